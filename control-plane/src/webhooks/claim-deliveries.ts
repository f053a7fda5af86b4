import type { EventPayload } from '@ffleet/shared';
import { sql } from 'drizzle-orm';
import type { Database } from '../db/client.ts';
import { WEBHOOK_DELETED, WEBHOOK_EVENT_CHANGED } from './record-attempt.ts';

/** Progress-only `task.updated` deliveries go to one target at most once per this window (CONTRACT.md). */
export const PROGRESS_WINDOW_MS = 5_000;

/**
 * Candidates ranked per claim, as a multiple of the free slots: enough that URLs at their cap don't
 * starve the claim, small enough that the eligibility checks stay cheap with a large backlog.
 */
const SCAN_FACTOR = 4;

/** A delivery this dispatcher now owns until `lease` (its `locked_until`, also the fencing token). */
export type ClaimedDelivery = {
  id: string;
  eventId: string;
  event: string;
  webhookId: string | null;
  source: 'global' | 'direct';
  /** Where to send it: a global webhook's current URL and secret, a direct webhook's stored ones. */
  url: string;
  secret: string | null;
  /** When `url` and `secret` were read; a row claimed ahead re-reads them once this is old (refreshTargets). */
  readAt: number;
  taskId: string | null;
  progressOnly: boolean;
  /** Attempts made before this one. */
  attempts: number;
  lease: number;
  /** The stored event payload; null only if the event row vanished. */
  payload: EventPayload | null;
};

export type ClaimOptions = {
  now: number;
  /** Free dispatcher slots. */
  limit: number;
  /** How long the claim holds the row: attempt timeout plus a margin to record it. */
  leaseMs: number;
  /** Rows this dispatcher may hold per URL (in flight or claimed ahead, see the dispatcher's PREFETCH). */
  perUrlLimit: number;
  /** Rows this dispatcher already holds (in flight or claimed ahead), by URL. */
  inFlightByUrl: Record<string, number>;
};

/** Same target = same task, URL and webhook (two webhooks on one URL are two targets). */
const sameTarget = (a: string, b: string) =>
  sql.raw(
    `${a}.task_id = ${b}.task_id AND ${a}.url = ${b}.url AND ${a}.webhook_id IS NOT DISTINCT FROM ${b}.webhook_id`,
  );

/**
 * Creation order of deliveries: their `seq`. (`created_at` is in milliseconds, and the events of one
 * task applied in one group commit share one, so a task's DONE could go out before its last RUNNING.)
 */
const before = (a: string, b: string) => sql.raw(`${a}.seq < ${b}.seq`);

/** Is any delivery due and unleased? One probe of the partial due index; the poll's idle cost. */
export async function hasDueDeliveries(database: Database, now: number): Promise<boolean> {
  const rows = await database.rows(
    database.db,
    sql`SELECT 1 FROM deliveries WHERE state = 'pending' AND next_attempt_at <= ${now} AND locked_until <= ${now} LIMIT 1`,
  );
  return rows.length > 0;
}

type Row = {
  id: string;
  event_id: string;
  event: string;
  webhook_id: string | null;
  source: string;
  url: string;
  secret: string | null;
  task_id: string | null;
  progress_only: boolean;
  attempts: number | string;
  payload: EventPayload | string | null;
};

/**
 * Claim due deliveries in one statement, safe with several control-plane replicas.
 *
 * Supersede: a pending, unclaimed progress-only delivery with a newer pending delivery for the same
 * target is marked `superseded` (the newer one carries fresher state; no attempt, not a failure).
 *
 * Due: `state = 'pending'`, `next_attempt_at <= now` and not leased (`locked_until <= now`). A crashed
 * replica's leases simply run out, so its rows become due again without any cleanup.
 *
 * Ordering: deliveries of one task to one target go one at a time in creation order: a row is eligible
 * only when no older row of its target is still pending — except an older unclaimed progress-only row,
 * which this same statement supersedes. A progress-only row also waits until PROGRESS_WINDOW_MS have
 * passed since its target's last progress-only attempt, delivered or not (a receiver failing them got
 * every newer progress at once, ~2 per s per running task, when only delivered ones counted; a
 * superseded row's `updated_at` is its superseding, so the window may start up to that much later).
 *
 * Fairness: at most `perUrlLimit` attempts per URL (counting those in flight), so one slow receiver
 * never takes every slot. Ranking runs over a bounded scan of the oldest candidates (`ranked`,
 * materialized so it is computed once) to keep the statement cheap with a large backlog; saturated
 * URLs are excluded before the scan.
 *
 * Target: a global webhook's deliveries go to the webhook as it is now. The rows carry the URL copied
 * when they were written (and updateWebhook rewrites that of pending rows), but a change can commit
 * between a row's insert and its claim, so the claim joins `webhooks`, sends with its URL and secret and
 * writes the URL back to the row. A secret is never stored on a delivery (finished rows are kept for
 * days, and a rotated or deleted webhook's secret stayed in them). A picked row whose webhook is gone (deleted while the
 * row was being written) is failed here instead of claimed; deleteWebhook fails the others.
 *
 * Locking: the picked rows are locked `FOR UPDATE SKIP LOCKED` (rows another replica is claiming are
 * skipped, never waited for) and their `state`/`locked_until` are re-checked on the newest row version,
 * then stamped with the lease. One known multi-replica race, harmless: a replica whose snapshot
 * predates a newer row may send an older progress-only update that another replica is superseding, so
 * that stale progress can arrive next to the newer delivery. Status changes are never affected.
 * Everything here is PostgreSQL 15 syntax (PGlite runs 18).
 */
export async function claimDeliveries(database: Database, opts: ClaimOptions): Promise<ClaimedDelivery[]> {
  const { now, limit } = opts;
  if (limit <= 0) return [];
  const lease = now + opts.leaseMs;
  const inFlight = JSON.stringify(opts.inFlightByUrl);
  const scanLimit = limit * SCAN_FACTOR;
  const windowStart = now - PROGRESS_WINDOW_MS;
  const rows = await database.rows<Row>(
    database.db,
    sql`
    WITH superseded AS (
      UPDATE deliveries s SET state = 'superseded', locked_until = 0, updated_at = ${now}
      WHERE s.id IN (
        SELECT p.id FROM deliveries p
        WHERE p.state = 'pending' AND p.progress_only AND p.task_id IS NOT NULL AND p.locked_until <= ${now}
          AND EXISTS (SELECT 1 FROM deliveries n
                      WHERE ${sameTarget('n', 'p')} AND n.state = 'pending' AND ${before('p', 'n')})
        FOR UPDATE SKIP LOCKED)
      RETURNING s.id
    ), ranked AS MATERIALIZED (
      SELECT e.id, e.next_attempt_at, e.seq,
        row_number() OVER (PARTITION BY e.url ORDER BY e.next_attempt_at, e.seq) AS rank,
        ${opts.perUrlLimit} - coalesce((${inFlight}::jsonb ->> e.url)::int, 0) AS room
      FROM (
        SELECT e.id, e.url, e.next_attempt_at, e.seq FROM deliveries e
        WHERE e.state = 'pending' AND e.next_attempt_at <= ${now} AND e.locked_until <= ${now}
          AND coalesce((${inFlight}::jsonb ->> e.url)::int, 0) < ${opts.perUrlLimit}
          AND (e.task_id IS NULL OR NOT EXISTS (
            SELECT 1 FROM deliveries o
            WHERE ${sameTarget('o', 'e')} AND o.state = 'pending' AND ${before('o', 'e')}
              AND (NOT o.progress_only OR o.locked_until > ${now})))
          AND (NOT e.progress_only OR e.task_id IS NULL OR (
            NOT EXISTS (SELECT 1 FROM deliveries n
                        WHERE ${sameTarget('n', 'e')} AND n.state = 'pending' AND ${before('e', 'n')})
            AND NOT EXISTS (SELECT 1 FROM deliveries l
                            WHERE ${sameTarget('l', 'e')} AND l.progress_only AND l.attempts > 0
                              AND l.updated_at > ${windowStart} AND l.id <> e.id)))
        ORDER BY e.next_attempt_at
        LIMIT ${scanLimit}
      ) e
    ), picked AS (
      SELECT c.id, c.webhook_id, c.event FROM ranked r JOIN deliveries c ON c.id = r.id
      WHERE r.rank <= r.room AND c.state = 'pending' AND c.locked_until <= ${now}
      ORDER BY r.next_attempt_at, r.seq
      LIMIT ${limit}
      FOR UPDATE OF c SKIP LOCKED
    ), orphaned AS (
      UPDATE deliveries o SET state = 'failed', locked_until = 0, updated_at = ${now},
        last_error = CASE WHEN EXISTS (SELECT 1 FROM webhooks w WHERE w.id = p.webhook_id)
          THEN ${WEBHOOK_EVENT_CHANGED} ELSE ${WEBHOOK_DELETED} END
      FROM picked p
      WHERE o.id = p.id AND p.webhook_id IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM webhooks w WHERE w.id = p.webhook_id AND w.event = p.event)
      RETURNING o.id
    )
    UPDATE deliveries d SET locked_until = ${lease}, updated_at = ${now}, url = coalesce(w.url, d.url)
    FROM picked p LEFT JOIN webhooks w ON w.id = p.webhook_id AND w.event = p.event
    WHERE d.id = p.id AND (p.webhook_id IS NULL OR w.id IS NOT NULL)
    RETURNING d.id, d.event_id, d.event, d.webhook_id, d.source, d.url,
      CASE WHEN w.id IS NULL THEN d.secret ELSE w.secret END AS secret, d.task_id, d.progress_only,
      d.attempts, (SELECT ev.payload FROM events ev WHERE ev.id = d.event_id) AS payload`,
  );
  return rows.map((r) => ({
    id: r.id,
    eventId: r.event_id,
    event: r.event,
    webhookId: r.webhook_id,
    source: r.source === 'direct' ? 'direct' : 'global',
    url: r.url,
    secret: r.secret,
    readAt: now,
    taskId: r.task_id,
    progressOnly: r.progress_only,
    // postgres-js returns int8/int4 from raw SQL as strings or numbers depending on type; normalise.
    attempts: Number(r.attempts),
    lease,
    payload: typeof r.payload === 'string' ? (JSON.parse(r.payload) as EventPayload) : r.payload,
  }));
}
