/**
 * Queued tasks whose `requires` no agent offers. Such a task stays QUEUED, correctly (an agent that
 * offers it may join later, or an operator may add a label), but nothing would say why: the fleet
 * checks each requirement list as tasks are queued and logs the ones no known agent (online or not)
 * satisfies. A list is checked at most once a minute and logged at most once in ten.
 */
import { agentCapabilities } from './capabilities.ts';
import { OncePer } from './once-per.ts';

const CHECK_EVERY_MS = 60_000;
const LOG_EVERY_MS = 10 * 60_000;

export type OfferingAgent = Parameters<typeof agentCapabilities>[0];

export type UnmetRequirement = {
  requires: readonly string[];
  /** Items no agent offers at all (empty when each is offered, but never all by one agent). */
  missing: string[];
};

const keyOf = (requires: readonly string[]): string => JSON.stringify([...requires].sort());

/** The lists no agent satisfies whole. */
export function unmetRequirements(
  lists: readonly (readonly string[])[],
  agents: readonly OfferingAgent[],
): UnmetRequirement[] {
  const offers = agents.map((a) => new Set(agentCapabilities(a)));
  const anywhere = new Set(offers.flatMap((o) => [...o]));
  return lists
    .filter((l) => !offers.some((o) => l.every((r) => o.has(r))))
    .map((l) => ({ requires: l, missing: l.filter((r) => !anywhere.has(r)) }));
}

export class RequirementCheck {
  readonly #queued = new Map<string, readonly string[]>();
  readonly #checked = new OncePer(CHECK_EVERY_MS);
  readonly #logged = new OncePer(LOG_EVERY_MS);

  /** Remember the non-empty lists of tasks just queued. */
  add(lists: Iterable<readonly string[]>): void {
    for (const l of lists) if (l.length) this.#queued.set(keyOf(l), l);
  }

  get pending(): boolean {
    return this.#queued.size > 0;
  }

  /** The remembered lists not checked in the last minute; marks them checked. */
  take(now: number): (readonly string[])[] {
    const due: (readonly string[])[] = [];
    for (const [key, l] of this.#queued) if (this.#checked.due(key, now)) due.push(l);
    this.#queued.clear();
    return due;
  }

  /** Of the unmet lists, those not logged in the last ten minutes; marks them logged. */
  toLog(unmet: readonly UnmetRequirement[], now: number): UnmetRequirement[] {
    return unmet.filter((u) => this.#logged.due(keyOf(u.requires), now));
  }
}
