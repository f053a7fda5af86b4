import { type Agent, type AgentPatch, type PageQuery, unstorableText } from '@ffleet/shared';
import { and, count, desc, eq } from 'drizzle-orm';
import { ConflictError, NotFoundError } from '../api/errors.ts';
import { anyOf } from '../db/array-literal.ts';
import type { Db } from '../db/client.ts';
import { type AgentRow, toAgent } from '../db/mappers.ts';
import { agents, taskIsRunning, tasks } from '../db/schema.ts';
import type { ServiceContext } from './context.ts';
import { paginate } from './paginate.ts';
import { isUuid } from './tasks.ts';

async function withRunning(db: Db, rows: AgentRow[], localAgentName?: string): Promise<Agent[]> {
  const running = new Map<string, string[]>();
  const ids = rows.map((r) => r.id);
  if (ids.length) {
    const rs = await db
      .select({ id: tasks.id, agentId: tasks.agentId })
      .from(tasks)
      .where(and(anyOf(tasks.agentId, ids, 'uuid'), taskIsRunning));
    for (const r of rs) {
      const list = running.get(r.agentId!) ?? [];
      list.push(r.id);
      running.set(r.agentId!, list);
    }
  }
  return rows.map((r) => toAgent(r, running.get(r.id) ?? [], r.name === localAgentName));
}

/** An agent by uuid or by its unique name. */
export async function findAgentRow(db: Db, idOrName: string): Promise<AgentRow | null> {
  // A name PostgreSQL cannot even compare (NUL, lone surrogate) names no agent: 404, not a 500.
  if (unstorableText(idOrName)) return null;
  const [r] = await db
    .select()
    .from(agents)
    .where(isUuid(idOrName) ? eq(agents.id, idOrName) : eq(agents.name, idOrName));
  return r ?? null;
}

export async function listAgents(ctx: ServiceContext, page: PageQuery) {
  const db = ctx.database.db;
  const { rows, total } = await paginate(
    // Newest first, by when each agent first joined: a stable order, so paging visits every agent once.
    // (By last_seen, which the sweep rewrites every few seconds, a walk of the pages skipped and repeated
    // agents.)
    db.select().from(agents).orderBy(desc(agents.createdAt), desc(agents.id)),
    db.select({ n: count() }).from(agents),
    page,
  );
  return { items: await withRunning(db, rows, ctx.localAgentName), total };
}

export async function getAgent(ctx: ServiceContext, id: string): Promise<Agent> {
  const r = await findAgentRow(ctx.database.db, id);
  if (!r) throw new NotFoundError('agent', id);
  return (await withRunning(ctx.database.db, [r], ctx.localAgentName))[0]!;
}

/**
 * Operator settings: `paused` drains (no new claims), `labels` and `slots` override the agent's own
 * (null clears the override: the agent's reported values apply again).
 */
export async function patchAgent(ctx: ServiceContext, id: string, patch: AgentPatch): Promise<Agent> {
  const db = ctx.database.db;
  const r = await findAgentRow(db, id);
  if (!r) throw new NotFoundError('agent', id);
  const set: Partial<typeof agents.$inferInsert> = {};
  if (patch.paused !== undefined) set.paused = patch.paused;
  if (patch.labels !== undefined) set.labelsOverride = patch.labels;
  if (patch.slots !== undefined) set.slotsOverride = patch.slots;
  if (Object.keys(set).length) await db.update(agents).set(set).where(eq(agents.id, r.id));
  ctx.fleet.agentChanged(r.id);
  if (patch.paused === false || patch.slots !== undefined || patch.labels !== undefined)
    ctx.fleet.workAvailable();
  return getAgent(ctx, r.id);
}

/** Only an offline agent may be removed (an online one would re-register at once). */
export async function deleteAgent(ctx: ServiceContext, id: string): Promise<void> {
  const db = ctx.database.db;
  const r = await findAgentRow(db, id);
  if (!r) throw new NotFoundError('agent', id);
  if (r.online)
    throw new ConflictError('AGENT_ONLINE', `agent ${r.name} is online; stop it before removing it`);
  await db.delete(agents).where(eq(agents.id, r.id));
  ctx.fleet.agentChanged(r.id);
}
