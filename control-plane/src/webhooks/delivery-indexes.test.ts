import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/helpers/app.ts';
import { dbKinds } from '../../../test/helpers/db-kinds.ts';

/**
 * A webhook's PUT and DELETE update its pending deliveries (services/webhooks.ts). Deliveries are kept
 * for days after they were delivered, so without an index of their own those updates read every row.
 */
describe.each(dbKinds)('deliveries indexes on %s', (kind) => {
  const t = useTestApp({ kind });

  it("finds a webhook's pending deliveries through an index, not by reading every delivery", async () => {
    const db = t.ctx.database.db;
    const webhook = randomUUID();
    // 20,000 deliveries of many webhooks, 20 of them this webhook's and pending.
    await t.db.rows(
      db,
      sql`INSERT INTO deliveries (id, event_id, event, webhook_id, source, url, state)
        SELECT gen_random_uuid(), gen_random_uuid(), 'task.created',
          CASE WHEN g % 1000 = 0 THEN ${webhook}::uuid ELSE gen_random_uuid() END, 'global', 'http://127.0.0.1:9/',
          CASE WHEN g % 1000 = 0 OR g % 7 = 0 THEN 'pending' ELSE 'delivered' END
        FROM generate_series(1, 20000) AS g`,
    );
    await t.db.rows(db, sql`ANALYZE deliveries`);
    const plan = await t.db.rows<{ 'QUERY PLAN': string }>(
      db,
      sql`EXPLAIN UPDATE deliveries SET state = 'failed'
        WHERE webhook_id = ${webhook}::uuid AND state = 'pending'`,
    );
    const text = plan.map((r) => r['QUERY PLAN']).join('\n');
    expect(text).toContain('deliveries_webhook_pending_idx');
    expect(text).not.toContain('Seq Scan');
  });
});
