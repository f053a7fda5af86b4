import type { Database } from '../db/client.ts';
import { type FinishedAttempt, recordAttempts } from './record-attempt.ts';

/** Attempts per recording statement; bounds one statement's parameter size (bodies are ≤ 64 KiB each). */
export const MAX_RECORD_BATCH = 100;

type Waiting = { attempt: FinishedAttempt; resolve: (ours: boolean) => void; reject: (e: unknown) => void };

/**
 * Group commit for attempt records: while one batch is being written, finished attempts queue up and
 * go out together in the next statement. No added latency when idle (a lone attempt is written at
 * once); under load, one statement per batch instead of one per attempt.
 */
export class AttemptRecorder {
  readonly #queue: Waiting[] = [];
  #writing: Promise<void> | null = null;

  constructor(private readonly database: Database) {}

  /** Record one attempt; resolves with whether its delivery row was still ours (see recordAttempts). */
  record(attempt: FinishedAttempt): Promise<boolean> {
    return new Promise((resolve, reject) => {
      this.#queue.push({ attempt, resolve, reject });
      this.#writing ??= this.#drain();
    });
  }

  async #drain(): Promise<void> {
    while (this.#queue.length > 0) {
      const batch = this.#queue.splice(0, MAX_RECORD_BATCH);
      try {
        const ours = await recordAttempts(
          this.database,
          batch.map((w) => w.attempt),
        );
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
