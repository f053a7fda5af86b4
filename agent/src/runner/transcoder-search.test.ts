/**
 * TranscoderSearch: an agent without a working transcoder keeps looking for one (one attempt at a time,
 * until found or stopped), and says so in its log without repeating itself every attempt. The attempts
 * here are functions that answer what a real resolve + probe would (the fleet test runs the real ones).
 */
import { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { type FindTranscoderResult, type FoundTranscoder, TranscoderSearch } from './transcoder.ts';

type Line = { level: number; msg: string } & Record<string, unknown>;
const ERROR = 50;
const INFO = 30;

function capture(): { logger: pino.Logger; lines: Line[] } {
  const lines: Line[] = [];
  const stream = new Writable({
    write(chunk, _enc, cb) {
      lines.push(JSON.parse(String(chunk)) as Line);
      cb();
    },
  });
  return { logger: pino({ level: 'debug' }, stream), lines };
}

const FOUND: FoundTranscoder = {
  path: '/opt/ffmpeg/bin/ffmpeg',
  source: 'FFLEET_TRANSCODER',
  version: '5.1.9-0+deb12u1',
  encoders: ['libx264', 'mpeg4'],
  hwaccels: [],
  hardware: { encoders: ['libx264', 'mpeg4'], hwaccels: [], hardwareEncoders: [], dropped: [], ms: 3 },
};
const fail = (error: string): FindTranscoderResult => ({ ok: false, error });

/** Resolves once `check` holds (polled), or fails after `ms`. */
async function until(check: () => boolean, ms = 2_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await sleep(2);
  }
}

describe('TranscoderSearch', () => {
  it('logs a failure when it starts, then at most once a minute while it repeats, at once when it changes, and once when found', async () => {
    const { logger, lines } = capture();
    // Every attempt advances the clock 15 s: ten attempts of the same failure span 135 s.
    let clock = 0;
    const answers: FindTranscoderResult[] = [
      ...Array.from({ length: 10 }, () => fail('FFLEET_TRANSCODER=/mnt/x/ffmpeg: not an executable file')),
      fail('/mnt/x/ffmpeg -version failed: exit code 1'),
      fail('/mnt/x/ffmpeg -version failed: exit code 1'),
      { ok: true, ...FOUND },
    ];
    let changes = 0;
    const search = new TranscoderSearch({
      find: async () => {
        clock += 15_000;
        return answers.shift() ?? { ok: true, ...FOUND };
      },
      logger,
      onChange: () => changes++,
      retryMs: 1,
      now: () => clock,
    });
    await search.start();
    expect(search.found).toBeNull();
    expect(search.error).toBe('FFLEET_TRANSCODER=/mnt/x/ffmpeg: not an executable file');
    await until(() => search.found !== null);

    expect(search.attempts).toBe(13);
    expect(search.error).toBe('');
    const shown = lines
      .filter((l) => l.level >= INFO)
      .map((l) => ({ level: l.level, msg: l.msg, error: l.error, failingForS: l.failingForS }));
    expect(shown).toEqual([
      {
        level: ERROR,
        msg: 'no working transcoder: this agent claims nothing until one is found',
        error: 'FFLEET_TRANSCODER=/mnt/x/ffmpeg: not an executable file',
        failingForS: undefined,
      },
      // 60 s after the first (at 15 s) is attempt 5 (75 s), then attempt 9 (135 s).
      {
        level: ERROR,
        msg: 'still no working transcoder: this agent claims nothing',
        error: 'FFLEET_TRANSCODER=/mnt/x/ffmpeg: not an executable file',
        failingForS: 60,
      },
      {
        level: ERROR,
        msg: 'still no working transcoder: this agent claims nothing',
        error: 'FFLEET_TRANSCODER=/mnt/x/ffmpeg: not an executable file',
        failingForS: 120,
      },
      // A different failure: logged at once.
      {
        level: ERROR,
        msg: 'no working transcoder: this agent claims nothing until one is found',
        error: '/mnt/x/ffmpeg -version failed: exit code 1',
        failingForS: 150,
      },
      { level: INFO, msg: 'transcoder ready', error: undefined, failingForS: undefined },
    ]);
    expect(lines.find((l) => l.msg === 'transcoder ready')).toMatchObject({
      path: FOUND.path,
      version: FOUND.version,
      source: 'FFLEET_TRANSCODER',
      attempts: 13,
    });
    // The agent announces the first failure, the changed one and the transcoder found; not every attempt.
    expect(changes).toBe(3);
    // Found: no more attempts.
    await sleep(20);
    expect(search.attempts).toBe(13);
  });

  it('takes a failure that differs only in its numbers (times, pids, addresses) for the same one', async () => {
    const { logger, lines } = capture();
    let clock = 0;
    let n = 0;
    let changes = 0;
    const search = new TranscoderSearch({
      find: async () => {
        clock += 5_000;
        n++;
        return n > 6
          ? { ok: true, ...FOUND }
          : fail(
              `/mnt/x/ffmpeg -version failed: [vaapi @ 0x55d${n}f0] init failed at ${1700000000 + n} (pid ${4000 + n})`,
            );
      },
      logger,
      onChange: () => changes++,
      retryMs: 1,
      now: () => clock,
    });
    await search.start();
    await until(() => search.found !== null);
    const errors = lines.filter((l) => l.level === ERROR);
    expect(errors.map((l) => l.msg)).toEqual([
      'no working transcoder: this agent claims nothing until one is found',
    ]);
    expect(changes).toBe(2); // the failure, then the transcoder found
    search.stop();
  });

  it('makes one attempt at a time, every retryMs, and none once stopped', async () => {
    const { logger } = capture();
    let running = 0;
    let most = 0;
    let calls = 0;
    let signal: AbortSignal | undefined;
    const search = new TranscoderSearch({
      find: async (s) => {
        calls++;
        signal = s;
        most = Math.max(most, ++running);
        await sleep(15);
        running--;
        return fail('no transcoder');
      },
      logger,
      onChange: () => {},
      retryMs: 5,
    });
    await search.start();
    expect(calls).toBe(1);
    await until(() => calls >= 5);
    expect(most).toBe(1);
    // Stopped during an attempt: it is told to stop, and no attempt follows.
    await until(() => running === 1);
    search.stop();
    expect(signal?.aborted).toBe(true);
    const stoppedAt = calls;
    await sleep(80);
    expect(calls).toBe(stoppedAt);
    expect(search.found).toBeNull();
  });

  it('reports an attempt that hangs, stops waiting for it at start, and starts no other meanwhile', async () => {
    const { logger, lines } = capture();
    let release: (r: FindTranscoderResult) => void = () => {};
    let calls = 0;
    let changes = 0;
    const search = new TranscoderSearch({
      find: () => {
        calls++;
        return new Promise((resolve) => {
          release = resolve;
        });
      },
      logger,
      onChange: () => changes++,
      retryMs: 1,
      hangMs: 50,
    });
    const started = performance.now();
    await search.start();
    expect(performance.now() - started).toBeLessThan(1_000);
    expect(search.error).toMatch(/has not finished after .* s \(a hung network mount or GPU driver\?\)/);
    expect(changes).toBe(1);
    expect(lines.filter((l) => l.level === ERROR)).toHaveLength(1);
    await sleep(50);
    expect(calls).toBe(1);
    // The hung attempt ends after all, with the transcoder: it is taken.
    release({ ok: true, ...FOUND });
    await until(() => search.found !== null);
    expect(search.error).toBe('');
    expect(changes).toBe(2);
    expect(calls).toBe(1);
  });
});
