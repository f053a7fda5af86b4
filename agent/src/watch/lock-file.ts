import { writeFile } from 'node:fs/promises';
import { LOCK_SUFFIX } from './filter.ts';

export type LockWriteResult = { ok: true } | { ok: false; error: string };

/** Writes the lock marker for a processed file; injectable so other failure modes can be tested. */
export type LockWriter = (lockPath: string) => Promise<LockWriteResult>;

/** Path of the marker that keeps `abs` from being processed again. */
export function lockPathFor(abs: string): string {
  return abs + LOCK_SUFFIX;
}

/**
 * Create the empty `<file>.lock`. Failures (read-only share, name too long, permissions) are returned,
 * not thrown: the scanner then remembers the file in memory instead.
 */
export const writeLockFile: LockWriter = async (lockPath) => {
  try {
    // 'a' creates without truncating: a lock someone else created meanwhile stays as it is.
    await writeFile(lockPath, '', { flag: 'a' });
    return { ok: true };
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    return { ok: false, error: e.code ?? e.message };
  }
};
