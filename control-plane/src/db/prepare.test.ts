import { randomUUID } from 'node:crypto';
import { eq, sql } from 'drizzle-orm';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { openTestDatabase, postgresAvailable, type TestDatabase } from '../../../test/helpers/db.ts';
import { parseConfig } from '../config/config.ts';
import { eventsStatement, pendingEvent } from '../events/outbox.ts';
import { renewLeasesIn } from '../scheduler/leases.ts';
import { anyOf } from './array-literal.ts';
import { execRaw, openDatabase, preparedAdmission } from './client.ts';
import { tasks } from './schema.ts';

const PG = await postgresAvailable();

/** A fresh PostgreSQL database for the enclosing describe; each test opens its own pool on it. */
function useScratchDatabase(): () => string {
  let base: TestDatabase;
  beforeAll(async () => {
    base = await openTestDatabase('postgres');
  });
  afterAll(() => base?.drop());
  return () => base.url!;
}

describe.skipIf(!PG)('prepared statements on PostgreSQL (FFLEET_PG_PREPARE)', () => {
  const baseUrl = useScratchDatabase();

  /** Named statements on the (only) connection after one parameterised query. */
  async function preparedAfterQuery(prepare: boolean): Promise<number> {
    const d = await openDatabase({ kind: 'postgres', url: baseUrl(), max: 1, prepare });
    try {
      await d.db.select().from(tasks).where(eq(tasks.id, randomUUID()));
      const [r] = await d.rows<{ n: number }>(
        d.db,
        sql`select count(*)::int as n from pg_prepared_statements where not from_sql`,
      );
      return r!.n;
    } finally {
      await d.close();
    }
  }

  it('prepares by default and sends only unnamed statements with FFLEET_PG_PREPARE=0', async () => {
    expect(await preparedAfterQuery(true)).toBeGreaterThan(0);
    expect(await preparedAfterQuery(false)).toBe(0);
    expect(parseConfig({}).pgPrepare).toBe(true);
    expect(parseConfig({ FFLEET_PG_PREPARE: '0' }).pgPrepare).toBe(false);
  });
});

describe('preparedAdmission', () => {
  it('admits up to its cap, keeps what it admitted, and warns once when it turns a text away', () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    try {
      const admit = preparedAdmission(2);
      expect([admit('a'), admit('b'), admit('a')]).toEqual([true, true, true]);
      expect([admit('c'), admit('d'), admit('b')]).toEqual([false, false, true]);
      expect(warn).toHaveBeenCalledTimes(1);
      expect(String(warn.mock.calls[0]![0])).toMatch(/more than 2 distinct SQL statements/);
    } finally {
      warn.mockRestore();
    }
  });
});

describe.skipIf(!PG)('the cap on named statements (PostgreSQL)', () => {
  const baseUrl = useScratchDatabase();

  it('prepares the first maxPrepared texts and runs the others unnamed, with the same results', async () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    const d = await openDatabase({ kind: 'postgres', url: baseUrl(), max: 1, maxPrepared: 2 });
    try {
      for (let round = 0; round < 2; round++)
        for (const probe of ['a', 'b', 'c', 'd']) {
          const [r] = await d.rows<{ v: number }>(
            d.db,
            sql`select ${round}::int + 1 as v /* cap-probe-${sql.raw(probe)} */`,
          );
          expect(r!.v).toBe(round + 1);
        }
      const named = await d.rows<{ statement: string }>(
        d.db,
        sql`select statement from pg_prepared_statements where not from_sql and statement like '%cap-probe%'`,
      );
      expect(named.map((r) => /cap-probe-(\w)/.exec(r.statement)![1]).sort()).toEqual(['a', 'b']);
      expect(warn).toHaveBeenCalledTimes(1);
    } finally {
      warn.mockRestore();
      await d.close();
    }
  });
});

describe.skipIf(!PG)('statements whose input varies in size (PostgreSQL)', () => {
  const baseUrl = useScratchDatabase();

  it('are prepared once each, whatever the number of events, webhooks, leases and ids', async () => {
    const d = await openDatabase({ kind: 'postgres', url: baseUrl(), max: 1 });
    try {
      const taskId = randomUUID();
      // A global receiver, so every event is stored (events no webhook receives are not). Written on
      // another connection: this one's prepared statements are counted below.
      const other = postgres(baseUrl(), { max: 1, onnotice: () => {} });
      await other`insert into webhooks (id, event, url, created_at, updated_at)
        values (${randomUUID()}, 'task.updated', 'http://h/g', 0, 0)`;
      await other.end();
      for (let n = 1; n <= 40; n++) {
        const items = Array.from({ length: n }, (_, i) =>
          pendingEvent({
            event: 'task.updated',
            data: { n, i },
            taskId,
            direct: Array.from({ length: i % 3 }, (_, k) => ({
              event: 'task.updated',
              url: `http://h/${k}`,
            })),
          }),
        );
        await d.db.transaction((tx) => execRaw(tx, eventsStatement(items)));
        const refs = Array.from({ length: n }, () => ({ taskId: randomUUID(), attempt: 1, leaseToken: 't' }));
        await renewLeasesIn(d.db, 1, randomUUID(), refs, 1000);
        await d.db
          .select({ id: tasks.id })
          .from(tasks)
          .where(
            anyOf(
              tasks.id,
              refs.map((r) => r.taskId),
              'uuid',
            ),
          );
      }
      const [prepared] = await d.rows<{ n: number }>(
        d.db,
        sql`select count(*)::int as n from pg_prepared_statements where not from_sql`,
      );
      // One each for the events, the lease renewal, the list and this count. With a VALUES row per
      // item, the events and the renewal alone were 40 statements each (83 in all).
      expect(prepared!.n).toBeLessThanOrEqual(5);
      const [written] = await d.rows<{ events: number; direct: number }>(
        d.db,
        sql`select (select count(*)::int from events) as events,
          (select count(*)::int from deliveries where source = 'direct' and task_id = ${taskId}) as direct`,
      );
      // Events of sizes 1..40, and (i % 3) direct deliveries per event.
      expect(written!.events).toBe((40 * 41) / 2);
      let direct = 0;
      for (let n = 1; n <= 40; n++) for (let i = 0; i < n; i++) direct += i % 3;
      expect(written!.direct).toBe(direct);
    } finally {
      await d.close();
    }
  });
});
