import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/helpers/app.ts';
import { postgresAvailable } from '../../../test/helpers/db.ts';
import type { Db } from '../db/client.ts';
import { GroupCommit } from './group-commit.ts';

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
