import { rm, stat } from 'node:fs/promises';
import {
  formatCommandLine,
  isTranscoderWildcard,
  parseCommand,
  resolveWildcards,
  type WildcardContext,
  type WildcardPaths,
} from '@ffleet/shared';
import {
  computeTaskProgress,
  durationLimits,
  NOT_PROGRESS,
  outputDuration,
  ProgressParser,
  parseDurationLine,
  type TaskProgress,
} from './progress.ts';
import type { RunLogs } from './run-logs.ts';
import { FENCED_OUT, runProcess } from './run-process.ts';
import { type StepOutcome, toStepOutcome } from './step-outcome.ts';
import { PROBE_TIMEOUT_MS } from './transcoder.ts';

/**
 * Arguments the runner puts in front of every transcoder call, before the user's arguments:
 * global options are position-independent only at the front, and a later user `-progress` still
 * wins. `-nostdin` keeps ffmpeg from reading the terminal, `-progress pipe:1` writes machine-readable
 * progress blocks to stdout, `-nostats` drops the human stats line from stderr so the log and the
 * error tail hold real messages. What else it prints to stdout (`-version`, a muxer writing to `-`
 * such as `-f framemd5 -`) goes to the task's log as transcoder output, line by line.
 */
export const TRANSCODER_PREFIX_ARGS: readonly string[] = ['-nostdin', '-progress', 'pipe:1', '-nostats'];

/** A command ready to run: the arguments of each `&&` segment, and the line shown as `command.resolved`. */
export type ResolvedChain =
  | { ok: true; segments: string[][]; display: string }
  | { ok: false; error: string };

/**
 * Tokenize the raw command, split it at `&&`, and substitute wildcards inside every argument. The
 * transcoder binary is not part of a segment's arguments: it is placed in front of the first
 * segment, and a later segment's leading `${TRANSCODER}`/`${FFMPEG}` stands for it. A first segment
 * that also starts with one of them is accepted and not doubled. `display` shows the chain with the
 * transcoder path in front of later segments, quoted so it tokenizes back to the same arguments.
 */
export function resolveChain(
  rawCommand: string,
  ctx: WildcardContext,
  paths: WildcardPaths,
  transcoderPath: string,
): ResolvedChain {
  const parsed = parseCommand(rawCommand);
  if (!parsed.ok) return { ok: false, error: `command: ${parsed.error}` };
  const segments = parsed.segments.map((words, index) => {
    const args = index > 0 || isTranscoderWildcard(words[0]) ? words.slice(1) : words;
    return args.map((word) => resolveWildcards(word, ctx, paths));
  });
  const display = formatCommandLine(
    segments.map((args, index) => (index === 0 ? args : [transcoderPath, ...args])),
  );
  return { ok: true, segments, display };
}

export interface TranscodeInput {
  segments: string[][];
  transcoderPath: string;
  /** Resolved output path ('' when the task has none): removed when a cancel interrupts the transcode. */
  outputFile: string;
  env: NodeJS.ProcessEnv;
  signal: AbortSignal;
  /** See RunTaskOptions.outputKeptBecause and killNow. */
  outputKeptBecause: () => string | undefined;
  killNow?: AbortSignal;
  graceMs: number;
  logs: RunLogs;
  onProgress: (progress: TaskProgress) => void;
  /** See RunTaskOptions.onTranscoderLost. */
  onTranscoderLost?: (error: string) => void;
}

/**
 * Run the segments one after another; the first failure stops the chain. Progress comes from
 * `-progress` on stdout and the input duration on stderr; stderr also goes to the transcoder log.
 * A canceled transcode removes the partial output file: the task's output, when the segment that was
 * running had written to it.
 */
export async function runTranscode(input: TranscodeInput): Promise<StepOutcome> {
  let duration: number | null = null;

  for (const [index, args] of input.segments.entries()) {
    // Taken per segment: the output an earlier segment of the chain finished is not a later one's
    // partial output (a chain canceled in its second segment had removed the first one's finished file).
    const before = await statOrNull(input.outputFile);
    const position = { index, count: input.segments.length };
    const parser = new ProgressParser();
    // A later segment that prints no duration (e.g. reading a generated source) keeps the last one.
    let segmentDuration: number | null = null;
    const argv = [...TRANSCODER_PREFIX_ARGS, ...args];
    // Progress is measured against what this command writes: `-t`, `-to` and `-ss` shorten it.
    const limits = durationLimits(args);
    input.logs.agent.add(`transcoder: $ ${formatCommandLine([[input.transcoderPath, ...argv]])}`);
    // A command that lowers the log level (`-loglevel error`) hides the input's Duration line: at the
    // segment's first progress block without a duration of its own, its input is read once more for
    // it (probeDuration; a later segment whose input is no file keeps the last segment's duration).
    const probe = new AbortController();
    let probing = false;
    // While the probe runs, the segment is measured against nothing (its start), not against an earlier
    // segment's duration, which could put it further along than it is.
    let pending = false;
    const probeWhenNeeded = () => {
      if (probing || segmentDuration !== null) return;
      probing = true;
      const file = firstInput(args);
      if (file === null) return;
      pending = true;
      void probeDuration(input, file, probe.signal, () => segmentDuration === null).then((seconds) => {
        pending = false;
        if (seconds === null || segmentDuration !== null || probe.signal.aborted) return;
        duration = segmentDuration = outputDuration(seconds, limits);
        input.logs.agent.add(`transcoder: printed no input duration; read it from ${file}`);
      });
    };

    const running = runProcess({
      file: input.transcoderPath,
      args: argv,
      env: input.env,
      signal: input.signal,
      graceMs: input.graceMs,
      ...(input.killNow ? { killNow: input.killNow } : {}),
      onStdoutLine: (line) => {
        const sample = parser.push(line);
        if (sample === NOT_PROGRESS) {
          input.logs.transcoder.add(line);
          return;
        }
        if (!sample) return;
        probeWhenNeeded();
        const against = pending ? segmentDuration : duration;
        input.onProgress(computeTaskProgress(sample.outTimeSeconds, against, sample.speed, position));
      },
      onStderrLine: (line) => {
        input.logs.transcoder.add(line);
        if (segmentDuration === null) {
          const input = parseDurationLine(line);
          if (input !== null) duration = segmentDuration = outputDuration(input, limits);
        }
      },
    });
    // The command line is handed over now, while the transcoder runs (it is spawned above): it rides on
    // the run's held RUNNING details or goes out on its own, not in a report between the transcoder's
    // exit and the final one (which the control plane handles in order before the agent's next claim).
    input.logs.agent.flush();
    const result = await running;
    probe.abort();

    const label =
      input.segments.length > 1
        ? `transcoder (segment ${index + 1} of ${input.segments.length})`
        : 'transcoder';
    if (result.leftovers) input.logs.agent.add(`${label}: killed the processes it left running`);
    const outcome = toStepOutcome(label, result);
    if (outcome.kind === 'canceled' && input.signal.reason !== FENCED_OUT) {
      const kept = input.outputKeptBecause();
      if (kept === undefined) await removePartialOutput(input.outputFile, before, input.logs);
      else
        input.logs.agent.add(`${label}: partial output kept: ${kept}; the path may be other work's by now`);
    }
    // Not started, or ended as a shell does when it cannot run a command (126, 127: a wrapper script
    // whose ffmpeg is gone), and the transcoder no longer answers `-version` (a share unmounted under a
    // running agent): no fault of this task's. Told before the failure is reported, so the agent can
    // hand the task back and look for its transcoder again instead of failing every task it claims.
    if (
      outcome.kind === 'failed' &&
      input.onTranscoderLost &&
      (result.error !== undefined || result.code === 126 || result.code === 127) &&
      !input.signal.aborted &&
      !(await transcoderAnswers(input.transcoderPath, input.env, input.signal))
    ) {
      input.logs.agent.add(`${label}: ${input.transcoderPath} no longer answers -version`);
      input.onTranscoderLost(outcome.error);
    }
    if (outcome.kind !== 'ok') return outcome;
  }
  return { kind: 'ok' };
}

/** The value of a segment's first `-i`: the input whose Duration line ffmpeg prints first. */
function firstInput(args: readonly string[]): string | null {
  const i = args.indexOf('-i');
  return i >= 0 && i + 1 < args.length ? args[i + 1]! : null;
}

/**
 * The duration of `file` as the transcoder reports it (`<transcoder> -hide_banner -nostdin -i <file>`
 * prints the input's Duration line and exits), or null: not a regular file, no Duration line (a stream,
 * an image), the probe failed or took longer than the transcoder's probes may (PROBE_TIMEOUT_MS), or `stop` was aborted (the segment
 * ended). One transcoder run per segment, only for commands whose own output shows no duration.
 */
async function probeDuration(
  input: TranscodeInput,
  file: string,
  stop: AbortSignal,
  /**
   * Still without a duration: checked after a turn of the loop, because a read hands over stdout's
   * progress before stderr's lines of the same moment, whose Duration line then makes the probe moot.
   */
  needed: () => boolean,
): Promise<number | null> {
  try {
    if (!(await stat(file)).isFile()) return null;
  } catch {
    return null;
  }
  if (stop.aborted || !needed()) return null;
  let seconds: number | null = null;
  await runProcess({
    file: input.transcoderPath,
    args: ['-hide_banner', '-nostdin', '-i', file],
    env: input.env,
    signal: AbortSignal.any([stop, input.signal, AbortSignal.timeout(PROBE_TIMEOUT_MS)]),
    graceMs: 500,
    onStderrLine: (line) => {
      seconds ??= parseDurationLine(line);
    },
  }).catch(() => undefined);
  return seconds;
}

type FileIdentity = { ino: number; size: number; mtimeMs: number };

async function statOrNull(file: string): Promise<FileIdentity | null> {
  if (file === '') return null;
  try {
    const s = await stat(file);
    return { ino: s.ino, size: s.size, mtimeMs: s.mtimeMs };
  } catch {
    return null;
  }
}

/**
 * Remove the output a canceled transcode left behind. A file that was already there when the canceled
 * segment started and that it did not touch (same inode, size and mtime) is kept: that segment never
 * wrote it (it existed before the task, or an earlier segment of the chain finished it).
 */
async function removePartialOutput(file: string, before: FileIdentity | null, logs: RunLogs): Promise<void> {
  const after = await statOrNull(file);
  if (after === null) return;
  if (before && before.ino === after.ino && before.size === after.size && before.mtimeMs === after.mtimeMs)
    return;
  try {
    await rm(file, { force: true });
    logs.agent.add(`transcoder: removed partial output ${file}`);
  } catch (err) {
    logs.agent.add(`transcoder: could not remove partial output ${file}: ${(err as Error).message}`);
  }
}

/**
 * Whether the transcoder still runs at all (`-version` exits 0 within PROBE_TIMEOUT_MS). A cancel or a
 * stop of the run ends the check at once (and it then says yes: the run's own end decides).
 */
async function transcoderAnswers(
  transcoderPath: string,
  env: NodeJS.ProcessEnv,
  stop: AbortSignal,
): Promise<boolean> {
  const result = await runProcess({
    file: transcoderPath,
    args: ['-version'],
    env,
    signal: AbortSignal.any([AbortSignal.timeout(PROBE_TIMEOUT_MS), stop]),
    graceMs: 1000,
  });
  return result.ok || stop.aborted;
}
