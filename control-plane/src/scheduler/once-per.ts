/** Keys remembered at most (the oldest go first): a flood of distinct keys costs bounded memory. */
const MAX_KEYS = 10_000;

/**
 * "Once per `everyMs` for each key": whether something (a log line, a check) is due for a key now,
 * marking it done when it is. Time is the caller's (`now`, ms), so tests need no clock.
 */
export class OncePer {
  readonly #at = new Map<string, number>();

  constructor(readonly everyMs: number) {}

  /** True (and marked) when `key` was not due in the last `everyMs`. */
  due(key: string, now: number = performance.now()): boolean {
    if ((this.#at.get(key) ?? Number.NEGATIVE_INFINITY) + this.everyMs > now) return false;
    this.#at.set(key, now);
    if (this.#at.size > MAX_KEYS) {
      for (const [k, at] of this.#at)
        if (at <= now - this.everyMs || this.#at.size > MAX_KEYS) this.#at.delete(k);
    }
    return true;
  }
}
