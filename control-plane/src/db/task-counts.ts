import { sql } from 'drizzle-orm';
import type { Db } from './client.ts';
import { taskCounts } from './schema.ts';

/**
 * Fold task_counts' delta rows into one row per status, in one statement: rows inserted meanwhile are
 * not in its snapshot and stay; a concurrent fold skips the rows this one deleted. Run by the
 * retention sweeper and by a count that summed many rows.
 */
export async function compactTaskCounts(db: Db): Promise<void> {
  await db.execute(sql`WITH d AS (DELETE FROM ${taskCounts} RETURNING status, n)
    INSERT INTO ${taskCounts} (status, n) SELECT status, sum(n) FROM d GROUP BY status HAVING sum(n) <> 0`);
}
