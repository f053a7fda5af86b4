import { describe, expect, it } from 'vitest';
import { UNHEARD_AFTER_MS, UnheardClaims } from './unheard-claims.ts';

const T = 'aaaaaaaa-0000-4000-8000-000000000001';
const OTHER = 'aaaaaaaa-0000-4000-8000-000000000002';
const HB = 500;

/**
 * An agent process `boot-1` of agent `a1` heartbeating every HB ms, with a clock `offset` ms off the
 * control plane's, which says hello at 0. `beat(at, listed)`: a heartbeat received at `at` (sent just
 * before, `transit` ms), listing `listed`.
 */
function agent(u = new UnheardClaims(), offset = 123_456) {
  u.hello('a1', 'boot-1', 0);
  const beat = (at: number, listed: string[] = [], opts: { transit?: number; bootId?: string } = {}) =>
    u.heartbeat(
      'a1',
      {
        bootId: opts.bootId ?? 'boot-1',
        ts: at - (opts.transit ?? 2) + offset,
        running: listed.map((taskId) => ({ taskId })),
      },
      at,
      true,
    );
  return { u, beat };
}

/** Whether a task claimed at `startedAt` counts for the pair a heartbeat closed. */
const counts = (w: ReturnType<UnheardClaims['heartbeat']>, id: string, startedAt: number) =>
  w?.counts({ id, startedAt }) ?? false;

describe('UnheardClaims', () => {
  it('counts a task two consecutive heartbeats leave out, from the margin after its claim on', () => {
    const { beat } = agent();
    // Claimed at 1,000: heartbeats up to 6,000 are within the margin.
    let w = null;
    for (let at = 500; at <= 6_000; at += HB) {
      w = beat(at);
      expect(counts(w, T, 1_000)).toBe(false);
    }
    // The heartbeat at 6,000 was the first after the margin; this one is the second.
    w = beat(6_500);
    expect(counts(w, T, 1_000)).toBe(true);
    expect(w).toMatchObject({ from: 0, until: 1_000 });
    // A task one of the two lists, or claimed later, does not count.
    expect(counts(beat(7_000, [T.toUpperCase()]), T, 1_000)).toBe(false);
    expect(counts(beat(7_500), T, 1_000)).toBe(false);
    expect(counts(beat(8_500), OTHER, 3_500)).toBe(false);
    expect(counts(beat(9_000), OTHER, 3_500)).toBe(true);
  });

  it('needs two: a task left out by every other heartbeat never counts', () => {
    const { beat } = agent();
    for (let at = 500; at <= 20_000; at += HB) {
      const listed = (at / HB) % 2 === 0 ? [T] : [];
      expect(counts(beat(at, listed), T, 1_000)).toBe(false);
    }
  });

  it('takes the margin as two heartbeat intervals when that is longer than its floor', () => {
    const { beat } = agent();
    const every = 4_000;
    const seen: number[] = [];
    for (let at = every; at <= 30_000; at += every) if (counts(beat(at), T, 1_000)) seen.push(at);
    // Margin 8 s: the first heartbeat at or after 9,000 is at 12,000, the second at 16,000.
    expect(seen[0]).toBe(16_000);
  });

  it('counts nothing of a heartbeat that came late: it may have waited with the answer', () => {
    const { beat } = agent();
    for (let at = 500; at <= 6_000; at += HB) beat(at);
    // Held 1.5 s on the way (a partition, a stalled control plane): neither it nor the next one pairs.
    expect(counts(beat(6_500, [], { transit: 1_500 }), T, 1_000)).toBe(false);
    expect(counts(beat(7_000), T, 1_000)).toBe(false);
    expect(counts(beat(7_500), T, 1_000)).toBe(true);
  });

  it('starts over for another process, and leaves the tasks claimed before its hello to the hello', () => {
    const { u, beat } = agent();
    for (let at = 500; at <= 10_000; at += HB) beat(at);
    expect(counts(beat(10_500, [], { bootId: 'boot-2' }), T, 9_000)).toBe(false);
    u.hello('a1', 'boot-2', 11_000);
    const w = [];
    for (let at = 11_000; at <= 30_000; at += HB) w.push(beat(at, [], { bootId: 'boot-2' }));
    // Claimed before boot-2's hello: never; after it: yes.
    expect(w.some((x) => counts(x, T, 9_000))).toBe(false);
    expect(w.some((x) => counts(x, T, 12_000))).toBe(true);
  });

  it('counts no heartbeat within the margin after the control plane heard again or the agent came back', () => {
    const { u, beat } = agent();
    for (let at = 500; at <= 10_000; at += HB) beat(at);
    u.resumed(10_000);
    for (let at = 10_500; at <= 15_000; at += HB) expect(counts(beat(at), T, 1_000)).toBe(false);
    expect(counts(beat(15_500), T, 1_000)).toBe(true);
    u.backOnline('a1', 16_000);
    for (let at = 16_000; at <= 21_000; at += HB) expect(counts(beat(at), T, 1_000)).toBe(false);
    expect(counts(beat(21_500), T, 1_000)).toBe(true);
    // Nor one received while it was not listening.
    const heard = (at: number, listening: boolean) =>
      u.heartbeat('a1', { bootId: 'boot-1', ts: at + 123_454, running: [] }, at, listening);
    expect(counts(heard(22_000, false), T, 1_000)).toBe(false);
    expect(counts(heard(22_500, true), T, 1_000)).toBe(false);
    expect(counts(heard(23_000, true), T, 1_000)).toBe(true);
  });

  it('counts the margin from the answer of a claim whose commit waited', () => {
    const { u, beat } = agent();
    // Its statement ran at 1,000, its answer left at 8,000.
    u.answered(T, 1_000, 8_000);
    u.answered(OTHER, 1_000, 1_500);
    const seen: number[] = [];
    for (let at = 500; at <= 20_000; at += HB) if (counts(beat(at), T, 1_000)) seen.push(at);
    expect(seen[0]).toBe(13_500);
    const { beat: beat2 } = agent(u);
    for (let at = 500; at <= 6_000; at += HB) beat2(at);
    expect(counts(beat2(6_500), OTHER, 1_000)).toBe(true);
  });

  it('has a floor the fleet may lower (tests)', () => {
    expect(UNHEARD_AFTER_MS).toBe(5_000);
    const { beat } = agent(new UnheardClaims(1_000));
    const seen: number[] = [];
    for (let at = 500; at <= 5_000; at += HB) if (counts(beat(at), T, 1_000)) seen.push(at);
    expect(seen[0]).toBe(2_500);
  });
});
