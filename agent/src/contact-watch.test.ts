import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { ContactWatch } from './contact-watch.ts';

describe('ContactWatch', () => {
  let w: ContactWatch | undefined;
  afterEach(() => w?.stop());

  const block = (ms: number) => {
    const until = performance.now() + ms;
    while (performance.now() < until) {
      // frozen
    }
  };

  it('says "away" right after a freeze, before its late tick has run, and for a while after', async () => {
    const stalls: number[] = [];
    w = new ContactWatch({ tickMs: 20, stallMs: 400, onStall: (ms) => stalls.push(ms) });
    expect(w.recentlyAway(1_000)).toBe(false);
    block(600);
    expect(w.recentlyAway(1_000)).toBe(true); // no tick since the freeze yet
    await sleep(100);
    expect(stalls.length).toBeGreaterThanOrEqual(1);
    expect(stalls[0]).toBeGreaterThanOrEqual(590);
    expect(w.recentlyAway(1_000)).toBe(true);
    expect(w.recentlyAway(1)).toBe(false);
  });

  it('says "away" for a while after the broker connection came back', async () => {
    w = new ContactWatch({ tickMs: 20, stallMs: 400 });
    expect(w.recentlyAway(100)).toBe(false);
    // The first connection ends no spell.
    w.connected();
    expect(w.recentlyAway(100)).toBe(false);
    w.disconnected();
    w.connected();
    expect(w.recentlyAway(100)).toBe(true);
    await sleep(150);
    expect(w.recentlyAway(100)).toBe(false);
  });

  describe('awaySince: a spell of at least some length, after some time', () => {
    it('sees a freeze while it is still going on (the late tick not run yet) and once it has ended', async () => {
      w = new ContactWatch({ tickMs: 20, stallMs: 200 });
      const before = performance.now();
      expect(w.awaySince(before, 300)).toBe(0);
      block(500);
      // A step that ended in the freeze is read before the late tick (libuv runs I/O callbacks first).
      expect(w.awaySince(before, 300)).toBeGreaterThanOrEqual(500);
      // The run asks the control plane now, before the late tick has run.
      const askedAt = performance.now();
      await sleep(60);
      expect(w.awaySince(before, 300)).toBeGreaterThanOrEqual(500);
      // Its answer came after the freeze, which had ended when it asked (not when the late tick ran).
      expect(w.awaySince(askedAt, 300)).toBe(0);
      // Too short for the lease in question.
      expect(w.awaySince(before, 5_000)).toBe(0);
    });

    it('does not count a freeze shorter than a stall', async () => {
      w = new ContactWatch({ tickMs: 20, stallMs: 400 });
      const before = performance.now();
      block(250);
      expect(w.awaySince(before, 0)).toBe(0);
      await sleep(60);
      expect(w.awaySince(before, 0)).toBe(0);
    });

    it('sees a lost connection while it lasts and after it came back, with its length', async () => {
      w = new ContactWatch({ tickMs: 20, stallMs: 400 });
      const before = performance.now();
      const since = w.disconnected();
      expect(w.disconnected()).toBe(since); // the spell began at the first loss
      await sleep(150);
      expect(w.awaySince(before, 100)).toBeGreaterThanOrEqual(140);
      expect(w.awaySince(before, 1_000)).toBe(0); // not that long yet
      w.connected();
      const after = performance.now();
      const length = w.awaySince(before, 100);
      expect(length).toBeGreaterThanOrEqual(140);
      await sleep(50);
      // Over: it stays what it was, and a later confirmation leaves it behind.
      expect(w.awaySince(before, 100)).toBe(length);
      expect(w.awaySince(after, 0)).toBe(0);
    });

    it('answers for the longest qualifying spell, and never forgets one it had to drop', () => {
      w = new ContactWatch({ tickMs: 20, stallMs: 400 });
      const before = performance.now();
      w.disconnected();
      block(120);
      w.connected();
      const long = w.awaySince(before, 0);
      // Many short spells after it: only the latest are kept one by one.
      for (let i = 0; i < 40; i++) {
        w.disconnected();
        w.connected();
      }
      expect(w.awaySince(before, 100)).toBe(long);
      expect(w.awaySince(performance.now(), 0)).toBe(0);
    });
  });
});
