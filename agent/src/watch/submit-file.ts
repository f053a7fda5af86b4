import type { Logger } from 'pino';
import { type FolderState, sampleKey } from './folder-state.ts';
import { type LockWriter, lockPathFor } from './lock-file.ts';

/** A finished file handed to the caller (who sends `watch.file` and waits for `request.result`). */
export type WatchFile = {
  watchfolderId: string;
  relativePath: string;
  absolutePath: string;
  size: number;
  mtimeMs: number;
};

/**
 * `retry: true` → submitted again at the next scan if unchanged; `false` → not until the file changes.
 * `confirmLock` is called once the lock is on disk (the control plane then knows a later submit of the
 * same file version means the lock was removed, i.e. "process again", not a retry).
 */
export type SubmitResult =
  | { ok: true; confirmLock?: () => void }
  | { ok: false; error: string; retry: boolean };
export type SubmitFile = (file: WatchFile) => Promise<SubmitResult>;

export type SubmitDeps = {
  submit: SubmitFile;
  writeLock: LockWriter;
  log: Logger;
  /** A new problem (lock not writable, file refused) should be reported now rather than at the next scan. */
  onProblem: () => void;
};

/**
 * Submit one finished file and act on the answer (PROTOCOL rule 6: the lock only after the control
 * plane committed the task). The file is in `folder.inFlight` until the answer is handled, which is what
 * keeps a second submit of the same file from starting meanwhile.
 */
export async function submitAndLock(deps: SubmitDeps, folder: FolderState, file: WatchFile): Promise<void> {
  const rel = file.relativePath;
  const key = sampleKey(file);
  folder.inFlight.add(rel);
  try {
    let result: SubmitResult;
    try {
      result = await deps.submit(file);
    } catch (err) {
      deps.log.error({ err, rel }, 'submit threw; will retry at the next scan');
      result = { ok: false, error: String(err), retry: true };
    }
    if (result.ok) {
      // Written even if the scanner was stopped meanwhile: the task exists, the lock must say so.
      const w = await deps.writeLock(lockPathFor(file.absolutePath));
      folder.tracker.forget(rel);
      if (w.ok) result.confirmLock?.();
      else {
        // The control plane is idempotent per (watchfolder, relativePath, size, mtime), so even another
        // agent process submitting this version again cannot create a second task; this map only saves
        // the round trips.
        folder.lockFailed.set(rel, { key, error: w.error, confirmLock: result.confirmLock });
        deps.log.warn({ rel, error: w.error }, 'cannot write lock file; remembering the file in memory');
        deps.onProblem();
      }
    } else if (result.retry) {
      // The tracker still says finished: the next scan submits again if the file is unchanged.
      deps.log.info({ rel, error: result.error }, 'submit failed; will retry at the next scan');
    } else {
      folder.tracker.forget(rel);
      folder.rejected.set(rel, { key, error: result.error });
      deps.log.warn({ rel, error: result.error }, 'submit refused');
      deps.onProblem();
    }
  } finally {
    folder.inFlight.delete(rel);
  }
}

/** Try again to write the lock of a file submitted earlier (a share that became writable heals). */
export async function retryLock(
  deps: SubmitDeps,
  folder: FolderState,
  rel: string,
  abs: string,
): Promise<void> {
  const w = await deps.writeLock(lockPathFor(abs));
  if (w.ok) {
    folder.lockFailed.get(rel)?.confirmLock?.();
    folder.lockFailed.delete(rel);
    deps.log.info({ rel }, 'lock file written on retry');
  }
}
