import { createRequire } from 'node:module';
import { constants as os } from 'node:os';
import { fileURLToPath } from 'node:url';

/** agent/native/spawn.c, built by agent/native/build.mjs at `npm install`. */
type Addon = {
  available: boolean;
  /** → pid, or -errno when the process could not be started (onExit is then never called). */
  spawn(
    file: string,
    argv: string[],
    envp: string[],
    cwd: string | null,
    stdoutFd: number,
    stderrFd: number,
    onExit: (code: number | null, signal: number | null) => void,
  ): number;
  /** fallocate(PUNCH_HOLE | KEEP_SIZE) → 0, or -errno. Absent from a module built before it existed. */
  punchHole?(fd: number, offset: number, length: number): number;
  /** prctl(PR_SET_DUMPABLE, 0) → 0, or -errno. Absent from a module built before it existed. */
  hideMemory?(): number;
};

export const NATIVE_SPAWN_PATH = fileURLToPath(
  new URL('../../native/build/ffleet_spawn.node', import.meta.url),
);

let loaded: { addon: Addon | null; reason?: string } | undefined;
let started = 0;

/** Processes started through the native spawner so far (tests check that the path is really taken). */
export const nativeSpawnCount = (): number => started;

/**
 * Whether processes start through the native spawner (posix_spawn, see agent/native/spawn.c), and if
 * not, why (logged by the agent at start). Loaded once.
 */
export function nativeSpawnStatus(): { available: boolean; reason?: string } {
  loaded ??= load();
  return loaded.addon ? { available: true } : { available: false, reason: loaded.reason };
}

function load(): { addon: Addon | null; reason?: string } {
  let addon: Addon;
  try {
    addon = createRequire(import.meta.url)(NATIVE_SPAWN_PATH) as Addon;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return {
      addon: null,
      reason:
        code === 'MODULE_NOT_FOUND'
          ? 'not built: `npm install` builds it where a C compiler and Node headers are present'
          : `cannot be loaded: ${(err as Error).message.split('\n')[0]}`,
    };
  }
  if (!addon.available) return { addon: null, reason: 'pidfd_open(2) is not available (Linux < 5.3?)' };
  return { addon };
}

const SIGNAL_NAMES = new Map<number, NodeJS.Signals>(
  Object.entries(os.signals).map(([name, n]) => [n, name as NodeJS.Signals]),
);

export type NativeStart = {
  file: string;
  args: readonly string[];
  env: NodeJS.ProcessEnv;
  cwd?: string;
  stdout: number;
  stderr: number;
};

/**
 * Start `file` as Node's `spawn(file, args, { detached: true, env, cwd, stdio: ['ignore', stdout,
 * stderr] })` would, through posix_spawn. Returns the pid, or undefined whenever the native path does
 * not apply or fails: the spawner is not built, an argument holds a NUL byte, `file` is a bare name
 * (no `/`: Node's spawn searches the env's PATH for it, and no second search is kept here that could
 * pick another file; the transcoder and allow-listed scripts arrive as paths), or the start failed
 * (missing file, no permission, a script without `#!`, a bad cwd). The caller then uses Node's spawn,
 * which runs the process or reports the error in Node's own words, so both paths behave the same.
 */
export function spawnNative(
  o: NativeStart,
  onExit: (code: number | null, signal: NodeJS.Signals | null) => void,
): number | undefined {
  loaded ??= load();
  const addon = loaded.addon;
  if (!addon || !o.file.includes('/')) return undefined;
  // posix_spawn takes C strings: a NUL byte anywhere is left to Node's spawn, which reports it.
  if (o.file.includes('\0') || o.cwd?.includes('\0') || o.args.some((a) => a.includes('\0')))
    return undefined;
  const env: string[] = [];
  for (const [key, value] of Object.entries(o.env)) {
    if (value === undefined) continue;
    const entry = `${key}=${value}`;
    if (entry.includes('\0')) return undefined;
    env.push(entry);
  }
  const pid = addon.spawn(o.file, [o.file, ...o.args], env, o.cwd ?? null, o.stdout, o.stderr, (code, sig) =>
    onExit(code, sig === null ? null : (SIGNAL_NAMES.get(sig) ?? null)),
  );
  if (pid <= 0) return undefined;
  started++;
  return pid;
}

/**
 * Make this process not dumpable (prctl PR_SET_DUMPABLE 0, see agent/native/spawn.c): other processes of
 * its user, a task's ffmpeg and scripts included, can no longer read its environment (its token) or
 * memory through /proc. Root still can. Without the native module it stays readable: `reason` says why.
 */
export function hideProcessMemory(): { hidden: boolean; reason?: string } {
  loaded ??= load();
  const hide = loaded.addon?.hideMemory;
  if (!loaded.addon) return { hidden: false, reason: `the native module is ${loaded.reason}` };
  if (!hide)
    return { hidden: false, reason: 'the native module predates it: run `node agent/native/build.mjs`' };
  const rc = hide();
  return rc === 0
    ? { hidden: true }
    : { hidden: false, reason: `prctl(PR_SET_DUMPABLE) failed: errno ${-rc}` };
}

/**
 * Free the blocks of `fd` in [offset, offset + length) and keep its size and every later offset
 * (fallocate(2) with FALLOC_FL_PUNCH_HOLE): true when done; false when the native module is not
 * there or the file system cannot (the caller then truncates).
 */
export function punchHole(fd: number, offset: number, length: number): boolean {
  loaded ??= load();
  const hole = loaded.addon?.punchHole;
  return hole !== undefined && hole(fd, offset, length) === 0;
}
