import { sql } from 'drizzle-orm';
import type { Logger } from 'pino';
import type { Database } from './client.ts';

const MB = 1024 * 1024;

/**
 * How often the WAL written since the last checkpoint is looked at: one query of ~0.4 ms. What is
 * written between two looks adds to the next checkpoint: a burst of large task bodies wrote ~17 MB/s
 * of WAL, so a look every 30 s would let a checkpoint cover ~500 MB.
 */
export const CHECK_EVERY_MS = 10_000;
/**
 * WAL that triggers a checkpoint: about what a crash restart replays at most (plus what one period
 * adds). A checkpoint blocks the event loop while it writes the dirty buffers and fsyncs every file
 * written since the last one; measured on ext4 after a burst: 46 ms at 32 MB of WAL, 65 ms at 64 MB,
 * 132 ms at 128 MB, 197 ms at 256 MB. Crash recovery replayed 600 MB in ~2.7 s.
 */
export const MAX_WAL_BYTES = 64 * MB;
/** A checkpoint at least this often while anything is written (PostgreSQL's checkpoint_timeout). */
export const MAX_CHECKPOINT_AGE_MS = 5 * 60_000;
/**
 * A checkpoint writes its own record after its redo point (~120 bytes, plus a page header where it
 * crosses a page): less than this past the last checkpoint record means nothing was written since.
 */
const IDLE_WAL_BYTES = 512;

export type CheckpointerOptions = {
  database: Database;
  logger: Logger;
  everyMs?: number;
  maxWalBytes?: number;
  maxAgeMs?: number;
  now?: () => number;
};

export type CheckpointOutcome =
  | { checkpointed: true; reason: 'wal' | 'age'; walBytes: number; ms: number }
  | { checkpointed: false; reason: 'not-embedded' | 'stopped' | 'idle' | 'below-threshold' | 'failed' };

type WalPosition = { sinceRedo: number; sinceRecord: number; checkpointAt: number };

/**
 * Checkpoints the embedded database. PGlite runs PostgreSQL in single-user mode, without the
 * checkpointer process, so neither checkpoint_timeout nor max_wal_size ever triggers one: pg_wal grew
 * without bound (3.7 GB in a 30-minute soak) and a crash restart replayed all of it (17 s). A
 * PostgreSQL server checkpoints by itself, so on one this does nothing.
 *
 * Its statements go through the database's client, which serialises them with every other statement
 * and transaction (as the retention sweeper's VACUUM does). A CHECKPOINT runs on the main thread and
 * holds the database for its duration. A clean shutdown needs none from here: closing PGlite writes
 * its own shutdown checkpoint.
 */
export class PgliteCheckpointer {
  readonly #o: Required<Omit<CheckpointerOptions, 'database' | 'logger'>> &
    Pick<CheckpointerOptions, 'database' | 'logger'>;
  readonly #log: Logger;
  #timer: NodeJS.Timeout | null = null;
  #running: Promise<CheckpointOutcome> | null = null;
  #stopped = false;

  constructor(opts: CheckpointerOptions) {
    this.#o = {
      everyMs: CHECK_EVERY_MS,
      maxWalBytes: MAX_WAL_BYTES,
      maxAgeMs: MAX_CHECKPOINT_AGE_MS,
      now: () => Date.now(),
      ...opts,
    };
    this.#log = opts.logger.child({ component: 'pglite-checkpointer' });
  }

  /** Starts the periodic check on the embedded database; does nothing on a PostgreSQL server. */
  start(): void {
    if (this.#o.database.kind !== 'pglite' || this.#timer || this.#stopped) return;
    this.#timer = setInterval(() => void this.check(), this.#o.everyMs);
    this.#timer.unref();
  }

  /** Stops the timer and waits for a checkpoint under way (before the database closes). */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
    await this.#running;
  }

  /** One look: checkpoints when enough WAL, or any WAL and enough time, went by since the last one. */
  check(): Promise<CheckpointOutcome> {
    if (this.#o.database.kind !== 'pglite')
      return Promise.resolve({ checkpointed: false, reason: 'not-embedded' });
    if (this.#stopped) return Promise.resolve({ checkpointed: false, reason: 'stopped' });
    this.#running ??= this.#check().finally(() => {
      this.#running = null;
    });
    return this.#running;
  }

  async #check(): Promise<CheckpointOutcome> {
    const { database, maxWalBytes, maxAgeMs, now } = this.#o;
    try {
      const wal = await this.#position();
      if (wal.sinceRecord < IDLE_WAL_BYTES) return { checkpointed: false, reason: 'idle' };
      const reason =
        wal.sinceRedo >= maxWalBytes ? 'wal' : now() - wal.checkpointAt >= maxAgeMs ? 'age' : null;
      if (!reason) return { checkpointed: false, reason: 'below-threshold' };
      const t0 = performance.now();
      await database.db.execute(sql`CHECKPOINT`);
      const ms = Math.round(performance.now() - t0);
      this.#log.debug({ reason, walBytes: wal.sinceRedo, ms }, 'checkpoint done');
      return { checkpointed: true, reason, walBytes: wal.sinceRedo, ms };
    } catch (err) {
      this.#log.warn({ err }, 'checkpoint failed');
      return { checkpointed: false, reason: 'failed' };
    }
  }

  /** WAL since the last checkpoint's redo point and record, and that checkpoint's time (ms). */
  async #position(): Promise<WalPosition> {
    const { database } = this.#o;
    // pg_control_checkpoint() reads pg_control, which every checkpoint (and the start) rewrites.
    const [row] = await database.rows<WalPosition>(
      database.db,
      sql`SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), c.redo_lsn)::float8 AS "sinceRedo",
          pg_wal_lsn_diff(pg_current_wal_insert_lsn(), c.checkpoint_lsn)::float8 AS "sinceRecord",
          (extract(epoch FROM c.checkpoint_time) * 1000)::float8 AS "checkpointAt"
        FROM pg_control_checkpoint() c`,
    );
    if (!row) throw new Error('pg_control_checkpoint() returned no row');
    return row;
  }
}
