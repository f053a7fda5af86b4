import { count, eq } from 'drizzle-orm';
import type { Database } from '../db/client.ts';
import { agents } from '../db/schema.ts';

/**
 * What `GET /health` adds to the database check: the broker connection and the agents online. The
 * agents are counted in the database, so their count is unknown (null) while it is unreachable; the
 * broker's state is reported either way.
 */
export async function healthFacts(
  database: Database,
  brokerConnected: () => boolean,
): Promise<{ broker: 'ok' | 'disconnected'; agents: { online: number | null } }> {
  const online = await database.db
    .select({ n: count() })
    .from(agents)
    .where(eq(agents.online, true))
    .then(
      ([r]) => Number(r?.n ?? 0),
      () => null,
    );
  return { broker: brokerConnected() ? 'ok' : 'disconnected', agents: { online } };
}
