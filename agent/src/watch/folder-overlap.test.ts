import type { WatchfolderAssignment } from '@ffleet/shared';
import { describe, expect, it } from 'vitest';
import { NO_YIELDS, planYields, yieldsFile } from './folder-overlap.ts';

const wf = (id: string, path: string, createdAt: number, suspended = false): WatchfolderAssignment => ({
  id,
  name: `wf-${id}`,
  path,
  interval: 1,
  growthChecks: 1,
  filter: {},
  suspended,
  createdAt,
});

describe('planYields', () => {
  it('names the watchfolder that really takes a folder watched three times', () => {
    const shadows = (list: WatchfolderAssignment[]) =>
      Object.fromEntries([...planYields(list)].map(([id, p]) => [id, p.shadowedBy]));
    const s1 = wf('s1', '/w3', 1);
    const s2 = wf('s2', '/w3/', 2);
    const m = wf('m', '/w3', 3);
    expect(shadows([s1, m, s2])).toEqual({ s1: null, s2: 'wf-s1', m: 'wf-s1' });
    // The first suspended: the next takes the files, and every other names that one.
    expect(shadows([{ ...s1, suspended: true }, m, s2])).toEqual({ s1: 'wf-s2', s2: null, m: 'wf-s2' });
    // All suspended: nobody takes them, nobody is told another does.
    const all = [s1, m, s2].map((x) => ({ ...x, suspended: true }));
    expect(shadows(all)).toEqual({ s1: null, s2: null, m: null });
  });

  it('leaves nested folders to the inner watchfolder, suspended or not, and nothing else', () => {
    const plans = planYields([
      wf('outer', '/drop', 1),
      wf('inner', '/drop/special/', 2, true),
      wf('deep', '/drop/a/b', 3),
      wf('other', '/dropbox', 4),
    ]);
    expect(plans.get('outer')).toEqual({ nested: ['special', 'a/b'], shadowedBy: null });
    expect(plans.get('inner')).toBe(NO_YIELDS);
    expect(plans.get('other')).toBe(NO_YIELDS);
    const outer = plans.get('outer')!;
    expect(yieldsFile(outer, 'special/x.mov')).toBe(true);
    expect(yieldsFile(outer, 'special-x.mov')).toBe(false);
    expect(yieldsFile(outer, 'a/b/c/x.mov')).toBe(true);
    expect(yieldsFile(outer, 'a/x.mov')).toBe(false);
  });
});
