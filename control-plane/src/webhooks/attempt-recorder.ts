import type { Database } from '../db/client.ts';
import { type FinishedAttempt, recordAttempts } from './record-attempt.ts';

/** Attempts per recording statement; bounds one statement's parameter size (bodies are ≤ 64 KiB each). */
export const MAX_RECORD_BATCH = 100;
/** The longest an attempt waits for others to share its recording statement (PGlite, see #gather). */
const GATHER_MAX_MS = 20;

type Waiting = { attempt: FinishedAttempt; resolve: (ours: boolean) => void; reject: (e: unknown) => void };

/**
 * Group commit for attempt records: while one batch is being written, finished attempts queue up and
 * go out together in the next statement. No added latency when idle (a lone attempt is written at
 * once); under load, one statement per batch instead of one per attempt.
 */
export class AttemptRecorder {
  readonly #queue: Waiting[] = [];
  #writing: Promise<void> | null = null;
  #lastWriteMs = 0;

  constructor(private readonly database: Database) {}

  /** Record one attempt; resolves with whether its delivery row was still ours (see recordAttempts). */
  record(attempt: FinishedAttempt): Promise<boolean> {
    return new Promise((resolve, reject) => {
      this.#queue.push({ attempt, resolve, reject });
      this.#writing ??= this.#gather().then(() => this.#drain());
    });
  }

  /**
   * On PGlite, before a write, wait as long as the last one took (at most GATHER_MAX_MS), so that
   * attempts finishing meanwhile share it: each write runs on the main thread there, and recording a
   * busy receiver's attempts one by one took most of it. (On PostgreSQL the attempts that finish while a
   * write is in flight already share the next one.)
   */
  #gather(): Promise<void> {
    if (this.database.kind !== 'pglite') return Promise.resolve();
    const wait = Math.min(GATHER_MAX_MS, this.#lastWriteMs);
    return wait >= 1 ? new Promise((r) => setTimeout(r, wait)) : Promise.resolve();
  }

  async #drain(): Promise<void> {
    while (this.#queue.length > 0) {
      const batch = this.#queue.splice(0, MAX_RECORD_BATCH);
      try {
        const t0 = performance.now();
        const ours = await recordAttempts(
          this.database,
          batch.map((w) => w.attempt),
        );
        this.#lastWriteMs = performance.now() - t0;
        for (const w of batch) w.resolve(ours.has(w.attempt.delivery.id));
      } catch (e) {
        if (batch.length === 1) batch[0]!.reject(e);
        // One unrecordable attempt must not sink the others: record them one by one.
        else await Promise.all(batch.map((w) => this.#recordOne(w)));
      }
    }
    this.#writing = null;
  }

  async #recordOne(w: Waiting): Promise<void> {
    try {
      w.resolve((await recordAttempts(this.database, [w.attempt])).has(w.attempt.delivery.id));
    } catch (e) {
      w.reject(e);
    }
  }
}
