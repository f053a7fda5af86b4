/**
 * Runs jobs one at a time per key, in arrival order. Reports of one agent must be applied in the
 * order it sent them (per-task seq numbers are applied once, so reordering would drop a report).
 */
export class SerialQueues {
  readonly #tails = new Map<string, Promise<void>>();

  run(key: string, job: () => Promise<void>): Promise<void> {
    const prev = this.#tails.get(key) ?? Promise.resolve();
    const next = prev.then(job, job).finally(() => {
      if (this.#tails.get(key) === next) this.#tails.delete(key);
    });
    this.#tails.set(key, next);
    return next;
  }

  /** Keys with a job queued or running. */
  get size(): number {
    return this.#tails.size;
  }

  /** Wait until every queued job has run (used by stop()). */
  async drain(): Promise<void> {
    while (this.#tails.size) await Promise.allSettled([...this.#tails.values()]);
  }
}
