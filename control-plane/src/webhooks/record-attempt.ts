import { randomUUID } from 'node:crypto';
import { toStorable } from '@ffleet/shared';
import { sql } from 'drizzle-orm';
import type { Database } from '../db/client.ts';
import type { ClaimedDelivery } from './claim-deliveries.ts';
import type { AttemptResult } from './send-webhook.ts';

/** Spec "Delivery rules": retried after 3 s, then 5 s, then 10 s — four attempts at most. */
export const RETRY_DELAYS_MS = [3_000, 5_000, 10_000] as const;
export const MAX_ATTEMPTS = RETRY_DELAYS_MS.length + 1;
/** `last_error` of a delivery dropped because its global webhook was deleted (state `failed`). */
export const WEBHOOK_DELETED = 'webhook deleted';
/** `last_error` of a delivery dropped because its global webhook now subscribes to another event. */
export const WEBHOOK_EVENT_CHANGED = 'webhook event changed';

export type DeliveryOutcome =
  | { state: 'delivered' }
  | { state: 'failed' }
  | { state: 'pending'; nextAttemptAt: number };

/** What happens to a delivery after its `attempt`-th attempt (1-based) finished at `now`. */
export function decideOutcome(result: AttemptResult, attempt: number, now: number): DeliveryOutcome {
  if (result.ok) return { state: 'delivered' };
  const delay = RETRY_DELAYS_MS[attempt - 1];
  if (result.permanent || delay === undefined) return { state: 'failed' };
  return { state: 'pending', nextAttemptAt: now + delay };
}

/** One finished attempt to record: the claimed delivery, what happened, and what happens next. */
export type FinishedAttempt = {
  delivery: ClaimedDelivery;
  result: AttemptResult;
  outcome: DeliveryOutcome;
  /** When the attempt finished (the delivery's `updated_at`). */
  now: number;
};

/** Receiver-controlled text (the error, headers, body) goes through toStorable: receivers send NULs too. */
function toRecord({ delivery, result, outcome, now }: FinishedAttempt) {
  const error = result.ok ? '' : toStorable(result.error);
  return {
    execution_id: randomUUID(),
    delivery_id: delivery.id,
    webhook_id: delivery.webhookId,
    source: delivery.source,
    event: delivery.event,
    url: delivery.url,
    attempt: delivery.attempts + 1,
    request: { ...result.request, headers: toStorable(result.request.headers) },
    response: result.response && {
      status: result.response.status,
      headers: toStorable(result.response.headers),
      body: toStorable(result.response.body),
    },
    error,
    success: result.ok,
    duration_ms: result.durationMs,
    task_id: delivery.taskId,
    started_at: result.startedAt,
    state: outcome.state,
    next_attempt_at: outcome.state === 'pending' ? outcome.nextAttemptAt : 0,
    lease: delivery.lease,
    now,
  };
}

/**
 * Record attempts as executions and move their deliveries on (delivered / retry later / failed), all
 * in one statement whatever the batch size (the whole batch travels as one JSON parameter). Each
 * delivery update is fenced by its lease: if a lease ran out and another replica re-claimed the row,
 * only the execution is written (the attempt did happen). A row that was finished while the attempt
 * was in flight (its webhook deleted) counts the attempt but stays finished. Returns the ids of the
 * deliveries that were still ours.
 */
export async function recordAttempts(database: Database, attempts: FinishedAttempt[]): Promise<Set<string>> {
  if (attempts.length === 0) return new Set();
  const rows = await database.rows<{ id: string }>(
    database.db,
    sql`
    WITH input AS (
      SELECT * FROM jsonb_to_recordset(${JSON.stringify(attempts.map(toRecord))}::jsonb) AS x(
        execution_id uuid, delivery_id uuid, webhook_id uuid, source text, event text, url text, attempt int,
        request jsonb, response jsonb, error text, success boolean, duration_ms int, task_id uuid,
        started_at bigint, state text, next_attempt_at bigint, lease bigint, now bigint)
    ), execution AS (
      INSERT INTO webhook_executions (id, delivery_id, webhook_id, source, event, url, attempt, request, response,
        error, success, duration_ms, task_id, created_at)
      SELECT execution_id, delivery_id, webhook_id, source, event, url, attempt, request,
        CASE WHEN jsonb_typeof(response) = 'object' THEN response END, error, success, duration_ms, task_id,
        started_at
      FROM input
      RETURNING id
    )
    UPDATE deliveries d SET attempts = i.attempt,
      state = CASE WHEN d.state = 'pending' THEN i.state ELSE d.state END,
      next_attempt_at = CASE WHEN d.state = 'pending' THEN i.next_attempt_at ELSE d.next_attempt_at END,
      last_error = CASE WHEN d.state = 'pending' THEN i.error ELSE d.last_error END,
      locked_until = 0, updated_at = i.now
    FROM input i
    WHERE d.id = i.delivery_id AND d.locked_until = i.lease
    RETURNING d.id`,
  );
  return new Set(rows.map((r) => r.id));
}

/**
 * Give a claimed delivery back untouched (the dispatcher stopped mid-attempt): it is due again at once
 * for whichever dispatcher runs next, and the interrupted attempt is not counted.
 */
export async function releaseDelivery(database: Database, delivery: ClaimedDelivery): Promise<void> {
  await database.rows(
    database.db,
    sql`UPDATE deliveries SET locked_until = 0 WHERE id = ${delivery.id} AND locked_until = ${delivery.lease}
        RETURNING id`,
  );
}

/** The event row is gone: nothing can ever be sent, so the delivery fails without an attempt. */
export async function failMissingEvent(
  database: Database,
  delivery: ClaimedDelivery,
  now: number,
): Promise<void> {
  await database.rows(
    database.db,
    sql`UPDATE deliveries SET state = 'failed', locked_until = 0, last_error = 'event not found', updated_at = ${now}
        WHERE id = ${delivery.id} AND locked_until = ${delivery.lease} RETURNING id`,
  );
}
