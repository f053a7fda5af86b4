import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { TaskProgress } from './progress.ts';
import { PROGRESS_REPORT_INTERVAL_MS, ProgressThrottle } from './progress-throttle.ts';

const p = (progress: number, remaining = -1): TaskProgress => ({ progress, remaining });

describe('ProgressThrottle', () => {
  let sent: { at: number; value: TaskProgress }[];
  let throttle: ProgressThrottle;

  beforeEach(() => {
    vi.useFakeTimers();
    sent = [];
    throttle = new ProgressThrottle((value) => sent.push({ at: Date.now(), value }));
  });
  afterEach(() => {
    throttle.stop();
    vi.useRealTimers();
  });

  it('sends the first value at once and later ones at most once per interval', () => {
    const start = Date.now();
    throttle.offer(p(1));
    vi.advanceTimersByTime(100);
    throttle.offer(p(2));
    throttle.offer(p(3));
    expect(sent.map((s) => s.value.progress)).toEqual([1]);
    vi.advanceTimersByTime(PROGRESS_REPORT_INTERVAL_MS);
    // The newest value, sent as soon as the interval since the last report was over.
    expect(sent.map((s) => [s.value.progress, s.at - start])).toEqual([
      [1, 0],
      [3, PROGRESS_REPORT_INTERVAL_MS],
    ]);
  });

  it('skips values equal to the last one sent', () => {
    throttle.offer(p(5, 10));
    vi.advanceTimersByTime(PROGRESS_REPORT_INTERVAL_MS);
    throttle.offer(p(5, 10));
    vi.advanceTimersByTime(PROGRESS_REPORT_INTERVAL_MS);
    throttle.offer(p(5, 9));
    expect(sent.map((s) => s.value)).toEqual([p(5, 10), p(5, 9)]);
  });

  it('counts a value reported by other means as the last report', () => {
    const start = Date.now();
    throttle.reported(p(0));
    throttle.offer(p(0));
    vi.advanceTimersByTime(100);
    throttle.offer(p(40));
    expect(sent).toEqual([]);
    vi.advanceTimersByTime(PROGRESS_REPORT_INTERVAL_MS);
    expect(sent.map((s) => [s.value.progress, s.at - start])).toEqual([[40, PROGRESS_REPORT_INTERVAL_MS]]);
  });

  it('drops a pending value when stopped', () => {
    throttle.offer(p(1));
    throttle.offer(p(2));
    throttle.stop();
    vi.advanceTimersByTime(PROGRESS_REPORT_INTERVAL_MS * 2);
    expect(sent.map((s) => s.value.progress)).toEqual([1]);
  });
});
