/** How long a process's hold on a name is remembered after its last birth. */
export const NAME_CLAIM_WINDOW_MS = 60_000;
/** How long a refused process stays refused (its births, hellos and heartbeats are ignored). */
const REFUSED_FOR_MS = 10 * 60_000;

type Holder = { bootId: string; hostname: string; first: number; last: number };

/**
 * Which agent processes (boot ids) took each agent name, to catch two live processes sharing one name:
 * two boxes cloned from one image, with the default name (the hostname). The broker lets the newer
 * MQTT connection take over the older one, so such a pair reconnects in turn forever, and each one's
 * hello tells the control plane that the other's tasks were lost. The sign: a process's birth after
 * another process took the name from it within NAME_CLAIM_WINDOW_MS — a restarted agent's old process
 * never comes back, a reconnecting one comes back with its own boot id. The process that held the name
 * first keeps it; the other is refused.
 */
export class NameClaims {
  readonly #holders = new Map<string, Holder[]>();
  readonly #refused = new Map<string, { at: number; reason: string }>();

  /**
   * An online birth of `name` from process `bootId`. Returns the process to refuse and why when two
   * live processes share the name (it may be this one), else null.
   */
  birth(
    name: string,
    bootId: string,
    hostname: string,
    now: number,
  ): { bootId: string; reason: string } | null {
    this.#prune(now);
    const refused = this.#refused.get(bootId);
    if (refused) return { bootId, reason: refused.reason };
    const holders = (this.#holders.get(name) ?? []).filter((h) => now - h.last <= NAME_CLAIM_WINDOW_MS);
    const latest = holders.reduce<Holder | null>((a, h) => (!a || h.last > a.last ? h : a), null);
    let mine = holders.find((h) => h.bootId === bootId);
    let verdict: { bootId: string; reason: string } | null = null;
    if (mine && latest && latest.bootId !== bootId) {
      const [keeper, loser] = mine.first <= latest.first ? [mine, latest] : [latest, mine];
      const reason =
        `another agent process named "${name}" (on host ${keeper.hostname || 'unknown'}) was connected first; ` +
        `each agent needs its own name: set FFLEET_AGENT_NAME (it defaults to the hostname)`;
      this.#refused.set(loser.bootId, { at: now, reason });
      verdict = { bootId: loser.bootId, reason };
    }
    if (!mine) {
      mine = { bootId, hostname, first: now, last: now };
      holders.push(mine);
    }
    mine.last = now;
    this.#holders.set(
      name,
      holders.filter((h) => !this.#refused.has(h.bootId)),
    );
    return verdict;
  }

  /**
   * Process `bootId` is alive under `name` (a heartbeat or hello). Keeps its hold on the name fresh: a
   * birth comes only with a connection, so an agent connected for longer than NAME_CLAIM_WINDOW_MS
   * would otherwise be forgotten, and a second process taking the name then would be judged the first
   * (the broker's takeover makes the long-connected one reconnect and send a newer birth).
   */
  seen(name: string, bootId: string, hostname: string, now: number): void {
    if (this.#refused.has(bootId)) return;
    const holders = this.#holders.get(name) ?? [];
    const mine = holders.find((h) => h.bootId === bootId);
    if (mine) mine.last = now;
    else holders.push({ bootId, hostname, first: now, last: now });
    this.#holders.set(name, holders);
  }

  /**
   * Process `bootId` held `name` until `last` as the database has it (the agent's row, read before a
   * birth from another process overwrites it): after the control plane's own restart, this memory is
   * empty, and a new process would otherwise look like the first holder of the name.
   */
  remember(name: string, bootId: string, hostname: string, last: number, now: number): void {
    if (!bootId || now - last > NAME_CLAIM_WINDOW_MS || this.#refused.has(bootId)) return;
    const holders = this.#holders.get(name) ?? [];
    if (holders.some((h) => h.bootId === bootId)) return;
    holders.push({ bootId, hostname, first: last, last });
    this.#holders.set(name, holders);
  }

  /**
   * The process other than `bootId` that held `name` most recently (within NAME_CLAIM_WINDOW_MS and
   * not refused), or null: whose tasks a hello from `bootId` that does not list them may be about.
   */
  previousHolder(name: string, bootId: string, now: number): string | null {
    let best: Holder | null = null;
    for (const h of this.#holders.get(name) ?? []) {
      if (h.bootId === bootId || this.#refused.has(h.bootId) || now - h.last > NAME_CLAIM_WINDOW_MS) continue;
      if (!best || h.last > best.last) best = h;
    }
    return best?.bootId ?? null;
  }

  /** True for a process refused for sharing its name: what it sends is ignored. */
  isRefused(bootId: string): boolean {
    return this.#refused.has(bootId);
  }

  #prune(now: number): void {
    for (const [id, r] of this.#refused) if (now - r.at > REFUSED_FOR_MS) this.#refused.delete(id);
    for (const [name, list] of this.#holders)
      if (list.every((h) => now - h.last > NAME_CLAIM_WINDOW_MS)) this.#holders.delete(name);
  }
}
