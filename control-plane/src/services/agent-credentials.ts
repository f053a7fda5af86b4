import { sql } from 'drizzle-orm';
import type { Db } from '../db/client.ts';
import { agentCredentials } from '../db/schema.ts';

/** The current generation of each agent name's own token (names at generation 0 have no row). */
export async function loadTokenGenerations(db: Db): Promise<Map<string, number>> {
  const rows = await db
    .select({ name: agentCredentials.name, generation: agentCredentials.generation })
    .from(agentCredentials);
  return new Map(rows.map((r) => [r.name, r.generation]));
}

/**
 * Move `name`'s own token to the next generation (the first move makes it 1) and return it: from then
 * on only that generation's token logs the name in. One statement, so two concurrent moves give two
 * generations, never the same one twice.
 */
export async function nextTokenGeneration(db: Db, name: string, now: number): Promise<number> {
  const [row] = await db
    .insert(agentCredentials)
    .values({ name, generation: 1, rotatedAt: now })
    .onConflictDoUpdate({
      target: agentCredentials.name,
      set: { generation: sql`${agentCredentials.generation} + 1`, rotatedAt: now },
    })
    .returning({ generation: agentCredentials.generation });
  return row!.generation;
}
