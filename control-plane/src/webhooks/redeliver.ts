import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import type { Database } from '../db/client.ts';

/** The delivery a redelivery queued (the 202 body of `POST /webhooks/executions/{id}/redeliver`). */
export type QueuedDelivery = {
  deliveryId: string;
  eventId: string;
  event: string;
  webhook: string | null;
  source: 'global' | 'direct';
  url: string;
  state: 'pending';
  createdAt: number;
};

export type RedeliverResult =
  | { ok: true; delivery: QueuedDelivery }
  | { ok: false; error: 'execution_not_found' | 'webhook_deleted' | 'webhook_event_changed' };

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

type Row = {
  id: string;
  event_id: string;
  event: string;
  webhook_id: string | null;
  source: string;
  url: string;
  created_at: number | string;
};

/**
 * Queue the event of an execution again, as a fresh delivery with its own four attempts. The payload
 * (and so `webhook-id`) is the original event's, letting receivers deduplicate. A global webhook's
 * delivery goes to the webhook as it is now (its URL may have moved, its secret been rotated); once the
 * webhook is deleted there is nowhere to send it (`webhook_deleted`), nor once it receives another event
 * (`webhook_event_changed`: the claim would drop the row unsent). A direct webhook's goes to the
 * URL it was sent to. Never progress-only, so it is never coalesced away.
 */
export async function queueRedelivery(
  database: Database,
  executionId: string,
  now: number,
): Promise<RedeliverResult> {
  if (!UUID.test(executionId)) return { ok: false, error: 'execution_not_found' };
  const [row] = await database.rows<Row>(
    database.db,
    sql`
    INSERT INTO deliveries (id, event_id, event, webhook_id, source, url, secret, task_id, progress_only, state,
      attempts, next_attempt_at, locked_until, last_error, created_at, updated_at)
    SELECT ${randomUUID()}::uuid, d.event_id, d.event, d.webhook_id, d.source, coalesce(w.url, d.url),
      CASE WHEN d.webhook_id IS NULL THEN d.secret END,
      d.task_id, false, 'pending', 0, ${now}::bigint, 0, '', ${now}::bigint, ${now}::bigint
    FROM webhook_executions x
    JOIN deliveries d ON d.id = x.delivery_id
    LEFT JOIN webhooks w ON w.id = d.webhook_id
    WHERE x.id = ${executionId}::uuid AND (d.webhook_id IS NULL OR w.event = d.event)
    RETURNING id, event_id, event, webhook_id, source, url, created_at`,
  );
  if (!row) return { ok: false, error: await whyNotRedeliverable(database, executionId) };
  return {
    ok: true,
    delivery: {
      deliveryId: row.id,
      eventId: row.event_id,
      event: row.event,
      webhook: row.webhook_id,
      source: row.source === 'direct' ? 'direct' : 'global',
      url: row.url,
      state: 'pending',
      createdAt: Number(row.created_at),
    },
  };
}

/**
 * Nothing was queued: tell a deleted webhook, or one that now receives another event, from a missing
 * execution (or its pruned delivery).
 */
async function whyNotRedeliverable(
  database: Database,
  executionId: string,
): Promise<'execution_not_found' | 'webhook_deleted' | 'webhook_event_changed'> {
  const [row] = await database.rows<{ webhook_id: string; current: string | null }>(
    database.db,
    sql`SELECT d.webhook_id, w.event AS current FROM webhook_executions x
        JOIN deliveries d ON d.id = x.delivery_id LEFT JOIN webhooks w ON w.id = d.webhook_id
        WHERE x.id = ${executionId}::uuid AND d.webhook_id IS NOT NULL`,
  );
  if (!row) return 'execution_not_found';
  return row.current === null ? 'webhook_deleted' : 'webhook_event_changed';
}
