import { constants } from 'node:fs';
import { access, stat } from 'node:fs/promises';
import path from 'node:path';
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
      return (await isExecutableFile(absolute))
        ? { ok: true, path: absolute, source: 'FFLEET_TRANSCODER' }
        : { ok: false, error: `FFLEET_TRANSCODER=${configured}: ${absolute} is not an executable file` };
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

async function isExecutableFile(file: string): Promise<boolean> {
  try {
    if (!(await stat(file)).isFile()) return false;
    await access(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
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
  hardwareOptions: HardwareProbeOptions = {},
): Promise<ProbeTranscoderResult> {
  // Output is collected line by line: the encoder list is longer than a result's tail.
  const run = async (args: string[]) => {
    const lines: string[] = [];
    const result = await runProcess({
      file: transcoderPath,
      args,
      signal: AbortSignal.timeout(PROBE_TIMEOUT_MS),
      graceMs: 1000,
      onStdoutLine: (line) => lines.push(line),
    });
    return { ...result, stdout: lines.join('\n') };
  };
  const [version, encoders, hwaccels] = await Promise.all([
    run(['-version']),
    run(['-hide_banner', '-encoders']),
    run(['-hide_banner', '-hwaccels']),
  ]);
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
    hardwareOptions,
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
