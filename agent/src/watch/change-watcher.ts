import { ChokidarWatcher } from './chokidar-watcher.ts';
import { DirectoryWatcher } from './directory-watcher.ts';
import type { CompiledFilter } from './filter.ts';

/**
 * Where early hints about new and growing files come from. None of them decides anything: an event only
 * makes the scanner look at a file now (first sighting, or a change that restarts its count) and
 * schedule its next check one interval later; the interval-spaced size checks remain the rule.
 * - `native`: one `fs.watch` per directory the scans walked (default; cheap at any tree size).
 * - `chokidar`: chokidar 5; finds new directories by itself but stats whole directories on every change
 *   and keeps a watch per unlocked file (see scan-bench.ts for the measured cost on 10,000 files).
 * - `off`: interval scans only (e.g. network shares where file-system events do not arrive anyway).
 */
export type WatcherMode = 'native' | 'chokidar' | 'off';

export type ChangeWatcher = {
  start(): void;
  /** The directories (relative, `''` = root) the latest scan walked. */
  syncDirectories(dirs: readonly string[]): void;
  /** Close every watch; idempotent. */
  stop(): Promise<void>;
};

export type ChangeWatcherOptions = {
  /** Real path of the watchfolder root. */
  root: string;
  filter: CompiledFilter;
  /** Files the last scan found locked: chokidar places no watch on them (the native watcher has none per file). */
  isLocked: (rel: string) => boolean;
  /** Relative, `/`-separated files that were added or changed and have since been quiet. */
  onFiles: (rels: string[]) => void;
  onError: (err: Error) => void;
};

export function createChangeWatcher(
  mode: WatcherMode,
  opts: ChangeWatcherOptions,
): ChangeWatcher | undefined {
  switch (mode) {
    case 'native':
      return new DirectoryWatcher(opts);
    case 'chokidar':
      return new ChokidarWatcher(opts);
    case 'off':
      return undefined;
  }
}
