import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { FFMPEG } from './fixtures/run-fixture.ts';
import type { RunProcessResult } from './run-process.ts';
import { ERROR_TAIL_CHARS, toStepOutcome, withoutBanner } from './step-outcome.ts';

const failed = (stderrTail: string, more: Partial<RunProcessResult> = {}): RunProcessResult => ({
  ok: false,
  code: 1,
  signal: null,
  stdoutTail: '',
  stderrTail,
  canceled: false,
  ...more,
});

/** What the real ffmpeg prints to stderr for `args` (it fails). */
const stderrOf = (args: string[]) => spawnSync(FFMPEG, ['-nostdin', ...args], { encoding: 'utf8' }).stderr;

describe('toStepOutcome', () => {
  it("leaves ffmpeg's banner out of the error, keeping the line that says what went wrong", () => {
    const stderr = stderrOf(['-i', '/nonexistent/ffleet-missing.mp4', '-y', '/tmp/ffleet-never.mp4']);
    // The real banner: version, build configuration, libraries.
    expect(stderr).toMatch(/^ffmpeg version /);
    expect(stderr).toContain('  configuration: ');
    const outcome = toStepOutcome('transcoder', failed(stderr));
    expect(outcome).toEqual({
      kind: 'failed',
      error: 'transcoder exited with code 1: /nonexistent/ffleet-missing.mp4: No such file or directory',
    });
  });

  it('keeps what follows the banner of an unknown encoder whole', () => {
    const stderr = stderrOf([
      '-f',
      'lavfi',
      '-i',
      'testsrc=duration=0.1',
      '-c:v',
      'ffleet-nope',
      '-f',
      'null',
      '-',
    ]);
    const outcome = toStepOutcome('transcoder', failed(stderr));
    expect(outcome.kind).toBe('failed');
    const error = (outcome as { error: string }).error;
    expect(error).toMatch(/^transcoder exited with code 1: Input #0, lavfi/);
    expect(error).toContain("Unknown encoder 'ffleet-nope'");
    expect(error).not.toContain('configuration:');
    expect(error).not.toContain('libavutil');
  });

  it('keeps the end of a long stderr and marks the cut', () => {
    const long = Array.from({ length: 200 }, (_, i) => `line ${i} of something the script said`).join('\n');
    const outcome = toStepOutcome('pre-processing script', failed(long, { code: 3 }));
    const error = (outcome as { error: string }).error;
    expect(error.startsWith('pre-processing script exited with code 3: …')).toBe(true);
    expect(error.endsWith('line 199 of something the script said')).toBe(true);
    expect(error.length).toBeLessThanOrEqual(
      'pre-processing script exited with code 3: …'.length + ERROR_TAIL_CHARS,
    );
  });

  it('names a signal and a start failure', () => {
    expect(toStepOutcome('transcoder', failed('', { code: null, signal: 'SIGKILL' }))).toEqual({
      kind: 'failed',
      error: 'transcoder was killed by SIGKILL',
    });
    expect(
      toStepOutcome('post-processing script', failed('', { code: null, error: 'spawn /x ENOENT' })),
    ).toEqual({
      kind: 'failed',
      error: 'post-processing script could not be started: spawn /x ENOENT',
    });
  });
});

describe('withoutBanner', () => {
  it('removes the banner lines of a real run, and leaves other text as it is', () => {
    const stderr = stderrOf(['-f', 'lavfi', '-i', 'nullsrc=duration=0.04', '-f', 'null', '-']);
    const kept = withoutBanner(stderr);
    expect(kept).not.toMatch(/ffmpeg version|built with|configuration:|libavutil|libpostproc/);
    // Everything after the banner is still there.
    expect(kept).toContain('Input #0, lavfi');
    expect(kept).toContain('Output #0, null');
    const plain = 'Error opening input: No such file\n  library foo failed\n  libx264 says: 3 frames';
    expect(withoutBanner(plain)).toBe(plain);
  });
});
