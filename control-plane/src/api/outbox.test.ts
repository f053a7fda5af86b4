import { EventName, type EventPayload } from '@ffleet/shared';
import { eq, sql } from 'drizzle-orm';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  countRows,
  deliveryRows,
  eventRows,
  expectProblem,
  json,
  query,
  UNKNOWN_ID,
  VALID,
} from '../../../test/api/support.ts';
import { useTestApp } from '../../../test/helpers/app.ts';
import { events } from '../db/schema.ts';

/**
 * The outbox: every state change writes one delivery row per matching global webhook and per matching
 * direct webhook, with the event row those deliveries share, in the transaction of the change; the
 * in-process bus hears about it only after the commit.
 */
describe('events and deliveries (outbox)', () => {
  const hooks = new Map<string, string>();
  const published: EventPayload[] = [];
  const t = useTestApp();
  beforeAll(async () => {
    for (const event of EventName.options) {
      hooks.set(
        event,
        (
          await json(
            await t.call('POST', '/api/v1/webhooks', { event, url: `http://global.test/${event}` }),
            201,
          )
        ).id,
      );
    }
    // Several webhooks may subscribe to one event.
    hooks.set(
      'second',
      (
        await json(
          await t.call('POST', '/api/v1/webhooks', {
            event: 'task.created',
            url: 'http://global.test/second',
          }),
          201,
        )
      ).id,
    );
    t.bus.subscribe((p) => published.push(p));
  });

  /** The newest event of a name, with its deliveries summarised. */
  async function latest(event: string) {
    const rows = await eventRows(t.db, event);
    const ev = rows.at(-1);
    if (!ev) throw new Error(`no ${event} event`);
    const ds = await deliveryRows(t.db, ev.id);
    return {
      ev,
      global: ds.filter((d) => d.source === 'global').map((d) => d.url),
      direct: ds.filter((d) => d.source === 'direct').map((d) => d.url),
      rows: ds,
    };
  }

  it('a task writes task.created/updated/deleted with global and direct deliveries', async () => {
    const task = await json(
      await t.call('POST', '/api/v1/tasks', {
        ...VALID.task(),
        webhooks: [
          { event: 'task.created', url: 'http://direct.test/created-a' },
          { event: 'task.updated', url: 'http://direct.test/updated' },
          { event: 'task.deleted', url: 'http://direct.test/deleted' },
          { event: 'task.created', url: 'http://direct.test/created-b' },
        ],
      }),
      201,
    );
    const created = await latest('task.created');
    expect(created.ev.payload).toMatchObject({
      id: created.ev.id,
      event: 'task.created',
      data: {
        taskId: task.id,
        inputFile: '/media/in/clip.mov',
        outputFile: '/media/out/clip.mp4',
        status: 'QUEUED',
        name: 'clip.mov',
        progress: 0,
        error: '',
        batch: null,
        source: 'api',
        task,
      },
    });
    expect(created.global).toEqual(['http://global.test/second', 'http://global.test/task.created']);
    expect(created.direct).toEqual(['http://direct.test/created-a', 'http://direct.test/created-b']);
    for (const d of created.rows) {
      expect(d.task_id).toBe(task.id);
      if (d.source === 'direct') expect(d.webhook_id).toBeNull();
    }
    expect(
      created.rows
        .filter((d) => d.source === 'global')
        .map((d) => d.webhook_id)
        .sort(),
    ).toEqual([hooks.get('task.created'), hooks.get('second')].sort());
    expect(published.at(-1)).toEqual(created.ev.payload);

    await json(await t.call('PATCH', `/api/v1/tasks/${task.id}/cancel`));
    const canceled = await latest('task.updated');
    expect(canceled.ev.payload.data).toMatchObject({ taskId: task.id, status: 'DONE_CANCELED' });
    expect(canceled.global).toEqual(['http://global.test/task.updated']);
    expect(canceled.direct).toEqual(['http://direct.test/updated']);

    await json(await t.call('PATCH', `/api/v1/tasks/${task.id}/restart`));
    const restarted = await latest('task.updated');
    expect(restarted.ev.payload.data).toMatchObject({ taskId: task.id, status: 'QUEUED' });
    expect(restarted.direct).toEqual(['http://direct.test/updated']);

    expect((await t.call('DELETE', `/api/v1/tasks/${task.id}`)).status).toBe(204);
    const deleted = await latest('task.deleted');
    expect(deleted.ev.payload.data).toMatchObject({ taskId: task.id });
    expect(deleted.global).toEqual(['http://global.test/task.deleted']);
    expect(deleted.direct).toEqual(['http://direct.test/deleted']);
  });

  it('a batch writes one task.created per task and one batch.created', async () => {
    const before = await countRows(t.db);
    const batch = await json(
      await t.call('POST', '/api/v1/batches', { tasks: [VALID.task(), VALID.task()] }),
      201,
    );
    const created = await latest('batch.created');
    expect(created.ev.payload.data).toEqual(batch);
    expect(created.global).toEqual(['http://global.test/batch.created']);
    const after = await countRows(t.db);
    expect(after.events - before.events).toBe(3);
    // 2 tasks x 2 task.created hooks + 1 batch.created hook.
    expect(after.deliveries - before.deliveries).toBe(5);
  });

  it('a large batch (131 tasks: several insert statements of different sizes) stores every task as sent, with its own event and deliveries', async () => {
    const before = await countRows(t.db);
    const items = Array.from({ length: 131 }, (_, i) => ({
      ...VALID.task(),
      name: `big-${i}`,
      inputFile: `/media/in/big-${i}.mov`,
      priority: i % 7,
      metadata: { i },
      // Direct webhooks on some tasks only: statements with different numbers of direct rows.
      ...(i % 5 === 0 ? { webhooks: [{ event: 'task.created', url: `http://direct.test/big-${i}` }] } : {}),
    }));
    const batch = await json(await t.call('POST', '/api/v1/batches', { tasks: items }), 201);
    expect(batch.tasks).toHaveLength(131);
    const after = await countRows(t.db);
    expect(after.tasks - before.tasks).toBe(131);
    // 131 task.created + 1 batch.created.
    expect(after.events - before.events).toBe(132);
    // 131 × 2 global task.created hooks + 27 direct (i % 5 === 0) + 1 batch.created hook.
    expect(after.deliveries - before.deliveries).toBe(131 * 2 + 27 + 1);

    const rows = await query<{
      id: string;
      name: string;
      input_raw: string;
      priority: number;
      metadata: unknown;
    }>(t.db, sql`select id, name, input_raw, priority, metadata from tasks where batch_id = ${batch.id}`);
    const byId = new Map(rows.map((r) => [r.id, r]));
    batch.tasks.forEach((id: string, i: number) => {
      const r = byId.get(id);
      expect(r).toMatchObject({ name: `big-${i}`, input_raw: `/media/in/big-${i}.mov`, priority: i % 7 });
      expect(typeof r!.metadata === 'string' ? JSON.parse(r!.metadata) : r!.metadata).toEqual({ i });
    });
    const createdEvents = (await eventRows(t.db, 'task.created')).filter(
      (e) => e.payload.data.batch === batch.id,
    );
    expect(createdEvents.map((e) => e.payload.data.taskId).sort()).toEqual([...batch.tasks].sort());
    for (const e of createdEvents) {
      const i = Number((e.payload.data.name as string).slice('big-'.length));
      expect(e.payload.data.taskId).toBe(batch.tasks[i]);
      const ds = await deliveryRows(t.db, e.id);
      expect(ds.filter((d) => d.source === 'global')).toHaveLength(2);
      expect(ds.filter((d) => d.source === 'direct').map((d) => d.url)).toEqual(
        i % 5 === 0 ? [`http://direct.test/big-${i}`] : [],
      );
      for (const d of ds) expect(d.task_id).toBe(batch.tasks[i]);
    }
  });

  it('a preset writes preset.* to global webhooks and its own preset.* direct webhooks; tasks inherit task.* ones', async () => {
    const preset = await json(
      await t.call('POST', '/api/v1/presets', {
        ...VALID.preset(),
        webhooks: [
          { event: 'preset.created', url: 'http://direct.test/p-created' },
          { event: 'preset.updated', url: 'http://direct.test/p-updated' },
          { event: 'task.created', url: 'http://direct.test/p-task' },
        ],
      }),
      201,
    );
    const created = await latest('preset.created');
    expect(created.ev.payload.data).toEqual(preset);
    expect(created.global).toEqual(['http://global.test/preset.created']);
    expect(created.direct).toEqual(['http://direct.test/p-created']);

    await json(await t.call('POST', '/api/v1/tasks', { preset: preset.id }), 201);
    expect((await latest('task.created')).direct).toEqual(['http://direct.test/p-task']);

    const updated = await json(
      await t.call('PUT', `/api/v1/presets/${preset.id}`, {
        name: preset.name,
        command: preset.command,
        webhooks: [{ event: 'preset.updated', url: 'http://direct.test/p-updated' }],
      }),
    );
    const upd = await latest('preset.updated');
    expect(upd.ev.payload.data).toEqual(updated);
    expect(upd.global).toEqual(['http://global.test/preset.updated']);
    expect(upd.direct).toEqual(['http://direct.test/p-updated']);

    expect((await t.call('DELETE', `/api/v1/presets/${preset.id}`)).status).toBe(204);
    const del = await latest('preset.deleted');
    expect(del.ev.payload.data).toMatchObject({ id: preset.id });
    expect(del.global).toEqual(['http://global.test/preset.deleted']);
    expect(del.direct).toEqual([]);
  });

  it('watchfolder and webhook changes write their events with the resource as data', async () => {
    const preset = await json(await t.call('POST', '/api/v1/presets', VALID.preset()), 201);
    const wf = await json(await t.call('POST', '/api/v1/watchfolders', VALID.watchfolder(preset.id)), 201);
    const wfCreated = await latest('watchfolder.created');
    expect(wfCreated.ev.payload.data).toEqual(wf);
    expect(wfCreated.global).toEqual(['http://global.test/watchfolder.created']);
    const wfUpdated = await json(
      await t.call('PUT', `/api/v1/watchfolders/${wf.id}`, {
        ...VALID.watchfolder(preset.id),
        name: wf.name,
        suspended: true,
      }),
    );
    expect((await latest('watchfolder.updated')).ev.payload.data).toEqual(wfUpdated);
    await t.call('DELETE', `/api/v1/watchfolders/${wf.id}`);
    const wfDeleted = await latest('watchfolder.deleted');
    expect(wfDeleted.ev.payload.data).toMatchObject({ id: wf.id });
    expect(wfDeleted.global).toEqual(['http://global.test/watchfolder.deleted']);

    // A webhook subscribed to webhook.created hears about its own creation.
    const w = await json(
      await t.call('POST', '/api/v1/webhooks', { event: 'webhook.created', url: 'http://self.test/' }),
      201,
    );
    const wCreated = await latest('webhook.created');
    expect(wCreated.ev.payload.data).toEqual(w);
    expect(wCreated.global).toEqual(['http://global.test/webhook.created', 'http://self.test/']);
    const wUpdated = await json(
      await t.call('PUT', `/api/v1/webhooks/${w.id}`, { event: 'batch.created', url: 'http://self.test/' }),
    );
    const upd = await latest('webhook.updated');
    expect(upd.ev.payload.data).toEqual(wUpdated);
    expect(upd.global).toEqual(['http://global.test/webhook.updated']);
    await t.call('DELETE', `/api/v1/webhooks/${w.id}`);
    const del = await latest('webhook.deleted');
    expect(del.ev.payload.data).toMatchObject({ id: w.id });
    expect(del.global).toEqual(['http://global.test/webhook.deleted']);
  });

  it('failed requests write no event, no delivery and publish nothing', async () => {
    const preset = await json(await t.call('POST', '/api/v1/presets', VALID.preset()), 201);
    const wf = await json(await t.call('POST', '/api/v1/watchfolders', VALID.watchfolder(preset.id)), 201);
    const done = await json(await t.call('POST', '/api/v1/tasks', VALID.task()), 201);
    await json(await t.call('PATCH', `/api/v1/tasks/${done.id}/cancel`));
    const before = await countRows(t.db);
    const publishedBefore = published.length;
    const failures: [string, string, unknown, number][] = [
      ['POST', '/api/v1/tasks', { preset: UNKNOWN_ID }, 422],
      ['POST', '/api/v1/tasks', { command: '-i a && b' }, 422],
      ['POST', '/api/v1/batches', { tasks: [VALID.task(), { command: '' }] }, 422],
      ['POST', '/api/v1/watchfolders', { ...VALID.watchfolder(preset.id), name: wf.name }, 409],
      ['PUT', `/api/v1/watchfolders/${wf.id}`, { ...VALID.watchfolder(UNKNOWN_ID), name: wf.name }, 422],
      ['DELETE', `/api/v1/presets/${preset.id}`, undefined, 409],
      ['PATCH', `/api/v1/tasks/${done.id}/cancel`, undefined, 409],
      ['PATCH', `/api/v1/tasks/${UNKNOWN_ID}/restart`, undefined, 404],
      ['DELETE', `/api/v1/tasks/${UNKNOWN_ID}`, undefined, 404],
      ['PUT', `/api/v1/presets/${UNKNOWN_ID}`, VALID.preset(), 404],
      ['DELETE', `/api/v1/webhooks/${UNKNOWN_ID}`, undefined, 404],
      ['POST', '/api/v1/webhooks', { event: 'task.created', url: 'nope' }, 422],
    ];
    for (const [method, path, body, status] of failures) {
      await expectProblem(await t.call(method, path, body), status);
    }
    expect(await countRows(t.db)).toEqual(before);
    expect(published.length).toBe(publishedBefore);
  });

  it('a transaction that fails after writing its events leaves nothing behind and publishes nothing', async () => {
    // A trigger makes the delivery insert (the last write of createTask) fail, after the task and its
    // event rows were written in the same transaction.
    await t.db.db.execute(
      sql.raw(`CREATE FUNCTION reject_delivery() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN IF NEW.url LIKE 'http://fail.test/%' THEN RAISE EXCEPTION 'delivery rejected'; END IF; RETURN NEW; END $$`),
    );
    await t.db.db.execute(
      sql.raw(
        'CREATE TRIGGER reject_delivery BEFORE INSERT ON deliveries FOR EACH ROW EXECUTE FUNCTION reject_delivery()',
      ),
    );
    try {
      const before = await countRows(t.db);
      const publishedBefore = published.length;
      const res = await t.call('POST', '/api/v1/tasks', {
        ...VALID.task(),
        webhooks: [{ event: 'task.created', url: 'http://fail.test/x' }],
      });
      await expectProblem(res, 500, 'INTERNAL');
      expect(await countRows(t.db)).toEqual(before);
      expect(published.length).toBe(publishedBefore);
    } finally {
      await t.db.db.execute(sql.raw('DROP TRIGGER reject_delivery ON deliveries'));
      await t.db.db.execute(sql.raw('DROP FUNCTION reject_delivery()'));
    }
  });

  it('publishes on the bus only after the commit: a listener already sees the committed rows', async () => {
    const seen: Promise<number>[] = [];
    const unsubscribe = t.bus.subscribe((p) => {
      // Runs on another connection than the transaction (PostgreSQL): it finds the row only if the
      // event was published after the commit.
      seen.push(
        t.db.db
          .select()
          .from(events)
          .where(eq(events.id, p.id))
          .then((r) => r.length),
      );
    });
    try {
      await json(
        await t.call('POST', '/api/v1/batches', { tasks: [VALID.task(), VALID.task(), VALID.task()] }),
        201,
      );
      expect(seen).toHaveLength(4);
      expect(await Promise.all(seen)).toEqual([1, 1, 1, 1]);
    } finally {
      unsubscribe();
    }
    const rows = await query<{ n: number }>(t.db, sql`select count(*)::int as n from events`);
    expect(rows[0]!.n).toBeGreaterThan(0);
  });
});

/** The events table holds what deliveries need: an event no webhook receives goes to the bus only. */
describe('events no webhook receives', () => {
  const t = useTestApp();

  it('are published but not stored; a global or direct receiver stores the event with its delivery', async () => {
    const published: EventPayload[] = [];
    const unsubscribe = t.bus.subscribe((p) => published.push(p));
    try {
      const before = await countRows(t.db);
      const plain = await json(await t.call('POST', '/api/v1/tasks', VALID.task()), 201);
      await json(await t.call('PATCH', `/api/v1/tasks/${plain.id}/cancel`), 200);
      expect(published.filter((p) => p.event.startsWith('task.')).map((p) => p.event)).toEqual([
        'task.created',
        'task.updated',
      ]);
      let after = await countRows(t.db);
      expect(after.events - before.events).toBe(0);
      expect(after.deliveries - before.deliveries).toBe(0);

      // A direct webhook for task.updated only: its task.updated is stored, its task.created is not.
      const direct = await json(
        await t.call('POST', '/api/v1/tasks', {
          ...VALID.task(),
          webhooks: [{ event: 'task.updated', url: 'http://127.0.0.1:9/direct' }],
        }),
        201,
      );
      await json(await t.call('PATCH', `/api/v1/tasks/${direct.id}/cancel`), 200);
      const directEvents = await eventRows(t.db);
      expect(directEvents.map((e) => [e.event, e.payload.data.taskId])).toEqual([
        ['task.updated', direct.id],
      ]);
      expect((await deliveryRows(t.db, directEvents[0]!.id)).map((d) => d.url)).toEqual([
        'http://127.0.0.1:9/direct',
      ]);

      // A global webhook for task.created: from now on every task.created is stored, task.updated not.
      await json(
        await t.call('POST', '/api/v1/webhooks', { event: 'task.created', url: 'http://127.0.0.1:9/g' }),
        201,
      );
      const before2 = await countRows(t.db);
      await json(
        await t.call('POST', '/api/v1/batches', { tasks: [VALID.task(), VALID.task(), VALID.task()] }),
        201,
      );
      after = await countRows(t.db);
      expect(after.events - before2.events).toBe(3);
      expect(after.deliveries - before2.deliveries).toBe(3);
      const created = await eventRows(t.db, 'task.created');
      expect(created).toHaveLength(3);
      for (const e of created) expect(await deliveryRows(t.db, e.id)).toHaveLength(1);
      expect(await eventRows(t.db, 'batch.created')).toEqual([]);
    } finally {
      unsubscribe();
    }
  });
});
