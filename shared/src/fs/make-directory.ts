/**
 * `mkdir -p` that always ends. Node's `mkdir(dir, { recursive: true })` (async and sync) retries
 * forever where creating a directory fails with ENOENT although its parent exists — any path under
 * /proc or /sys, e.g. an output file `/proc/x/out.mp4` from an API client — spinning a thread at
 * 100 % and never settling, so a task would hang uncancellably and take an agent's slot for good.
 * These create the missing directories one by one, top down, and report the first failure.
 */
import { mkdir, stat } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';

const code = (err: unknown): string | undefined => (err as NodeJS.ErrnoException).code;

function notDirectory(path: string): NodeJS.ErrnoException {
  const err: NodeJS.ErrnoException = new Error(`ENOTDIR: not a directory, mkdir '${path}'`);
  err.code = 'ENOTDIR';
  err.path = path;
  return err;
}

/** What EROFS means for the operator (lock files and directories say the same). */
export const READ_ONLY_FS =
  'read-only (mounted read-only, or switched to read-only by the kernel after disk errors: see dmesg)';

/** EROFS, saying what it means for the operator. */
function readOnly(path: string, cause: NodeJS.ErrnoException): NodeJS.ErrnoException {
  const err: NodeJS.ErrnoException = new Error(
    `EROFS: read-only file system, mkdir '${path}': the file system holding it is ${READ_ONLY_FS}`,
    { cause },
  );
  err.code = 'EROFS';
  err.path = path;
  return err;
}

/** Create `dir` and its missing parents; an existing directory is fine, an existing file is ENOTDIR. */
export async function makeDirectory(dir: string): Promise<void> {
  const missing: string[] = [];
  for (let d = resolve(dir); ; ) {
    try {
      if (!(await stat(d)).isDirectory()) throw notDirectory(d);
      break;
    } catch (err) {
      // A file above `d` (stat says ENOTDIR): the same error mkdir -p gives, naming the directory.
      if (code(err) === 'ENOTDIR') throw notDirectory(d);
      if (code(err) !== 'ENOENT') throw err;
      missing.push(d);
      const parent = dirname(d);
      if (parent === d) break;
      d = parent;
    }
  }
  for (const d of missing.reverse()) {
    try {
      await mkdir(d);
    } catch (err) {
      // Made meanwhile by someone else: fine if it is a directory (the next level or the end checks).
      if (code(err) === 'EROFS') throw readOnly(d, err as NodeJS.ErrnoException);
      if (code(err) !== 'EEXIST') throw err;
    }
  }
  if (missing.length && !(await stat(missing.at(-1)!)).isDirectory()) throw notDirectory(missing.at(-1)!);
}
