import type { RunProcessResult } from './run-process.ts';

/** How a step of a run ended. */
export type StepOutcome = { kind: 'ok' } | { kind: 'failed'; error: string } | { kind: 'canceled' };

/** Characters of a failed process's stderr kept in the task's `error` (the full output is in the logs). */
export const ERROR_TAIL_CHARS = 2000;

/**
 * Turn a process result into a step outcome. The error names the step (`label`), then how the
 * process ended (exit code, signal or start failure), then the end of its stderr.
 */
export function toStepOutcome(label: string, result: RunProcessResult): StepOutcome {
  if (result.canceled) return { kind: 'canceled' };
  if (result.ok) return { kind: 'ok' };
  if (result.error !== undefined)
    return { kind: 'failed', error: `${label} could not be started: ${result.error}` };
  const how = result.signal ? `was killed by ${result.signal}` : `exited with code ${result.code}`;
  const tail = withoutBanner(result.stderrTail).trim();
  const shown = tail.length > ERROR_TAIL_CHARS ? `…${tail.slice(-ERROR_TAIL_CHARS)}` : tail;
  return { kind: 'failed', error: shown ? `${label} ${how}: ${shown}` : `${label} ${how}` };
}

/**
 * Lines of the banner ffmpeg (and ffprobe) print first: the version, the compiler, the build
 * configuration (Debian's is ~1,500 characters) and one line per library.
 */
const BANNER_LINE =
  /^(?:ff(?:mpeg|probe|play) version \S+.*| {2}built with .*| {2}configuration: .*| {2}lib[a-z]+ +\d+\. *\d+\.\d+ \/ +\d+\. *\d+\.\d+ *)$/;

/**
 * Output without ffmpeg's banner lines, for a task's `error`: a transcode that fails at once (a missing
 * input, an unknown codec) prints the banner and one line of error, and the error's 2,000 characters
 * were mostly build configuration. The logs keep the banner.
 */
export function withoutBanner(text: string): string {
  if (!text.includes(' version ') && !text.includes('  lib')) return text;
  return text
    .split('\n')
    .filter((line) => !BANNER_LINE.test(line.replace(/\r$/, '')))
    .join('\n');
}
