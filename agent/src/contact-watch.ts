/**
 * When this agent was last out of touch with the control plane: frozen (SIGSTOP, a paused VM, an event
 * loop starved for seconds) or cut off from the broker. A message read right after such a spell may
 * have waited in the broker or in the socket for all of it, so it may describe a world that has moved
 * on: a cancel of a task that the control plane has since finished without us (its lease ran out, or a
 * DELETE stopped waiting for us after 3 s) and whose output path a new attempt or a new task now
 * writes. Such a cancel still stops the run, but must not remove "its" partial output.
 *
 * (The runs' step gate does not rely on it: a silent partition is no spell here until mqtt.js's keepalive
 * finds it, so the gate goes by the control plane's last word on each run instead; it only says whether
 * a spell was seen, for its log line.)
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
  /** When the last spell away ended (performance.now()). */
  #backAt = Number.NEGATIVE_INFINITY;
  /** Since when the broker connection is lost (performance.now()); undefined while it is up. */
  #cutOffAt: number | undefined;

  constructor(opts: { tickMs?: number; stallMs?: number; onStall?: (ms: number) => void } = {}) {
    this.#stallMs = opts.stallMs ?? 2_500;
    this.#onStall = opts.onStall ?? (() => {});
    this.#timer = setInterval(() => this.#tick(), opts.tickMs ?? 1_000);
    this.#timer.unref();
  }

  #tick(): void {
    const now = performance.now();
    const gap = now - this.#lastTick;
    this.#lastTick = now;
    if (gap > this.#stallMs) {
      this.#backAt = now;
      this.#onStall(gap);
    }
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
    this.#backAt = performance.now();
    this.#cutOffAt = undefined;
  }

  /** Away right now (frozen until a moment ago, or cut off), or back for less than `withinMs`. */
  recentlyAway(withinMs: number): boolean {
    const now = performance.now();
    return (
      now - this.#lastTick > this.#stallMs || this.#cutOffAt !== undefined || now - this.#backAt < withinMs
    );
  }

  stop(): void {
    clearInterval(this.#timer);
  }
}
