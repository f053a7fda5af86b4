/**
 * When this agent was last out of touch with the control plane: frozen (SIGSTOP, a paused VM, an event
 * loop starved for seconds) or cut off from the broker. A message read right after such a spell may
 * have waited in the broker or in the socket for all of it, so it may describe a world that has moved
 * on: a cancel of a task that the control plane has since finished without us (its lease ran out, or a
 * DELETE stopped waiting for us after 3 s) and whose output path a new attempt or a new task now
 * writes. Such a cancel still stops the run, but must not remove "its" partial output.
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

  /** The broker connection came back after it was lost. */
  reconnected(): void {
    this.#backAt = performance.now();
  }

  /** Away right now (frozen until a moment ago), or back for less than `withinMs`. */
  recentlyAway(withinMs: number): boolean {
    const now = performance.now();
    return now - this.#lastTick > this.#stallMs || now - this.#backAt < withinMs;
  }

  stop(): void {
    clearInterval(this.#timer);
  }
}
