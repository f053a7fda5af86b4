import { constants } from 'node:fs';
import { access, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import {
  type EncoderRow,
  type HardwareProbeOptions,
  type HardwareProbeResult,
  probeHardware,
} from './hw-probe.ts';
import { type RunProcessResult, runProcess } from './run-process.ts';

/** Where the transcoder came from, in the order they are tried. */
export type TranscoderSource = 'FFLEET_TRANSCODER' | 'PATH' | 'bundled';

export type ResolveTranscoderResult =
  | { ok: true; path: string; source: TranscoderSource }
  | { ok: false; error: string };

export interface ResolveTranscoderDeps {
  /** Path of the bundled binary; default: the `@ffmpeg-installer/ffmpeg` package. May throw. */
  loadBundledPath?: () => Promise<string>;
}

/**
 * Find the transcoder executable as an absolute path: `FFLEET_TRANSCODER` (a path, or a name
 * looked up on `PATH`), else `ffmpeg` on `PATH`, else the binary shipped by
 * `@ffmpeg-installer/ffmpeg`. An explicit `FFLEET_TRANSCODER` that does not work is an error, never
 * silently replaced by another binary. Async because the bundled package is loaded on demand (it
 * throws at import time on platforms it does not support).
 */
export async function resolveTranscoder(
  env: NodeJS.ProcessEnv,
  deps: ResolveTranscoderDeps = {},
): Promise<ResolveTranscoderResult> {
  const configured = env.FFLEET_TRANSCODER?.trim();
  if (configured) {
    if (configured.includes('/') || configured.includes(path.sep)) {
      const absolute = path.resolve(configured);
      const why = await notExecutableReason(absolute);
      return why === undefined
        ? { ok: true, path: absolute, source: 'FFLEET_TRANSCODER' }
        : { ok: false, error: `FFLEET_TRANSCODER=${configured}: ${why}` };
    }
    const found = await findOnPath(configured, env.PATH);
    return found
      ? { ok: true, path: found, source: 'FFLEET_TRANSCODER' }
      : { ok: false, error: `FFLEET_TRANSCODER=${configured}: no executable of that name on PATH` };
  }

  const onPath = await findOnPath('ffmpeg', env.PATH);
  if (onPath) return { ok: true, path: onPath, source: 'PATH' };

  let bundled: string;
  try {
    bundled = await (deps.loadBundledPath ?? loadInstallerPath)();
  } catch (err) {
    return {
      ok: false,
      error: `no transcoder: FFLEET_TRANSCODER is not set, ffmpeg is not on PATH, and the bundled @ffmpeg-installer/ffmpeg is unavailable (${errorText(err)})`,
    };
  }
  if (!(await isExecutableFile(bundled))) {
    return {
      ok: false,
      error: `no transcoder: ffmpeg is not on PATH and the bundled binary ${bundled} is not executable (reinstall @ffmpeg-installer/ffmpeg with install scripts allowed, chmod +x it, or set FFLEET_TRANSCODER)`,
    };
  }
  return { ok: true, path: path.resolve(bundled), source: 'bundled' };
}

async function loadInstallerPath(): Promise<string> {
  const installer = await import('@ffmpeg-installer/ffmpeg');
  return installer.default.path;
}

/** First executable regular file called `name` in the `PATH` directories, as an absolute path. */
export async function findOnPath(name: string, pathEnv: string | undefined): Promise<string | null> {
  for (const dir of (pathEnv ?? '').split(path.delimiter)) {
    // An empty PATH entry means "the current directory" to a shell; an agent must not run what
    // happens to lie in its working directory.
    if (dir === '' || !path.isAbsolute(dir)) continue;
    const candidate = path.join(dir, name);
    if (await isExecutableFile(candidate)) return candidate;
  }
  return null;
}

/**
 * Why `file` is no executable file, in words an operator can act on; undefined when it is one. One
 * look decides both (a second look for the wording could see a file that appeared meanwhile).
 */
async function notExecutableReason(file: string): Promise<string | undefined> {
  let isFile: boolean;
  try {
    isFile = (await stat(file)).isFile();
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return code === 'ENOENT' || code === 'ENOTDIR'
      ? `${file} does not exist`
      : `${file} cannot be read (${code ?? errorText(err)})`;
  }
  if (!isFile) return `${file} is not a file`;
  try {
    await access(file, constants.X_OK);
    return undefined;
  } catch {
    return `${file} is not executable (no x permission)`;
  }
}

async function isExecutableFile(file: string): Promise<boolean> {
  return (await notExecutableReason(file)) === undefined;
}

export type ProbeTranscoderResult =
  | {
      ok: true;
      version: string;
      /** Software encoders, and the hardware ones that work on this box. */
      encoders: string[];
      /** The hwaccels that initialise on this box. */
      hwaccels: string[];
      /** What the hardware probe kept, dropped and why, and how long it took (for the log). */
      hardware: HardwareProbeResult;
    }
  | { ok: false; error: string };

/** The hardware probes' options, whose `signal` and `env` the basic probe commands take too. */
export type ProbeTranscoderOptions = HardwareProbeOptions;

/** How long each probe command may take; a healthy ffmpeg answers in milliseconds. */
export const PROBE_TIMEOUT_MS = 10_000;

/**
 * Ask the transcoder for its version (`-version`), encoders (`-hide_banner -encoders`) and
 * hardware acceleration methods (`-hide_banner -hwaccels`), for the agent's birth message and
 * capability routing (`encoder:hevc_nvenc`). Those lists say what ffmpeg was built with; the
 * hardware encoders and hwaccels among them are then tried (hw-probe.ts) and only the ones that work
 * on this box are returned, or a task requiring `encoder:h264_nvenc` would be claimed by any agent
 * running the same ffmpeg build, GPU or not.
 */
export async function probeTranscoder(
  transcoderPath: string,
  options: ProbeTranscoderOptions = {},
): Promise<ProbeTranscoderResult> {
  const { signal, env } = options;
  // Output is collected line by line: the encoder list is longer than a result's tail.
  const run = async (args: string[]) => {
    const lines: string[] = [];
    const timeout = AbortSignal.timeout(PROBE_TIMEOUT_MS);
    const result = await runProcess({
      file: transcoderPath,
      args,
      // A process that does not exit even when killed (stuck in a driver or on a hung mount) holds the
      // probe up until it does: probing again meanwhile would only add another such process.
      signal: signal ? AbortSignal.any([timeout, signal]) : timeout,
      graceMs: 1000,
      ...(env ? { env } : {}),
      onStdoutLine: (line) => lines.push(line),
    });
    return { ...result, stdout: lines.join('\n') };
  };
  const [version, encoders, hwaccels] = await Promise.all([
    run(['-version']),
    run(['-hide_banner', '-encoders']),
    run(['-hide_banner', '-hwaccels']),
  ]);
  if (signal?.aborted) return { ok: false, error: `${transcoderPath}: probe stopped` };
  for (const [label, result] of [
    ['-version', version],
    ['-encoders', encoders],
    ['-hwaccels', hwaccels],
  ] as const) {
    if (!result.ok)
      return { ok: false, error: `${transcoderPath} ${label} failed: ${describeFailure(result)}` };
  }
  const parsedVersion = parseVersion(version.stdout);
  if (parsedVersion === null) {
    return { ok: false, error: `${transcoderPath} -version printed no version line; is it ffmpeg?` };
  }
  const hardware = await probeHardware(
    transcoderPath,
    { encoders: parseEncoderRows(encoders.stdout), hwaccels: parseHwaccels(hwaccels.stdout) },
    options, // its signal and environment too
  );
  return {
    ok: true,
    version: parsedVersion,
    encoders: hardware.encoders,
    hwaccels: hardware.hwaccels,
    hardware,
  };
}

function describeFailure(result: RunProcessResult): string {
  if (result.error) return result.error;
  if (result.canceled) return `no answer within ${PROBE_TIMEOUT_MS} ms`;
  const last = result.stderrTail.trim().split('\n').at(-1) ?? '';
  return result.signal ? `killed by ${result.signal}` : `exit code ${result.code}${last ? `: ${last}` : ''}`;
}

/** `ffmpeg version 5.1.9-0+deb12u1 Copyright …` → `5.1.9-0+deb12u1`. */
export function parseVersion(output: string): string | null {
  return /^\S+ version (\S+)/m.exec(output)?.[1] ?? null;
}

/** Encoder names from `-encoders`: the second column of every row after the `------` line. */
export function parseEncoders(output: string): string[] {
  return parseEncoderRows(output).map((r) => r.name);
}

/** The rows of `-encoders`: name, and type (the first letter of the flags column). */
export function parseEncoderRows(output: string): EncoderRow[] {
  const lines = output.split('\n');
  const start = lines.findIndex((l) => l.trim() === '------');
  if (start === -1) return [];
  const rows: EncoderRow[] = [];
  for (const line of lines.slice(start + 1)) {
    const match = /^\s*([VAS])[A-Z.]{5}\s+(\S+)/.exec(line);
    if (match?.[1] && match[2]) rows.push({ type: match[1], name: match[2] });
  }
  return rows;
}

/** Method names from `-hwaccels`: one per line after the heading. */
export function parseHwaccels(output: string): string[] {
  return output
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.endsWith(':'));
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** An error text with its numbers (decimal and hex) blanked: what stays the same between attempts. */
const errorShape = (error: string): string => error.replace(/0x[0-9a-f]+|\d+/gi, '#');

/** A transcoder that resolved and passed its probe. */
export type FoundTranscoder = {
  path: string;
  source: TranscoderSource;
  version: string;
  encoders: string[];
  hwaccels: string[];
  hardware: HardwareProbeResult;
};

export type FindTranscoderResult = ({ ok: true } & FoundTranscoder) | { ok: false; error: string };

/**
 * Resolve the transcoder ({@link resolveTranscoder}) and probe it ({@link probeTranscoder}); the probe
 * commands run with `opts.childEnv` (the agent gives them its runs' environment: no credentials, its
 * run mark, so a restarted agent kills what a probe of a dead one left behind).
 */
export async function findTranscoder(
  env: NodeJS.ProcessEnv,
  opts: { signal?: AbortSignal; childEnv?: NodeJS.ProcessEnv } = {},
): Promise<FindTranscoderResult> {
  const resolved = await resolveTranscoder(env);
  if (!resolved.ok) return resolved;
  // The probe's errors start with the path.
  const probed = await probeTranscoder(resolved.path, {
    ...(opts.signal ? { signal: opts.signal } : {}),
    ...(opts.childEnv ? { env: opts.childEnv } : {}),
  });
  if (!probed.ok) return probed;
  const { version, encoders, hwaccels, hardware } = probed;
  return { ok: true, path: resolved.path, source: resolved.source, version, encoders, hwaccels, hardware };
}

/**
 * While an agent has no working transcoder it looks again this often. Agents run as services and often
 * start before a network mount or a GPU driver is ready (FFmate looks for its ffmpeg every 10 s too).
 */
export const TRANSCODER_RETRY_MS = 10_000;
/** The same failure again is logged at most this often (a different one at once). */
export const TRANSCODER_REPEAT_LOG_MS = 60_000;
/**
 * A search attempt still running after this long is reported as hanging, and the agent's start stops
 * waiting for it (the agent comes online without a transcoder and announces it once the attempt
 * succeeds). Well above what probing takes: each probe command may take PROBE_TIMEOUT_MS and each
 * hardware probe HW_PROBE_TIMEOUT_MS.
 */
export const TRANSCODER_HANG_MS = 60_000;

export type TranscoderSearchOptions = {
  /** One attempt; its errors should be stable texts (a changed text is logged at once). */
  find: (signal: AbortSignal) => Promise<FindTranscoderResult>;
  /** Bound to the agent by the caller. */
  logger: Logger;
  /** The transcoder was found, or the failure (`error`) changed: the agent announces it again. */
  onChange: () => void;
  /** Default {@link TRANSCODER_RETRY_MS}. */
  retryMs?: number;
  /** Default {@link TRANSCODER_REPEAT_LOG_MS}. */
  repeatLogMs?: number;
  /** Default {@link TRANSCODER_HANG_MS}. */
  hangMs?: number;
  /** Clock for the log throttling (ms); default `performance.now`. */
  now?: () => number;
};

/**
 * Finds the agent's transcoder and, while there is none that works, looks again every `retryMs`: one
 * attempt at a time (the next one is scheduled once the last one has ended, so an attempt stuck on a
 * hung mount or driver is never joined by another), until found or stopped. A failure is logged at
 * error level when it starts and when it changes, and repeated at most once every `repeatLogMs`; the
 * transcoder found is logged once, at info.
 */
export class TranscoderSearch {
  readonly #o: TranscoderSearchOptions;
  readonly #retryMs: number;
  readonly #repeatLogMs: number;
  readonly #hangMs: number;
  readonly #now: () => number;
  #found: FoundTranscoder | null = null;
  #error = '';
  #stopped = false;
  #running = false;
  #attempts = 0;
  /** When the current streak of failures began, and when its error was last logged. */
  #failingSince: number | undefined;
  #loggedAt = 0;
  #retryTimer: NodeJS.Timeout | undefined;
  #abort: AbortController | undefined;
  /** Ends the wait for the running attempt (start() waits for the first one; stop() ends it). */
  #waiting: (() => void) | undefined;

  constructor(opts: TranscoderSearchOptions) {
    this.#o = opts;
    this.#retryMs = opts.retryMs ?? TRANSCODER_RETRY_MS;
    this.#repeatLogMs = opts.repeatLogMs ?? TRANSCODER_REPEAT_LOG_MS;
    this.#hangMs = opts.hangMs ?? TRANSCODER_HANG_MS;
    this.#now = opts.now ?? (() => performance.now());
  }

  /** The working transcoder, once found. */
  get found(): FoundTranscoder | null {
    return this.#found;
  }

  /** Why there is no working transcoder ('' once found, and before the first attempt has failed). */
  get error(): string {
    return this.#error;
  }

  /** Attempts started so far. */
  get attempts(): number {
    return this.#attempts;
  }

  /** Make the first attempt; resolves once it has ended or has run for `hangMs` (it goes on then). */
  start(): Promise<void> {
    return this.#attempt();
  }

  /**
   * The transcoder found could not be started (its binary is gone): it is forgotten, the failure logged
   * and announced as at a failed start, and the search goes on every `retryMs`.
   */
  lost(error: string): void {
    if (this.#stopped || !this.#found) return;
    this.#found = null;
    this.#error = '';
    this.#failingSince = undefined;
    this.#failed(`the transcoder stopped working: ${error}`);
    clearTimeout(this.#retryTimer);
    this.#retryTimer = setTimeout(() => void this.#attempt(), this.#retryMs);
    this.#retryTimer.unref();
  }

  /** No attempt from now on; one running is told to stop and its result is ignored. */
  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#retryTimer);
    this.#abort?.abort();
    this.#waiting?.();
  }

  #attempt(): Promise<void> {
    if (this.#stopped || this.#found || this.#running) return Promise.resolve();
    this.#running = true;
    this.#attempts++;
    const abort = new AbortController();
    this.#abort = abort;
    return new Promise<void>((resolve) => {
      let hang: NodeJS.Timeout | undefined;
      const settled = () => {
        clearTimeout(hang);
        if (this.#waiting === settled) this.#waiting = undefined;
        resolve();
      };
      this.#waiting = settled;
      hang = setTimeout(() => {
        this.#failed(
          `the transcoder search has not finished after ${Math.round(this.#hangMs / 1000)} s (a hung network mount or GPU driver?); still waiting for it`,
        );
        settled();
      }, this.#hangMs);
      void this.#o
        .find(abort.signal)
        .catch((err: unknown): FindTranscoderResult => ({ ok: false, error: errorText(err) }))
        .then((result) => {
          this.#running = false;
          if (this.#stopped) return;
          if (result.ok) {
            this.#succeeded(result);
            return;
          }
          this.#retryTimer = setTimeout(() => void this.#attempt(), this.#retryMs);
          this.#retryTimer.unref();
          this.#failed(result.error);
        })
        .catch((err: unknown) => this.#o.logger.error({ err }, 'handling the transcoder search failed'))
        .finally(settled);
    });
  }

  #failed(error: string): void {
    const now = this.#now();
    const log = this.#o.logger;
    const fields = { error, retryInS: this.#retryMs / 1000 };
    // The same failure with other numbers (a time, a pid, ffmpeg's `@ 0x55…` addresses) is the same
    // failure: logged and announced once, not at every attempt.
    if (this.#failingSince === undefined || errorShape(error) !== errorShape(this.#error)) {
      const first = this.#failingSince === undefined;
      this.#failingSince ??= now;
      this.#error = error;
      this.#loggedAt = now;
      log.error(
        first ? fields : { ...fields, failingForS: Math.round((now - this.#failingSince) / 1000) },
        'no working transcoder: this agent claims nothing until one is found',
      );
      this.#o.onChange();
      return;
    }
    if (now - this.#loggedAt >= this.#repeatLogMs) {
      this.#loggedAt = now;
      log.error(
        { ...fields, failingForS: Math.round((now - this.#failingSince) / 1000), attempts: this.#attempts },
        'still no working transcoder: this agent claims nothing',
      );
      return;
    }
    log.debug({ error, attempts: this.#attempts }, 'still no working transcoder');
  }

  #succeeded(found: FindTranscoderResult & { ok: true }): void {
    const { ok: _, ...transcoder } = found;
    const { hardware } = transcoder;
    this.#found = transcoder;
    this.#error = '';
    const log = this.#o.logger;
    // What is advertised beyond software encoding: the hardware that passed its probe on this box.
    for (const d of hardware.dropped) {
      log.debug({ [d.kind]: d.name, reason: d.reason }, 'not advertised: does not work on this box');
    }
    log.info(
      {
        path: transcoder.path,
        version: transcoder.version,
        source: transcoder.source,
        hardwareEncoders: hardware.hardwareEncoders,
        hwaccels: transcoder.hwaccels,
        hardwareDropped: hardware.dropped.length,
        hardwareProbeMs: hardware.ms,
        ...(this.#failingSince === undefined
          ? {}
          : { failedForS: Math.round((this.#now() - this.#failingSince) / 1000), attempts: this.#attempts }),
      },
      'transcoder ready',
    );
    this.#o.onChange();
  }
}
