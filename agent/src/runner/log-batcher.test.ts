import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { LOG_FLUSH_MS, LogBatcher } from './log-batcher.ts';

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('LogBatcher', () => {
  it('sends the lines collected during the flush interval as one text', () => {
    const sent: string[] = [];
    const batcher = new LogBatcher((t) => sent.push(t));
    batcher.add('one');
    batcher.add('two');
    expect(sent).toEqual([]);
    vi.advanceTimersByTime(LOG_FLUSH_MS);
    expect(sent).toEqual(['one\ntwo\n']);
    vi.advanceTimersByTime(LOG_FLUSH_MS * 4);
    expect(sent).toHaveLength(1);
  });

  it('sends at once when a batch reaches the size limit', () => {
    const sent: string[] = [];
    const batcher = new LogBatcher((t) => sent.push(t), LOG_FLUSH_MS, 10);
    batcher.add('12345');
    batcher.add('67890');
    expect(sent).toEqual(['12345\n67890\n']);
  });

  it('flushes on demand and sends nothing when empty', () => {
    const sent: string[] = [];
    const batcher = new LogBatcher((t) => sent.push(t));
    batcher.flush();
    batcher.add('last');
    batcher.flush();
    expect(sent).toEqual(['last\n']);
  });
});

describe('LogBatcher over its budget', () => {
  it('sends the first budget of output as it comes, then says what it left out and sends the last lines', () => {
    const sent: string[] = [];
    // Budget 100 bytes, tail 30 bytes, batches of 1,000 bytes.
    const batcher = new LogBatcher((t) => sent.push(t), LOG_FLUSH_MS, 1000, undefined, 100, 45);
    const line = (i: number) => `line ${i} ${'x'.repeat(10)}`;
    for (let i = 0; i < 10; i++) batcher.add(`line ${i} ${'x'.repeat(10)}`); // 18 bytes a line: 180 in the first ten
    vi.advanceTimersByTime(LOG_FLUSH_MS);
    // Within budget (lines 0-4, 90 bytes) while it lasted; nothing more goes out on the timer.
    expect(sent).toEqual([Array.from({ length: 5 }, (_, i) => `line ${i} ${'x'.repeat(10)}\n`).join('')]);
    for (let i = 10; i < 1000; i++) batcher.add(`line ${i} ${'x'.repeat(10)}`);
    vi.advanceTimersByTime(LOG_FLUSH_MS * 10);
    expect(sent).toHaveLength(1);
    batcher.flush();
    expect(sent).toHaveLength(2);
    const lines = sent[1]!.split('\n');
    // The last lines that fit in the tail (whole lines), after a line naming what was left out.
    let leftOut = 0;
    for (let i = 5; i < 998; i++) leftOut += line(i).length + 1;
    expect(leftOut).toBe(19_760);
    expect(lines[0]).toBe('[ffleet: 993 lines (19.3 KiB) of output left out]');
    expect(lines.slice(1, -1)).toEqual([line(998), line(999)]);
    // Still over budget: later output is a tail again, sent on demand.
    batcher.add('after');
    batcher.flush();
    expect(sent[2]).toBe('after\n');
  });

  it('keeps the newest line even when it alone is larger than the tail', () => {
    const sent: string[] = [];
    const batcher = new LogBatcher((t) => sent.push(t), LOG_FLUSH_MS, 1000, undefined, 10, 5);
    batcher.add('0123456789abc');
    batcher.add('a long last line');
    batcher.flush();
    expect(sent).toEqual(['[ffleet: 1 line (14 bytes) of output left out]\na long last line\n']);
  });
});
