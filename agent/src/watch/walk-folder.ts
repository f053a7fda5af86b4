import type { Dirent } from 'node:fs';
import { readdir, stat } from 'node:fs/promises';
import { sep } from 'node:path';
import { type CompiledFilter, isCandidateName, isHiddenName, LOCK_SUFFIX } from './filter.ts';
import { isLocalDirectory, pathExists } from './sample-files.ts';

/** A file that passed the name rules and has no lock beside it. */
export type FoundFile = {
  /** Path below the watchfolder with `/` separators. */
  rel: string;
  abs: string;
  /** Its directory is on a local file system (see sampleFiles). */
  local: boolean;
};

export type WalkResult =
  | {
      ok: true;
      /** Candidates without `<file>.lock`. */
      files: FoundFile[];
      /**
       * Candidates with `<file>.lock` beside them (the lock on disk is the truth): relative paths only.
       * Empty when the caller passed `onLocked`.
       */
      locked: string[];
      /** Every directory read, relative (`''` = the root). */
      dirs: string[];
      unreadableDirs: { rel: string; code: string }[];
      /**
       * Files and directories whose names are not valid UTF-8 (relative, with U+FFFD where the bytes
       * did not decode). Node can only name them that way, a path that does not exist, so they can be
       * neither read nor submitted: they are reported instead of being skipped in silence.
       */
      undecodable: string[];
    }
  | { ok: false; error: string };

/** What Node puts in a name for bytes that are not UTF-8. */
const REPLACEMENT = '\uFFFD';

/** Directories read at once by a walk; libuv has 4 threads by default, so more would only queue. */
const WALK_PARALLEL = 4;

function errorCode(err: unknown): string {
  return (err as NodeJS.ErrnoException | undefined)?.code ?? String(err);
}

/** Explain why the watchfolder root cannot be scanned, in words an operator can act on. */
export function describeRootError(root: string, err: unknown): string {
  const code = errorCode(err);
  if (code === 'ENOENT') return `watchfolder path does not exist: ${root}`;
  if (code === 'ENOTDIR') return `watchfolder path is not a directory: ${root}`;
  if (code === 'EACCES' || code === 'EPERM') return `watchfolder path is not readable (${code}): ${root}`;
  return `cannot scan watchfolder path ${root}: ${(err as Error | undefined)?.message ?? code}`;
}

/**
 * Told about each locked candidate as its directory is listed (`relDir` as in {@link WalkResult} `dirs`).
 * With it the walk keeps no list of locked files: in a processed folder nearly every file is locked, and
 * a path string per locked file, alive for the whole scan, outlives the small young generation the agent
 * runs with and fills the old generation (measured ~7 MB of heap for 11,000 locked files).
 */
export type OnLocked = (relDir: string, name: string) => void;

/**
 * Walk `root` recursively without following symlinks (the root itself may be a symlink to a directory:
 * operators point watchfolders at mount links). Hidden entries are not entered, lock files and files
 * the filter rejects are not returned. Uses the directory listing for the lock check so a locked file
 * costs no extra system call.
 */
export async function walkFolder(
  root: string,
  filter: CompiledFilter,
  onLocked?: OnLocked,
): Promise<WalkResult> {
  try {
    const st = await stat(root);
    if (!st.isDirectory()) return { ok: false, error: describeRootError(root, { code: 'ENOTDIR' }) };
  } catch (err) {
    return { ok: false, error: describeRootError(root, err) };
  }
  // String concatenation instead of path.join: join normalises every call, a measurable cost at 10,000
  // files per scan; the root is trimmed once so the concatenation stays canonical.
  const base = root.length > 1 && root.endsWith(sep) ? root.slice(0, -1) : root;
  const prefix = base === sep ? '' : base;
  const files: FoundFile[] = [];
  const locked: string[] = [];
  const unreadableDirs: { rel: string; code: string }[] = [];
  const undecodable: string[] = [];
  /** Candidates whose name holds U+FFFD: a real character, or bytes that are not UTF-8 (checked below). */
  const suspects: FoundFile[] = [];
  const pending: string[] = [];
  const dirs: string[] = [];
  const collect = (relDir: string, entries: Dirent[], local: boolean): void => {
    dirs.push(relDir);
    let names: Set<string> | undefined;
    for (const entry of entries) {
      const name = entry.name;
      if (entry.isDirectory()) {
        if (!isHiddenName(name)) pending.push(relDir === '' ? name : `${relDir}/${name}`);
        continue;
      }
      // Dirent types come from lstat semantics: a symlink is never isFile(), so links are not followed.
      if (!entry.isFile() || !isCandidateName(name, filter)) continue;
      // Only names ending in the suffix can match `name + LOCK_SUFFIX`; a set of just those is half the size.
      if (names === undefined) {
        names = new Set();
        for (const e of entries) if (e.name.endsWith(LOCK_SUFFIX)) names.add(e.name);
      }
      if (names.has(name + LOCK_SUFFIX)) {
        if (onLocked !== undefined) onLocked(relDir, name);
        else locked.push(relDir === '' ? name : `${relDir}/${name}`);
        continue;
      }
      const rel = relDir === '' ? name : `${relDir}/${name}`;
      (name.includes(REPLACEMENT) ? suspects : files).push({ rel, abs: `${prefix}${sep}${rel}`, local });
    }
  };
  try {
    const [entries, local] = await Promise.all([
      readdir(base, { withFileTypes: true }),
      isLocalDirectory(base),
    ]);
    collect('', entries, local);
  } catch (err) {
    return { ok: false, error: describeRootError(root, err) };
  }
  // Subdirectories are read a few at a time: with one await per directory in sequence, a busy thread
  // pool (another scan, chokidar, ffmpeg's output writes) multiplies the wait by the directory count.
  const worker = async (): Promise<void> => {
    for (let relDir = pending.pop(); relDir !== undefined; relDir = pending.pop()) {
      try {
        const abs = `${prefix}${sep}${relDir}`;
        // Per directory: a subdirectory may be the mount point of a network share.
        const [entries, local] = await Promise.all([
          readdir(abs, { withFileTypes: true }),
          isLocalDirectory(abs),
        ]);
        collect(relDir, entries, local);
      } catch (err) {
        // A directory removed between listing and reading is not a problem, unless its name did not
        // decode (then it never existed under that name); anything else is reported.
        if (errorCode(err) !== 'ENOENT') unreadableDirs.push({ rel: relDir, code: errorCode(err) });
        else if (relDir.includes(REPLACEMENT)) undecodable.push(`${relDir}/`);
      }
    }
  };
  // Workers that find the queue empty end early; restart them while directories keep appearing.
  while (pending.length > 0) await Promise.all(Array.from({ length: WALK_PARALLEL }, worker));
  for (const f of suspects) {
    if (await pathExists(f.abs)) files.push(f);
    else undecodable.push(f.rel);
  }
  return { ok: true, files, locked, dirs, unreadableDirs, undecodable };
}
