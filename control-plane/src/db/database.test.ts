// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${NAME} wildcards are literal request text.
import { readdirSync } from 'node:fs';
import type { TaskListQuery } from '@ffleet/shared';
import { eq, sql } from 'drizzle-orm';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { countRows, deliveryRows, eventRows, query } from '../../../test/api/support.ts';
import { openTestDatabase, postgresAvailable, type TestDatabase } from '../../../test/helpers/db.ts';
import { EventBus } from '../events/event-bus.ts';
import { createBatch, getBatch, listBatchTasks } from '../services/batches.ts';
import { noFleet, type ServiceContext } from '../services/context.ts';
import { createPreset, deletePreset, getPreset, listPresets, updatePreset } from '../services/presets.ts';
import { cancelTask, createTask, deleteTask, getTask, listTasks, restartTask } from '../services/tasks.ts';
import {
  createWatchfolder,
  deleteWatchfolder,
  listWatchfolders,
  updateWatchfolder,
} from '../services/watchfolders.ts';
import { createWebhook, deleteWebhook, getWebhook, listWebhooks } from '../services/webhooks.ts';
import { MIGRATIONS_DIR } from './client.ts';
import { tasks } from './schema.ts';

const PG = await postgresAvailable();
const PAGE = { page: 0, perPage: 100 };
const TABLES = [
  'agent_credentials',
  'agents',
  'batches',
  'deliveries',
  'events',
  'idempotency_keys',
  'presets',
  'task_counts',
  'task_logs',
  'tasks',
  'watchfolders',
  'webhook_executions',
  'webhooks',
];

/**
 * The data layer on both backends, each on a fresh database: the embedded PGlite and the PostgreSQL
 * server (skipped only when the server is not reachable).
 */
describe.each(['pglite', 'postgres'] as const)('database on %s', (kind) => {
  let db: TestDatabase;
  let ctx: ServiceContext;
  let clock = 1_700_000_000_000;
  beforeAll(async () => {
    if (kind === 'postgres' && !PG) return;
    db = await openTestDatabase(kind);
    ctx = {
      database: db,
      bus: new EventBus(),
      logger: pino({ level: 'silent' }),
      fleet: noFleet,
      now: () => ++clock,
    };
  });
  afterAll(async () => {
    await db?.drop();
  });
  const test = kind === 'postgres' && !PG ? it.skip : it;

  test('applies every committed migration to a fresh database', async () => {
    expect(db.kind).toBe(kind);
    const tables = await query<{ table_name: string }>(
      db,
      sql`select table_name from information_schema.tables where table_schema = 'public' order by table_name`,
    );
    expect(tables.map((r) => r.table_name)).toEqual(TABLES);
    const files = readdirSync(MIGRATIONS_DIR).filter((f) => f.endsWith('.sql'));
    const applied = await query<{ n: number }>(
      db,
      sql`select count(*)::int as n from drizzle.__drizzle_migrations`,
    );
    expect(applied[0]!.n).toBe(files.length);
    const idx = await query<{ indexname: string }>(
      db,
      sql`select indexname from pg_indexes where tablename = 'tasks'`,
    );
    expect(idx.map((r) => r.indexname)).toEqual(
      expect.arrayContaining(['tasks_claim_idx', 'tasks_watch_key_idx']),
    );
    expect(Object.values(await countRows(db)).every((n) => n === 0)).toBe(true);
    expect(await db.ping()).toBe(true);
  });

  test('stores and reads tasks through the services, with events and deliveries in one transaction', async () => {
    await createWebhook(ctx, { event: 'task.created', url: 'http://h.test/created' });
    // Events are stored for the webhooks that receive them (webhook.created has none here).
    for (const event of ['preset.created', 'task.updated', 'task.deleted'] as const)
      await createWebhook(ctx, { event, url: `http://h.test/${event}` });
    const preset = await createPreset(ctx, {
      name: 'p',
      command: '-i ${INPUT_FILE} ${OUTPUT_FILE}',
      priority: 9,
      requires: ['gpu'],
      preProcessing: { scriptPath: '/bin/pre', importSidecar: true },
    });
    const task = await createTask(ctx, {
      preset: preset.id,
      inputFile: '/in/a b.mov',
      metadata: { nested: { list: [1, 'two', null, true], n: 1.5 }, emoji: '🎬' },
      webhooks: [{ event: 'task.created', url: 'http://h.test/direct' }],
    });
    expect(await getTask(ctx, task.id)).toEqual(task);
    expect(task).toMatchObject({
      name: 'a b.mov',
      priority: 9,
      requires: ['gpu'],
      preset: preset.id,
      metadata: { nested: { list: [1, 'two', null, true], n: 1.5 }, emoji: '🎬' },
      preProcessing: { scriptPath: { raw: '/bin/pre', resolved: '' }, importSidecar: true },
    });
    // Timestamps round-trip as numbers (bigint mode 'number'), not strings.
    expect(typeof task.createdAt).toBe('number');
    const [created] = await eventRows(db, 'task.created');
    expect(created!.payload.data.taskId).toBe(task.id);
    expect((await deliveryRows(db, created!.id)).map((d) => [d.source, d.url])).toEqual([
      ['global', 'http://h.test/created'],
      ['direct', 'http://h.test/direct'],
    ]);

    const canceled = await cancelTask(ctx, task.id);
    expect(canceled.status).toBe('DONE_CANCELED');
    const restarted = await restartTask(ctx, task.id);
    expect(restarted.status).toBe('QUEUED');
    await deleteTask(ctx, task.id);
    await expect(getTask(ctx, task.id)).rejects.toMatchObject({ status: 404 });
    // Sorted: task.created/deleted take Date.now() rather than ctx.now (see the report), so the
    // order by created_at is not the order of the calls under this test's clock.
    expect((await eventRows(db)).map((e) => e.event).sort()).toEqual([
      'preset.created',
      'task.created',
      'task.deleted',
      'task.updated',
      'task.updated',
    ]);
  });

  test('filters and paginates task lists in SQL', async () => {
    const batch = await createBatch(ctx, {
      tasks: [
        { command: '-i a b', name: 'in-batch-1' },
        { command: '-i a b', name: 'in-batch-2' },
      ],
    });
    const mk = (name: string) => createTask(ctx, { command: '-i a b', name });
    const a = await mk('Alpha 50%');
    const b = await mk('beta');
    await mk('gamma');
    await db.db
      .update(tasks)
      .set({ status: 'RUNNING', agentName: 'node-1', source: 'watchfolder' })
      .where(eq(tasks.id, b.id));
    await cancelTask(ctx, a.id);
    const names = async (q: Partial<TaskListQuery>, page = PAGE) =>
      (await listTasks(ctx, { status: undefined, ...q }, page)).items.map((t) => t.name);
    expect(await names({})).toEqual(['gamma', 'beta', 'Alpha 50%', 'in-batch-2', 'in-batch-1']);
    expect(await names({ status: ['DONE_CANCELED', 'RUNNING'] })).toEqual(['beta', 'Alpha 50%']);
    expect(await names({ source: 'watchfolder' })).toEqual(['beta']);
    expect(await names({ batch: batch.id })).toEqual(['in-batch-2', 'in-batch-1']);
    expect(await names({ agent: 'node-1' })).toEqual(['beta']);
    expect(await names({ q: 'ALPHA' })).toEqual(['Alpha 50%']);
    expect(await names({ q: '%' })).toEqual(['Alpha 50%']);
    expect(await names({}, { page: 1, perPage: 2 })).toEqual(['Alpha 50%', 'in-batch-2']);
    expect((await listTasks(ctx, { status: ['QUEUED'] }, { page: 0, perPage: 1 })).total).toBe(3);
    expect((await listBatchTasks(ctx, batch.id, PAGE)).total).toBe(2);
    expect((await getBatch(ctx, batch.id)).counts).toEqual({ QUEUED: 2 });
  });

  test('creates, replaces and deletes presets, watchfolders and webhooks', async () => {
    const p = await createPreset(ctx, {
      name: 'crud',
      command: '-i a b',
      webhooks: [{ event: 'preset.updated', url: 'http://h.test/p' }],
    });
    const p2 = await updatePreset(ctx, p.id, { name: 'crud-2', command: '-i c d' });
    expect(p2).toMatchObject({
      id: p.id,
      name: 'crud-2',
      command: '-i c d',
      webhooks: [],
      createdAt: p.createdAt,
    });
    expect(await getPreset(ctx, p.id)).toEqual(p2);
    expect((await listPresets(ctx, PAGE)).items.map((x) => x.id)).toContain(p.id);

    const wf = await createWatchfolder(ctx, {
      name: 'w',
      interval: 2,
      growthChecks: 2,
      preset: p.id,
      path: '/w',
    });
    await expect(
      createWatchfolder(ctx, { name: 'w', interval: 2, growthChecks: 2, preset: p.id, path: '/x' }),
    ).rejects.toMatchObject({
      status: 409,
    });
    await expect(deletePreset(ctx, p.id)).rejects.toMatchObject({ status: 409, code: 'PRESET_IN_USE' });
    const wf2 = await updateWatchfolder(ctx, wf.id, {
      name: 'w2',
      interval: 3,
      growthChecks: 1,
      preset: p.id,
      path: '/w2',
      filter: { extensions: { include: ['mov'] } },
    });
    expect(wf2).toMatchObject({
      name: 'w2',
      path: '/w2',
      filter: { extensions: { include: ['mov'], exclude: [] } },
    });
    expect((await listWatchfolders(ctx, PAGE)).total).toBe(1);
    await deleteWatchfolder(ctx, wf.id);
    await deletePreset(ctx, p.id);
    await expect(getPreset(ctx, p.id)).rejects.toMatchObject({ status: 404 });

    const w = await createWebhook(ctx, { event: 'batch.finished', url: 'http://h.test/b', secret: 'x' });
    expect(await getWebhook(ctx, w.id)).toMatchObject({ hasSecret: true });
    const [row] = await query<{ secret: string }>(db, sql`select secret from webhooks where id = ${w.id}`);
    expect(row!.secret).toBe('x');
    expect((await listWebhooks(ctx, PAGE)).items.map((x) => x.id)).toContain(w.id);
    await deleteWebhook(ctx, w.id);
    await expect(getWebhook(ctx, w.id)).rejects.toMatchObject({ status: 404 });
  });

  test('rolls back every write of a failed transaction', async () => {
    const before = await countRows(db);
    await expect(
      createBatch(ctx, { tasks: [{ command: '-i a b' }, { command: '-i a b && oops' }] }),
    ).rejects.toMatchObject({ status: 422 });
    await expect(createTask(ctx, { preset: '00000000-0000-4000-8000-000000000000' })).rejects.toMatchObject({
      status: 422,
    });
    expect(await countRows(db)).toEqual(before);
  });
});
