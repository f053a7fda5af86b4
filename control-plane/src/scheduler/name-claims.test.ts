import { describe, expect, it } from 'vitest';
import { NAME_CLAIM_WINDOW_MS, NameClaims } from './name-claims.ts';

describe('NameClaims', () => {
  it('accepts reconnects of one process and a restart (the old process never comes back)', () => {
    const n = new NameClaims();
    expect(n.birth('box', 'a', 'h1', 0)).toBeNull();
    expect(n.birth('box', 'a', 'h1', 1_000)).toBeNull();
    expect(n.birth('box', 'b', 'h1', 2_000)).toBeNull();
    expect(n.birth('box', 'b', 'h1', 3_000)).toBeNull();
    expect(n.isRefused('a') || n.isRefused('b')).toBe(false);
  });

  it('refuses the later of two live processes sharing a name, whichever of them births next', () => {
    const n = new NameClaims();
    expect(n.birth('box', 'first', 'host-1', 0)).toBeNull();
    expect(n.birth('box', 'second', 'host-2', 100)).toBeNull();
    // The first one takes the name back: both are alive.
    const verdict = n.birth('box', 'first', 'host-1', 400);
    expect(verdict?.bootId).toBe('second');
    expect(verdict?.reason).toMatch(/"box" \(on host host-1\) was connected first/);
    expect(verdict?.reason).toContain('FFLEET_AGENT_NAME');
    expect(n.isRefused('second')).toBe(true);
    // The refused one keeps being refused; the first one is not.
    expect(n.birth('box', 'second', 'host-2', 700)?.bootId).toBe('second');
    expect(n.birth('box', 'first', 'host-1', 900)).toBeNull();
    // Another name is not concerned.
    expect(n.birth('other', 'x', 'host-3', 1_000)).toBeNull();
  });

  it('keeps the name with a process connected for long when a second one takes it (QA)', () => {
    const n = new NameClaims();
    expect(n.birth('box', 'first', 'host-1', 0)).toBeNull();
    // Connected ever since: only heartbeats, no births.
    for (let t = 5_000; t <= 3 * NAME_CLAIM_WINDOW_MS; t += 5_000) n.seen('box', 'first', 'host-1', t);
    const later = 3 * NAME_CLAIM_WINDOW_MS + 1_000;
    expect(n.birth('box', 'second', 'host-2', later)).toBeNull();
    // The broker's takeover makes the first one reconnect: the second one is refused, not the first.
    expect(n.birth('box', 'first', 'host-1', later + 300)?.bootId).toBe('second');
    expect(n.isRefused('first')).toBe(false);
    // A refused process's heartbeats do not make it a holder again.
    n.seen('box', 'second', 'host-2', later + 400);
    expect(n.birth('box', 'first', 'host-1', later + 500)).toBeNull();
  });

  it('forgets a process that took the name long ago', () => {
    const n = new NameClaims();
    n.birth('box', 'a', 'h', 0);
    n.birth('box', 'b', 'h', 1_000);
    expect(n.birth('box', 'a', 'h', 1_000 + NAME_CLAIM_WINDOW_MS + 1)).toBeNull();
  });
});
