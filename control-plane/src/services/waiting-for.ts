import { reservedLabelProblem, type Task } from '@ffleet/shared';
import { type AgentRow, effectiveLabels, effectiveSlots } from '../db/mappers.ts';
import { agents } from '../db/schema.ts';
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
 * The tasks with `waitingFor` set on those QUEUED and not being claimed. The agents are read once,
 * only when a task is QUEUED; a reason is worked out once per distinct `requires`.
 */
export async function withWaitingFor<T extends Task>(ctx: ServiceContext, list: T[]): Promise<T[]> {
  if (!list.some((t) => t.status === 'QUEUED')) return list;
  const known = await ctx.database.db.select().from(agents);
  const offering = offeringOf(known);
  const reasons = new Map<string, string>();
  return list.map((t) => {
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
