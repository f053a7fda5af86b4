import { spawn } from 'node:child_process';
import type { Readable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import { LineSplitter } from './line-splitter.ts';
import { TailBuffer } from './tail-buffer.ts';

/** Time a canceled process group gets between SIGTERM and SIGKILL: ffmpeg finalises a file in well under it. */
/**
 * Abort reason for a run the control plane gave to another attempt (stale lease). Unlike a user cancel,
 * the process group is killed at once and the output is left alone: the new attempt is writing it.
 */
export const FENCED_OUT = 'fenced-out';

export const DEFAULT_KILL_GRACE_MS = 5000;

/** Bytes of stdout/stderr kept for the result (enough for ffmpeg's closing error lines). */
export const DEFAULT_TAIL_BYTES = 16 * 1024;

/**
 * After the process exits, how long to wait for its stdout/stderr to close. A backgrounded
 * grandchild that inherited the pipes would otherwise keep the step waiting forever.
 */
export const STDIO_DRAIN_MS = 1000;

export interface RunProcessOptions {
  /** Executable path (or a name looked up on PATH by the OS). */
  file: string;
  args: readonly string[];
  /** The complete environment of the process; default: the agent's environment. */
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** Aborting it kills the process group: SIGTERM, then SIGKILL after `graceMs`. */
  signal?: AbortSignal;
  graceMs?: number;
  onStdoutLine?: (line: string) => void;
  onStderrLine?: (line: string) => void;
  tailBytes?: number;
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
}

/**
 * Run one executable without a shell in its own process group, streaming its output line by line.
 * Never rejects: a spawn failure, a non-zero exit, a death by signal and a cancel are all values.
 * On cancel the whole group (the process and anything it started) gets SIGTERM, then SIGKILL after
 * the grace period; the promise settles once the process has exited.
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
    const child = spawn(options.file, [...options.args], {
      shell: false,
      // A process group of its own, so cancel reaches grandchildren (a script's ffmpeg, a shell's sleep).
      detached: true,
      env: options.env ?? process.env,
      cwd: options.cwd,
      stdio: ['ignore', 'pipe', 'pipe'],
    });

    let canceled = false;
    let settled = false;
    let killTimer: NodeJS.Timeout | undefined;
    let drainTimer: NodeJS.Timeout | undefined;
    const stdoutLines = attachLines(child.stdout, stdoutTail, options.onStdoutLine);
    const stderrLines = attachLines(child.stderr, stderrTail, options.onStderrLine);

    const killGroup = (sig: NodeJS.Signals): void => {
      if (child.pid === undefined) return;
      try {
        process.kill(-child.pid, sig);
      } catch {
        // ESRCH: the group is already gone.
      }
    };

    const onAbort = (): void => {
      if (settled || child.pid === undefined) return;
      canceled = true;
      // Fenced out: another attempt owns the output now, so no grace in which ffmpeg could write a trailer.
      if (signal?.reason === FENCED_OUT) {
        killGroup('SIGKILL');
        return;
      }
      killGroup('SIGTERM');
      killTimer = setTimeout(() => killGroup('SIGKILL'), graceMs);
    };

    const finish = (
      result: Omit<RunProcessResult, 'stdoutTail' | 'stderrTail' | 'canceled' | 'ok'>,
    ): void => {
      if (settled) return;
      settled = true;
      clearTimeout(killTimer);
      clearTimeout(drainTimer);
      signal?.removeEventListener('abort', onAbort);
      // A canceled group must not outlive the step: members that ignored SIGTERM or kept running
      // after the leader exited are killed now.
      if (canceled) killGroup('SIGKILL');
      stdoutLines.end();
      stderrLines.end();
      const ok = result.error === undefined && result.code === 0 && !canceled;
      resolve({
        ...result,
        ok,
        canceled,
        stdoutTail: stdoutTail.toString(),
        stderrTail: stderrTail.toString(),
      });
    };

    child.on('error', (err) => {
      // Spawn failures (ENOENT, EACCES) arrive here with no pid; the process never ran.
      if (child.pid === undefined) finish({ code: null, signal: null, error: err.message });
    });
    child.once('exit', () => {
      drainTimer = setTimeout(() => {
        child.stdout?.destroy();
        child.stderr?.destroy();
        finish({ code: child.exitCode, signal: child.signalCode });
      }, STDIO_DRAIN_MS);
    });
    child.once('close', (code, sig) => finish({ code, signal: sig }));
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** Feed a pipe into a tail buffer and a line callback; returns a handle that flushes the last line. */
function attachLines(
  stream: Readable | null,
  tail: TailBuffer,
  onLine: ((line: string) => void) | undefined,
): { end: () => void } {
  const decoder = new StringDecoder('utf8');
  const splitter = onLine ? new LineSplitter(onLine) : undefined;
  let ended = false;
  stream?.on('data', (chunk: Buffer) => {
    tail.push(chunk);
    splitter?.push(decoder.write(chunk));
  });
  return {
    end: () => {
      if (ended) return;
      ended = true;
      splitter?.push(decoder.end());
      splitter?.end();
    },
  };
}
