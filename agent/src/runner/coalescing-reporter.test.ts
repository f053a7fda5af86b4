import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  coalescingReporter,
  DEFER_MAX_LOG_CHARS,
  DEFER_MAX_MS,
  type ReportBody,
} from './coalescing-reporter.ts';

const tick = () => new Promise<void>((r) => setImmediate(r));

function recorder() {
  const sent: ReportBody[] = [];
  let muted = false;
  const reporter = coalescingReporter(
    (b) => sent.push(b),
    () => muted,
  );
  return { sent, reporter, mute: () => (muted = true) };
}

describe('coalescingReporter', () => {
  it("sends a run's last lines with the update that follows them in the same tick", async () => {
    const { sent, reporter } = recorder();
    reporter.log('transcoder', 'frame=1\n');
    reporter.log('agent', 'exit 0\n');
    reporter.update({ status: 'DONE_SUCCESSFUL', progress: 100 });
    expect(sent).toEqual([
      {
        kind: 'update',
        patch: { status: 'DONE_SUCCESSFUL', progress: 100 },
        logs: [
          { step: 'transcoder', text: 'frame=1\n' },
          { step: 'agent', text: 'exit 0\n' },
        ],
      },
    ]);
    await tick();
    expect(sent).toHaveLength(1);
  });

  it('sends lines without an update of their own tick as log reports, in order, once the tick ends', async () => {
    const { sent, reporter } = recorder();
    reporter.update({ status: 'RUNNING' });
    reporter.log('transcoder', 'a\n');
    reporter.log('pre', 'b\n');
    expect(sent).toEqual([{ kind: 'update', patch: { status: 'RUNNING' } }]);
    await tick();
    expect(sent.slice(1)).toEqual([
      { kind: 'log', step: 'transcoder', text: 'a\n' },
      { kind: 'log', step: 'pre', text: 'b\n' },
    ]);
    // Lines after an update that took earlier ones start a new batch.
    reporter.log('transcoder', 'c\n');
    reporter.update({ progress: 50 });
    reporter.log('transcoder', 'd\n');
    await tick();
    expect(sent.slice(3)).toEqual([
      { kind: 'update', patch: { progress: 50 }, logs: [{ step: 'transcoder', text: 'c\n' }] },
      { kind: 'log', step: 'transcoder', text: 'd\n' },
    ]);
  });

  it('sends nothing once muted, including lines already waiting', async () => {
    const { sent, reporter, mute } = recorder();
    reporter.log('transcoder', 'before\n');
    mute();
    reporter.update({ status: 'DONE_CANCELED' });
    reporter.log('agent', 'after\n');
    await tick();
    expect(sent).toEqual([]);
    // Kept for the hand-back report, in order.
    expect(reporter.takeUnsent()).toEqual([
      { step: 'transcoder', text: 'before\n' },
      { step: 'agent', text: 'after\n' },
    ]);
    expect(reporter.takeUnsent()).toEqual([]);
  });

  it('keeps only the newest output while muted (one hand-back report stays small)', async () => {
    const { sent, reporter, mute } = recorder();
    mute();
    const line = `${'x'.repeat(999)}\n`;
    for (let i = 0; i < 100; i++) reporter.log('transcoder', line);
    reporter.log('agent', 'last\n');
    await tick();
    expect(sent).toEqual([]);
    const [note, ...kept] = reporter.takeUnsent();
    const chars = kept.reduce((n, l) => n + l.text.length, 0);
    expect(chars).toBeLessThanOrEqual(DEFER_MAX_LOG_CHARS);
    expect(chars).toBeGreaterThan(DEFER_MAX_LOG_CHARS - line.length);
    expect(kept.at(-1)).toEqual({ step: 'agent', text: 'last\n' });
    expect(note).toEqual({
      step: 'agent',
      text: `[ffleet: ${100 * line.length + 5 - chars} characters of output left out]\n`,
    });
  });

  it('keeps the end of one line longer than what it keeps', async () => {
    const { reporter, mute } = recorder();
    mute();
    const line = `${'z'.repeat(39_999)}!\n`;
    reporter.log('transcoder', line);
    await tick();
    const [note, kept, ...rest] = reporter.takeUnsent();
    expect(rest).toEqual([]);
    expect(kept).toEqual({ step: 'transcoder', text: line.slice(line.length - DEFER_MAX_LOG_CHARS) });
    expect(note!.text).toBe(`[ffleet: ${line.length - DEFER_MAX_LOG_CHARS} characters of output left out]\n`);
  });

  it('cuts a batch larger than what it keeps at a line start, keeping its newest lines', async () => {
    const { reporter, mute } = recorder();
    mute();
    // One batch of 70,000 characters (a step past its output budget flushes that much at once), then a
    // short one: the end of the big one is kept, from a line start, with the short one after it.
    const big = Array.from(
      { length: 1000 },
      (_, i) => `${String(i).padStart(4, '0')} ${'y'.repeat(64)}\n`,
    ).join('');
    expect(big.length).toBe(70_000);
    reporter.log('transcoder', big);
    reporter.log('transcoder', 'tail\n');
    await tick();
    const [note, first, second, ...rest] = reporter.takeUnsent();
    expect(rest).toEqual([]);
    expect(second).toEqual({ step: 'transcoder', text: 'tail\n' });
    expect(first!.text.endsWith(`0999 ${'y'.repeat(64)}\n`)).toBe(true);
    expect(first!.text).toMatch(/^\d{4} y/);
    expect(first!.text.length + 5).toBeLessThanOrEqual(DEFER_MAX_LOG_CHARS);
    expect(first!.text.length + 5).toBeGreaterThan(DEFER_MAX_LOG_CHARS - 70);
    expect(note!.text).toBe(`[ffleet: ${70_005 - 5 - first!.text.length} characters of output left out]\n`);
  });

  describe('deferrable updates', () => {
    afterEach(() => {
      vi.useRealTimers();
    });

    it('hold the update and the output after it, and send them with the next update as one report', async () => {
      const { sent, reporter } = recorder();
      reporter.update(
        { status: 'RUNNING', progress: 0, command: { raw: 'r', resolved: 'x' } },
        { defer: true },
      );
      reporter.log('agent', '$ ffmpeg\n');
      await tick();
      reporter.log('transcoder', 'Duration: 00:00:01.00\n');
      await tick();
      expect(sent).toEqual([]);
      reporter.log('agent', 'exit 0\n');
      reporter.update({ status: 'DONE_SUCCESSFUL', progress: 100 });
      expect(sent).toEqual([
        {
          kind: 'update',
          // The later update's fields win; the held ones it does not set ride along.
          patch: { status: 'DONE_SUCCESSFUL', progress: 100, command: { raw: 'r', resolved: 'x' } },
          logs: [
            { step: 'agent', text: '$ ffmpeg\n' },
            { step: 'transcoder', text: 'Duration: 00:00:01.00\n' },
            { step: 'agent', text: 'exit 0\n' },
          ],
        },
      ]);
      await tick();
      expect(sent).toHaveLength(1);
    });

    it('send the held update with its output on their own once the deferral is over', async () => {
      vi.useFakeTimers();
      const { sent, reporter } = recorder();
      reporter.update({ status: 'RUNNING', startedAt: 5 }, { defer: true });
      reporter.log('transcoder', 'a\n');
      await vi.advanceTimersByTimeAsync(DEFER_MAX_MS - 1);
      expect(sent).toEqual([]);
      await vi.advanceTimersByTimeAsync(1);
      expect(sent).toEqual([
        {
          kind: 'update',
          patch: { status: 'RUNNING', startedAt: 5 },
          logs: [{ step: 'transcoder', text: 'a\n' }],
        },
      ]);
      // Nothing is held any more: output goes out as log reports again, an update at once.
      reporter.log('transcoder', 'b\n');
      await vi.advanceTimersByTimeAsync(0);
      reporter.update({ progress: 40 });
      expect(sent.slice(1)).toEqual([
        { kind: 'log', step: 'transcoder', text: 'b\n' },
        { kind: 'update', patch: { progress: 40 } },
      ]);
      await vi.advanceTimersByTimeAsync(DEFER_MAX_MS * 2);
      expect(sent).toHaveLength(3);
    });

    it('send the held update at once when the output held with it grows large', async () => {
      const { sent, reporter } = recorder();
      reporter.update({ status: 'RUNNING' }, { defer: true });
      reporter.log('transcoder', 'x'.repeat(DEFER_MAX_LOG_CHARS / 2));
      await tick();
      expect(sent).toEqual([]);
      reporter.log('transcoder', 'y'.repeat(DEFER_MAX_LOG_CHARS / 2));
      await tick();
      expect(sent).toHaveLength(1);
      expect(sent[0]).toMatchObject({ kind: 'update', patch: { status: 'RUNNING' } });
      expect((sent[0] as { logs: unknown[] }).logs).toHaveLength(2);
    });

    it('are not sent when the run is muted before they are; their output is kept', async () => {
      vi.useFakeTimers();
      const { sent, reporter, mute } = recorder();
      reporter.update({ status: 'RUNNING' }, { defer: true });
      reporter.log('transcoder', 'a\n');
      await vi.advanceTimersByTimeAsync(0);
      mute();
      await vi.advanceTimersByTimeAsync(DEFER_MAX_MS);
      reporter.update({ status: 'DONE_CANCELED' });
      expect(sent).toEqual([]);
      // Their output is kept for the hand-back report.
      expect(reporter.takeUnsent()).toEqual([{ step: 'transcoder', text: 'a\n' }]);
    });
  });
});
