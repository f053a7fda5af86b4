import type { Db } from '../db/client.ts';
import type { EmittedEvents } from '../events/outbox.ts';
import type { ServiceContext } from '../services/context.ts';
import { finishBatchIfDone } from '../services/tasks.ts';
import { GroupEvents } from './group-events.ts';

/**
 * What a job may leave to the end of its group: `finishBatch(id)` runs finishBatchIfDone for that
 * batch once, after every job of the group, batches in id order, still inside the transaction.
 * `claimedFrom(id)`: the job just claimed a task of that batch, so the batch has an open task; unless a
 * later job of the group finishes a task of it again, its check is skipped (it could only say "open").
 */
export type GroupScope = { finishBatch(batchId: string): void; claimedFrom(batchId: string): void };

export type GroupJob<T> = (tx: Db, ev: EmittedEvents, scope: GroupScope) => Promise<T>;

type Queued = {
  fn: GroupJob<unknown>;
  locksBatch: boolean;
  key: string | undefined;
  resolve: (v: unknown) => void;
  reject: (err: unknown) => void;
};

/** A group's transaction holds at most this many jobs (bounds its length and lock set). */
const MAX_GROUP = 64;
/** Groups written at the same time on PostgreSQL (the pool has 10 connections; the API keeps the rest). */
const PG_CONCURRENT_GROUPS = 4;

/**
 * Group commit for the agent protocol's database work (claims, reports, lease renewals). Jobs that
 * arrive while groups are being written wait and go into the next group: ONE transaction runs them one
 * after another, in arrival order, and every job resolves after that commit (an ack still means
 * "durable"). Jobs carry their agent as `key`: one agent's jobs keep their order and are never in two
 * groups written at once, but its consecutive jobs may share one group.
 *
 * Why: every job used to be its own transaction. PGlite runs one transaction at a time, so 500 agents'
 * claims and reports serialised behind BEGIN/COMMIT pairs; on PostgreSQL every commit is a WAL flush.
 * Under load a group holds dozens of jobs; alone, a job waits one macrotask and runs as before.
 *
 * Deadlocks (PostgreSQL): claims skip locked rows, and a group locks only task rows of its own agents
 * until its end, where it locks the batch rows of the tasks it finished (batch.finished, GroupScope), in
 * id order, and then waits for nothing else; API transactions lock a task row before its batch row
 * (cancel, restart), so no cycle can form. A job that may lock a batch row on its own (`locksBatch`: a
 * hand-back that may end the task) closes its group. PGlite runs one group at a time and cannot
 * deadlock. If a group fails anyway (a deadlock PostgreSQL broke, a bug in one job), its jobs are
 * retried one transaction each, so one bad job cannot fail the others.
 */
export class GroupCommit {
  readonly #ctx: ServiceContext;
  readonly #maxGroups: number;
  #queue: Queued[] = [];
  #active = 0;
  #scheduled = false;
  #idle: (() => void)[] = [];
  /** Per key: jobs queued or being written. */
  readonly #pending = new Map<string, number>();
  /** Keys with a job in a group being written now. */
  readonly #writing = new Set<string>();
  /** Per key: callers of settled() waiting for its pending jobs. */
  readonly #settledWaiters = new Map<string, (() => void)[]>();

  constructor(ctx: ServiceContext) {
    this.#ctx = ctx;
    this.#maxGroups = ctx.database.singleConnection ? 1 : PG_CONCURRENT_GROUPS;
  }

  /**
   * `locksBatch`: the job may lock a batch row (see above). `key` (an agent): jobs with one key run in
   * the order they were queued and never in two groups written at the same time, but consecutive ones
   * may share a group — an agent's last log report, final report and next claim usually arrive
   * together and cost one transaction instead of three.
   */
  run<T>(fn: GroupJob<T>, opts: { locksBatch?: boolean; key?: string } = {}): Promise<T> {
    const { key } = opts;
    if (key !== undefined) this.#pending.set(key, (this.#pending.get(key) ?? 0) + 1);
    return new Promise<T>((resolve, reject) => {
      this.#queue.push({
        fn,
        locksBatch: opts.locksBatch ?? false,
        key,
        resolve: resolve as (v: unknown) => void,
        reject,
      });
      this.#schedule();
    });
  }

  /** Resolves when every job queued so far with `key` is written (at once when there is none). */
  settled(key: string): Promise<void> {
    if (!this.#pending.get(key)) return Promise.resolve();
    return new Promise((r) => {
      const waiters = this.#settledWaiters.get(key);
      if (waiters) waiters.push(r);
      else this.#settledWaiters.set(key, [r]);
    });
  }

  /** Resolves when everything queued so far is written. */
  drain(): Promise<void> {
    if (!this.#active && !this.#queue.length && !this.#scheduled) return Promise.resolve();
    return new Promise((r) => this.#idle.push(r));
  }

  #schedule(): void {
    if (this.#scheduled || this.#active >= this.#maxGroups) return;
    this.#scheduled = true;
    // Let the messages that arrived in the same I/O turn join the group.
    setImmediate(() => {
      this.#scheduled = false;
      this.#pump();
      this.#wakeDrainers();
    });
  }

  #wakeDrainers(): void {
    if (!this.#active && !this.#queue.length && !this.#scheduled) for (const r of this.#idle.splice(0)) r();
  }

  #pump(): void {
    while (this.#queue.length && this.#active < this.#maxGroups) {
      const jobs = this.#takeGroup();
      if (!jobs.length) return; // Every queued job waits for a key being written.
      const keys = new Set<string>();
      for (const j of jobs) if (j.key !== undefined) keys.add(j.key);
      for (const k of keys) this.#writing.add(k);
      this.#active += 1;
      void this.#write(jobs).finally(() => {
        this.#active -= 1;
        for (const k of keys) this.#writing.delete(k);
        for (const j of jobs) if (j.key !== undefined) this.#jobDone(j.key);
        this.#pump();
        this.#wakeDrainers();
      });
    }
  }

  /**
   * The next group, in queue order: at most MAX_GROUP jobs, none whose key is in a group being written
   * (those wait, and so do the later jobs of that key), ending at the first job that may lock a batch
   * row when groups are written concurrently.
   */
  #takeGroup(): Queued[] {
    const jobs: Queued[] = [];
    const rest: Queued[] = [];
    const held = new Set<string>();
    let closed = false;
    for (const j of this.#queue) {
      const blocked = j.key !== undefined && (this.#writing.has(j.key) || held.has(j.key));
      if (closed || blocked || jobs.length >= MAX_GROUP) {
        if (j.key !== undefined) held.add(j.key);
        rest.push(j);
        continue;
      }
      jobs.push(j);
      if (j.locksBatch && this.#maxGroups > 1) closed = true;
    }
    this.#queue = rest;
    return jobs;
  }

  #jobDone(key: string): void {
    const n = (this.#pending.get(key) ?? 1) - 1;
    if (n > 0) {
      this.#pending.set(key, n);
      return;
    }
    this.#pending.delete(key);
    const waiters = this.#settledWaiters.get(key);
    this.#settledWaiters.delete(key);
    for (const r of waiters ?? []) r();
  }

  async #write(jobs: Queued[]): Promise<void> {
    let results: unknown[];
    try {
      results = await this.#transact(async (tx, ev) => {
        const scope = new Scope(this.#ctx.database.singleConnection);
        const out: unknown[] = [];
        for (const j of jobs) out.push(await j.fn(tx, ev, scope));
        await scope.end(tx, ev, this.#ctx.now());
        return out;
      });
    } catch (err) {
      if (jobs.length === 1) {
        jobs[0]!.reject(err);
        return;
      }
      for (const j of jobs) {
        try {
          j.resolve(
            await this.#transact(async (tx, ev) => {
              const scope = new Scope(this.#ctx.database.singleConnection);
              const r = await j.fn(tx, ev, scope);
              await scope.end(tx, ev, this.#ctx.now());
              return r;
            }),
          );
        } catch (e) {
          j.reject(e);
        }
      }
      return;
    }
    for (const [i, j] of jobs.entries()) j.resolve(results[i]);
  }

  /** services' `transact`, with the group's events written together just before the commit. */
  async #transact<T>(fn: (tx: Db, ev: EmittedEvents) => Promise<T>): Promise<T> {
    let emitted: GroupEvents | undefined;
    const result = await this.#ctx.database.db.transaction(async (t) => {
      const tx = t as unknown as Db;
      emitted = new GroupEvents(tx, { alone: this.#ctx.database.singleConnection });
      const r = await fn(tx, emitted);
      await emitted.flush();
      return r;
    });
    emitted?.publish(this.#ctx.bus);
    return result;
  }
}

class Scope implements GroupScope {
  /** Per batch: whether its check must run (a task of it finished after the group's last claim from it). */
  readonly #batches = new Map<string, boolean>();
  /** The database runs one transaction at a time (see finishBatchIfDone). */
  readonly #serialized: boolean;

  constructor(serialized: boolean) {
    this.#serialized = serialized;
  }

  finishBatch(batchId: string): void {
    this.#batches.set(batchId, true);
  }

  /**
   * A claim in this transaction moved a task of the batch to PRE_PROCESSING or RUNNING: at the commit
   * the batch has that open task, whatever other transactions do (the row is ours until then), so
   * finishBatchIfDone would find it open. An agent's finishing report and its next claim share a group,
   * and this spares each such group the batch row lock and the open-task probe.
   */
  claimedFrom(batchId: string): void {
    this.#batches.set(batchId, false);
  }

  async end(tx: Db, ev: EmittedEvents, now: number): Promise<void> {
    const due = [...this.#batches].filter(([, check]) => check).map(([id]) => id);
    for (const id of due.sort()) await finishBatchIfDone(tx, ev, id, now, { serialized: this.#serialized });
  }
}
