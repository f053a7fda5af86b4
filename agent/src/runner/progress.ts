/**
 * Parsing of ffmpeg's machine-readable progress (`-progress pipe:1`) and of the input duration it
 * prints on stderr, and the arithmetic that turns both into the task's `progress` and `remaining`.
 */

/** One `-progress` block, reported when its closing `progress=continue|end` line arrives. */
export interface ProgressSample {
  /** Output time reached, in seconds; null while ffmpeg reports it as N/A. */
  outTimeSeconds: number | null;
  /** Encoding speed as a multiple of real time (`1.5x` → 1.5); null while N/A. */
  speed: number | null;
  /** True for the last block (`progress=end`). */
  end: boolean;
}

/** Task progress in the units the API reports. */
export interface TaskProgress {
  /** 0–100, two decimals. */
  progress: number;
  /** Seconds left, or -1 while unknown (no duration or no speed yet). */
  remaining: number;
}

const DURATION_LINE = /Duration:\s*(-?\d+):(\d{1,2}):(\d{1,2}(?:\.\d+)?)/;
const CLOCK = /^(-?)(\d+):(\d{1,2}):(\d{1,2}(?:\.\d+)?)$/;

/**
 * Input duration in seconds from an ffmpeg stderr line like `  Duration: 00:00:05.00, start: …`;
 * null for other lines and for `Duration: N/A` (a live or generated input).
 */
export function parseDurationLine(line: string): number | null {
  const match = DURATION_LINE.exec(line);
  if (!match) return null;
  const seconds = Number(match[1]) * 3600 + Number(match[2]) * 60 + Number(match[3]);
  return Number.isFinite(seconds) && seconds > 0 ? seconds : null;
}

/** Seconds of an `HH:MM:SS.micro` clock value; null when it is not one. */
export function parseClock(value: string): number | null {
  const match = CLOCK.exec(value);
  if (!match) return null;
  const seconds = Number(match[2]) * 3600 + Number(match[3]) * 60 + Number(match[4]);
  return match[1] === '-' ? -seconds : seconds;
}

/**
 * Reads `-progress` output line by line. ffmpeg writes `key=value` lines (values may be
 * space-padded, e.g. `speed=   1x`) and ends each block with `progress=continue` or `progress=end`.
 * `out_time_us` and `out_time_ms` are both microseconds (the `_ms` name is a historical ffmpeg
 * mistake); `out_time` is `HH:MM:SS.micro`. Early blocks may say `N/A` or, in some versions, a
 * negative time: both count as "not known yet" and "0" respectively.
 */
/** What {@link ProgressParser.push} returns for a line that is no `key=value` of a progress block. */
export const NOT_PROGRESS = 'not-progress' as const;

/**
 * The keys of ffmpeg's `-progress` blocks (4.x–7.x): a `key=value` line with another key is output of
 * its own (`-f ffmetadata -` prints `title=…`), for the log.
 */
const PROGRESS_KEY =
  /^(?:frame|fps|bitrate|total_size|out_time(?:_us|_ms)?|dup_frames|drop_frames|speed|progress|stream_\d+_\d+_[a-z0-9_]+)$/;

export class ProgressParser {
  private block = new Map<string, string>();

  /**
   * Feed one stdout line; returns the block's sample when the line closes a block, null for another
   * line of a block, and NOT_PROGRESS for anything else ffmpeg printed to stdout (`-version`, a muxer
   * writing to `-`, like `-f framemd5 -`): output of its own, for the task's log.
   */
  push(line: string): ProgressSample | null | typeof NOT_PROGRESS {
    const eq = line.indexOf('=');
    if (eq <= 0) return line.trim() === '' ? null : NOT_PROGRESS;
    const key = line.slice(0, eq).trim();
    if (!PROGRESS_KEY.test(key)) return NOT_PROGRESS;
    const value = line.slice(eq + 1).trim();
    if (key !== 'progress') {
      this.block.set(key, value);
      return null;
    }
    const sample: ProgressSample = {
      outTimeSeconds: readOutTime(this.block),
      speed: readSpeed(this.block.get('speed')),
      end: value === 'end',
    };
    this.block = new Map();
    return sample;
  }
}

function readOutTime(block: Map<string, string>): number | null {
  for (const key of ['out_time_us', 'out_time_ms']) {
    const raw = block.get(key);
    if (raw !== undefined && /^-?\d+$/.test(raw)) return Math.max(0, Number(raw) / 1e6);
  }
  const clock = block.get('out_time');
  const seconds = clock === undefined ? null : parseClock(clock);
  return seconds === null ? null : Math.max(0, seconds);
}

function readSpeed(raw: string | undefined): number | null {
  if (raw === undefined) return null;
  const match = /^(\d+(?:\.\d+)?(?:e[+-]?\d+)?)x$/i.exec(raw);
  if (!match) return null;
  const speed = Number(match[1]);
  return Number.isFinite(speed) ? speed : null;
}

/** Where in an `&&` chain a sample comes from: segment `index` (0-based) of `count`. */
export interface ChainPosition {
  index: number;
  count: number;
}

/**
 * Progress and remaining time of a task from the current segment's output time, the input
 * duration and the speed. Every segment of a chain is assumed to process the whole input (the
 * two-pass case), so segments weigh equally and later segments add one duration each to the time
 * left. Without a duration the progress stays at the segment's start and the remaining time is -1.
 */
export function computeTaskProgress(
  outTimeSeconds: number | null,
  durationSeconds: number | null,
  speed: number | null,
  position: ChainPosition = { index: 0, count: 1 },
): TaskProgress {
  const base = (position.index / position.count) * 100;
  if (durationSeconds === null || durationSeconds <= 0 || outTimeSeconds === null) {
    return { progress: round2(base), remaining: -1 };
  }
  const fraction = Math.min(1, Math.max(0, outTimeSeconds / durationSeconds));
  const progress = round2(Math.min(100, base + (fraction * 100) / position.count));
  // Before the first output time the speed says nothing about the rest.
  if (speed === null || speed <= 0 || outTimeSeconds <= 0) return { progress, remaining: -1 };
  const laterSegments = position.count - position.index - 1;
  const mediaLeft = durationSeconds * (1 - fraction) + durationSeconds * laterSegments;
  return { progress, remaining: Math.round(mediaLeft / speed) };
}

function round2(value: number): number {
  return Math.round(value * 100) / 100;
}

/**
 * A time duration as ffmpeg reads one in `-ss`, `-t`, `-to`: `[-][HH:]MM:SS[.m…]`, or `[-]S[.m…]` with
 * an optional `s`, `ms` or `us` unit. Seconds, or null for anything else.
 */
export function parseTimeDuration(value: string): number | null {
  // MM:SS is H:MM:SS without its hours.
  if (value.includes(':'))
    return parseClock(/^-?\d+:[^:]*$/.test(value) ? value.replace(/^(-?)/, '$10:') : value);
  const plain = /^(-?\d+(?:\.\d+)?)(s|ms|us)?$/.exec(value);
  if (!plain) return null;
  const n = Number(plain[1]);
  return plain[2] === 'ms' ? n / 1e3 : plain[2] === 'us' ? n / 1e6 : n;
}

/** What a transcoder command's `-ss`, `-t` and `-to` do to the length of its output. */
export interface DurationLimits {
  /** Input `-ss` and output `-ss`: skipped from the start (seconds). */
  inputStart: number;
  outputStart: number;
  /** `-t` (input or output): at most this long. */
  atMost: number | null;
  /** Input `-to` and output `-to`: positions reading or writing stops at. */
  inputEnd: number | null;
  outputEnd: number | null;
}

/**
 * The `-ss`/`-t`/`-to` of one command's arguments. An option before the last `-i` belongs to an
 * input (ffmpeg's rule: options go before the file they apply to), one after it to the output.
 */
export function durationLimits(args: readonly string[]): DurationLimits {
  const lastInput = args.lastIndexOf('-i');
  const limits: DurationLimits = {
    inputStart: 0,
    outputStart: 0,
    atMost: null,
    inputEnd: null,
    outputEnd: null,
  };
  for (let i = 0; i < args.length - 1; i++) {
    const option = args[i];
    if (option !== '-ss' && option !== '-t' && option !== '-to') continue;
    const value = parseTimeDuration(args[i + 1]!);
    i += 1;
    if (value === null || value < 0) continue;
    const onInput = i < lastInput;
    if (option === '-t') limits.atMost = Math.min(limits.atMost ?? value, value);
    else if (option === '-ss') {
      if (onInput) limits.inputStart = value;
      else limits.outputStart = value;
    } else if (onInput) limits.inputEnd = value;
    else limits.outputEnd = value;
  }
  return limits;
}

/**
 * How long the output of an input of `inputSeconds` will be under `limits` (what progress is measured
 * against): `-i 20 s clip -t 6` writes 6 s, so at 5 s out it is 83 % done, not 25 %.
 */
export function outputDuration(inputSeconds: number, limits: DurationLimits): number {
  let seconds = inputSeconds - limits.inputStart - limits.outputStart;
  if (limits.inputEnd !== null) seconds = Math.min(seconds, limits.inputEnd - limits.inputStart);
  if (limits.outputEnd !== null) seconds = Math.min(seconds, limits.outputEnd - limits.outputStart);
  if (limits.atMost !== null) seconds = Math.min(seconds, limits.atMost);
  return Math.max(0, seconds);
}
