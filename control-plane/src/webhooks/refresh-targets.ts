import { sql } from 'drizzle-orm';
import type { Database } from '../db/client.ts';
import type { ClaimedDelivery } from './claim-deliveries.ts';
import { WEBHOOK_DELETED, WEBHOOK_EVENT_CHANGED } from './record-attempt.ts';

/**
 * A claimed-ahead row that waited this long for a slot re-reads its webhook before it is sent. Rows
 * usually wait one HTTP exchange (tens of milliseconds); the ones that wait long are those of a slow
 * receiver, exactly the backlog that must not keep going to a webhook deleted or moved meanwhile.
 */
export const TARGET_REFRESH_MS = 500;

export type CurrentTarget = { url: string; secret: string | null };

/**
 * The current URL and secret of the global webhooks of claimed rows, by delivery id, in one
 * statement. A row whose webhook is gone or now subscribes to another event, or that is no longer
 * pending (deleteWebhook or updateWebhook failed it meanwhile), is left out and, if it is still ours and
 * pending (it was written while the webhook was being deleted or changed), failed as those fail the others.
 */
export async function refreshTargets(
  database: Database,
  claimed: ClaimedDelivery[],
  now: number,
): Promise<Map<string, CurrentTarget>> {
  const input = claimed
    .filter((d) => d.webhookId !== null)
    .map((d) => ({ id: d.id, webhook_id: d.webhookId, lease: d.lease }));
  if (input.length === 0) return new Map();
  const rows = await database.rows<{ id: string; url: string; secret: string | null }>(
    database.db,
    sql`
    WITH input AS (
      SELECT * FROM jsonb_to_recordset(${JSON.stringify(input)}::jsonb) AS x(id uuid, webhook_id uuid, lease bigint)
    ), orphaned AS (
      UPDATE deliveries d SET state = 'failed', locked_until = 0, updated_at = ${now},
        last_error = CASE WHEN EXISTS (SELECT 1 FROM webhooks w WHERE w.id = i.webhook_id)
          THEN ${WEBHOOK_EVENT_CHANGED} ELSE ${WEBHOOK_DELETED} END
      FROM input i
      WHERE d.id = i.id AND d.locked_until = i.lease AND d.state = 'pending'
        AND NOT EXISTS (SELECT 1 FROM webhooks w WHERE w.id = i.webhook_id AND w.event = d.event)
      RETURNING d.id
    )
    SELECT i.id, w.url, w.secret FROM input i
      JOIN deliveries d ON d.id = i.id AND d.state = 'pending'
      JOIN webhooks w ON w.id = i.webhook_id AND w.event = d.event`,
  );
  return new Map(rows.map((r) => [r.id, { url: r.url, secret: r.secret }]));
}
