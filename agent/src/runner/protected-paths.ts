import { realpathSync } from 'node:fs';
import path from 'node:path';

/**
 * Directories a task's output and sidecar paths may not point into: the agent's data dir (its outbox,
 * lock and, in the all-in-one, the control plane's embedded database and the agent token). Such a path
 * would overwrite ffleet's own state, e.g. replace the agent token with a task's JSON and lock every
 * remote agent out at the next start. This catches a mistaken path (a preset's output directory); it is
 * no barrier to a hostile command, whose other arguments can name any path the agent's user may write
 * (README "What a task can reach"). Each directory is taken both as given and through its symlinks,
 * once, when the agent starts.
 */
export function protectedDirs(dirs: readonly string[]): string[] {
  const out = new Set<string>();
  for (const d of dirs) {
    const abs = path.resolve(d);
    out.add(abs);
    try {
      out.add(realpathSync(abs));
    } catch {
      // Not created yet: the path as given is what a task would name.
    }
  }
  return [...out];
}

/**
 * The protected directory `file` lies in (the path as written, `..` resolved), or null. A symlink that
 * leads into one is not followed: creating it takes a script, and an allowed script can do anything.
 */
export function protectedDirOf(file: string, dirs: readonly string[]): string | null {
  if (file === '') return null;
  const abs = path.resolve(file);
  for (const d of dirs) if (abs === d || abs.startsWith(d.endsWith(path.sep) ? d : d + path.sep)) return d;
  return null;
}

/** The error of a task whose `what` (e.g. "output file") is `file`, inside the protected `dir`. */
export const protectedPathError = (what: string, file: string, dir: string) =>
  `${what} ${file} is inside the agent's data directory ${dir} (FFLEET_DATA_DIR), which holds ffleet's own state; choose another path`;
