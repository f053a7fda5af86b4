import { type FileSample, GrowthTracker } from './growth-tracker.ts';

type Remembered = { key: string; error: string; confirmLock?: () => void };

/** Identity of one version of a file, the same pair the control plane keys task creation on. */
export function sampleKey(sample: FileSample): string {
  return `${sample.size}:${sample.mtimeMs}`;
}

/**
 * Everything the scanner knows about one watchfolder path. Replaced as a whole when the path changes,
 * so nothing learned about one directory leaks into another.
 */
export class FolderState {
  readonly tracker: GrowthTracker;
  /** Files whose submit has not returned yet: never a second submit for them meanwhile. */
  readonly inFlight = new Set<string>();
  /**
   * Submitted files whose lock could not be written (read-only share). Keyed by path with the
   * (size, mtime) version, so the same version is never submitted again by this process while a new
   * version of the file is a new file.
   */
  readonly lockFailed = new Map<string, Remembered>();
  /** Versions the control plane refused for good (retry: false); not resubmitted until they change. */
  readonly rejected = new Map<string, Remembered>();
  /** Files that had a lock at the last scan; kept for the chokidar watcher only (no watch on them). */
  locked: ReadonlySet<string> = new Set();
  /** Why the root cannot be scanned; `''` when the last scan could read it. */
  rootError = '';
  unreadableDirs: { rel: string; code: string }[] = [];
  /** Names that are not valid UTF-8 (see WalkResult): they cannot be processed until renamed. */
  undecodable: string[] = [];

  constructor(growthChecks: number, intervalMs: number) {
    this.tracker = new GrowthTracker(growthChecks, intervalMs);
  }

  /** True when nothing is known about any file (the steady state of a fully processed folder). */
  isEmpty(): boolean {
    return this.tracker.size === 0 && this.lockFailed.size === 0 && this.rejected.size === 0;
  }

  /** Forget a file entirely (it vanished, or its lock appeared). */
  forget(rel: string): void {
    this.tracker.forget(rel);
    this.lockFailed.delete(rel);
    this.rejected.delete(rel);
  }

  /** After a complete scan: drop what no longer exists so memory stays bounded by the folder's contents. */
  retainOnly(seen: ReadonlySet<string>): void {
    this.tracker.retainOnly(seen);
    for (const rel of this.lockFailed.keys()) if (!seen.has(rel)) this.lockFailed.delete(rel);
    for (const rel of this.rejected.keys()) if (!seen.has(rel)) this.rejected.delete(rel);
  }

  /** One line for the watchfolder's `error` field; `''` when all is well. */
  describeProblems(): string {
    if (this.rootError !== '') return this.rootError;
    const parts: string[] = [];
    const first = (m: Map<string, Remembered>): string => {
      const [rel, r] = m.entries().next().value as [string, Remembered];
      return `${rel}: ${r.error}`;
    };
    if (this.lockFailed.size > 0) {
      parts.push(
        `cannot write the lock file for ${this.lockFailed.size} submitted file(s) (first: ${first(this.lockFailed)}); ` +
          'this agent will not submit them again',
      );
    }
    if (this.rejected.size > 0) {
      parts.push(`control plane refused ${this.rejected.size} file(s) (first: ${first(this.rejected)})`);
    }
    if (this.unreadableDirs.length > 0) {
      const d = this.unreadableDirs[0]!;
      parts.push(`cannot read ${this.unreadableDirs.length} subdirectory(ies) (first: ${d.rel}: ${d.code})`);
    }
    if (this.undecodable.length > 0) {
      parts.push(
        `${this.undecodable.length} name(s) are not valid UTF-8 and cannot be processed until renamed ` +
          `(first: ${this.undecodable[0]})`,
      );
    }
    return parts.join('; ');
  }
}
