import { realpath } from 'node:fs/promises';
import { join } from 'node:path';
import type { WatchfolderAssignment } from '@ffleet/shared';
import type { Logger } from 'pino';
import { type ChangeWatcher, createChangeWatcher, type WatcherMode } from './change-watcher.ts';
import { type CompiledFilter, compileFilter, isSameFilter } from './filter.ts';
import { NO_YIELDS, shadowedError, type YieldPlan, yieldsFile } from './folder-overlap.ts';
import { FolderState, sampleKey } from './folder-state.ts';
import { type CheckSource, type FileSample, spacingToleranceMs } from './growth-tracker.ts';
import { type LockWriter, writeLockFile } from './lock-file.ts';
import { sampleFiles, sampleUnlockedFiles } from './sample-files.ts';
import { retryLock, type SubmitDeps, type SubmitFile, submitAndLock, type WatchFile } from './submit-file.ts';
import { type FoundFile, walkFolder } from './walk-folder.ts';

export type { SubmitFile, SubmitResult, WatchFile } from './submit-file.ts';

/** Reported after every scan and whenever a problem appears (`error` is `''` when all is well). */
export type WatchState = {
  watchfolderId: string;
  lastCheck: number;
  error: string;
  /** The folder itself could not be read (its walk failed at the root). */
  unreadable: boolean;
};

export type WatchScannerOptions = {
  assignment: WatchfolderAssignment;
  submit: SubmitFile;
  onState: (state: WatchState) => void;
  logger: Logger;
  /** Unix ms for `lastCheck`; spacing between checks uses the monotonic clock. */
  clock?: () => number;
  /** Source of early hints about new and growing files (see {@link WatcherMode}); default `native`. */
  watcher?: WatcherMode;
  /** Length of one `interval` second; tests shrink it. Default 1000. */
  intervalUnitMs?: number;
  writeLock?: LockWriter;
  /** What this folder leaves to the agent's other watchfolders (folder-overlap.ts); default nothing. */
  yields?: YieldPlan;
};

/** An early check due this close before the next scan waits for the scan instead. */
const EARLY_CHECK_SLACK_MS = 20;

/** Watch errors that mean the OS ran out of watches/descriptors: retrying every scan would not help. */
const WATCH_LIMIT_CODES = new Set(['ENOSPC', 'EMFILE', 'ENFILE']);

/**
 * Scans one watchfolder on this agent (spec "Watchfolder", CONTRACT "Watchfolders", PROTOCOL rule 6):
 * every `interval` seconds, recursively, through the filter; a file whose (size, mtime) stayed the same
 * for `growthChecks` checks one interval apart is submitted, and its `<file>.lock` is written once the
 * submit returned ok. Scans, event checks and early checks run one at a time on a single chain; submits
 * run beside it, at most one per file.
 */
export class WatchScanner {
  private assignment: WatchfolderAssignment;
  private filter: CompiledFilter;
  private yields: YieldPlan;
  private folder: FolderState;
  private phase: 'idle' | 'running' | 'stopped' = 'idle';
  /** Bumped by every (de)activation; queued work from an older epoch does nothing. */
  private epoch = 0;
  private chain: Promise<void> = Promise.resolve();
  private scanTimer: NodeJS.Timeout | undefined;
  private earlyTimer: NodeJS.Timeout | undefined;
  /** Monotonic time the pending scan starts; early checks leave the files it will count to it. */
  private nextScanAt = 0;
  private watcher: ChangeWatcher | undefined;
  private watcherDisabled = false;
  private readonly closings = new Set<Promise<void>>();
  private lastCheck = 0;
  private readonly log: Logger;
  private readonly clock: () => number;
  private readonly submitDeps: SubmitDeps;

  constructor(private readonly opts: WatchScannerOptions) {
    this.assignment = opts.assignment;
    this.filter = compileFilter(opts.assignment.filter);
    this.yields = opts.yields ?? NO_YIELDS;
    this.folder = new FolderState(this.growthChecks(), this.intervalMs());
    this.log = opts.logger.child({ watchfolderId: opts.assignment.id });
    this.clock = opts.clock ?? Date.now;
    this.submitDeps = {
      submit: opts.submit,
      writeLock: opts.writeLock ?? writeLockFile,
      log: this.log,
      onProblem: () => this.report(),
    };
  }

  /** Begin scanning (the first scan runs at once) unless the assignment is suspended. */
  start(): void {
    if (this.phase !== 'idle') return;
    this.phase = 'running';
    this.log.info({ path: this.assignment.path }, 'watchfolder scanner started');
    this.activate();
  }

  /** Stop scanning and close the change watcher; idempotent. Submits in flight still write their lock when ok. */
  async stop(): Promise<void> {
    if (this.phase !== 'stopped') {
      this.phase = 'stopped';
      this.deactivate();
      this.log.info('watchfolder scanner stopped');
    }
    await Promise.all([...this.closings]);
    await this.chain;
  }

  /** Apply a new assignment for the same watchfolder; a real change restarts scanning at once. */
  update(next: WatchfolderAssignment): void {
    const prev = this.assignment;
    const filter = compileFilter(next.filter);
    const changed =
      prev.path !== next.path ||
      prev.interval !== next.interval ||
      prev.growthChecks !== next.growthChecks ||
      prev.suspended !== next.suspended ||
      !isSameFilter(this.filter, filter);
    this.assignment = next;
    if (!changed) return;
    this.filter = filter;
    const running = this.phase === 'running';
    if (running) this.deactivate();
    if (prev.path !== next.path) {
      this.folder = new FolderState(this.growthChecks(), this.intervalMs());
    } else {
      this.folder.tracker.configure(this.growthChecks(), this.intervalMs());
      // The refusal may have been caused by the old configuration; give those files another chance.
      this.folder.rejected.clear();
      // Suspended means no processing: what was tracked is stale when scanning resumes.
      if (next.suspended) this.folder.tracker.clear();
    }
    this.log.info(
      { path: next.path, interval: next.interval, suspended: next.suspended },
      'watchfolder updated',
    );
    if (running) this.activate();
  }

  private intervalMs(): number {
    // The wire is validated to ≥ 1 s; clamping keeps a bad value from becoming a busy loop.
    return Math.max(1, this.assignment.interval) * (this.opts.intervalUnitMs ?? 1000);
  }

  private watcherMode(): WatcherMode {
    return this.opts.watcher ?? 'native';
  }

  private growthChecks(): number {
    return Math.max(1, this.assignment.growthChecks);
  }

  private activate(): void {
    if (this.assignment.suspended) {
      this.log.info('watchfolder suspended; not scanning');
      return;
    }
    this.epoch += 1;
    this.watcherDisabled = false;
    this.scheduleScan(0);
  }

  private deactivate(): void {
    this.epoch += 1;
    clearTimeout(this.scanTimer);
    this.scanTimer = undefined;
    this.closeWatcher();
  }

  private enqueue(job: () => Promise<void>): void {
    this.chain = this.chain.then(job).catch((err: unknown) => this.log.error({ err }, 'watch job failed'));
  }

  private scheduleScan(delayMs: number): void {
    const epoch = this.epoch;
    clearTimeout(this.scanTimer);
    this.nextScanAt = performance.now() + delayMs;
    this.scanTimer = setTimeout(() => {
      this.scanTimer = undefined;
      this.enqueue(() => this.runScan(epoch));
    }, delayMs);
  }

  private async runScan(epoch: number): Promise<void> {
    if (epoch !== this.epoch) return;
    const startedAt = performance.now();
    const folder = this.folder;
    // Only chokidar needs the set of locked files (to place no watch on them).
    const locked = this.watcherMode() === 'chokidar' ? new Set<string>() : undefined;
    // A locked file is done: whatever was known about it goes (unless its submit is still in flight), and
    // it is not "seen" (so the final retainOnly drops it too). Told per file during the walk instead of
    // as a list: in the steady state (nothing tracked, every file locked) no path string is built at all.
    const walk = await walkFolder(this.assignment.path, this.filter, (relDir, name) => {
      if (epoch !== this.epoch || (locked === undefined && folder.isEmpty())) return;
      const rel = relDir === '' ? name : `${relDir}/${name}`;
      locked?.add(rel);
      if (!folder.inFlight.has(rel)) folder.forget(rel);
    });
    if (epoch !== this.epoch) return;
    if (!walk.ok) {
      if (folder.rootError !== walk.error)
        this.log.warn({ error: walk.error }, 'watchfolder cannot be scanned');
      folder.rootError = walk.error;
      this.closeWatcher();
    } else {
      if (folder.rootError !== '') this.log.info('watchfolder readable again');
      folder.rootError = '';
      folder.unreadableDirs = walk.unreadableDirs;
      folder.undecodable = walk.undecodable;
      if (locked !== undefined) folder.locked = locked;
      await this.checkScanned(epoch, folder, walk.files, startedAt, walk.unreadableDirs.length === 0);
      if (epoch !== this.epoch) return;
      await this.ensureWatcher(epoch);
      this.watcher?.syncDirectories(walk.dirs);
    }
    this.lastCheck = this.clock();
    this.report();
    this.scheduleScan(Math.max(0, startedAt + this.intervalMs() - performance.now()));
    this.scheduleEarlyCheck();
  }

  private async checkScanned(
    epoch: number,
    folder: FolderState,
    files: FoundFile[],
    at: number,
    complete: boolean,
  ): Promise<void> {
    const seen = new Set<string>(folder.inFlight);
    const toSample: FoundFile[] = [];
    for (const f of files) {
      seen.add(f.rel);
      if (!folder.inFlight.has(f.rel)) toSample.push(f);
    }
    const samples = await sampleFiles(toSample);
    if (epoch !== this.epoch) return;
    const lockRetries: Promise<void>[] = [];
    toSample.forEach((f, i) => {
      const sample = samples[i];
      if (sample === null || sample === undefined) {
        folder.forget(f.rel);
        seen.delete(f.rel);
        return;
      }
      const retry = this.consider(folder, f.rel, f.abs, sample, at, 'scan');
      if (retry !== undefined) lockRetries.push(retry);
    });
    await Promise.all(lockRetries);
    // After a partial walk a missing file may just be unreadable for now; keep what we know about it.
    if (complete) folder.retainOnly(seen);
  }

  /**
   * Feed one check into the rules. Returns a promise only when it retries a failed lock write (scans
   * do that so a share that became writable again heals).
   */
  private consider(
    folder: FolderState,
    rel: string,
    abs: string,
    sample: FileSample,
    at: number,
    source: CheckSource,
  ): Promise<void> | undefined {
    if (this.yields !== NO_YIELDS && yieldsFile(this.yields, rel)) {
      folder.forget(rel);
      return undefined;
    }
    const key = sampleKey(sample);
    const failed = folder.lockFailed.get(rel);
    if (failed !== undefined) {
      if (failed.key === key) return retryLock(this.submitDeps, folder, rel, abs);
      folder.lockFailed.delete(rel);
    }
    const refused = folder.rejected.get(rel);
    if (refused !== undefined) {
      if (refused.key === key) return undefined;
      folder.rejected.delete(rel);
    }
    if (folder.tracker.observe(rel, sample, at, source)) {
      const file: WatchFile = {
        watchfolderId: this.assignment.id,
        relativePath: rel,
        absolutePath: abs,
        size: sample.size,
        mtimeMs: sample.mtimeMs,
      };
      this.log.debug({ rel, size: sample.size }, 'submitting finished file');
      void submitAndLock(this.submitDeps, folder, file);
    }
    return undefined;
  }

  private async ensureWatcher(epoch: number): Promise<void> {
    if (this.watcherMode() === 'off' || this.watcherDisabled || this.watcher !== undefined) return;
    let root: string;
    try {
      root = await realpath(this.assignment.path);
    } catch {
      return; // the next scan reports the path problem
    }
    if (epoch !== this.epoch || this.watcher !== undefined) return;
    const watcher = createChangeWatcher(this.watcherMode(), {
      root,
      filter: this.filter,
      isLocked: (rel) => this.folder.locked.has(rel),
      onFiles: (rels) => this.enqueue(() => this.checkEvents(epoch, rels)),
      onError: (err) => {
        const code = (err as NodeJS.ErrnoException).code ?? '';
        this.log.warn({ err }, 'file watcher failed; interval scans continue');
        if (WATCH_LIMIT_CODES.has(code)) this.watcherDisabled = true;
        if (this.watcher === watcher) this.closeWatcher();
      },
    });
    this.watcher = watcher;
    watcher?.start();
  }

  private closeWatcher(): void {
    clearTimeout(this.earlyTimer);
    this.earlyTimer = undefined;
    const w = this.watcher;
    this.watcher = undefined;
    if (w === undefined) return;
    const closing = w.stop().catch((err: unknown) => this.log.warn({ err }, 'closing file watcher failed'));
    this.closings.add(closing);
    void closing.finally(() => this.closings.delete(closing));
  }

  /** Files the change watcher saw added or changed: start tracking (or restart the count) now. */
  private checkEvents(epoch: number, rels: string[]): Promise<void> {
    const folder = this.folder;
    return this.checkNow(
      epoch,
      folder,
      rels.filter((rel) => !folder.inFlight.has(rel)),
    );
  }

  /**
   * True for a check the pending scan will count anyway (due from just before its start up to its
   * spacing tolerance after): an early check then would only lstat the file twice. Files first seen by
   * a scan are due exactly at the next scan, so in a quiet folder early checks cost nothing.
   */
  private readonly isScansJob = (due: number): boolean =>
    this.scanTimer !== undefined &&
    due >= this.nextScanAt - EARLY_CHECK_SLACK_MS &&
    due <= this.nextScanAt + spacingToleranceMs(this.intervalMs());

  /** Early checks exist only with the watcher: without events every first sighting is a scan. */
  private scheduleEarlyCheck(): void {
    clearTimeout(this.earlyTimer);
    this.earlyTimer = undefined;
    if (this.watcher === undefined) return;
    const due = this.folder.tracker.nextDueAt(this.isScansJob);
    if (due === undefined) return;
    const epoch = this.epoch;
    this.earlyTimer = setTimeout(
      () => {
        this.earlyTimer = undefined;
        this.enqueue(() => this.runEarlyCheck(epoch));
      },
      Math.max(0, due - performance.now()),
    );
  }

  private runEarlyCheck(epoch: number): Promise<void> {
    const folder = this.folder;
    const due = folder.tracker
      .listDue(performance.now(), this.isScansJob)
      .filter((rel) => !folder.inFlight.has(rel));
    return this.checkNow(epoch, folder, due);
  }

  /** Check a few files outside a scan: lstat each, honour a lock beside it, apply the rules. */
  private async checkNow(epoch: number, folder: FolderState, rels: string[]): Promise<void> {
    if (epoch !== this.epoch) return;
    const abs = rels.map((rel) => join(this.assignment.path, rel));
    const samples = await sampleUnlockedFiles(abs);
    if (epoch !== this.epoch) return;
    const at = performance.now();
    for (const [i, rel] of rels.entries()) {
      const sample = samples[i];
      if (sample === null || sample === undefined) folder.tracker.forget(rel);
      else if (sample === 'locked') folder.forget(rel);
      else if (!folder.inFlight.has(rel)) void this.consider(folder, rel, abs[i]!, sample, at, 'between');
    }
    this.scheduleEarlyCheck();
  }

  /** The agent's set of watchfolders changed: what this one leaves to the others now. */
  setYields(plan: YieldPlan): void {
    const was = this.yields.shadowedBy;
    this.yields = plan;
    if (plan.shadowedBy !== was) this.report();
  }

  private report(): void {
    if (this.phase !== 'running') return;
    try {
      this.opts.onState({
        watchfolderId: this.assignment.id,
        lastCheck: this.lastCheck,
        unreadable: this.folder.rootError !== '',
        error: [
          this.yields.shadowedBy === null ? '' : shadowedError(this.yields.shadowedBy),
          this.folder.describeProblems(),
        ]
          .filter((e) => e !== '')
          .join('; '),
      });
    } catch (err) {
      this.log.error({ err }, 'onState threw');
    }
  }
}
