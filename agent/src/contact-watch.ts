/**
 * When this agent was last out of touch with the control plane: frozen (SIGSTOP, a paused VM, an event
 * loop starved for seconds) or cut off from the broker. A message read right after such a spell may
 * have waited in the broker or in the socket for all of it, so it may describe a world that has moved
 * on: a cancel of a task that the control plane has since finished without us (its lease ran out, or a
 * DELETE stopped waiting for us after 3 s) and whose output path a new attempt or a new task now
 * writes. Such a cancel still stops the run, but must not remove "its" partial output.
 *
 * A spell long enough may also have cost a run its lease without the run hearing of it yet: the step
 * that was running when the agent froze may have ended meanwhile, and the next one must not start
 * before the control plane says the attempt is still this agent's (`awaySince`, the runs' step gate).
 *
 * A freeze is seen by a coarse timer: once a second it notes that it ran; a tick later than `stallMs`
 * means the process did not run meanwhile. Right after a freeze, before the late tick has run (libuv
 * reads the socket that woke it before it runs timers), the old tick itself says so.
 */
export class ContactWatch {
  readonly #stallMs: number;
  readonly #onStall: (ms: number) => void;
  readonly #timer: NodeJS.Timeout;
  #lastTick = performance.now();
  /**
   * When a freeze whose late tick has not run yet was first seen over (awaySince): the process ran
   * then, so the freeze had ended. The tick, which runs after the I/O that woke the process, records it
   * as the freeze's end, not its own later time: a run that asked the control plane in between asked
   * after the freeze.
   */
  #seenBackAt: number | undefined;
  /** When the last spell away ended (performance.now()). */
  #backAt = Number.NEGATIVE_INFINITY;
  /** Since when the broker connection is lost (performance.now()); undefined while it is up. */
  #cutOffAt: number | undefined;
  /** The latest spells that ended (at most SPELLS_KEPT), oldest first. */
  readonly #spells: Spell[] = [];
  /**
   * What the spells dropped from `#spells` add up to: the latest end and the longest length among them.
   * A question about a time before that end is answered with that length, so a dropped spell is never
   * missed (at worst one that ended before the time asked about is counted).
   */
  #dropped: Spell = { end: Number.NEGATIVE_INFINITY, ms: 0 };

  constructor(opts: { tickMs?: number; stallMs?: number; onStall?: (ms: number) => void } = {}) {
    this.#stallMs = opts.stallMs ?? 2_500;
    this.#onStall = opts.onStall ?? (() => {});
    this.#timer = setInterval(() => this.#tick(), opts.tickMs ?? 1_000);
    this.#timer.unref();
  }

  #tick(): void {
    const now = performance.now();
    const gap = now - this.#lastTick;
    const end = this.#seenBackAt ?? now;
    this.#lastTick = now;
    this.#seenBackAt = undefined;
    if (gap > this.#stallMs) {
      this.#backAt = end;
      this.#ended(end, end - (now - gap));
      this.#onStall(gap);
    }
  }

  #ended(end: number, ms: number): void {
    this.#spells.push({ end, ms });
    if (this.#spells.length <= SPELLS_KEPT) return;
    const old = this.#spells.shift()!;
    this.#dropped = { end: Math.max(this.#dropped.end, old.end), ms: Math.max(this.#dropped.ms, old.ms) };
  }

  /**
   * The broker connection was lost, or refused: a spell cut off begins, unless one is going on. Returns
   * when the ongoing one began.
   */
  disconnected(): number {
    this.#cutOffAt ??= performance.now();
    return this.#cutOffAt;
  }

  /** Connected to the broker: the spell cut off, if one was going on, ends. */
  connected(): void {
    if (this.#cutOffAt === undefined) return;
    const now = performance.now();
    this.#backAt = now;
    this.#ended(now, now - this.#cutOffAt);
    this.#cutOffAt = undefined;
  }

  /** Away right now (frozen until a moment ago), or back for less than `withinMs`. */
  recentlyAway(withinMs: number): boolean {
    const now = performance.now();
    return now - this.#lastTick > this.#stallMs || now - this.#backAt < withinMs;
  }

  /**
   * The longest spell away of at least `minMs` that ended after `since` (performance.now()) or is still
   * going on (frozen until a moment ago, before the late tick has run; or cut off now): how long it
   * lasted, or lasts so far. 0 when there was none.
   */
  awaySince(since: number, minMs: number): number {
    const now = performance.now();
    let longest = 0;
    const frozen = now - this.#lastTick;
    if (frozen > this.#stallMs) {
      this.#seenBackAt ??= now;
      if (frozen >= minMs) longest = frozen;
    }
    if (this.#cutOffAt !== undefined && now - this.#cutOffAt >= minMs)
      longest = Math.max(longest, now - this.#cutOffAt);
    if (this.#dropped.end > since && this.#dropped.ms >= minMs) longest = Math.max(longest, this.#dropped.ms);
    for (const s of this.#spells) if (s.end > since && s.ms >= minMs) longest = Math.max(longest, s.ms);
    return longest;
  }

  stop(): void {
    clearInterval(this.#timer);
  }
}

type Spell = { end: number; ms: number };

/**
 * Spells remembered one by one. They are rare (a freeze of seconds, a lost connection); a run asks
 * about the time since its lease was last confirmed, and more spells than this within one run are
 * summed up conservatively (`#dropped`).
 */
const SPELLS_KEPT = 16;
