import { describe, expect, it } from 'vitest';
import { countRows, eventRows, expectProblem, json, UNKNOWN_ID, VALID } from '../../../test/api/support.ts';
import { useTestApp } from '../../../test/helpers/app.ts';

describe('Idempotency-Key on POST /tasks and POST /batches', () => {
  const t = useTestApp({ receiveAllEvents: true });

  const post = (path: string, body: unknown, key?: string) =>
    t.call('POST', path, body, key === undefined ? {} : { 'Idempotency-Key': key });

  it('replays the first response for the same key and body; the task is created once', async () => {
    const body = { ...VALID.task(), name: 'idem-task' };
    const first = await post('/api/v1/tasks', body, 'key-task-1');
    const firstText = await first.clone().text();
    const created = await json(first, 201);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    const before = await countRows(t.db);
    const again = await post('/api/v1/tasks', body, 'key-task-1');
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.headers.get('location')).toBe(first.headers.get('location'));
    // The same answer, to its key order (a client may compare or hash the text).
    expect(await again.clone().text()).toBe(firstText);
    expect(await json(again, 201)).toEqual(created);
    expect(await countRows(t.db)).toEqual(before);
    const createdEvents = (await eventRows(t.db, 'task.created')).filter(
      (e) => e.payload.data.name === 'idem-task',
    );
    expect(createdEvents).toHaveLength(1);
  });

  it('answers 409 for the same key with another body, and writes nothing', async () => {
    await json(await post('/api/v1/tasks', { ...VALID.task(), name: 'a' }, 'key-task-2'), 201);
    const before = await countRows(t.db);
    await expectProblem(
      await post('/api/v1/tasks', { ...VALID.task(), name: 'b' }, 'key-task-2'),
      409,
      'IDEMPOTENCY_KEY_REUSED',
    );
    expect(await countRows(t.db)).toEqual(before);
  });

  it('replays a retry that differs only in key order, whitespace or an FFmate null', async () => {
    const body = { ...VALID.task(), name: 'idem-same-meaning', priority: 3 };
    const first = await json(await post('/api/v1/tasks', body, 'key-task-meaning'), 201);
    const before = await countRows(t.db);
    const reordered = Object.fromEntries(Object.entries(body).reverse());
    const retries = [
      JSON.stringify(reordered),
      JSON.stringify(body, null, 2),
      JSON.stringify({ ...body, preProcessing: null, postProcessing: null, webhooks: null }),
    ];
    for (const text of retries) {
      const res = await post('/api/v1/tasks', text, 'key-task-meaning');
      expect([text, res.status, res.headers.get('idempotent-replayed')]).toEqual([text, 201, 'true']);
      expect(await json(res, 201)).toEqual(first);
    }
    expect(await countRows(t.db)).toEqual(before);
    // A value that changes the request is still another body, metadata's own nulls included.
    await expectProblem(
      await post('/api/v1/tasks', { ...body, metadata: { a: null } }, 'key-task-meaning'),
      409,
      'IDEMPOTENCY_KEY_REUSED',
    );
  });

  it('does not burn a key on a failed request: the corrected body succeeds with the same key', async () => {
    const before = await countRows(t.db);
    await expectProblem(await post('/api/v1/tasks', { preset: UNKNOWN_ID }, 'key-task-3'), 422);
    expect(await countRows(t.db)).toEqual(before);
    await json(await post('/api/v1/tasks', VALID.task(), 'key-task-3'), 201);
  });

  it('scopes keys per route and creates anew without a key', async () => {
    const body = { tasks: [VALID.task()] };
    await json(await post('/api/v1/tasks', VALID.task(), 'shared-key'), 201);
    const b1 = await json(await post('/api/v1/batches', body, 'shared-key'), 201);
    const b2 = await json(await post('/api/v1/batches', body), 201);
    const b3 = await json(await post('/api/v1/batches', body), 201);
    expect(new Set([b1.id, b2.id, b3.id]).size).toBe(3);
  });

  it('replays a batch (same id, same tasks, nothing created twice) and rejects a changed body with 409', async () => {
    const body = { name: 'idem-batch', tasks: [VALID.task(), VALID.task()] };
    const first = await json(await post('/api/v1/batches', body, 'key-batch-1'), 201);
    const before = await countRows(t.db);
    const res = await post('/api/v1/batches', body, 'key-batch-1');
    expect(res.headers.get('idempotent-replayed')).toBe('true');
    expect(res.headers.get('location')).toBe(`/api/v1/batches/${first.id}`);
    expect(await json(res, 201)).toEqual(first);
    expect(await countRows(t.db)).toEqual(before);
    await expectProblem(
      await post('/api/v1/batches', { ...body, name: 'other' }, 'key-batch-1'),
      409,
      'IDEMPOTENCY_KEY_REUSED',
    );
    expect(await countRows(t.db)).toEqual(before);
  });

  it('creates once when the same key arrives concurrently', async () => {
    const body = { ...VALID.task(), name: 'concurrent' };
    const results = await Promise.all(
      Array.from({ length: 6 }, () => post('/api/v1/tasks', body, 'key-concurrent')),
    );
    const bodies = await Promise.all(results.map((r) => json(r, 201)));
    expect(new Set(bodies.map((b) => b.id)).size).toBe(1);
    expect(results.filter((r) => r.headers.get('idempotent-replayed') === 'true')).toHaveLength(5);
    const listed = await json(await t.call('GET', '/api/v1/tasks?q=concurrent'));
    expect(listed).toHaveLength(1);
  });
});
