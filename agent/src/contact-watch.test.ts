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

  it('says "away" while the broker connection is lost', () => {
    w = new ContactWatch({ tickMs: 20, stallMs: 400 });
    const since = w.disconnected();
    expect(w.disconnected()).toBe(since); // the spell began at the first loss
    expect(w.recentlyAway(0)).toBe(true);
    w.connected();
    expect(w.recentlyAway(0)).toBe(false);
  });
});
