import type { Stats } from 'node:fs';
import { relative, sep } from 'node:path';
import type { FSWatcher } from 'chokidar';
import type { ChangeWatcher } from './change-watcher.ts';
import { type CompiledFilter, isIgnoredRelativePath, matchesFilter } from './filter.ts';
import { QuietBatch } from './quiet-batch.ts';

export type ChokidarWatcherOptions = {
  /** Real path of the watchfolder (chokidar does not follow a symlinked root with followSymlinks off). */
  root: string;
  filter: CompiledFilter;
  /**
   * Files the last scan found locked. Not watched: in a steady-state folder nearly every file is locked,
   * and a watch per file is chokidar's main cost. A lock removed later is noticed by the next scan.
   */
  isLocked: (rel: string) => boolean;
  /** Files (relative, `/`-separated) that were added or changed and have since been quiet. */
  onFiles: (rels: string[]) => void;
  onError: (err: Error) => void;
};

/**
 * chokidar as an early-warning system for the scanner: events only start tracking sooner and schedule
 * an earlier check; the interval scan remains the rule. Symlinks, hidden paths, lock files and files
 * the filter rejects are ignored so chokidar does not even place a watch on them.
 */
export class ChokidarWatcher implements ChangeWatcher {
  private watcher: FSWatcher | undefined;
  private readonly batch: QuietBatch;
  private closing: Promise<void> | undefined;
  private loading = false;

  constructor(private readonly opts: ChokidarWatcherOptions) {
    this.batch = new QuietBatch(opts.onFiles);
  }

  /** chokidar finds new directories itself. */
  syncDirectories(): void {}

  /**
   * chokidar is loaded on first use: it is the non-default watcher, and as a static import every agent
   * with a watchfolder would carry its modules (~2 MB of RSS) without ever using them.
   */
  start(): void {
    if (this.loading || this.watcher !== undefined || this.closing !== undefined) return;
    this.loading = true;
    import('chokidar').then(
      ({ watch }) => {
        this.loading = false;
        if (this.closing === undefined) this.watch(watch);
      },
      (err: unknown) => {
        this.loading = false;
        if (this.closing === undefined)
          this.opts.onError(err instanceof Error ? err : new Error(String(err)));
      },
    );
  }

  private watch(watch: typeof import('chokidar').watch): void {
    const { root } = this.opts;
    const toRel = (p: string): string | null => {
      const rel = relative(root, p);
      if (rel.startsWith('..')) return null;
      return sep === '/' ? rel : rel.split(sep).join('/');
    };
    const isIgnored = (p: string, stats?: Stats): boolean => {
      const rel = toRel(p);
      if (rel === null) return true;
      if (isIgnoredRelativePath(rel)) return true;
      if (stats === undefined) return false;
      if (stats.isSymbolicLink()) return true;
      // Directories must pass whatever their name; the extension filter is for files only.
      if (!stats.isFile()) return false;
      return !matchesFilter(rel.slice(rel.lastIndexOf('/') + 1), this.opts.filter) || this.opts.isLocked(rel);
    };
    const w = watch(root, {
      ignoreInitial: true,
      followSymlinks: false,
      // atomic would hold back add events by 100 ms to merge editor save patterns; we re-check anyway.
      atomic: false,
      ignored: isIgnored,
    });
    const mark = (p: string): void => {
      const rel = toRel(p);
      if (rel !== null && rel !== '') this.batch.mark(rel);
    };
    w.on('add', mark);
    w.on('change', mark);
    w.on('error', (err) => this.opts.onError(err instanceof Error ? err : new Error(String(err))));
    this.watcher = w;
  }

  /** Close chokidar's watches; idempotent. */
  stop(): Promise<void> {
    if (this.closing !== undefined) return this.closing;
    this.batch.stop();
    const w = this.watcher;
    this.watcher = undefined;
    this.closing = w === undefined ? Promise.resolve() : w.close();
    return this.closing;
  }
}
