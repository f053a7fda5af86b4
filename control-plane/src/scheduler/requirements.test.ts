import { describe, expect, it } from 'vitest';
import { RequirementCheck, unmetRequirements } from './requirements.ts';

const agent = (name: string, labels: string[], encoders: string[] = [], hwaccels: string[] = []) => ({
  name,
  labels,
  encoders,
  hwaccels,
  os: 'linux',
  arch: 'x64',
});

describe('unmetRequirements', () => {
  const fleet = [agent('enc-1', ['gpu'], ['libx264'], ['cuda']), agent('enc-2', ['hdr'], ['libx265'])];

  it('passes lists one agent offers whole: labels, encoder:, hwaccel:, agent:, os:', () => {
    expect(
      unmetRequirements(
        [['gpu', 'encoder:libx264', 'hwaccel:cuda'], ['agent:enc-2', 'hdr', 'encoder:libx265'], ['os:linux']],
        fleet,
      ),
    ).toEqual([]);
  });

  it('names the items no agent offers, and none when each is offered but not by one agent', () => {
    expect(unmetRequirements([['gpu', 'nvme'], ['gpu', 'hdr'], ['encoder:hevc_nvenc']], fleet)).toEqual([
      { requires: ['gpu', 'nvme'], missing: ['nvme'] },
      { requires: ['gpu', 'hdr'], missing: [] },
      { requires: ['encoder:hevc_nvenc'], missing: ['encoder:hevc_nvenc'] },
    ]);
  });

  it('finds every list unmet without agents', () => {
    expect(unmetRequirements([['gpu']], [])).toEqual([{ requires: ['gpu'], missing: ['gpu'] }]);
  });
});

describe('RequirementCheck', () => {
  it('keeps non-empty lists, one per set of items whatever their order', () => {
    const check = new RequirementCheck();
    expect(check.pending).toBe(false);
    check.add([[], ['a', 'b'], ['b', 'a'], ['c']]);
    expect(check.pending).toBe(true);
    expect(check.take(0)).toEqual([['b', 'a'], ['c']]);
    expect(check.pending).toBe(false);
  });

  it('checks a list at most once a minute', () => {
    const check = new RequirementCheck();
    check.add([['gpu']]);
    expect(check.take(1_000)).toHaveLength(1);
    check.add([['gpu']]);
    expect(check.take(60_999)).toEqual([]);
    check.add([['gpu']]);
    expect(check.take(61_000)).toEqual([['gpu']]);
  });

  it('logs an unmet list at most once in ten minutes', () => {
    const check = new RequirementCheck();
    const unmet = [{ requires: ['gpu'], missing: ['gpu'] }];
    expect(check.toLog(unmet, 0)).toEqual(unmet);
    expect(check.toLog(unmet, 599_999)).toEqual([]);
    expect(check.toLog(unmet, 600_000)).toEqual(unmet);
  });
});
