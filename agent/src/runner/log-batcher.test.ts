import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { LOG_FLUSH_MS, LogBatcher } from './log-batcher.ts';

describe('LogBatcher', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

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
