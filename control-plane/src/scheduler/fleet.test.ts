import { describe, expect, it } from 'vitest';
import { sweepEveryMs } from './fleet.ts';

describe('sweepEveryMs', () => {
  it('sweeps ten times per lease TTL, between 100 ms and 3 s', () => {
    expect(sweepEveryMs(30_000)).toBe(3_000);
    expect(sweepEveryMs(3_000)).toBe(300);
    expect(sweepEveryMs(1_000)).toBe(100);
    expect(sweepEveryMs(500)).toBe(100);
    expect(sweepEveryMs(3_600_000)).toBe(3_000);
  });
});
