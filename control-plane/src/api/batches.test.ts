// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${NAME} wildcards are literal request text.
import { eq } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import {
  countRows,
  errorPaths,
  eventRows,
  expectProblem,
  json,
  readList,
  recordingFleet,
  UNKNOWN_ID,
} from '../../../test/api/support.ts';
import { useTestApp } from '../../../test/helpers/app.ts';
import { tasks } from '../db/schema.ts';

describe('batch routes', () => {
  const rec = recordingFleet();
  const t = useTestApp({ fleet: rec.fleet, receiveAllEvents: true });

  const item = (name: string, extra: object = {}) => ({
    command: '-i ${INPUT_FILE} ${OUTPUT_FILE}',
    name,
    ...extra,
  });
  const createBatch = async (body: unknown) => json(await t.call('POST', '/api/v1/batches', body), 201);

  it('creates a batch: 201, Location, counts and task ids in submission order; tasks carry the batch', async () => {
    const res = await t.call('POST', '/api/v1/batches', {
      name: 'nightly',
      tasks: [item('t0'), item('t1'), item('t2')],
    });
    const batch = await json(res, 201);
    expect(res.headers.get('location')).toBe(`/api/v1/batches/${batch.id}`);
    expect(batch).toMatchObject({
      uuid: batch.id,
      name: 'nightly',
      status: 'RUNNING',
      taskCount: 3,
      counts: { QUEUED: 3 },
      finishedAt: 0,
    });
    expect(batch.createdAt).toBeGreaterThan(1_600_000_000_000);
    expect(batch.tasks).toHaveLength(3);
    const names = [];
    for (const id of batch.tasks) {
      const task = await json(await t.call('GET', `/api/v1/tasks/${id}`));
      expect(task.batch).toBe(batch.id);
      names.push(task.name);
    }
    expect(names).toEqual(['t0', 't1', 't2']);
    expect((await createBatch({ tasks: [item('x')] })).name).toBe('');
    const created = (await eventRows(t.db, 'batch.created')).find((e) => e.payload.data.id === batch.id);
    expect(created?.payload.data).toMatchObject({ id: batch.id, taskCount: 3, tasks: batch.tasks });
  });

  it('is all-or-nothing: one bad item is 422 with per-item paths and nothing is written', async () => {
    const preset = await json(
      await t.call('POST', '/api/v1/presets', { name: 'bp', command: '-i a b' }),
      201,
    );
    const before = await countRows(t.db);
    const p = await expectProblem(
      await t.call('POST', '/api/v1/batches', {
        tasks: [
          item('ok0'),
          item('bad-preset', { preset: UNKNOWN_ID }),
          item('ok2', { preset: preset.id }),
          item('bad-chain', { command: '-i a b && -i c d' }),
          { name: 'no-command' },
        ],
      }),
      422,
      'VALIDATION_FAILED',
    );
    expect(errorPaths(p)).toEqual(['tasks.1.preset', 'tasks.3.command', 'tasks.4.command']);
    expect(await countRows(t.db)).toEqual(before);
  });

  it('reports schema errors of items with their paths (tasks.N.field)', async () => {
    const before = await countRows(t.db);
    const p = await expectProblem(
      await t.call('POST', '/api/v1/batches', {
        tasks: [
          item('a'),
          item('b', { priority: 'high' }),
          item('c'),
          item('d', { webhooks: [{ event: 'batch.created', url: 'http://x.test' }] }),
        ],
      }),
      422,
    );
    expect(errorPaths(p)).toEqual(['tasks.1.priority', 'tasks.3.webhooks.0.event']);
    for (const body of [
      { tasks: [] },
      {},
      { tasks: 'x' },
      { name: 1, tasks: [item('a')] },
      { tasks: [item('a')], extra: 1 },
    ]) {
      await expectProblem(await t.call('POST', '/api/v1/batches', body), 422, 'VALIDATION_FAILED');
    }
    expect(await countRows(t.db)).toEqual(before);
  });

  it('gets a batch, lists batches with X-Total, and is 404 for unknown ids', async () => {
    const b = await createBatch({ name: 'get-me', tasks: [item('g')] });
    const got = await json(await t.call('GET', `/api/v1/batches/${b.id}`));
    expect(got).toEqual(b);
    const all = await readList(await t.call('GET', '/api/v1/batches'));
    expect(all.total).toBe(all.items.length);
    expect(all.items[0]).toEqual(b);
    const page = await readList(await t.call('GET', '/api/v1/batches?perPage=1&page=1'));
    expect(page.total).toBe(all.total);
    expect(page.items).toEqual([all.items[1]]);
    await expectProblem(await t.call('GET', `/api/v1/batches/${UNKNOWN_ID}`), 404, 'BATCH_NOT_FOUND');
    await expectProblem(await t.call('GET', '/api/v1/batches/xyz'), 404, 'BATCH_NOT_FOUND');
    await expectProblem(await t.call('GET', `/api/v1/batches/${UNKNOWN_ID}/tasks`), 404, 'BATCH_NOT_FOUND');
    await expectProblem(await t.call('GET', '/api/v1/batches?perPage=0'), 400, 'INVALID_QUERY');
  });

  it('lists the tasks of a batch, paginated, with X-Total', async () => {
    const b = await createBatch({ tasks: [item('p0'), item('p1'), item('p2'), item('p3'), item('p4')] });
    const first = await readList<{ name: string; batch: string }>(
      await t.call('GET', `/api/v1/batches/${b.id}/tasks?perPage=2`),
    );
    const second = await readList<{ name: string }>(
      await t.call('GET', `/api/v1/batches/${b.id}/tasks?perPage=2&page=1`),
    );
    const third = await readList<{ name: string }>(
      await t.call('GET', `/api/v1/batches/${b.id}/tasks?perPage=2&page=2`),
    );
    expect([first.total, second.total, third.total]).toEqual([5, 5, 5]);
    // Newest first: the reverse of the submission order.
    expect([...first.items, ...second.items, ...third.items].map((x) => x.name)).toEqual([
      'p4',
      'p3',
      'p2',
      'p1',
      'p0',
    ]);
    expect(first.items.every((x) => x.batch === b.id)).toBe(true);
    await expectProblem(await t.call('GET', `/api/v1/batches/${b.id}/tasks?page=-1`), 400, 'INVALID_QUERY');
  });

  it('cancels every unfinished task; the batch finishes once and a second cancel is 409', async () => {
    const b = await createBatch({ tasks: [item('c0'), item('c1'), item('c2')] });
    await t.db.db.update(tasks).set({ status: 'DONE_SUCCESSFUL' }).where(eq(tasks.id, b.tasks[0]));
    const canceled = await json(await t.call('PATCH', `/api/v1/batches/${b.id}/cancel`));
    expect(canceled).toMatchObject({ status: 'DONE', counts: { DONE_SUCCESSFUL: 1, DONE_CANCELED: 2 } });
    expect(canceled.finishedAt).toBeGreaterThan(0);
    const finished = (await eventRows(t.db, 'batch.finished')).filter((e) => e.payload.data.id === b.id);
    expect(finished).toHaveLength(1);
    await expectProblem(await t.call('POST', `/api/v1/batches/${b.id}/cancel`), 409, 'BATCH_FINISHED');
    await expectProblem(
      await t.call('PATCH', `/api/v1/batches/${UNKNOWN_ID}/cancel`),
      404,
      'BATCH_NOT_FOUND',
    );
  });

  it('cancels the queued tasks of a large batch together and asks the agents to stop the running ones', async () => {
    const b = await createBatch({ tasks: Array.from({ length: 300 }, (_, i) => item(`big-${i}`)) });
    const running = b.tasks[7];
    await t.db.db
      .update(tasks)
      .set({ status: 'RUNNING', agentId: UNKNOWN_ID, agentName: 'a1', attempt: 1, leaseToken: 'lease' })
      .where(eq(tasks.id, running));
    rec.calls.cancelRunning.length = 0;
    const canceled = await json(await t.call('PATCH', `/api/v1/batches/${b.id}/cancel`));
    // The running task ends when its agent reports the kill; the batch finishes with it.
    expect(canceled).toMatchObject({ status: 'RUNNING', counts: { DONE_CANCELED: 299, RUNNING: 1 } });
    expect(rec.calls.cancelRunning).toEqual([running]);
    const updated = (await eventRows(t.db, 'task.updated')).filter((e) => e.payload.data.batch === b.id);
    expect(updated).toHaveLength(299);
    expect((await eventRows(t.db, 'batch.finished')).some((e) => e.payload.data.id === b.id)).toBe(false);
  });

  it('finishes a batch (batch.finished exactly once) when its last task is canceled, and reopens it on restart', async () => {
    const b = await createBatch({ tasks: [item('f0'), item('f1')] });
    await t.call('PATCH', `/api/v1/tasks/${b.tasks[0]}/cancel`);
    expect((await json(await t.call('GET', `/api/v1/batches/${b.id}`))).status).toBe('RUNNING');
    await t.call('PATCH', `/api/v1/tasks/${b.tasks[1]}/cancel`);
    expect((await json(await t.call('GET', `/api/v1/batches/${b.id}`))).status).toBe('DONE');
    const finished = () =>
      eventRows(t.db, 'batch.finished').then((r) => r.filter((e) => e.payload.data.id === b.id));
    expect(await finished()).toHaveLength(1);
    await json(await t.call('PATCH', `/api/v1/tasks/${b.tasks[1]}/restart`));
    expect((await json(await t.call('GET', `/api/v1/batches/${b.id}`))).status).toBe('RUNNING');
    await t.call('PATCH', `/api/v1/tasks/${b.tasks[1]}/cancel`);
    expect(await finished()).toHaveLength(2);
  });
});
