import { type FSWatcher, watch } from 'node:fs';
import { sep } from 'node:path';
import type { ChangeWatcher, ChangeWatcherOptions } from './change-watcher.ts';
import { isCandidateName } from './filter.ts';
import { QuietBatch } from './quiet-batch.ts';

/** Errors that mean the directory is simply gone; the next scan stops watching it. */
const GONE_CODES = new Set(['ENOENT', 'ENOTDIR']);

/**
 * One `fs.watch` (one inotify watch on Linux) per directory the scans walked. A directory watch reports
 * every create, write and rename of its entries by name, so a new or growing file is known at once and
 * nothing is stat'ed by the watcher itself. The set of directories follows the scans: a directory
 * created between scans is watched from the next scan on (its files are found by that scan).
 */
export class DirectoryWatcher implements ChangeWatcher {
  private readonly watches = new Map<string, FSWatcher>();
  private readonly batch: QuietBatch;
  private stopped = false;

  constructor(private readonly opts: ChangeWatcherOptions) {
    this.batch = new QuietBatch(opts.onFiles);
  }

  start(): void {}

  syncDirectories(dirs: readonly string[]): void {
    if (this.stopped) return;
    const wanted = new Set(dirs);
    for (const [rel, w] of this.watches) {
      if (!wanted.has(rel)) {
        w.close();
        this.watches.delete(rel);
      }
    }
    for (const rel of dirs) if (!this.watches.has(rel)) this.watchDirectory(rel);
  }

  private watchDirectory(relDir: string): void {
    const abs = relDir === '' ? this.opts.root : `${this.opts.root}${sep}${relDir}`;
    let w: FSWatcher;
    try {
      w = watch(abs, { persistent: true }, (_event, name) => {
        if (name !== null) this.onEntry(relDir, name.toString());
      });
    } catch (err) {
      if (!GONE_CODES.has((err as NodeJS.ErrnoException).code ?? '')) this.opts.onError(err as Error);
      return;
    }
    w.on('error', (err: NodeJS.ErrnoException) => {
      w.close();
      if (this.watches.get(relDir) === w) this.watches.delete(relDir);
      if (!GONE_CODES.has(err.code ?? '')) this.opts.onError(err);
    });
    this.watches.set(relDir, w);
  }

  private onEntry(relDir: string, name: string): void {
    // Hidden entries, lock files and filtered names never become candidates; a new subdirectory's name
    // may pass, its lstat then shows it is not a file.
    if (!isCandidateName(name, this.opts.filter)) return;
    this.batch.mark(relDir === '' ? name : `${relDir}/${name}`);
  }

  stop(): Promise<void> {
    if (!this.stopped) {
      this.stopped = true;
      this.batch.stop();
      for (const w of this.watches.values()) w.close();
      this.watches.clear();
    }
    return Promise.resolve();
  }
}
