// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${NAME} wildcards are literal text here, not template placeholders.
import { existsSync, readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listProcessesMentioning } from './fixtures/live-processes.ts';
import { FFMPEG, RunFixture } from './fixtures/run-fixture.ts';
import { makeStep } from './fixtures/sample-task.ts';
import { FENCED_OUT } from './run-process.ts';
import { HANDED_BACK, type RunStep } from './run-task.ts';

/**
 * The step gate (RunTaskOptions.beforeStep): the agent holds a run's next step there after a spell out
 * of touch, until the control plane confirms the attempt. Each step runs a script (the transcoder a
 * wrapper around ffmpeg) that notes in a journal that it started.
 */
let fx: RunFixture;
let n = 0;
beforeAll(() => {
  fx = new RunFixture();
});
afterAll(() => {
  fx.remove();
});

/** A task whose three steps each append their name to a journal of their own; the run's controller. */
function journaledRun(beforeStep: (step: RunStep, journal: () => string) => Promise<void> | undefined) {
  const id = `gate-${++n}`;
  const journalFile = fx.file(`${id}.journal`);
  const journal = () => (existsSync(journalFile) ? readFileSync(journalFile, 'utf8') : '');
  const note = (what: string) => fx.script(`${id}-${what}.sh`, `echo ${what} >> ${journalFile}`);
  const transcoder = fx.script(`${id}-ffmpeg.sh`, `echo transcoder >> ${journalFile}\nexec ${FFMPEG} "$@"`);
  const output = fx.file(id, 'out.mp4');
  const controller = new AbortController();
  const run = fx.run(
    {
      command: { raw: '-y -i ${INPUT_FILE} -c:v mpeg4 ${OUTPUT_FILE}', resolved: '' },
      outputFile: { raw: output, resolved: '' },
      preProcessing: makeStep(note('pre'), ''),
      postProcessing: makeStep(note('post'), ''),
    },
    {
      signal: controller.signal,
      transcoderPath: transcoder,
      beforeStep: (step) => beforeStep(step, journal),
    },
  );
  return { run, controller, journal, output };
}

describe('runTask: the step gate', () => {
  it('is asked before each step, in order, and a step it holds starts only once it lets it', async () => {
    const asked: Array<[RunStep, string]> = [];
    let journalAtRelease = '';
    const { run, journal, output } = journaledRun((step, journal) => {
      asked.push([step, journal()]);
      if (step !== 'transcoder') return undefined;
      return sleep(300).then(() => {
        journalAtRelease = journal();
      });
    });
    const { result, reporter } = await run;
    expect(result).toEqual({ status: 'DONE_SUCCESSFUL', error: '' });
    expect(asked).toEqual([
      ['pre', ''],
      ['transcoder', 'pre\n'],
      ['post', 'pre\ntranscoder\n'],
    ]);
    expect(journalAtRelease).toBe('pre\n');
    expect(journal()).toBe('pre\ntranscoder\npost\n');
    expect(existsSync(output)).toBe(true);
    expect(reporter.statuses()).toEqual(['PRE_PROCESSING', 'RUNNING', 'DONE_SUCCESSFUL']);
  });

  it('does not start the step it held when the run was fenced out meanwhile: the run ends canceled', async () => {
    const { run, controller, journal, output } = journaledRun((step) => {
      if (step !== 'transcoder') return undefined;
      // The control plane's cancel of the stale attempt comes in while the step waits for its word.
      return sleep(100).then(() => controller.abort(FENCED_OUT));
    });
    const { result, reporter } = await run;
    expect(result).toEqual({ status: 'DONE_CANCELED', error: '' });
    expect(journal()).toBe('pre\n');
    expect(existsSync(output)).toBe(false);
    // Nothing of the transcoder's step was reported either: the task never looked RUNNING for it.
    expect(reporter.statuses()).toEqual(['PRE_PROCESSING', 'DONE_CANCELED']);
    expect(listProcessesMentioning(fx.dir)).toEqual([]);
  });

  it('gives way to an abort at once, whatever the gate does (a forced stop hands the run back)', async () => {
    const { run, controller, journal } = journaledRun((step) =>
      step === 'pre' ? new Promise<void>(() => {}) : undefined,
    );
    await sleep(200);
    const abortedAt = Date.now();
    controller.abort(HANDED_BACK);
    const { result } = await run;
    expect(result.status).toBe('DONE_CANCELED');
    expect(Date.now() - abortedAt).toBeLessThan(1_000);
    expect(journal()).toBe('');
  });

  it('fails the run, starting nothing more, when the gate fails', async () => {
    const { run, journal, output } = journaledRun((step) =>
      step === 'transcoder' ? Promise.reject(new Error('the gate broke')) : undefined,
    );
    const { result } = await run;
    expect(result).toEqual({ status: 'DONE_ERROR', error: 'agent error: the gate broke' });
    expect(journal()).toBe('pre\n');
    expect(existsSync(output)).toBe(false);
  });
});
