import { mkdtempSync, readdirSync, readlinkSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { query } from '../../../test/api/support.ts';
import { EventBus } from '../events/event-bus.ts';
import { noFleet, type ServiceContext } from '../services/context.ts';
import { createPreset, getPreset } from '../services/presets.ts';
import { cancelTask, createTask, getTask, listTasks } from '../services/tasks.ts';
import { createWebhook } from '../services/webhooks.ts';
import { type Database, MIGRATIONS_DIR, openDatabase } from './client.ts';

const ctxOf = (database: Database): ServiceContext => ({
  database,
  bus: new EventBus(),
  logger: pino({ level: 'silent' }),
  fleet: noFleet,
  now: () => Date.now(),
});

describe('embedded PGlite data directory', () => {
  let dir = '';
  let open: Database | null = null;
  afterEach(async () => {
    await open?.close();
    open = null;
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('keeps its data across close and reopen, and does not re-run migrations', async () => {
    dir = mkdtempSync(join(tmpdir(), 'ffleet-pglite-'));
    // A nested path: openDatabase creates missing parent directories.
    const dataDir = join(dir, 'state', 'pglite');

    open = await openDatabase({ kind: 'pglite', dataDir });
    let ctx = ctxOf(open);
    // Events are stored for the webhooks that receive them.
    for (const event of ['preset.created', 'task.created', 'task.updated'] as const)
      await createWebhook(ctx, { event, url: `http://h.test/${event}` });
    const preset = await createPreset(ctx, { name: 'kept', command: '-i a b', priority: 3 });
    const task = await createTask(ctx, {
      preset: preset.id,
      inputFile: '/in/x.mov',
      metadata: { k: [1, { v: 'é' }] },
    });
    const canceled = await cancelTask(ctx, task.id);
    await open.close();
    // Closing twice is harmless.
    await open.close();
    expect(await open.ping()).toBe(false);

    open = await openDatabase({ kind: 'pglite', dataDir });
    ctx = ctxOf(open);
    expect(await getPreset(ctx, preset.id)).toEqual(preset);
    expect(await getTask(ctx, task.id)).toEqual(canceled);
    const events = await query<{ event: string }>(
      open,
      sql`select event from events order by created_at, id`,
    );
    expect(events.map((e) => e.event).sort()).toEqual(['preset.created', 'task.created', 'task.updated']);
    const migrations = await query<{ n: number }>(
      open,
      sql`select count(*)::int as n from drizzle.__drizzle_migrations`,
    );
    // One row per committed migration: reopening applied none twice.
    const files = readdirSync(MIGRATIONS_DIR).filter((f) => f.endsWith('.sql'));
    expect(migrations[0]!.n).toBe(files.length);

    // It stays writable after the reopen, and a third open sees both generations of data.
    const second = await createTask(ctx, { command: '-i a b', name: 'after-reopen' });
    await open.close();
    open = await openDatabase({ kind: 'pglite', dataDir });
    const all = await listTasks(ctxOf(open), { status: undefined }, { page: 0, perPage: 10 });
    expect(all.items.map((t) => t.id).sort()).toEqual([task.id, second.id].sort());
    // The first open runs initdb in the empty directory (what a first `npm start` does): seconds on an
    // idle machine, much longer on a loaded CI runner.
  }, 180_000);
  it('syncs every commit to disk: fsync on, and the WAL really fsync()ed', async () => {
    dir = mkdtempSync(join(tmpdir(), 'ffleet-pglite-'));
    open = await openDatabase({ kind: 'pglite', dataDir: join(dir, 'pglite') });
    const settings = await query<{ name: string; setting: string }>(
      open,
      sql`SELECT name, setting FROM pg_settings WHERE name IN ('fsync', 'wal_sync_method') ORDER BY name`,
    );
    expect(settings).toEqual([
      { name: 'fsync', setting: 'on' },
      { name: 'wal_sync_method', setting: 'fsync' },
    ]);
    // Count what reaches the real fsync (installed by openDatabase under PGlite's NODEFS).
    const ops = (
      open.raw as unknown as { mod: { NODEFS: { stream_ops: { fsync: (s: { nfd?: number }) => number } } } }
    ).mod.NODEFS.stream_ops;
    const real = ops.fsync;
    const synced: string[] = [];
    ops.fsync = (stream) => {
      if (stream.nfd !== undefined) synced.push(readlinkSync(`/proc/self/fd/${stream.nfd}`));
      return real(stream);
    };
    try {
      const ctx = ctxOf(open);
      await createPreset(ctx, { name: 'durable', command: '-i a b' });
      expect(synced.some((f) => f.includes(`${join(dir, 'pglite')}/pg_wal/`))).toBe(true);
      const before = synced.length;
      await createPreset(ctx, { name: 'durable-2', command: '-i a b' });
      expect(synced.length).toBeGreaterThan(before);
    } finally {
      ops.fsync = real;
    }
  });

  it('leaves an in-memory database as PGlite starts it (nothing to sync)', async () => {
    open = await openDatabase({ kind: 'pglite' });
    const [row] = await query<{ setting: string }>(
      open,
      sql`SELECT setting FROM pg_settings WHERE name = 'fsync'`,
    );
    expect(row?.setting).toBe('off');
  });
});
