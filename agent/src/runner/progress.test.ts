import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  computeTaskProgress,
  durationLimits,
  NOT_PROGRESS,
  outputDuration,
  ProgressParser,
  type ProgressSample,
  parseClock,
  parseDurationLine,
  parseTimeDuration,
} from './progress.ts';
import { runProcess } from './run-process.ts';

const SYSTEM_FFMPEG = '/usr/bin/ffmpeg';
const BUNDLED_FFMPEG = path.resolve('node_modules/@ffmpeg-installer/linux-x64/ffmpeg');

function feed(text: string): ProgressSample[] {
  const parser = new ProgressParser();
  return text
    .split('\n')
    .map((line) => parser.push(line))
    .filter((s): s is ProgressSample => s !== null && s !== NOT_PROGRESS);
}

describe('parseDurationLine', () => {
  it('reads the input duration from an ffmpeg stderr line', () => {
    expect(parseDurationLine('  Duration: 00:00:05.00, start: 0.000000, bitrate: 49 kb/s')).toBe(5);
    expect(parseDurationLine('  Duration: 01:02:03.50, start: 0.0')).toBe(3723.5);
  });

  it('ignores N/A durations and other lines', () => {
    expect(parseDurationLine('  Duration: N/A, start: 0.000000, bitrate: N/A')).toBeNull();
    expect(parseDurationLine('Stream #0:0: Video: h264')).toBeNull();
  });
});

describe('parseClock', () => {
  it('reads HH:MM:SS.micro, also negative, and rejects other text', () => {
    expect(parseClock('00:01:02.500000')).toBe(62.5);
    expect(parseClock('-00:00:01.000000')).toBe(-1);
    expect(parseClock('N/A')).toBeNull();
  });
});

describe('ProgressParser', () => {
  it('tells the lines of a progress block from other output ffmpeg printed to stdout', () => {
    const parser = new ProgressParser();
    const lines = [
      'ffmpeg version 5.1.6-0+deb12u1 Copyright (c) 2000-2024 the FFmpeg developers',
      'configuration: --prefix=/usr --extra-version=0+deb12u1',
      '#format: frame checksums',
      '0,          0,          0,        1,   230400, 5f2a3c1d',
      'title=hello',
      'Frame=1',
      '',
      'stream_0_0_q=28.0',
      'bitrate=N/A',
      ' frame = 3 ',
    ];
    expect(lines.map((l) => parser.push(l))).toEqual([
      NOT_PROGRESS,
      NOT_PROGRESS,
      NOT_PROGRESS,
      NOT_PROGRESS,
      NOT_PROGRESS,
      NOT_PROGRESS,
      null,
      null,
      null,
      null,
    ]);
    expect(parser.push('progress=end')).toEqual({ outTimeSeconds: null, speed: null, end: true });
  });

  it('emits one sample per block, preferring out_time_us and reading padded speeds', () => {
    const samples = feed(
      [
        'frame=1',
        'out_time_us=1500000',
        'out_time_ms=1500000',
        'out_time=00:00:01.500000',
        'speed=   1.5x',
        'progress=continue',
        'out_time_us=N/A',
        'out_time=N/A',
        'speed=N/A',
        'progress=continue',
        'out_time_ms=2000000',
        'speed=2.25x',
        'progress=end',
      ].join('\n'),
    );
    expect(samples).toEqual([
      { outTimeSeconds: 1.5, speed: 1.5, end: false },
      { outTimeSeconds: null, speed: null, end: false },
      { outTimeSeconds: 2, speed: 2.25, end: true },
    ]);
  });

  it('falls back to out_time and clamps negative times to zero', () => {
    expect(feed('out_time=00:00:03.250000\nspeed=0x\nprogress=continue')).toEqual([
      { outTimeSeconds: 3.25, speed: 0, end: false },
    ]);
    expect(feed('out_time_us=-577014\nprogress=continue')[0]?.outTimeSeconds).toBe(0);
  });

  it('does not carry values over from the previous block', () => {
    expect(feed('out_time_us=1000000\nspeed=1x\nprogress=continue\nprogress=end')[1]).toEqual({
      outTimeSeconds: null,
      speed: null,
      end: true,
    });
  });
});

describe('computeTaskProgress', () => {
  it('relates output time to the input duration and speed', () => {
    expect(computeTaskProgress(2.5, 10, 2)).toEqual({ progress: 25, remaining: 4 });
    expect(computeTaskProgress(1 / 3, 1, 1)).toEqual({ progress: 33.33, remaining: 1 });
  });

  it('caps at 100 and reports -1 remaining while duration or speed is unknown', () => {
    expect(computeTaskProgress(12, 10, 1)).toEqual({ progress: 100, remaining: 0 });
    expect(computeTaskProgress(5, null, 1)).toEqual({ progress: 0, remaining: -1 });
    expect(computeTaskProgress(5, 10, null)).toEqual({ progress: 50, remaining: -1 });
    expect(computeTaskProgress(5, 10, 0)).toEqual({ progress: 50, remaining: -1 });
    expect(computeTaskProgress(null, 10, 1)).toEqual({ progress: 0, remaining: -1 });
  });

  it('weighs the segments of a chain equally', () => {
    expect(computeTaskProgress(5, 10, 1, { index: 0, count: 2 })).toEqual({ progress: 25, remaining: 15 });
    expect(computeTaskProgress(5, 10, 1, { index: 1, count: 2 })).toEqual({ progress: 75, remaining: 5 });
    expect(computeTaskProgress(null, 10, 1, { index: 1, count: 2 })).toEqual({ progress: 50, remaining: -1 });
  });
});

describe('progress of a real ffmpeg run', () => {
  let dir = '';
  let clip = '';

  beforeAll(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'ffleet-progress-'));
    clip = path.join(dir, 'in.mp4');
    execFileSync(SYSTEM_FFMPEG, [
      '-v',
      'error',
      '-f',
      'lavfi',
      '-i',
      'testsrc=duration=2:size=160x120:rate=25',
      '-pix_fmt',
      'yuv420p',
      clip,
    ]);
  });

  afterAll(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it.each([
    ['ffmpeg 5.1', SYSTEM_FFMPEG],
    ['the bundled 2018 ffmpeg', BUNDLED_FFMPEG],
  ])('turns the -progress output of %s into rising progress', async (_label, ffmpeg) => {
    const parser = new ProgressParser();
    const samples: ProgressSample[] = [];
    const others: string[] = [];
    let duration: number | null = null;
    const result = await runProcess({
      file: ffmpeg,
      // -re paces reading at real time so several blocks appear, as in a long encode.
      args: [
        '-re',
        '-i',
        clip,
        '-nostdin',
        '-progress',
        'pipe:1',
        '-nostats',
        '-y',
        path.join(dir, `out-${_label.length}.mp4`),
      ],
      onStdoutLine: (line) => {
        const sample = parser.push(line);
        if (sample === NOT_PROGRESS) others.push(line);
        else if (sample) samples.push(sample);
      },
      onStderrLine: (line) => {
        duration ??= parseDurationLine(line);
      },
    });
    expect(result.ok).toBe(true);
    // Every line of a real -progress stream is read as progress, none goes to the log.
    expect(others).toEqual([]);
    expect(duration).toBe(2);
    expect(samples.length).toBeGreaterThanOrEqual(3);
    expect(samples.at(-1)?.end).toBe(true);
    expect(samples.slice(0, -1).every((s) => !s.end)).toBe(true);

    const progress = samples.map((s) => computeTaskProgress(s.outTimeSeconds, duration, s.speed));
    const values = progress.map((p) => p.progress);
    expect(values).toEqual([...values].sort((a, b) => a - b));
    expect(values.some((v) => v > 0 && v < 100)).toBe(true);
    // The last frame starts 1/25 s before the end, and ffmpeg reports the start time of the frame.
    expect(values.at(-1)).toBeGreaterThanOrEqual(90);
    expect(samples.at(-1)?.speed).toBeGreaterThan(0);
    expect(progress.at(-1)?.remaining).toBeGreaterThanOrEqual(0);
  });
});

describe('what -ss, -t and -to do to the length measured against', () => {
  it('reads ffmpeg time durations', () => {
    expect(parseTimeDuration('6')).toBe(6);
    expect(parseTimeDuration('2.5')).toBe(2.5);
    expect(parseTimeDuration('1500ms')).toBe(1.5);
    expect(parseTimeDuration('250000us')).toBe(0.25);
    expect(parseTimeDuration('3s')).toBe(3);
    expect(parseTimeDuration('01:30')).toBe(90);
    expect(parseTimeDuration('00:01:02.5')).toBe(62.5);
    expect(parseTimeDuration('-00:00:02')).toBe(-2);
    for (const bad of ['', 'abc', '1:2:3:4', '5x', '1.2.3']) expect(parseTimeDuration(bad)).toBeNull();
  });

  it('takes options before the last -i as input options and after it as output options', () => {
    const limits = durationLimits(['-ss', '5', '-i', 'in.mp4', '-t', '6', '-c:v', 'libx264', 'out.mp4']);
    expect(limits).toEqual({ inputStart: 5, outputStart: 0, atMost: 6, inputEnd: null, outputEnd: null });
    expect(durationLimits(['-i', 'in.mp4', '-ss', '00:00:02', '-to', '10', 'out.mp4'])).toEqual({
      inputStart: 0,
      outputStart: 2,
      atMost: null,
      inputEnd: null,
      outputEnd: 10,
    });
    // A value that is no duration (a -t of another tool's meaning) is ignored, not guessed.
    expect(durationLimits(['-i', 'in.mp4', '-t', 'x', 'out.mp4']).atMost).toBeNull();
  });

  it('measures progress against the output the command writes', () => {
    const of = (args: string[]) => outputDuration(20, durationLimits(args));
    expect(of(['-i', 'in', 'out'])).toBe(20);
    expect(of(['-i', 'in', '-t', '6', 'out'])).toBe(6);
    expect(of(['-t', '6', '-i', 'in', 'out'])).toBe(6);
    expect(of(['-ss', '15', '-i', 'in', 'out'])).toBe(5);
    expect(of(['-ss', '5', '-to', '8', '-i', 'in', 'out'])).toBe(3);
    expect(of(['-i', 'in', '-ss', '4', '-to', '10', 'out'])).toBe(6);
    expect(of(['-i', 'in', '-t', '60', 'out'])).toBe(20);
    expect(of(['-ss', '30', '-i', 'in', 'out'])).toBe(0);
    // 5 s written of a 6 s output is 83 %, not the 25 % of the input's 20 s.
    expect(computeTaskProgress(5, of(['-i', 'in', '-t', '6', 'out']), 1).progress).toBe(83.33);
  });
});
