import { describe, expect, it } from 'vitest';
import { json, VALID } from '../../../test/api/support.ts';
import { useTestApp } from '../../../test/helpers/app.ts';
import type { AgentRow } from '../db/mappers.ts';
import { agents } from '../db/schema.ts';
import { cancelReason, SILENT_AGENT_MS, waitingReason } from './waiting-for.ts';

const agent = (name: string, more: Partial<AgentRow> = {}) =>
  ({
    id: `id-${name}`,
    name,
    online: true,
    paused: false,
    shuttingDown: false,
    reportedSlots: 2,
    slotsOverride: null,
    reportedLabels: [],
    labelsOverride: null,
    encoders: ['libx264'],
    hwaccels: [],
    os: 'linux',
    arch: 'x64',
    transcoder: { path: '/usr/bin/ffmpeg', version: '5.1' },
    ...more,
  }) as AgentRow;

describe('waitingReason', () => {
  it('has none while an agent that can run the task can take it (a busy one included)', () => {
    expect(waitingReason([], [agent('a1')])).toBe('');
    expect(
      waitingReason(['gpu', 'encoder:libx264'], [agent('a1'), agent('a2', { reportedLabels: ['gpu'] })]),
    ).toBe('');
    // A label set by PATCH counts, the reported one it overrides does not.
    expect(waitingReason(['gpu'], [agent('a1', { reportedLabels: ['gpu'], labelsOverride: [] })])).toMatch(
      /^no agent offers gpu/,
    );
  });

  it('names what no agent offers, or that no agent offers all of it', () => {
    expect(waitingReason(['nonexistent'], [agent('a1')])).toBe(
      'no agent offers nonexistent (its requires): add the label to an agent (PATCH /api/v1/agents/{id}) or connect one that has it',
    );
    expect(
      waitingReason(
        ['gpu', 'fast'],
        [agent('a1', { reportedLabels: ['gpu'] }), agent('a2', { reportedLabels: ['fast'] })],
      ),
    ).toBe('no single agent offers all of gpu, fast (its requires)');
    expect(waitingReason([], [])).toBe('no agent has connected yet');
    // What an agent reports itself cannot be given as a label: no advice to PATCH one.
    expect(waitingReason(['agent:nobody'], [agent('a1')])).toBe(
      'no agent offers agent:nobody (its requires): connect one that has it',
    );
  });

  it('names the agents that could run it and why each cannot now', () => {
    const gpu = { reportedLabels: ['gpu'] };
    expect(
      waitingReason(
        ['gpu'],
        [
          agent('off', { ...gpu, online: false }),
          agent('paused', { ...gpu, paused: true }),
          agent('draining', { ...gpu, shuttingDown: true }),
          agent('zero', { ...gpu, slotsOverride: 0 }),
          agent('broken', { ...gpu, transcoder: null }),
          agent('other'),
        ],
      ),
    ).toBe(
      'every agent that offers its requires is unavailable: off (offline), paused (paused), draining (draining), zero (0 slots), broken (no working transcoder)',
    );
    const many = Array.from({ length: 7 }, (_, i) => agent(`a${i}`, { online: false }));
    expect(waitingReason([], many)).toBe(
      'every agent is unavailable: a0 (offline), a1 (offline), a2 (offline), a3 (offline), a4 (offline) and 2 more',
    );
  });
});

describe('GET /tasks shows why a queued task is not claimed', () => {
  const t = useTestApp();

  it('on the task and in lists, and not once an agent can take it', async () => {
    const waiting = await json(
      await t.call('POST', '/api/v1/tasks', { ...VALID.task(), requires: ['gpu'] }),
      201,
    );
    const plain = await json(await t.call('POST', '/api/v1/tasks', VALID.task()), 201);
    // Not in the create's answer (nor its events): only on reads.
    expect(waiting.waitingFor).toBeUndefined();
    await t.ctx.database.db.insert(agents).values({
      id: '00000000-0000-4000-8000-0000000000a1',
      name: 'box-1',
      online: true,
      reportedSlots: 1,
      transcoder: { path: '/usr/bin/ffmpeg', version: '5.1' },
      createdAt: 1,
      lastSeen: 1,
      connectedAt: 1,
    });
    const got = await json(await t.call('GET', `/api/v1/tasks/${waiting.id}`), 200);
    expect(got.waitingFor).toMatch(/^no agent offers gpu \(its requires\)/);
    expect((await json(await t.call('GET', `/api/v1/tasks/${plain.id}`), 200)).waitingFor).toBeUndefined();
    const list = (await json(await t.call('GET', '/api/v1/tasks?status=QUEUED&perPage=1000'), 200)) as {
      id: string;
      waitingFor?: string;
    }[];
    expect(list.find((x) => x.id === waiting.id)?.waitingFor).toBe(got.waitingFor);
    expect(list.find((x) => x.id === plain.id)?.waitingFor).toBeUndefined();
    // The agent gets the label: nothing keeps the task from being claimed.
    await t.call('PATCH', '/api/v1/agents/box-1', { labels: ['gpu'] });
    expect((await json(await t.call('GET', `/api/v1/tasks/${waiting.id}`), 200)).waitingFor).toBeUndefined();
  });
});

describe('what a running task’s cancel waits for', () => {
  it('its agent’s stop while the agent is heard from; else the lease, saying why', () => {
    expect(cancelReason('enc-1', true, 2_000, 20_000)).toBe('its cancel: agent enc-1 is stopping the run');
    // Frozen or cut off without the broker knowing yet: online, but silent.
    expect(cancelReason('enc-1', true, SILENT_AGENT_MS + 2_500, 4_200)).toBe(
      'its cancel: agent enc-1 has not been heard from for 12 s; the task is canceled when its lease runs out (in 5 s), or as soon as the agent reports back',
    );
    expect(cancelReason('enc-1', false, 1_000, -300)).toBe(
      'its cancel: agent enc-1 is offline; the task is canceled when its lease runs out (in 0 s), or as soon as the agent reports back',
    );
  });
});
