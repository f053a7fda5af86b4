import { describe, expect, it } from 'vitest';
import { computeBackoffMs, DEFAULT_BACKOFF } from './reconnect-backoff.ts';

describe('computeBackoffMs', () => {
  it('doubles from the minimum and stops at the maximum', () => {
    const top = (n: number) => computeBackoffMs(n, DEFAULT_BACKOFF, () => 1);
    expect([0, 1, 2, 3, 4, 5, 6, 100].map(top)).toEqual([250, 500, 1000, 2000, 4000, 8000, 10_000, 10_000]);
  });

  it('keeps at least half of the step so jitter never collapses the delay', () => {
    expect(computeBackoffMs(0, DEFAULT_BACKOFF, () => 0)).toBe(125);
    expect(computeBackoffMs(10, DEFAULT_BACKOFF, () => 0)).toBe(5000);
  });
});
