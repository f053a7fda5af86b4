import { describe, expect, it } from 'vitest';
import { agentCapabilities, offers } from './capabilities.ts';

describe('offers', () => {
  it('answers as agentCapabilities(a).includes(r) does, for every kind of requirement', () => {
    const agents = [
      {
        name: 'enc-1',
        labels: ['gpu', 'Encoder:fake', 'agent:other', 'a:b'],
        encoders: ['libx264', 'h264_nvenc'],
        hwaccels: ['cuda'],
        os: 'linux',
        arch: 'amd64',
      },
      { name: 'bare', labels: [], encoders: [], hwaccels: [], os: '', arch: '' },
    ];
    const requirements = [
      'gpu',
      'GPU',
      'a:b',
      'Encoder:fake',
      'agent:other',
      'encoder:libx264',
      'encoder:h264_nvenc',
      'encoder:fake',
      'Encoder:libx264',
      'encoder:',
      'hwaccel:cuda',
      'hwaccel:vaapi',
      'agent:enc-1',
      'agent:bare',
      'agent:',
      'os:linux',
      'os:',
      'arch:amd64',
      'arch:',
      'os:darwin',
      ':x',
      'x:',
    ];
    for (const a of agents) {
      const all = agentCapabilities(a);
      for (const r of requirements) expect([a.name, r, offers(a, r)]).toEqual([a.name, r, all.includes(r)]);
    }
  });
});
