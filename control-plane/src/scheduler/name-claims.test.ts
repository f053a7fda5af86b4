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

  it('forgets a process that took the name long ago', () => {
    const n = new NameClaims();
    n.birth('box', 'a', 'h', 0);
    n.birth('box', 'b', 'h', 1_000);
    expect(n.birth('box', 'a', 'h', 1_000 + NAME_CLAIM_WINDOW_MS + 1)).toBeNull();
  });
});
