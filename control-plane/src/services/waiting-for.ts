import { reservedLabelProblem, type Task } from '@ffleet/shared';
import { and, eq } from 'drizzle-orm';
import { anyOf } from '../db/array-literal.ts';
import { type AgentRow, effectiveLabels, effectiveSlots } from '../db/mappers.ts';
import { agents, tasks } from '../db/schema.ts';
import { claimBlocker, offers } from '../scheduler/capabilities.ts';
import type { ServiceContext } from './context.ts';

type OfferingAgent = AgentRow & { labels: string[] };

/** Each agent with its labels as the claim reads them (an override wins over the reported ones). */
const offeringOf = (known: readonly AgentRow[]): OfferingAgent[] =>
  known.map((a) => ({ ...a, labels: effectiveLabels(a) }));

/** Agents named in a reason, at most. */
const NAMED = 5;

/** Why the agent cannot claim now ('' when it can): the fleet's gate, and slots to claim with. */
const unavailable = (a: AgentRow): string => claimBlocker(a) || (effectiveSlots(a) <= 0 ? '0 slots' : '');

/**
 * Why a QUEUED task with these `requires` is not being claimed by any of `known` (every agent on
 * record), or '' when an agent that can run it is there to take it (it waits for a free slot, if at all).
 * ARCHITECTURE "failure model": a task reaches a final state or is visibly queued with the reason.
 */
export function waitingReason(
  requires: readonly string[],
  known: readonly AgentRow[],
  offering: readonly OfferingAgent[] = offeringOf(known),
): string {
  const capable = known.filter((_, i) => requires.every((r) => offers(offering[i]!, r)));
  if (capable.some((a) => unavailable(a) === '')) return '';
  if (!known.length) return 'no agent has connected yet';
  if (!capable.length) {
    const missing = requires.filter((r) => !offering.some((a) => offers(a, r)));
    if (!missing.length) return `no single agent offers all of ${requires.join(', ')} (its requires)`;
    // A capability the agent reports itself (encoder:, agent:…) cannot be given as a label.
    const labels = missing.some((r) => reservedLabelProblem(r) === null);
    return `no agent offers ${missing.join(', ')} (its requires): ${labels ? 'add the label to an agent (PATCH /api/v1/agents/{id}) or ' : ''}connect one that has it`;
  }
  const named = capable
    .slice(0, NAMED)
    .map((a) => `${a.name} (${unavailable(a)})`)
    .join(', ');
  const more = capable.length > NAMED ? ` and ${capable.length - NAMED} more` : '';
  return `${requires.length ? 'every agent that offers its requires' : 'every agent'} is unavailable: ${named}${more}`;
}

/**
 * An agent not heard from for this long is not taken to be stopping a run any more (heartbeats come every
 * few seconds; the broker shows a frozen or silently cut agent online for up to 1.5 keepalives, 45 s).
 */
export const SILENT_AGENT_MS = 10_000;

/**
 * Why a running task whose cancel was asked for still runs: its agent has not confirmed the stop yet.
 * An agent that is offline, or silent, cannot be told, so the cancel completes when the task's lease runs
 * out (the agent may be cut off and still running the step: nothing else may write its output before then).
 */
export function cancelReason(
  agentName: string | null,
  agentOnline: boolean,
  silentMs: number,
  leaseLeftMs: number,
): string {
  const who = `agent ${agentName ?? '(unknown)'}`;
  if (agentOnline && silentMs < SILENT_AGENT_MS) return `its cancel: ${who} is stopping the run`;
  const state = agentOnline ? `has not been heard from for ${Math.floor(silentMs / 1000)} s` : 'is offline';
  const left = Math.max(0, Math.ceil(leaseLeftMs / 1000));
  return `its cancel: ${who} ${state}; the task is canceled when its lease runs out (in ${left} s), or as soon as the agent reports back`;
}

/** Running tasks among `ids` whose cancel is pending → the reason they still run. */
async function pendingCancels(ctx: ServiceContext, ids: string[]): Promise<Map<string, string>> {
  const rows = await ctx.database.db
    .select({
      id: tasks.id,
      leaseExpiresAt: tasks.leaseExpiresAt,
      agentName: agents.name,
      agentOnline: agents.online,
      agentLastSeen: agents.lastSeen,
    })
    .from(tasks)
    .leftJoin(agents, eq(agents.id, tasks.agentId))
    .where(and(anyOf(tasks.id, ids, 'uuid'), eq(tasks.cancelRequested, true)));
  const now = ctx.now();
  return new Map(
    rows.map((r) => [
      r.id,
      cancelReason(r.agentName, r.agentOnline === true, now - (r.agentLastSeen ?? 0), r.leaseExpiresAt - now),
    ]),
  );
}

const RUNNING: ReadonlySet<string> = new Set(['PRE_PROCESSING', 'RUNNING']);

/**
 * The tasks with `waitingFor` set on those QUEUED and not being claimed, and on running ones whose
 * cancel waits for their agent. The agents are read once, only when a task is QUEUED; a reason is worked
 * out once per distinct `requires`; pending cancels are one read, only when a task is running.
 */
export async function withWaitingFor<T extends Task>(ctx: ServiceContext, list: T[]): Promise<T[]> {
  const running = list.filter((t) => RUNNING.has(t.status)).map((t) => t.id);
  const cancels = running.length ? await pendingCancels(ctx, running) : new Map<string, string>();
  const queued = list.some((t) => t.status === 'QUEUED');
  if (!cancels.size && !queued) return list;
  const known = queued ? await ctx.database.db.select().from(agents) : [];
  const offering = offeringOf(known);
  const reasons = new Map<string, string>();
  return list.map((t) => {
    const cancel = cancels.get(t.id);
    if (cancel) return { ...t, waitingFor: cancel };
    if (t.status !== 'QUEUED') return t;
    const key = JSON.stringify(t.requires);
    let reason = reasons.get(key);
    if (reason === undefined) {
      reason = waitingReason(t.requires, known, offering);
      reasons.set(key, reason);
    }
    return reason ? { ...t, waitingFor: reason } : t;
  });
}
