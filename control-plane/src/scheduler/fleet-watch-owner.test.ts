/**
 * A watchfolder is scanned by the one agent it is assigned to: files from any other agent (a late
 * replay of a folder that moved) make no task, and an agent back from a silence hears that its folders
 * moved.
 */
import { type InboxMessage, PresetCreate, WatchfolderCreate } from '@ffleet/shared';
import { eq } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { sampleBirth } from '../broker/test-brokers.ts';
import { agents, tasks, watchfolders } from '../db/schema.ts';
import { createPreset } from '../services/presets.ts';
import { createWatchfolder } from '../services/watchfolders.ts';
import { useTestFleets } from './fake-mqtt.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('watchfolder ownership', () => {
  const startFleet = useTestFleets();

  /** A fleet hearing a1 and a2, with one watchfolder assigned to a1. */
  async function folderOnA1(opts: { silentAfterMs?: number } = {}) {
    const t = await startFleet(opts);
    const { database } = t;
    await t.mqtt.birth('a1', sampleBirth('a1'));
    await sleep(50);
    const preset = await createPreset(t.ctx, PresetCreate.parse({ name: 'p', command: '-i /in /out' }));
    const wf = await createWatchfolder(
      t.ctx,
      WatchfolderCreate.parse({
        name: 'w',
        interval: 1,
        growthChecks: 1,
        preset: preset.id,
        path: '/srv/drop',
      }),
    );
    await t.fleet.assignWatchfolders();
    await t.mqtt.birth('a2', sampleBirth('a2'));
    await sleep(50);
    const owner = async () => {
      const [row] = await database.db
        .select({ name: agents.name })
        .from(watchfolders)
        .leftJoin(agents, eq(agents.id, watchfolders.assignedAgentId))
        .where(eq(watchfolders.id, wf.id));
      return row?.name ?? null;
    };
    expect(await owner()).toBe('a1');
    const taskCount = async () =>
      (await database.db.select({ id: tasks.id }).from(tasks).where(eq(tasks.source, 'watchfolder'))).length;
    return { ...t, wf, owner, taskCount };
  }

  const answerTo = (sent: { agent: string; message: { type: string } }[], agent: string, requestId: string) =>
    sent.find(
      (s) =>
        s.agent === agent &&
        s.message.type === 'request.result' &&
        (s.message as { requestId?: string }).requestId === requestId,
    )?.message;

  it("moves a folder only when its agent says it cannot read it, not when an error's text reads so", async () => {
    const t = await folderOnA1();
    const state = (requestId: string, error: string, unreadable?: boolean) =>
      t.mqtt.request('a1', {
        type: 'watch.state',
        requestId,
        watchfolderId: t.wf.id,
        lastCheck: Date.now(),
        error,
        ...(unreadable === undefined ? {} : { unreadable }),
      });
    // A shadowed folder's error names the other watchfolder, whose name may read like a failure.
    await state('s1', 'another watchfolder ("no-permission-needed") watches this folder', false);
    await sleep(100);
    expect(await t.owner()).toBe('a1');
    // The agent says so: the folder moves.
    await state('s2', 'cannot read /srv/drop: ENOENT', true);
    await t.fleet.assignWatchfolders();
    expect(await t.owner()).toBe('a2');
  });

  it('makes no task of a file another agent submits, even after the owner locked it', async () => {
    const { mqtt, wf, taskCount } = await folderOnA1();
    const file = (requestId: string) =>
      ({
        type: 'watch.file',
        requestId,
        watchfolderId: wf.id,
        relativePath: 'clip.mov',
        size: 10,
        mtimeMs: 1,
      }) as const;
    await mqtt.request('a1', file('own-1'));
    // Each answer is waited for (a fixed 100 ms was too short for a slow box under load).
    const answer = async (agent: string, requestId: string) => {
      const deadline = Date.now() + 5_000;
      while (!answerTo(mqtt.sent, agent, requestId) && Date.now() < deadline) await sleep(20);
      return answerTo(mqtt.sent, agent, requestId);
    };
    const own = (await answer('a1', 'own-1')) as unknown as { ok: boolean; taskId: string };
    expect(own).toMatchObject({ ok: true });
    await mqtt.request('a1', {
      type: 'watch.locked',
      requestId: 'lock-1',
      watchfolderId: wf.id,
      taskId: own.taskId,
    });
    expect(await answer('a1', 'lock-1')).toMatchObject({ ok: true });
    // a2 scanned the folder before it moved; its outbox replays the submit now.
    await mqtt.request('a2', file('replayed-1'));
    expect(await answer('a2', 'replayed-1')).toMatchObject({
      ok: false,
      error: 'this watchfolder is assigned to another agent now',
    });
    expect(await taskCount()).toBe(1);
  });

  it('tells an agent back from a silence that its watchfolder moved', async () => {
    const { mqtt, owner } = await folderOnA1({ silentAfterMs: 1_000 });
    const heartbeat = (agent: string) =>
      mqtt.heartbeat(agent, { bootId: 'boot-1', freeSlots: 1, running: [], ts: Date.now() });
    // a1 goes silent (frozen; its connection stays up), a2 is heard: the folder moves to a2.
    const deadline = Date.now() + 15_000;
    while ((await owner()) !== 'a2') {
      if (Date.now() > deadline) throw new Error('the folder did not move');
      await heartbeat('a2');
      await sleep(200);
    }
    const before = mqtt.sent.length;
    await heartbeat('a1');
    await sleep(100);
    const configs = mqtt.sent
      .slice(before)
      .filter((s) => s.agent === 'a1' && s.message.type === 'config')
      .map((s) => (s.message as { watchfolders: unknown[] }).watchfolders);
    expect(configs).toEqual([[]]);
    expect(await owner()).toBe('a2');
  }, 30_000);

  it('tells the outer folder’s agent to leave a pinned inner folder’s files while that folder’s agent is away', async () => {
    const t = await startFleet();
    await t.mqtt.birth('a1', sampleBirth('a1'));
    await sleep(50);
    const preset = await createPreset(t.ctx, PresetCreate.parse({ name: 'p', command: '-i /in /out' }));
    const create = (name: string, path: string, agent?: string) =>
      createWatchfolder(
        t.ctx,
        WatchfolderCreate.parse({ name, interval: 1, growthChecks: 1, preset: preset.id, path, agent }),
      );
    const outer = await create('drop', '/srv/drop');
    const gpu = await create('gpu', '/srv/drop/gpu', 'box-b');
    await create('b-local', '/srv/elsewhere', 'box-b');
    await t.fleet.assignWatchfolders();
    const lastConfig = (agent: string) =>
      t.mqtt.sent.filter((s) => s.agent === agent && s.message.type === 'config').at(-1)?.message as
        | Extract<InboxMessage, { type: 'config' }>
        | undefined;
    const a1 = lastConfig('a1');
    expect(a1?.watchfolders.map((w) => w.name)).toEqual(['drop']);
    expect(a1?.yieldTo).toEqual([
      {
        id: gpu.id,
        name: 'gpu',
        path: '/srv/drop/gpu',
        suspended: false,
        createdAt: expect.any(Number),
        overlaps: [outer.id],
      },
    ]);
    // box-b connects: the group goes to it, and a1 has nothing left to scan or to leave alone.
    await t.mqtt.birth('box-b', sampleBirth('box-b'));
    await sleep(50);
    await t.fleet.assignWatchfolders();
    expect(lastConfig('a1')).toMatchObject({ watchfolders: [] });
    expect(lastConfig('a1')?.yieldTo).toBeUndefined();
    expect(
      lastConfig('box-b')
        ?.watchfolders.map((w) => w.name)
        .sort(),
    ).toEqual(['b-local', 'drop', 'gpu']);
    expect(lastConfig('box-b')?.yieldTo).toBeUndefined();
  });
});
