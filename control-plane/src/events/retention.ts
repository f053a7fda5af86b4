import { and, inArray, lt, notExists, sql } from 'drizzle-orm';
import type { Logger } from 'pino';
import type { Database } from '../db/client.ts';
import { deliveries, events, idempotencyKeys, webhookExecutions } from '../db/schema.ts';
import { compactTaskCounts } from '../db/task-counts.ts';

const DAY_MS = 86_400_000;

export type RetentionOptions = {
  database: Database;
  logger: Logger;
  /** Events and finished deliveries are kept this long (redelivery needs the event). */
  eventsMs?: number;
  /** Delivery attempts (executions) are kept this long (FFLEET_EXECUTION_RETENTION_DAYS); Infinity: forever. */
  executionsMs?: number;
  /** Idempotency keys answer repeats for this long (clients retry within minutes). */
  idempotencyMs?: number;
  everyMs?: number;
  now?: () => number;
};

/**
 * Keeps the outbox tables bounded: every task change a webhook receives writes its deliveries and an
 * event row (progress too), so without pruning they grow forever. Pending deliveries and the events
 * they need are never removed. On the embedded database it also vacuums the busy tables (PGlite runs
 * no autovacuum).
 */
export class RetentionSweeper {
  readonly #o: Required<Omit<RetentionOptions, 'database' | 'logger'>> &
    Pick<RetentionOptions, 'database' | 'logger'>;
  #timer: NodeJS.Timeout | null = null;
  #running: Promise<void> | null = null;

  constructor(opts: RetentionOptions) {
    this.#o = {
      eventsMs: 7 * DAY_MS,
      executionsMs: 30 * DAY_MS,
      idempotencyMs: DAY_MS,
      everyMs: 10 * 60_000,
      now: () => Date.now(),
      ...opts,
    };
  }

  start(): void {
    this.#timer = setInterval(() => void this.sweep(), this.#o.everyMs);
    this.#timer.unref();
  }

  async stop(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
    await this.#running;
  }

  /** One pass; returns the number of rows removed per table. */
  sweep(): Promise<void> {
    this.#running ??= this.#sweep().finally(() => {
      this.#running = null;
    });
    return this.#running;
  }

  async #sweep(): Promise<void> {
    const db = this.#o.database.db;
    const now = this.#o.now();
    try {
      const oldEvents = now - this.#o.eventsMs;
      const d = await db
        .delete(deliveries)
        .where(
          and(
            lt(deliveries.createdAt, oldEvents),
            inArray(deliveries.state, ['delivered', 'failed', 'superseded']),
          ),
        )
        .returning({ id: deliveries.id });
      const e = await db
        .delete(events)
        .where(
          and(
            lt(events.createdAt, oldEvents),
            notExists(
              db.select({ one: sql`1` }).from(deliveries).where(sql`${deliveries.eventId} = ${events.id}`),
            ),
          ),
        )
        .returning({ id: events.id });
      const x = Number.isFinite(this.#o.executionsMs)
        ? await db
            .delete(webhookExecutions)
            .where(lt(webhookExecutions.createdAt, now - this.#o.executionsMs))
            .returning({ id: webhookExecutions.id })
        : [];
      const k = await db
        .delete(idempotencyKeys)
        .where(lt(idempotencyKeys.createdAt, now - this.#o.idempotencyMs))
        .returning({ key: idempotencyKeys.key });
      await compactTaskCounts(db);
      // PGlite has no autovacuum: without this, dead row versions of every task update and delivery
      // pile up in the tables and their indexes forever, and claims and lists slow down with them.
      if (this.#o.database.kind === 'pglite') {
        await db.execute(
          sql`VACUUM (ANALYZE) tasks, task_counts, deliveries, events, agents, webhook_executions`,
        );
      }
      if (d.length + e.length + x.length + k.length > 0) {
        this.#o.logger.info(
          { deliveries: d.length, events: e.length, executions: x.length, idempotencyKeys: k.length },
          'retention: old rows removed',
        );
      }
    } catch (err) {
      this.#o.logger.error({ err }, 'retention sweep failed');
    }
  }
}
