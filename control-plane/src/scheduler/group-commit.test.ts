import type { TaskStatus } from '@ffleet/shared';
import { eq, sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { eventRows, json, VALID } from '../../../test/api/support.ts';
import { useTestApp } from '../../../test/helpers/app.ts';
import { postgresAvailable } from '../../../test/helpers/db.ts';
import type { Db } from '../db/client.ts';
import { tasks } from '../db/schema.ts';
import { GroupCommit, type GroupJob } from './group-commit.ts';

const PG = await postgresAvailable();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The id of the transaction a job runs in. */
async function txid(tx: Db): Promise<string> {
  const r = await tx.execute<{ id: string }>(sql`select txid_current()::text as id`);
  return ((r as { rows?: { id: string }[] }).rows ?? (r as unknown as { id: string }[]))[0]!.id;
}

describe('GroupCommit keys', () => {
  const t = useTestApp();

  it("lets one key's consecutive jobs share a transaction, in order", async () => {
    const group = new GroupCommit(t.ctx);
    const order: string[] = [];
    const job = (name: string) => async (tx: Db) => {
      order.push(name);
      return txid(tx);
    };
    // Queued in one turn, as a log report, a final report and the next claim arrive together.
    const ids = await Promise.all([
      group.run(job('log'), { key: 'a' }),
      group.run(job('final'), { key: 'a' }),
      group.run(job('claim'), { key: 'a' }),
      group.run(job('other'), { key: 'b' }),
    ]);
    expect(order).toEqual(['log', 'final', 'claim', 'other']);
    expect(new Set(ids).size).toBe(1);
  });

  it('runs the other jobs of a group when one fails, and keeps the failure to its job', async () => {
    const group = new GroupCommit(t.ctx);
    const results = await Promise.allSettled([
      group.run(async (tx) => txid(tx), { key: 'a' }),
      group.run(
        async () => {
          throw new Error('bad job');
        },
        { key: 'a' },
      ),
      group.run(async () => 'after', { key: 'a' }),
    ]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect((results[2] as PromiseFulfilledResult<string>).value).toBe('after');
    await expect(group.settled('a')).resolves.toBeUndefined();
  });
});

// Concurrent groups exist only on PostgreSQL (PGlite writes one group at a time, and its transactions
// would serialise the jobs whatever the scheduling did, so the test could not fail there).
describe.skipIf(!PG)('GroupCommit keys with concurrent groups (PostgreSQL)', () => {
  const pg = useTestApp({ kind: 'postgres' });

  it('never writes one key in two groups at once, and settled() waits for all its jobs', async () => {
    const group = new GroupCommit(pg.ctx);
    expect(pg.ctx.database.singleConnection).toBe(false); // groups are written concurrently here
    const log: string[] = [];
    const first = group.run(
      async (tx) => {
        log.push('a1 start');
        await txid(tx);
        await sleep(150);
        log.push('a1 end');
      },
      { key: 'a' },
    );
    await sleep(30); // a1's group is being written now
    const second = group.run(
      async () => {
        log.push('a2 start');
      },
      { key: 'a' },
    );
    const other = group.run(
      async () => {
        log.push('b1 start');
      },
      { key: 'b' },
    );
    let settled = false;
    const waitA = group.settled('a').then(() => {
      settled = true;
    });
    await first;
    log.push('a1 committed');
    expect(settled).toBe(false);
    await Promise.all([second, other, waitA]);
    expect(log.indexOf('a2 start')).toBeGreaterThan(log.indexOf('a1 committed'));
    expect(log).toContain('b1 start');
    expect(settled).toBe(true);
    await expect(group.settled('a')).resolves.toBeUndefined();
    await group.drain();
  });
});

describe('GroupCommit batch checks', () => {
  const t = useTestApp({ receiveAllEvents: true });

  const newBatch = async (n: number): Promise<{ id: string; tasks: string[] }> =>
    json(
      await t.call('POST', '/api/v1/batches', { tasks: Array.from({ length: n }, () => VALID.task()) }),
      201,
    );
  /** A job that moves `taskId` to `status` (if given) and tells the scope, as a report or a claim does. */
  const job =
    (kind: 'finished' | 'claimed', batchId: string, taskId?: string, status?: TaskStatus): GroupJob<void> =>
    async (tx, _ev, scope) => {
      if (taskId && status) await tx.update(tasks).set({ status }).where(eq(tasks.id, taskId));
      if (kind === 'finished') scope.finishBatch(batchId);
      else scope.claimedFrom(batchId);
    };
  const batchState = async (id: string) => ({
    status: (await json(await t.call('GET', `/api/v1/batches/${id}`))).status,
    finished: (await eventRows(t.db, 'batch.finished')).filter((e) => e.payload.data.id === id).length,
  });

  it('skips the check of a batch claimed from after one of its tasks finished (the check could only find it open)', async () => {
    const b = await newBatch(1);
    const group = new GroupCommit(t.ctx);
    // The second job only tells the scope it claimed from the batch and opens nothing: had the check
    // run, it would have finished the batch. That it stays RUNNING shows the check was skipped.
    await Promise.all([
      group.run(job('finished', b.id, b.tasks[0], 'DONE_SUCCESSFUL'), { key: 'a' }),
      group.run(job('claimed', b.id), { key: 'a' }),
    ]);
    expect(await batchState(b.id)).toEqual({ status: 'RUNNING', finished: 0 });
    await group.run(job('finished', b.id));
    expect(await batchState(b.id)).toEqual({ status: 'DONE', finished: 1 });
  });

  it('still checks a batch when a task of it finishes after the claim in the same group', async () => {
    const claimFirst = await newBatch(1);
    const claimedThenDone = await newBatch(2);
    const group = new GroupCommit(t.ctx);
    const [a, b] = claimedThenDone.tasks as [string, string];
    await Promise.all([
      // A claim before any finish of its batch changes nothing.
      group.run(job('claimed', claimFirst.id), { key: 'a' }),
      group.run(job('finished', claimFirst.id, claimFirst.tasks[0], 'DONE_SUCCESSFUL'), { key: 'a' }),
      // Finish a, claim b, finish b: the batch is done at the commit.
      group.run(job('finished', claimedThenDone.id, a, 'DONE_SUCCESSFUL'), { key: 'a' }),
      group.run(job('claimed', claimedThenDone.id, b, 'RUNNING'), { key: 'a' }),
      group.run(job('finished', claimedThenDone.id, b, 'DONE_ERROR'), { key: 'a' }),
    ]);
    expect(await batchState(claimFirst.id)).toEqual({ status: 'DONE', finished: 1 });
    expect(await batchState(claimedThenDone.id)).toEqual({ status: 'DONE', finished: 1 });
  });
});
