import type { WatchfolderAssignment, WatchfolderYield } from '@ffleet/shared';
import type { Logger } from 'pino';
import { planYields } from './folder-overlap.ts';
import { type SubmitFile, WatchScanner, type WatchScannerOptions, type WatchState } from './watch-scanner.ts';

export type WatchSupervisorOptions = {
  submit: SubmitFile;
  onState: (state: WatchState) => void;
  /** Bound to the agent and its component by the caller; each scanner adds its `watchfolderId`. */
  logger: Logger;
  /** Passed to every scanner (tests shrink the interval unit; benchmarks switch the watcher off). */
  scanner?: Pick<WatchScannerOptions, 'clock' | 'watcher' | 'intervalUnitMs' | 'writeLock'>;
};

/**
 * Keeps exactly one {@link WatchScanner} per watchfolder the control plane assigned to this agent.
 * Each `config` inbox message carries the complete list, so `apply` is a reconcile: new ids start,
 * missing ids stop, the rest get `update` (which ignores an unchanged assignment). Safe to call often.
 */
export class WatchSupervisor {
  private readonly scanners = new Map<string, WatchScanner>();
  private readonly stopping = new Set<Promise<void>>();
  private stopped = false;

  constructor(private readonly opts: WatchSupervisorOptions) {}

  /**
   * Reconcile with the full list from a `config` message. A duplicated id: the last entry wins.
   * `yieldTo`: watchfolders scanned elsewhere (or waiting for their pinned agent) whose folders overlap
   * these: they get no scanner here, but their files are left to them as to a watchfolder scanned here.
   */
  apply(assignments: readonly WatchfolderAssignment[], yieldTo: readonly WatchfolderYield[] = []): void {
    if (this.stopped) return;
    const wanted = new Map(assignments.map((a) => [a.id, a]));
    for (const [id, scanner] of this.scanners) {
      if (!wanted.has(id)) {
        this.scanners.delete(id);
        this.track(scanner.stop());
        this.opts.logger.info({ watchfolderId: id }, 'watchfolder unassigned');
      }
    }
    const yields = planYields(
      [...wanted.values()],
      yieldTo.filter((y) => !wanted.has(y.id)),
    );
    for (const [id, assignment] of wanted) {
      const existing = this.scanners.get(id);
      if (existing !== undefined) {
        existing.setYields(yields.get(id)!);
        existing.update(assignment);
        continue;
      }
      const scanner = new WatchScanner({
        ...this.opts.scanner,
        yields: yields.get(id)!,
        assignment,
        submit: this.opts.submit,
        onState: this.opts.onState,
        logger: this.opts.logger,
      });
      this.scanners.set(id, scanner);
      scanner.start();
    }
  }

  /** Ids of the watchfolders being watched (suspended ones included). */
  list(): string[] {
    return [...this.scanners.keys()];
  }

  /** Stop every scanner and wait for them; further `apply` calls are ignored. Idempotent. */
  async stopAll(): Promise<void> {
    this.stopped = true;
    for (const scanner of this.scanners.values()) this.track(scanner.stop());
    this.scanners.clear();
    await Promise.all([...this.stopping]);
  }

  private track(p: Promise<void>): void {
    const settled = p.catch((err: unknown) => this.opts.logger.error({ err }, 'stopping a scanner failed'));
    this.stopping.add(settled);
    void settled.finally(() => this.stopping.delete(settled));
  }
}
