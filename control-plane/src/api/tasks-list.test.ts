import { eq, sql } from 'drizzle-orm';
import { beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, json, readList, UNKNOWN_ID } from '../../../test/api/support.ts';
import { useTestApp } from '../../../test/helpers/app.ts';
import { tasks } from '../db/schema.ts';
import { compactTaskCounts } from '../db/task-counts.ts';

type T = { id: string; name: string; status: string };

/**
 * One database with a known mix of tasks; every filter is checked against it. Creation times are
 * driven through ctx.now so "newest first" is deterministic (several tasks per millisecond otherwise).
 */
describe('GET /api/v1/tasks filters and pagination', () => {
  let clock = 1_700_000_000_000;
  const ids: Record<string, string> = {};
  let presetId = '';
  let batchId = '';
  const agentId = '11111111-2222-4333-8444-555555555555';

  const list = async (qs: string) => readList<T>(await t.call('GET', `/api/v1/tasks${qs}`));
  const names = async (qs: string) => (await list(qs)).items.map((x) => x.name);

  const t = useTestApp();
  beforeAll(async () => {
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
    // Given twice, the parameter is the list of both (no value silently dropped).
    expect(await names('?status=done_error&status=Done_Successful')).toEqual(['epsilon', 'delta']);
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
    // Only status takes a list: another parameter given twice is refused, not read as "a,b".
    for (const q of ['agent=node-1&agent=node-2', 'q=alpha&q=beta', 'batch=a&batch=b', 'page=0&page=1']) {
      const p = await expectProblem(await t.call('GET', `/api/v1/tasks?${q}`), 400, 'INVALID_QUERY');
      expect(p.errors, q).toEqual([
        { path: q.split('=')[0], message: 'is given 2 times; it takes one value' },
      ]);
    }
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
    for (const qs of [
      ...['page=-1', 'perPage=0', 'perPage=1001', 'page=abc', 'perPage=1.5', 'page=1e400'],
      // Only decimal digits: Number() would take these as 16, 16, 5, 2, 0 and 0.
      ...['page=0x10', 'page=1.6e1', 'perPage=%2B5', 'perPage=0x2', 'page=%20', 'perPage='],
      'page=1&page=2',
    ]) {
      await expectProblem(await t.call('GET', `/api/v1/tasks?${qs}`), 400, 'INVALID_QUERY');
    }
  });
});

/**
 * X-Total for no filter and status filters comes from task_counts (triggers on tasks); every kind of
 * write must keep it equal to counting the table.
 */
describe('X-Total stays exact through every kind of task write', () => {
  const t = useTestApp();

  const STATUSES = ['QUEUED', 'RUNNING', 'DONE_SUCCESSFUL', 'DONE_ERROR', 'DONE_CANCELED'];
  const total = async (qs: string) => readList(await t.call('GET', `/api/v1/tasks?perPage=1${qs}`));
  const expectExact = async () => {
    const rows = await t.db.rows<{ status: string; n: number }>(
      t.db.db,
      sql`select status, count(*)::int as n from tasks group by status`,
    );
    const by = Object.fromEntries(rows.map((r) => [r.status, Number(r.n)]));
    const all = rows.reduce((a, r) => a + Number(r.n), 0);
    expect((await total('')).total).toBe(all);
    for (const s of STATUSES) expect((await total(`&status=${s}`)).total, s).toBe(by[s] ?? 0);
    expect((await total('&status=QUEUED,RUNNING')).total).toBe((by.QUEUED ?? 0) + (by.RUNNING ?? 0));
  };

  it('counts inserts (one, batch, multi-row), status changes, cancels, deletes, truncate and compaction', async () => {
    await expectExact();
    const ids: string[] = [];
    for (let i = 0; i < 5; i++)
      ids.push((await json(await t.call('POST', '/api/v1/tasks', { command: '-i a b' }), 201)).id);
    await json(
      await t.call('POST', '/api/v1/batches', { tasks: [{ command: '-i a b' }, { command: '-i a b' }] }),
      201,
    );
    await expectExact();
    await t.db.db.update(tasks).set({ status: 'RUNNING' }).where(eq(tasks.id, ids[0]!));
    await t.db.db.update(tasks).set({ status: 'RUNNING' }).where(eq(tasks.id, ids[0]!)); // no change
    await t.db.db.update(tasks).set({ progress: 50 }).where(eq(tasks.id, ids[0]!));
    await t.db.db.update(tasks).set({ status: 'DONE_ERROR' }).where(eq(tasks.id, ids[1]!));
    await expectExact();
    await json(await t.call('PATCH', `/api/v1/tasks/${ids[2]}/cancel`), 200);
    await json(await t.call('PATCH', `/api/v1/tasks/${ids[1]}/restart`), 200);
    expect((await t.call('DELETE', `/api/v1/tasks/${ids[3]}`)).status).toBe(204);
    await expectExact();
    await t.db.db.update(tasks).set({ status: 'DONE_SUCCESSFUL' }).where(eq(tasks.status, 'QUEUED'));
    await expectExact();
    await compactTaskCounts(t.db.db);
    const rows = await t.db.rows<{ n: number }>(t.db.db, sql`select count(*)::int as n from task_counts`);
    expect(Number(rows[0]!.n)).toBeLessThanOrEqual(STATUSES.length);
    await expectExact();
    await t.db.db.delete(tasks).where(eq(tasks.status, 'DONE_SUCCESSFUL'));
    await expectExact();
    await t.db.db.execute(sql`truncate tasks`);
    await expectExact();
    expect((await total('')).total).toBe(0);
  });
});

describe('POST /api/v1/tasks answers with the stored task', () => {
  const t = useTestApp();

  it('is byte for byte what GET returns (jsonb key order, defaults, numbers)', async () => {
    const body = {
      command: '-i a b',
      inputFile: '/in/a.mov',
      metadata: {
        zeta: 1,
        b: { yy: [{ q: 1, a: -0 }], x: 1e21 },
        10: 'ten',
        9: 'nine',
        é: 'e',
        z: 0.1,
        big: 2 ** 60,
      },
      webhooks: [{ event: 'task.updated', url: 'http://h.test/x' }],
      preProcessing: { scriptPath: '/s/pre.sh' },
      postProcessing: { scriptPath: '/s/post.sh', sidecarPath: '/s/side.json' },
      requires: ['gpu', 'encoder:hevc_nvenc'],
      priority: 5,
    };
    const created = await t.call('POST', '/api/v1/tasks', body);
    expect(created.status).toBe(201);
    const text = await created.text();
    const id = JSON.parse(text).id as string;
    // Reads add, last, why the queued task is not claimed (no agent offers its requires here): a live
    // field, not part of the stored task the create answers with.
    const waiting = /,"waitingFor":"[^"]*"}$/;
    const got = await (await t.call('GET', `/api/v1/tasks/${id}`)).text();
    expect(got).toMatch(waiting);
    expect(got.replace(waiting, '}')).toBe(text);
    const list = await t.call('GET', '/api/v1/tasks');
    expect(JSON.stringify(((await list.json()) as unknown[])[0]).replace(waiting, '}')).toBe(text);
  });
});
