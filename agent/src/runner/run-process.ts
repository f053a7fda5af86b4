import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  accessSync,
  closeSync,
  constants,
  fstatSync,
  ftruncateSync,
  openSync,
  readSync,
  statfsSync,
  unlinkSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import { processRunsSince } from '@ffleet/shared';
import { findMarkedProcesses, RUN_MARK_VAR, STEP_MARK_VAR } from '../orphans.ts';
import { LineSplitter } from './line-splitter.ts';
import { punchHole, spawnNative } from './native-spawn.ts';
import { TailBuffer } from './tail-buffer.ts';

/**
 * Abort reason for a run the control plane gave to another attempt (stale lease). Unlike a user cancel,
 * the process group is killed at once and the output is left alone: the new attempt is writing it.
 */
export const FENCED_OUT = 'fenced-out';

/** Time a canceled process group gets between SIGTERM and SIGKILL: ffmpeg finalises a file in well under it. */
export const DEFAULT_KILL_GRACE_MS = 5000;

/** Bytes of stdout/stderr kept for the result (enough for ffmpeg's closing error lines). */
export const DEFAULT_TAIL_BYTES = 16 * 1024;

/**
 * After the process exits, how long to wait for its stdout/stderr to close. A backgrounded
 * grandchild that inherited the pipes would otherwise keep the step waiting forever.
 */
export const STDIO_DRAIN_MS = 1000;

/** How often a running process's captured output is read (its lines arrive at most this late). */
export const CAPTURE_POLL_MS = 250;

/**
 * Once this much of a capture file has been read, what was read is freed, so a process that prints
 * without end cannot fill the disk, or the memory of a tmpfs: its blocks are punched out of the file
 * (fallocate PUNCH_HOLE through the native module; the process goes on appending after them and
 * nothing is lost). Without the native module, or on a file system that cannot punch holes, the file is
 * read to its end and truncated: output written in the microseconds between that last read and the
 * truncation is lost. No ordinary process gets here (ffmpeg prints a few kB per transcode).
 */
export const CAPTURE_TRUNCATE_BYTES = 8 * 1024 * 1024;

/** `f_type` of a tmpfs in statfs(2). */
const TMPFS_MAGIC = 0x01021994;

/** True when `dir` is a directory on a tmpfs this process can create files in. */
export function isWritableTmpfs(dir: string): boolean {
  try {
    if (statfsSync(dir).type !== TMPFS_MAGIC) return false;
    accessSync(dir, constants.W_OK | constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

let defaultDir: string | undefined;

/**
 * Where output is captured when the caller does not say (decided once): the OS temp dir when it is a
 * tmpfs, else `/dev/shm` when that is a writable tmpfs, else the OS temp dir on disk. Creating and
 * unlinking two files per process on ext4 cost ~1 ms of kernel time in inode allocation (perf, 2-vCPU
 * VM); on a tmpfs it is a few microseconds.
 */
export function defaultCaptureDir(): string {
  defaultDir ??= [tmpdir(), '/dev/shm'].find(isWritableTmpfs) ?? tmpdir();
  return defaultDir;
}

export interface RunProcessOptions {
  /** Executable path (or a name looked up on PATH by the OS). */
  file: string;
  args: readonly string[];
  /**
   * The complete environment of the process (default: the agent's environment). When it holds the
   * agent's `FFLEET_AGENT_RUN` mark (orphans.ts), runProcess adds `FFLEET_AGENT_STEP` (STEP_MARK_VAR):
   * an id of this run that its descendants inherit. The two name what the process started outside its
   * process group (see runProcess). Without the mark the environment is passed as given and nothing
   * outside the group is followed.
   */
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** Aborting it kills the process group: SIGTERM, then SIGKILL after `graceMs`. */
  signal?: AbortSignal;
  graceMs?: number;
  /** Aborting it once `signal` is aborted cuts the grace short: SIGKILL now (the output may be other work's). */
  killNow?: AbortSignal;
  onStdoutLine?: (line: string) => void;
  onStderrLine?: (line: string) => void;
  tailBytes?: number;
  /**
   * Where stdout and stderr are captured (default: {@link defaultCaptureDir}): each goes to an
   * unlinked file there, read every {@link CAPTURE_POLL_MS} and at exit. `null`: capture through pipes
   * instead (also the fallback when no file can be made).
   */
  captureDir?: string | null;
  /** See {@link CAPTURE_TRUNCATE_BYTES} (tests set it low). */
  captureTruncateBytes?: number;
  /** Free read output by truncation even where holes can be punched (tests of the fallback). */
  captureTruncateOnly?: boolean;
  /**
   * How the process is started when its output is captured to files: `native` (default) through
   * posix_spawn when the native spawner is built (native-spawn.ts), else, and with `node`, through
   * Node's `child_process.spawn`, which forks the agent. Both behave the same.
   */
  spawner?: 'native' | 'node';
}

export interface RunProcessResult {
  /** True when the process exited with code 0 and was not canceled. */
  ok: boolean;
  /** Exit code, or null when the process was killed by a signal or never started. */
  code: number | null;
  /** Signal that ended the process, e.g. `SIGKILL`, or null. */
  signal: NodeJS.Signals | null;
  stdoutTail: string;
  stderrTail: string;
  /** Why the process could not be started (e.g. `spawn /x ENOENT`); absent when it ran. */
  error?: string;
  /** True when `signal` was aborted before the process ended. */
  canceled: boolean;
  /**
   * True when processes it started in its process group were still running after it ended (and were
   * killed then); absent otherwise.
   */
  leftovers?: true;
}

let stepSeq = 0;

/** When /proc is read again for what a canceled (or leftover-leaving) step started outside its group. */
const ESCAPED_RECHECK_MS = 100;

/**
 * An id for one run (FFLEET_AGENT_STEP): a prefix drawn at random once per agent process and a counter,
 * so unique in this process and not what another agent process uses.
 */
const STEP_ID_PREFIX = randomBytes(6).toString('hex');
const newStepId = (): string => `${STEP_ID_PREFIX}.${(++stepSeq).toString(36)}`;

/**
 * Run one executable without a shell in its own process group, streaming its output line by line.
 * Never rejects: a spawn failure, a non-zero exit, a death by signal and a cancel are all values.
 * On cancel the whole group (the process and anything it started) gets SIGTERM, then SIGKILL after
 * the grace period; the promise settles once the process has exited. Whatever is left in the group
 * when the process ends is killed then (SIGKILL).
 *
 * A descendant that left the group (`setsid`, `setsid -f`, a shell's job control) is found by its
 * environment: the process carries `FFLEET_AGENT_STEP=<id of this run>` (added to `env`) and every
 * descendant inherits it, so /proc/<pid>/environ holding both that and the `FFLEET_AGENT_RUN` mark of
 * `env` (this agent process) names it. On cancel these get what the group gets (SIGTERM, then SIGKILL
 * with it; SIGKILL at once when fenced out or on `killNow`), and SIGKILL when the process ends, like
 * the group's leftovers. When the process ends without a cancel, /proc is read only if the group
 * still had members (then those outside it are killed too): reading every process's environ costs
 * milliseconds, and this is every task's path. So a step that only detached a process (`setsid -f
 * uploader`) and left nothing in its group leaves that process running. Never followed: a descendant
 * that replaced its environment (`env -i`) or runs as another user (its environ cannot be read), and
 * nothing at all when `env` carries no `FFLEET_AGENT_RUN` or there is no /proc (not Linux).
 */
export function runProcess(options: RunProcessOptions): Promise<RunProcessResult> {
  const { signal } = options;
  const graceMs = options.graceMs ?? DEFAULT_KILL_GRACE_MS;
  const stdoutTail = new TailBuffer(options.tailBytes ?? DEFAULT_TAIL_BYTES);
  const stderrTail = new TailBuffer(options.tailBytes ?? DEFAULT_TAIL_BYTES);

  if (signal?.aborted) {
    return Promise.resolve({
      ok: false,
      code: null,
      signal: null,
      stdoutTail: '',
      stderrTail: '',
      canceled: true,
    });
  }

  return new Promise((resolve) => {
    const files = openCaptureFiles(
      options.captureDir === undefined ? defaultCaptureDir() : options.captureDir,
    );
    const given = options.env ?? process.env;
    // The step id is of use only with the agent's mark beside it (see runProcess): without one, the
    // environment is passed exactly as given.
    const runMark = given[RUN_MARK_VAR];
    const stepId = runMark ? newStepId() : undefined;
    const env = stepId ? { ...given, [STEP_MARK_VAR]: stepId } : given;
    // Captured to files, the process needs no pipes: posix_spawn can start it (see native-spawn.ts).
    const nativePid =
      files && options.spawner !== 'node'
        ? spawnNative(
            {
              file: options.file,
              args: options.args,
              env,
              cwd: options.cwd,
              stdout: files[0],
              stderr: files[1],
            },
            // Called from the event loop once the process exits, never during this call: `finish` (a
            // function declaration, below) and the state it uses exist by then.
            (code, sig) => finish({ code, signal: sig }),
          )
        : undefined;
    let child: ChildProcess | undefined;
    if (nativePid === undefined) {
      try {
        child = spawn(options.file, [...options.args], {
          shell: false,
          // A process group of its own, so cancel reaches grandchildren (a script's ffmpeg, a shell's sleep).
          detached: true,
          env,
          cwd: options.cwd,
          stdio: files ? ['ignore', files[0], files[1]] : ['ignore', 'pipe', 'pipe'],
        });
      } catch (err) {
        // Synchronous spawn failures (e.g. an argument with a NUL byte) are values too.
        if (files) for (const fd of files) closeSync(fd);
        resolve({
          ok: false,
          code: null,
          signal: null,
          stdoutTail: '',
          stderrTail: '',
          error: (err as Error).message,
          canceled: false,
        });
        return;
      }
    }
    const pid = (): number | undefined => nativePid ?? child?.pid;

    let canceled = false;
    let settled = false;
    let killTimer: NodeJS.Timeout | undefined;
    let drainTimer: NodeJS.Timeout | undefined;
    const free = {
      at: options.captureTruncateBytes ?? CAPTURE_TRUNCATE_BYTES,
      punch: options.captureTruncateOnly !== true,
    };
    const stdoutLines = files
      ? captureLines(files[0], stdoutTail, options.onStdoutLine, free)
      : attachLines(child?.stdout ?? null, stdoutTail, options.onStdoutLine);
    const stderrLines = files
      ? captureLines(files[1], stderrTail, options.onStderrLine, free)
      : attachLines(child?.stderr ?? null, stderrTail, options.onStderrLine);
    // Both capture files are read up to what each held at one moment: a line one stream printed after
    // that moment never comes before what the other printed earlier (a script's last stderr line ahead
    // of its last stdout lines, which then pushed it out of the step's kept tail). Within one read,
    // stdout's lines still come before stderr's.
    const readCaptures = (): void => {
      const out = stdoutLines.size();
      const err = stderrLines.size();
      stdoutLines.read(out);
      stderrLines.read(err);
    };
    const pollTimer = files ? setInterval(readCaptures, CAPTURE_POLL_MS) : undefined;

    /** Signal the process group; false when it has no member left (ESRCH). */
    const killGroup = (sig: NodeJS.Signals | 0): boolean => {
      const leader = pid();
      if (leader === undefined) return false;
      try {
        process.kill(-leader, sig);
        return true;
      } catch (err) {
        // ESRCH: the group is gone. EPERM: a member changed its user; nothing we can do about it.
        return (err as NodeJS.ErrnoException).code === 'EPERM';
      }
    };

    /**
     * Signal the processes of this run outside its group (see runProcess): a scan of /proc, so only on
     * cancel, or at the end when the group had leftovers.
     */
    const killEscaped = (sig: NodeJS.Signals): void => {
      const leader = pid();
      if (leader === undefined || !runMark || !stepId) return;
      for (const p of findMarkedProcesses(runMark, stepId)) {
        if (p.pgrp === leader) continue; // In the group: killGroup reaches it.
        // The same process still (not a new one that got its pid since the scan, nor one already dead).
        if (!processRunsSince(p.pid, p.start)) continue;
        try {
          process.kill(p.pid, sig);
        } catch {
          // Gone meanwhile.
        }
      }
    };
    /** The group and what left it. */
    const killAll = (sig: NodeJS.Signals): void => {
      killGroup(sig);
      killEscaped(sig);
    };

    const onAbort = (): void => {
      if (settled || pid() === undefined) return;
      canceled = true;
      // Fenced out: another attempt owns the output now, so no grace in which ffmpeg could write a trailer.
      if (signal?.reason === FENCED_OUT) {
        killAll('SIGKILL');
        return;
      }
      killAll('SIGTERM');
      killTimer = setTimeout(() => killAll('SIGKILL'), graceMs);
    };
    const onKillNow = (): void => {
      if (!settled && canceled) killAll('SIGKILL');
    };

    function finish(result: Omit<RunProcessResult, 'stdoutTail' | 'stderrTail' | 'canceled' | 'ok'>): void {
      if (settled) return;
      settled = true;
      clearTimeout(killTimer);
      clearTimeout(drainTimer);
      clearInterval(pollTimer);
      signal?.removeEventListener('abort', onAbort);
      options.killNow?.removeEventListener('abort', onKillNow);
      // The group does not outlive the step, canceled or not: members that ignored SIGTERM, or that the
      // process left running when it exited (a script's `sleep 300 &`), are killed now. Left alone they
      // ran on after the task ended, and kept writing into the capture files nobody read any more.
      // (One kill(2) when the group is empty, as it is after nearly every process.)
      const leftovers = result.error === undefined && killGroup(0);
      if (leftovers) killGroup('SIGKILL');
      // What left the group: after a cancel always (a process that ignored SIGTERM gets no grace once the
      // step has ended, as in the group), else only when the group had leftovers, as /proc is read for it
      // (the step ended normally with an empty group: no read, see runProcess).
      if (result.error === undefined && (canceled || leftovers)) {
        killEscaped('SIGKILL');
        // Once more a moment later: a process caught in its exec (`setsid -f` right before the step ended)
        // shows an empty environ for that moment, and the first look missed it.
        setTimeout(() => killEscaped('SIGKILL'), ESCAPED_RECHECK_MS).unref();
      }
      // The last read: the process has exited and what it left running is killed.
      readCaptures();
      stdoutLines.end();
      stderrLines.end();
      const ok = result.error === undefined && result.code === 0 && !canceled;
      resolve({
        ...result,
        ok,
        canceled,
        stdoutTail: stdoutTail.toString(),
        stderrTail: stderrTail.toString(),
        ...(leftovers && !canceled ? { leftovers: true as const } : {}),
      });
    }

    if (child) {
      const c = child;
      c.on('error', (err) => {
        // Spawn failures (ENOENT, EACCES) arrive here with no pid; the process never ran.
        if (c.pid === undefined) finish({ code: null, signal: null, error: err.message });
      });
      c.once('exit', () => {
        // Captured to files: everything the process wrote is there now (a grandchild still writing to
        // them holds nobody up).
        if (files) {
          finish({ code: c.exitCode, signal: c.signalCode });
          return;
        }
        drainTimer = setTimeout(() => {
          c.stdout?.destroy();
          c.stderr?.destroy();
          finish({ code: c.exitCode, signal: c.signalCode });
        }, STDIO_DRAIN_MS);
      });
      c.once('close', (code, sig) => finish({ code, signal: sig }));
    }
    signal?.addEventListener('abort', onAbort, { once: true });
    options.killNow?.addEventListener('abort', onKillNow, { once: true });
  });
}

/**
 * Captured output: `read` takes what arrived so far (up to `upTo` bytes of the file when given, the
 * `size` it had at some moment; null: unknown, nothing read), `end` hands over the last line and
 * closes (read what is left first).
 */
type Capture = { size: () => number | null; read: (upTo?: number | null) => void; end: () => void };

let captureSeq = 0;

/**
 * Two files for a process's stdout and stderr, created in `dir` and unlinked at once (only the open
 * descriptors keep them), or null when that is not possible (then pipes are used). Opened for
 * appending: each write of the process lands at the end, also after {@link CAPTURE_TRUNCATE_BYTES}.
 *
 * Why files: the process writes into the page cache without waking the agent, which reads a few
 * times a second, while two pipes cost a socket pair, two stream objects and a wake-up per write.
 * Measured on a 2-vCPU VM: ~1.8 ms of agent CPU less per process, for a short transcode a tenth of
 * what the agent spends on the whole task.
 */
function openCaptureFiles(dir: string | null): [number, number] | null {
  if (dir === null) return null;
  const fds: number[] = [];
  try {
    for (let i = 0; i < 2; i++) {
      const file = join(
        dir,
        `.ffleet-capture-${process.pid}-${++captureSeq}-${randomBytes(4).toString('hex')}`,
      );
      // Exclusive create: never a file someone else placed there.
      fds.push(
        openSync(file, constants.O_RDWR | constants.O_CREAT | constants.O_EXCL | constants.O_APPEND, 0o600),
      );
      unlinkSync(file);
    }
    return [fds[0]!, fds[1]!];
  } catch {
    for (const fd of fds) closeSync(fd);
    return null;
  }
}

/** Read a capture file from where the last read stopped; `end` closes it. */
function captureLines(
  fd: number,
  tail: TailBuffer,
  onLine: ((line: string) => void) | undefined,
  free: { at: number; punch: boolean },
): Capture {
  const decoder = new StringDecoder('utf8');
  const splitter = onLine ? new LineSplitter(onLine) : undefined;
  let pos = 0;
  /** Bytes before this offset have been read and freed (punched out). */
  let freed = 0;
  let closed = false;
  const sizeNow = (): number | null => {
    try {
      return fstatSync(fd).size;
    } catch {
      return null;
    }
  };
  /** Read what the file holds past `pos` (up to `upTo`); false when it cannot be read (the capture stops). */
  const readToSize = (upTo: number | null = sizeNow()): boolean => {
    if (upTo === null) return false;
    const size = upTo;
    while (pos < size) {
      const chunk = Buffer.allocUnsafe(Math.min(size - pos, 256 * 1024));
      let n: number;
      try {
        n = readSync(fd, chunk, 0, chunk.length, pos);
      } catch {
        return false;
      }
      if (n <= 0) break;
      pos += n;
      const bytes = n === chunk.length ? chunk : chunk.subarray(0, n);
      tail.push(bytes);
      splitter?.push(decoder.write(bytes));
    }
    return true;
  };
  const read = (upTo?: number | null) => {
    if (closed || !readToSize(upTo === undefined ? sizeNow() : upTo) || pos - freed < free.at) return;
    if (free.punch && punchHole(fd, freed, pos - freed)) {
      freed = pos;
      return;
    }
    // Truncation: first read what arrived while the last read was split into lines, until a look at
    // the size finds nothing new (bounded: a writer faster than this loses the race some time anyway).
    for (let i = 0; i < 16; i++) {
      const before = pos;
      if (!readToSize()) return;
      if (pos === before) break;
    }
    try {
      ftruncateSync(fd, 0);
      pos = 0;
      freed = 0;
    } catch {
      // Keep reading from where we are.
    }
  };
  return {
    size: () => (closed ? null : sizeNow()),
    read,
    end: () => {
      if (closed) return;
      closed = true;
      closeSync(fd);
      splitter?.push(decoder.end());
      splitter?.end();
    },
  };
}

/** Feed a pipe into a tail buffer and a line callback; returns a handle that flushes the last line. */
function attachLines(
  stream: Readable | null,
  tail: TailBuffer,
  onLine: ((line: string) => void) | undefined,
): Capture {
  const decoder = new StringDecoder('utf8');
  const splitter = onLine ? new LineSplitter(onLine) : undefined;
  let ended = false;
  stream?.on('data', (chunk: Buffer) => {
    tail.push(chunk);
    splitter?.push(decoder.write(chunk));
  });
  return {
    size: () => null,
    read: () => {},
    end: () => {
      if (ended) return;
      ended = true;
      splitter?.push(decoder.end());
      splitter?.end();
    },
  };
}
