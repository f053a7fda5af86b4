import { randomUUID } from 'node:crypto';
import { count, sql } from 'drizzle-orm';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openTestDatabase, type TestDatabase } from '../../../test/helpers/db.ts';
import { deliveries, events, idempotencyKeys, webhookExecutions } from '../db/schema.ts';
import { RetentionSweeper } from './retention.ts';

describe('RetentionSweeper', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await openTestDatabase();
  });
  afterAll(() => db.drop());

  it('removes old events and finished deliveries but never a pending delivery or the event it needs', async () => {
    const now = 100 * 86_400_000;
    const old = now - 8 * 86_400_000;
    const mk = async (createdAt: number, state: string | null) => {
      const id = randomUUID();
      await db.db.insert(events).values({
        id,
        event: 'task.updated',
        payload: { id, event: 'task.updated', timestamp: '', data: {} },
        createdAt,
      });
      if (state) {
        await db.db.insert(deliveries).values({
          id: randomUUID(),
          eventId: id,
          event: 'task.updated',
          source: 'global',
          url: 'http://x',
          state,
          createdAt,
          updatedAt: createdAt,
        });
      }
      return id;
    };
    await mk(old, null); // old, no delivery → removed
    await mk(old, 'delivered'); // old, delivered → both removed
    await mk(old, 'pending'); // old, still pending → both kept
    await mk(now - 1000, 'delivered'); // recent → kept
    await db.db
      .insert(idempotencyKeys)
      .values({ key: 'k', route: 'r', bodyHash: 'h', status: 201, response: {}, createdAt: old });
    const sweeper = new RetentionSweeper({ database: db, logger: pino({ level: 'silent' }), now: () => now });
    await sweeper.sweep();
    const [e] = await db.db.select({ n: count() }).from(events);
    const [d] = await db.db.select({ n: count() }).from(deliveries);
    const [k] = await db.db.select({ n: count() }).from(idempotencyKeys);
    expect(Number(e!.n)).toBe(2);
    expect(Number(d!.n)).toBe(2);
    expect(Number(k!.n)).toBe(0);
    // The embedded database has no autovacuum: the sweep vacuums its busy tables.
    const [vacuumed] = await db.rows<{ n: number }>(
      db.db,
      sql`SELECT count(*)::int AS n FROM pg_stat_user_tables
        WHERE relname IN ('tasks', 'deliveries', 'events') AND last_vacuum IS NOT NULL`,
    );
    expect(vacuumed!.n).toBe(db.kind === 'pglite' ? 3 : 0);
    await sweeper.stop();
  });

  it('keeps delivery attempts 30 days by default, as long as told, or forever (FFLEET_EXECUTION_RETENTION_DAYS=0)', async () => {
    const DAY = 86_400_000;
    const now = 1000 * DAY;
    await db.db.delete(webhookExecutions);
    for (const ageDays of [400, 31, 29, 1]) {
      await db.db.insert(webhookExecutions).values({
        id: randomUUID(),
        deliveryId: randomUUID(),
        source: 'global',
        event: 'task.created',
        url: 'http://x',
        attempt: 1,
        request: { method: 'POST', headers: {}, body: '' },
        response: null,
        success: true,
        durationMs: 1,
        createdAt: now - ageDays * DAY,
      });
    }
    const left = async () => Number((await db.db.select({ n: count() }).from(webhookExecutions))[0]!.n);
    const sweep = (executionsMs?: number) =>
      new RetentionSweeper({
        database: db,
        logger: pino({ level: 'silent' }),
        now: () => now,
        ...(executionsMs === undefined ? {} : { executionsMs }),
      }).sweep();
    await sweep(Number.POSITIVE_INFINITY);
    expect(await left()).toBe(4);
    await sweep();
    expect(await left()).toBe(2);
    await sweep(7 * DAY);
    expect(await left()).toBe(1);
  });
});
