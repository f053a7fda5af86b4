import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, json, readList, UNKNOWN_ID } from '../../../test/api/support.ts';
import { createTestApp, type TestApp } from '../../../test/helpers/app.ts';
import { tasks } from '../db/schema.ts';

type T = { id: string; name: string; status: string };

/**
 * One database with a known mix of tasks; every filter is checked against it. Creation times are
 * driven through ctx.now so "newest first" is deterministic (several tasks per millisecond otherwise).
 */
describe('GET /api/v1/tasks filters and pagination', () => {
  let t: TestApp;
  let clock = 1_700_000_000_000;
  const ids: Record<string, string> = {};
  let presetId = '';
  let batchId = '';
  const agentId = '11111111-2222-4333-8444-555555555555';

  const list = async (qs: string) => readList<T>(await t.call('GET', `/api/v1/tasks${qs}`));
  const names = async (qs: string) => (await list(qs)).items.map((x) => x.name);

  beforeAll(async () => {
    t = await createTestApp();
    t.ctx.now = () => ++clock;
    presetId = (await json(await t.call('POST', '/api/v1/presets', { name: 'p', command: '-i a b' }), 201))
      .id;
    const mk = async (name: string, extra: object = {}) => {
      ids[name] = (
        await json(await t.call('POST', '/api/v1/tasks', { command: '-i a b', name, ...extra }), 201)
      ).id;
    };
    await mk('alpha');
    await mk('Beta clip');
    await mk('gamma', { preset: presetId });
    await mk('delta');
    await mk('100%_done');
    await mk('epsilon');
    const batch = await json(
      await t.call('POST', '/api/v1/batches', {
        tasks: [
          { command: '-i a b', name: 'b1' },
          { command: '-i a b', name: 'b2' },
        ],
      }),
      201,
    );
    batchId = batch.id;
    const set = (name: string, patch: Partial<typeof tasks.$inferInsert>) =>
      t.db.db.update(tasks).set(patch).where(eq(tasks.id, ids[name]!));
    await set('Beta clip', { status: 'RUNNING', agentId, agentName: 'node-1' });
    await set('delta', { status: 'DONE_ERROR', source: 'watchfolder' });
    await set('epsilon', { status: 'DONE_SUCCESSFUL', source: 'watchfolder' });
  });
  afterAll(() => t.close());

  it('lists every task newest first with X-Total', async () => {
    const all = await list('');
    expect(all.total).toBe(8);
    expect(all.items.map((x) => x.name)).toEqual([
      'b2',
      'b1',
      'epsilon',
      '100%_done',
      'delta',
      'gamma',
      'Beta clip',
      'alpha',
    ]);
  });

  it('filters by a case-insensitive comma list of statuses', async () => {
    expect(await names('?status=queued')).toEqual(['b2', 'b1', '100%_done', 'gamma', 'alpha']);
    expect(await names('?status=done_error,Done_Successful')).toEqual(['epsilon', 'delta']);
    expect(await names('?status=%20running%20,DONE_CANCELED')).toEqual(['Beta clip']);
    expect((await list('?status=')).total).toBe(8);
    const p = await expectProblem(
      await t.call('GET', '/api/v1/tasks?status=QUEUED,FINISHED'),
      400,
      'INVALID_QUERY',
    );
    expect(p.detail).not.toBe('');
  });

  it('filters by source, batch, preset and agent', async () => {
    expect(await names('?source=watchfolder')).toEqual(['epsilon', 'delta']);
    expect((await list('?source=api')).total).toBe(6);
    await expectProblem(await t.call('GET', '/api/v1/tasks?source=cli'), 400, 'INVALID_QUERY');
    expect(await names(`?batch=${batchId}`)).toEqual(['b2', 'b1']);
    expect((await list(`?batch=${UNKNOWN_ID}`)).total).toBe(0);
    expect((await list('?batch=not-a-uuid')).total).toBe(0);
    expect(await names(`?preset=${presetId}`)).toEqual(['gamma']);
    expect((await list('?preset=nope')).total).toBe(0);
    expect(await names(`?agent=${agentId}`)).toEqual(['Beta clip']);
    expect(await names('?agent=node-1')).toEqual(['Beta clip']);
    expect((await list('?agent=node-2')).total).toBe(0);
  });

  it('filters by name substring (q), case-insensitive, with LIKE wildcards taken literally', async () => {
    expect(await names('?q=CLIP')).toEqual(['Beta clip']);
    expect(await names('?q=a')).toEqual(['delta', 'gamma', 'Beta clip', 'alpha']);
    expect(await names(`?q=${encodeURIComponent('%_')}`)).toEqual(['100%_done']);
    expect(await names('?q=_')).toEqual(['100%_done']);
    expect((await list('?q=zzz')).total).toBe(0);
  });

  it('combines filters with AND', async () => {
    expect(await names('?status=QUEUED&q=a')).toEqual(['gamma', 'alpha']);
    expect(await names(`?status=QUEUED&batch=${batchId}&q=2`)).toEqual(['b2']);
  });

  it('paginates with page (0-based) and perPage; X-Total counts every matching row', async () => {
    const p0 = await list('?perPage=3');
    const p1 = await list('?perPage=3&page=1');
    const p2 = await list('?perPage=3&page=2');
    expect([p0.total, p1.total, p2.total]).toEqual([8, 8, 8]);
    expect([...p0.items, ...p1.items, ...p2.items].map((x) => x.name)).toEqual(
      (await list('')).items.map((x) => x.name),
    );
    expect(p2.items).toHaveLength(2);
    const past = await list('?perPage=3&page=3');
    expect(past).toEqual({ items: [], total: 8 });
    const filtered = await list('?status=queued&perPage=2&page=1');
    expect(filtered.total).toBe(5);
    expect(filtered.items.map((x) => x.name)).toEqual(['100%_done', 'gamma']);
    expect((await list('?perPage=1000')).items).toHaveLength(8);
  });

  it('rejects invalid pagination with 400', async () => {
    for (const qs of ['page=-1', 'perPage=0', 'perPage=1001', 'page=abc', 'perPage=1.5', 'page=1e400']) {
      await expectProblem(await t.call('GET', `/api/v1/tasks?${qs}`), 400, 'INVALID_QUERY');
    }
  });
});
