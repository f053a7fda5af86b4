import { describe, expect, it } from 'vitest';
import { GrowthTracker } from './growth-tracker.ts';

const I = 1000;
const s = (size: number, mtimeMs = 1): { size: number; mtimeMs: number } => ({ size, mtimeMs });

/** Scan k happens at time k × interval; returns the scan at which the file was finished. */
function finishScan(growthChecks: number, sizes: number[]): number | undefined {
  const t = new GrowthTracker(growthChecks, I);
  for (const [k, size] of sizes.entries()) if (t.observe('f', s(size), k * I)) return k;
  return undefined;
}

describe('GrowthTracker', () => {
  it.each([1, 2, 3, 5])(
    'finishes a file first seen at scan k at scan k + growthChecks (growthChecks=%i)',
    (g) => {
      expect(finishScan(g, Array(20).fill(10))).toBe(g);
    },
  );

  it('restarts the count at the scan that sees the last change', () => {
    // sizes grow until scan 4 (last change seen at scan 4) → finished at scan 4 + 3
    expect(finishScan(3, [1, 2, 3, 4, 5, 5, 5, 5, 5, 5, 5])).toBe(7);
  });

  it('counts an mtime change with the same size as a change', () => {
    const t = new GrowthTracker(1, I);
    expect(t.observe('f', s(10, 1), 0)).toBe(false);
    expect(t.observe('f', s(10, 2), I)).toBe(false);
    expect(t.observe('f', s(10, 2), 2 * I)).toBe(true);
  });

  it('ignores an unchanged check sooner than one interval after the last counted one', () => {
    const t = new GrowthTracker(2, I);
    t.observe('f', s(10), 0);
    expect(t.observe('f', s(10), 300)).toBe(false); // too soon: does not count
    expect(t.observe('f', s(10), 1000)).toBe(false); // 1st stable check
    expect(t.observe('f', s(10), 1500)).toBe(false); // too soon again
    expect(t.observe('f', s(10), 1990)).toBe(true); // 2nd, within the small spacing tolerance
  });

  it('lets a change seen between checks restart the window at that moment', () => {
    const t = new GrowthTracker(1, I);
    t.observe('f', s(10), 0);
    t.observe('f', s(20), 700); // an event-time observation
    expect(t.observe('f', s(20), 1000)).toBe(false); // only 300 ms after the change
    expect(t.dueAt('f')).toBe(1700);
    expect(t.observe('f', s(20), 1700)).toBe(true);
  });

  it('stays finished while unchanged (a retried submit) and forgets on request', () => {
    const t = new GrowthTracker(1, I);
    t.observe('f', s(10), 0);
    expect(t.observe('f', s(10), I)).toBe(true);
    expect(t.observe('f', s(10), I + 1)).toBe(true);
    expect(t.dueAt('f')).toBeUndefined();
    t.forget('f');
    expect(t.observe('f', s(10), I + 2)).toBe(false);
  });

  it('reports due times and drops files that were not seen', () => {
    const t = new GrowthTracker(1, I);
    t.observe('a', s(1), 0, 'between');
    t.observe('b', s(1), 400, 'between');
    t.observe('c', s(1), 100, 'scan'); // follows the scan cadence: no due time of its own
    expect(t.nextDueAt()).toBe(1000);
    expect(t.nextDueAt((due) => due === 1000)).toBe(1400);
    expect(t.listDue(1000)).toEqual(['a']);
    expect(t.listDue(2000)).toEqual(['a', 'b']);
    t.observe('a', s(1), 1000, 'scan');
    expect(t.nextDueAt()).toBe(1400);
    t.retainOnly(new Set(['b']));
    expect(t.has('a')).toBe(false);
    expect(t.size).toBe(1);
  });
});
