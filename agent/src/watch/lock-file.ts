import { close, open } from 'node:fs';
import { LOCK_SUFFIX } from './filter.ts';

export type LockWriteResult = { ok: true } | { ok: false; error: string };

/** Writes the lock marker for a processed file; injectable so other failure modes can be tested. */
export type LockWriter = (lockPath: string) => Promise<LockWriteResult>;

/** Path of the marker that keeps `abs` from being processed again. */
export function lockPathFor(abs: string): string {
  return abs + LOCK_SUFFIX;
}

const LOCKED: LockWriteResult = { ok: true };

/**
 * Create the empty `<file>.lock`. Failures (read-only share, name too long, permissions) are returned,
 * not thrown: the scanner then remembers the file in memory instead. open + close through the callback
 * API: fs/promises' writeFile builds a FileHandle (an event emitter) and a promise per step, garbage that
 * lives as long as the I/O does and so ends up in the old generation at hundreds of locks per second.
 */
export const writeLockFile: LockWriter = (lockPath) =>
  new Promise((resolve) => {
    const failed = (err: NodeJS.ErrnoException): void =>
      resolve({ ok: false, error: err.code ?? err.message });
    // 'a' creates without truncating: a lock someone else created meanwhile stays as it is.
    open(lockPath, 'a', (err, fd) => {
      if (err !== null) return failed(err);
      close(fd, (closeErr) => (closeErr === null ? resolve(LOCKED) : failed(closeErr)));
    });
  });
