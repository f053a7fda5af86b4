// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${NAME} wildcards are literal text here, not template placeholders.
import { existsSync, readFileSync, statSync } from 'node:fs';
import { Writable } from 'node:stream';
import { type Logger, pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listGroupMembers, listProcessesMentioning } from './fixtures/live-processes.ts';
import { RecordingReporter } from './fixtures/recording-reporter.ts';
import { FFMPEG, RunFixture } from './fixtures/run-fixture.ts';
import { makeStep } from './fixtures/sample-task.ts';
import { HANDED_BACK } from './run-task.ts';

let fx: RunFixture;
let longClip = '';
beforeAll(() => {
  fx = new RunFixture();
  longClip = fx.makeClip('long.mp4', 3);
});
afterAll(() => {
  fx.remove();
});

async function waitFor(predicate: () => boolean, timeoutMs = 5000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!predicate()) {
    if (Date.now() > end) throw new Error('condition not reached in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('runTask: progress', () => {
  it('reports rising progress about every half second while the transcoder runs', async () => {
    const { result, reporter } = await fx.run({
      inputFile: { raw: longClip, resolved: '' },
      // -re reads at real time, so the 3 s clip takes about 3 s like a real encode would.
      command: { raw: '-re -i ${INPUT_FILE} -c:v mpeg4 -y ${OUTPUT_FILE}', resolved: '' },
      outputFile: { raw: `${fx.dir}/progress/out.mp4`, resolved: '' },
    });
    expect(result.status).toBe('DONE_SUCCESSFUL');
    const runningAt = reporter.updates.find((u) => u.patch.status === 'RUNNING')?.at ?? 0;
    const doneAt = reporter.updates.find((u) => u.patch.status === 'DONE_SUCCESSFUL')?.at ?? 0;
    const progress = reporter.updates.filter(
      (u) => u.patch.progress !== undefined && u.patch.status === undefined,
    );
    const values = progress.map((u) => u.patch.progress ?? 0);
    expect(values.length).toBeGreaterThanOrEqual(3);
    expect(values).toEqual([...values].sort((a, b) => a - b));
    expect(values.every((v) => v >= 0 && v <= 100)).toBe(true);
    expect(progress.some((u) => (u.patch.remaining ?? -1) > 0)).toBe(true);

    // Never more often than every 500 ms; never a silent second while the encode runs.
    const times = [runningAt, ...progress.map((u) => u.at), doneAt];
    const gaps = times.slice(1).map((t, i) => t - (times[i] ?? 0));
    for (const gap of gaps.slice(1, -1)) expect(gap).toBeGreaterThanOrEqual(490);
    expect(Math.max(...gaps)).toBeLessThanOrEqual(1100);
    expect(reporter.last()).toMatchObject({ progress: 100, remaining: 0 });
  });
});

describe('runTask: progress of a shortened output', () => {
  it('measures progress against what -t writes, not the whole input', async () => {
    const clip = fx.makeClip('six-seconds.mp4', 6);
    const { result, reporter } = await fx.run({
      inputFile: { raw: clip, resolved: '' },
      // 2 s of the 6 s clip at real time: a second in is half done, not a sixth.
      command: { raw: '-re -i ${INPUT_FILE} -t 2 -c:v mpeg4 -y ${OUTPUT_FILE}', resolved: '' },
      outputFile: { raw: `${fx.dir}/progress-t/out.mp4`, resolved: '' },
    });
    expect(result.status).toBe('DONE_SUCCESSFUL');
    const values = reporter.updates
      .filter((u) => u.patch.progress !== undefined && u.patch.status === undefined)
      .map((u) => u.patch.progress ?? 0);
    expect(values.length).toBeGreaterThanOrEqual(2);
    // Against the input's 6 s it could not pass 33.3 % before the end.
    expect(Math.max(...values)).toBeGreaterThanOrEqual(45);
    expect(Math.max(...values)).toBeLessThanOrEqual(100);
  });
});

/** A minute of real-time encoding: long enough to be canceled in the middle. */
const LONG_ENCODE = '-re -f lavfi -i testsrc=duration=60:size=160x120:rate=25 -c:v mpeg4 -y ${OUTPUT_FILE}';

/** A run of `command` writing `output`, with the controller that cancels it and the reporter it tells. */
function cancelableRun(command: string, output: string, logger?: Logger) {
  const controller = new AbortController();
  const reporter = new RecordingReporter();
  const run = fx.run(
    { command: { raw: command, resolved: '' }, outputFile: { raw: output, resolved: '' } },
    { signal: controller.signal, reporter, ...(logger ? { logger } : {}) },
  );
  return { controller, reporter, run };
}

describe('runTask: cancel', () => {
  it('kills the transcoder mid-run, removes the partial output and ends DONE_CANCELED', async () => {
    const output = fx.file('cancel', 'out.mp4');
    const { controller, reporter, run } = cancelableRun(LONG_ENCODE, output);
    await waitFor(() => existsSync(output) && statSync(output).size > 0);
    expect(listProcessesMentioning(fx.dir).some((p) => p.cmdline.startsWith(FFMPEG))).toBe(true);
    const abortedAt = Date.now();
    controller.abort();
    const { result } = await run;

    expect(result).toEqual({ status: 'DONE_CANCELED', error: '' });
    // ffmpeg stops on SIGTERM; nobody waited for the SIGKILL grace period.
    expect(Date.now() - abortedAt).toBeLessThan(3000);
    expect(reporter.statuses()).toEqual(['RUNNING', 'DONE_CANCELED']);
    expect(reporter.last()).toMatchObject({ status: 'DONE_CANCELED', error: '' });
    expect(existsSync(output)).toBe(false);
    expect(listProcessesMentioning(fx.dir)).toEqual([]);
    expect(reporter.text('agent')).toContain(`removed partial output ${output}`);
  });

  it('keeps the output an earlier segment of a chain finished when a later segment is canceled', async () => {
    const output = fx.file('chain-cancel', 'first.mp4');
    const second = fx.file('chain-cancel', 'second.mkv');
    const { controller, reporter, run } = cancelableRun(
      '-f lavfi -i testsrc=duration=1:size=160x120:rate=25 -c:v mpeg4 -y ${OUTPUT_FILE} && ${FFMPEG} -re -f lavfi -i testsrc=duration=60:size=160x120:rate=25 -c:v mpeg4 -y ${OUTPUT_FILE_DIR}/second.mkv',
      output,
    );
    await waitFor(() => existsSync(second) && statSync(second).size > 0, 15_000);
    const finished = readFileSync(output);
    controller.abort();
    const { result } = await run;

    expect(result).toEqual({ status: 'DONE_CANCELED', error: '' });
    // The first segment's file is whole and stays; the canceled segment never wrote it.
    expect(readFileSync(output).equals(finished)).toBe(true);
    expect(reporter.text('agent')).not.toContain('removed partial output');
    expect(listProcessesMentioning(fx.dir)).toEqual([]);
  });

  it('logs a run stopped for a hand-back as handed back, not as a finished DONE_CANCELED task', async () => {
    const lines: Array<{ msg: string; status?: string }> = [];
    const logger = pino(
      { level: 'info' },
      new Writable({
        write(chunk, _enc, cb) {
          lines.push(JSON.parse(String(chunk)));
          cb();
        },
      }),
    );
    const { controller, reporter, run } = cancelableRun(LONG_ENCODE, fx.file('handback', 'out.mp4'), logger);
    await waitFor(() => reporter.statuses().includes('RUNNING'));
    controller.abort(HANDED_BACK);
    const { result } = await run;
    // The run itself ends canceled (the agent drops that report and sends QUEUED instead)...
    expect(result.status).toBe('DONE_CANCELED');
    // ...but its log says what happens to the task.
    const last = lines.at(-1);
    expect(last).toMatchObject({ status: 'QUEUED' });
    expect(last?.msg).toMatch(/handed back/);
    expect(lines.some((l) => l.msg === 'task finished')).toBe(false);
  });

  it('kills a pre-processing script and everything it started, and never runs the transcoder', async () => {
    const controller = new AbortController();
    const pidFile = fx.file('pre-cancel.pid');
    // The script ignores SIGTERM, and so does the sleep it starts: only the group SIGKILL ends them.
    const script = fx.script(
      'pre-hang.sh',
      `trap '' TERM\necho $$ > ${pidFile}.tmp && mv ${pidFile}.tmp ${pidFile}\nsleep 60\necho done`,
    );
    const run = fx.run(
      {
        outputFile: { raw: `${fx.dir}/precancel/out.mp4`, resolved: '' },
        preProcessing: makeStep(script, ''),
      },
      { signal: controller.signal, graceMs: 200 },
    );
    await waitFor(() => existsSync(pidFile));
    const pgid = Number(readFileSync(pidFile, 'utf8'));
    await waitFor(() => listGroupMembers(pgid).length >= 2);
    controller.abort();
    const { result, reporter } = await run;

    expect(result).toEqual({ status: 'DONE_CANCELED', error: '' });
    expect(reporter.statuses()).toEqual(['PRE_PROCESSING', 'DONE_CANCELED']);
    // The last SIGKILL goes to the group as the script exits; a member can still be on its way out
    // (no command line any more, not yet a zombie) for a moment after that.
    await waitFor(() => listGroupMembers(pgid).length === 0, 1000);
    expect(reporter.text('transcoder')).toBe('');
    expect(existsSync(fx.file('precancel'))).toBe(false);
  });

  it('keeps the finished output when canceled during post-processing', async () => {
    const controller = new AbortController();
    const marker = fx.file('post-started');
    const script = fx.script('post-hang.sh', `touch ${marker}\nsleep 60`);
    const output = fx.file('postcancel', 'out.mp4');
    const run = fx.run(
      { outputFile: { raw: output, resolved: '' }, postProcessing: makeStep(script, '') },
      { signal: controller.signal },
    );
    await waitFor(() => existsSync(marker));
    controller.abort();
    const { result } = await run;
    expect(result.status).toBe('DONE_CANCELED');
    expect(existsSync(output)).toBe(true);
    // As above: the script's `sleep`, killed with its group, may still be on its way out for a moment.
    await waitFor(() => listProcessesMentioning(fx.dir).length === 0, 1000).catch(() => {});
    expect(listProcessesMentioning(fx.dir)).toEqual([]);
  });

  it('ends a task canceled before it started without running anything', async () => {
    const { result, reporter } = await fx.run(
      { outputFile: { raw: `${fx.dir}/never/out.mp4`, resolved: '' } },
      { signal: AbortSignal.abort() },
    );
    expect(result).toEqual({ status: 'DONE_CANCELED', error: '' });
    expect(reporter.updates.map((u) => u.patch.status)).toEqual(['DONE_CANCELED']);
    expect(existsSync(fx.file('never'))).toBe(false);
  });
});
