/**
 * Watchfolders across the fleet, end to end: a real control plane, real agents (in-process and child
 * processes), real files. Agents run with 0 slots so the created tasks stay QUEUED and are only counted.
 */
import { execFileSync } from 'node:child_process';
import { appendFileSync, existsSync, mkdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Task, Watchfolder } from '@ffleet/shared';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { makeTestVideo, TestCluster, waitFor } from '../helpers/cluster.ts';

let c: TestCluster;
let presetId: string;

beforeAll(async () => {
  c = await TestCluster.start();
  const r = await c.api.request<{ id: string }>('POST', '/api/v1/presets', {
    name: 'watch-preset',
    command: '-y -i ${INPUT_FILE} ${OUTPUT_FILE}',
    outputFile: '${INPUT_FILE_DIR}/out/${INPUT_FILE_BASENAME}.mp4',
  });
  presetId = r.body.id;
}, 180_000);

afterAll(async () => {
  await c?.stop();
}, 60_000);

afterEach(async (ctx) => {
  if (ctx.task.result?.state === 'fail') console.error(c.controlPlaneLog().slice(-6000));
  await c.stopAgents();
  const list = await c.api.request<Watchfolder[]>('GET', '/api/v1/watchfolders?perPage=1000');
  for (const wf of list.body) await c.api.request('DELETE', `/api/v1/watchfolders/${wf.id}`);
}, 60_000);

let n = 0;
function folder(): string {
  const dir = join(c.dir, 'watch', `f${n++}`);
  mkdirSync(dir, { recursive: true });
  return dir;
}

async function createWatchfolder(path: string, extra: Record<string, unknown> = {}): Promise<Watchfolder> {
  const r = await c.api.request<Watchfolder>('POST', '/api/v1/watchfolders', {
    name: `wf-${n++}-${Date.now()}`,
    path,
    interval: 1,
    growthChecks: 1,
    preset: presetId,
    ...extra,
  });
  expect(r.status).toBe(201);
  return r.body;
}

async function tasksOf(wf: Watchfolder): Promise<Task[]> {
  const r = await c.api.request<Task[]>('GET', '/api/v1/tasks?source=watchfolder&perPage=1000');
  return r.body.filter(
    (t) =>
      (t.metadata as { ffleet?: { watchfolder?: { uuid?: string } } }).ffleet?.watchfolder?.uuid === wf.id,
  );
}

const relPaths = (ts: Task[]) =>
  ts
    .map(
      (t) =>
        (t.metadata as { ffleet: { watchfolder: { relativePath: string } } }).ffleet.watchfolder.relativePath,
    )
    .sort();

async function getWf(id: string): Promise<Watchfolder> {
  return (await c.api.request<Watchfolder>('GET', `/api/v1/watchfolders/${id}`)).body;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('a watchfolder scanned by an agent', () => {
  it('creates one task per finished file with the watchfolder metadata, skipping dot-files and locks, and writes the lock', async () => {
    const agent = await c.startLocalAgent({ name: 'w1', slots: 0 });
    const dir = folder();
    mkdirSync(join(dir, 'sub', 'deeper'), { recursive: true });
    writeFileSync(join(dir, 'top.mov'), 'x'.repeat(100));
    writeFileSync(join(dir, 'sub', 'deeper', 'clip.MOV'), 'y'.repeat(50));
    writeFileSync(join(dir, '.hidden.mov'), 'z');
    writeFileSync(join(dir, 'stray.lock'), '');
    const wf = await createWatchfolder(dir);
    await waitFor(async () => (await tasksOf(wf)).length === 2, 20_000, 'two tasks');
    const ts = await tasksOf(wf);
    expect(relPaths(ts)).toEqual(['sub/deeper/clip.MOV', 'top.mov']);
    const deep = ts.find((t) => t.name === 'clip.MOV')!;
    expect(deep).toMatchObject({ source: 'watchfolder', status: 'QUEUED', preset: presetId });
    expect(deep.inputFile.raw).toBe(join(dir, 'sub', 'deeper', 'clip.MOV'));
    expect(deep.metadata).toEqual({
      ffleet: {
        watchfolder: {
          path: dir,
          relativeDir: 'sub/deeper',
          relativePath: 'sub/deeper/clip.MOV',
          uuid: wf.id,
        },
      },
    });
    expect(
      (ts.find((t) => t.name === 'top.mov')!.metadata as { ffleet: { watchfolder: { relativeDir: string } } })
        .ffleet.watchfolder.relativeDir,
    ).toBe('.');
    await waitFor(
      () => existsSync(join(dir, 'top.mov.lock')) && existsSync(join(dir, 'sub', 'deeper', 'clip.MOV.lock')),
      10_000,
      'locks',
    );
    const live = await getWf(wf.id);
    expect(live.assignedAgent?.name).toBe(agent.name);
    expect(live.lastCheck).toBeGreaterThan(0);
    expect(live.error).toBe('');
    // Nothing more over further scans.
    await sleep(2500);
    expect((await tasksOf(wf)).length).toBe(2);
  }, 60_000);

  it('waits until a file written in chunks stops growing', async () => {
    await c.startLocalAgent({ name: 'w2', slots: 0 });
    const dir = folder();
    const wf = await createWatchfolder(dir, { growthChecks: 2 });
    const file = join(dir, 'growing.mxf');
    writeFileSync(file, 'a');
    let lastWrite = Date.now();
    for (let i = 0; i < 5; i++) {
      await sleep(700);
      appendFileSync(file, 'more data '.repeat(100));
      lastWrite = Date.now();
      expect((await tasksOf(wf)).length).toBe(0);
    }
    await waitFor(async () => (await tasksOf(wf)).length === 1, 15_000, 'task after growth stops');
    const t = (await tasksOf(wf))[0]!;
    // Two unchanged checks at a 1 s interval after the last write: never sooner than ~1 s.
    expect(t.createdAt - lastWrite).toBeGreaterThanOrEqual(900);
    expect(statSync(file).size).toBe(1 + 5 * 1000);
  }, 60_000);

  it('applies the extension filter: exclude first, include keeps only its extensions, case-insensitive', async () => {
    await c.startLocalAgent({ name: 'w3', slots: 0 });
    const dir = folder();
    for (const f of ['a.mov', 'b.MXF', 'c.txt', 'd.mp4', 'e.MOV']) writeFileSync(join(dir, f), 'data');
    const wf = await createWatchfolder(dir, {
      filter: { extensions: { include: ['MOV', 'mxf', 'mp4'], exclude: ['mp4'] } },
    });
    await waitFor(async () => (await tasksOf(wf)).length === 3, 15_000, 'three tasks');
    await sleep(1500);
    expect(relPaths(await tasksOf(wf))).toEqual(['a.mov', 'b.MXF', 'e.MOV']);
  }, 60_000);

  it('reprocesses a file whose lock was removed, and keeps locks across an agent restart', async () => {
    await c.startLocalAgent({ name: 'w4', slots: 0 });
    const dir = folder();
    writeFileSync(join(dir, 'one.mov'), 'data');
    const wf = await createWatchfolder(dir);
    await waitFor(() => existsSync(join(dir, 'one.mov.lock')), 15_000, 'lock');
    expect((await tasksOf(wf)).length).toBe(1);
    // The agent confirms the lock to the control plane right after writing it; give that a moment
    // before the abrupt stop below (the test stops agents without flushing their outbox).
    await sleep(1500);
    // Restart: a new agent process sees the lock and creates nothing.
    await c.stopAgents();
    await c.startLocalAgent({ name: 'w4b', slots: 0 });
    await waitFor(
      async () => (await getWf(wf.id)).assignedAgent?.name === c.agentName('w4b'),
      15_000,
      'reassigned',
    );
    const checked = (await getWf(wf.id)).lastCheck;
    await waitFor(async () => (await getWf(wf.id)).lastCheck > checked + 1000, 15_000, 'scans after restart');
    expect((await tasksOf(wf)).length).toBe(1);
    // Removing the lock makes the unchanged file eligible again (spec: processed again).
    rmSync(join(dir, 'one.mov.lock'));
    await waitFor(async () => (await tasksOf(wf)).length === 2, 15_000, 'reprocessed');
    await waitFor(() => existsSync(join(dir, 'one.mov.lock')), 10_000, 'lock again');
  }, 90_000);

  it('suspend stops detection, resume restarts it, PUT moves it to another path, DELETE stops it', async () => {
    await c.startLocalAgent({ name: 'w5', slots: 0 });
    const dir = folder();
    const wf = await createWatchfolder(dir);
    const body = { name: wf.name, path: dir, interval: 1, growthChecks: 1, preset: presetId };
    expect(
      (await c.api.request('PUT', `/api/v1/watchfolders/${wf.id}`, { ...body, suspended: true })).status,
    ).toBe(200);
    await sleep(1200);
    writeFileSync(join(dir, 'while-suspended.mov'), 'data');
    await sleep(3000);
    expect((await tasksOf(wf)).length).toBe(0);
    expect(existsSync(join(dir, 'while-suspended.mov.lock'))).toBe(false);

    await c.api.request('PUT', `/api/v1/watchfolders/${wf.id}`, { ...body, suspended: false });
    await waitFor(async () => (await tasksOf(wf)).length === 1, 15_000, 'resumed');

    const other = folder();
    writeFileSync(join(other, 'elsewhere.mov'), 'data');
    await c.api.request('PUT', `/api/v1/watchfolders/${wf.id}`, { ...body, path: other, interval: 2 });
    await waitFor(
      async () => relPaths(await tasksOf(wf)).includes('elsewhere.mov'),
      15_000,
      'new path scanned',
    );

    expect((await c.api.request('DELETE', `/api/v1/watchfolders/${wf.id}`)).status).toBe(204);
    await sleep(1500);
    writeFileSync(join(other, 'after-delete.mov'), 'data');
    await sleep(4500);
    expect(existsSync(join(other, 'after-delete.mov.lock'))).toBe(false);
    const all = (await c.api.request<Task[]>('GET', '/api/v1/tasks?source=watchfolder&q=after-delete')).body;
    expect(all.length).toBe(0);
  }, 90_000);

  it('shows a missing path in `error` and recovers when the directory appears', async () => {
    await c.startLocalAgent({ name: 'w6', slots: 0 });
    const dir = join(c.dir, 'watch', `missing-${n++}`);
    const wf = await createWatchfolder(dir);
    await waitFor(async () => (await getWf(wf.id)).error !== '', 15_000, 'error shown');
    expect((await getWf(wf.id)).error).toMatch(/not exist|ENOENT|missing/i);
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'late.mov'), 'data');
    await waitFor(async () => (await tasksOf(wf)).length === 1, 20_000, 'recovered');
    await waitFor(async () => (await getWf(wf.id)).error === '', 10_000, 'error cleared');
  }, 60_000);

  it('never creates a second task for a file in a read-only folder, and shows the lock failure', async (ctx) => {
    await c.startLocalAgent({ name: 'w7', slots: 0 });
    const src = folder();
    writeFileSync(join(src, 'ro.mov'), 'data');
    const ro = folder();
    try {
      execFileSync('mount', ['--bind', src, ro]);
      execFileSync('mount', ['-o', 'remount,bind,ro', ro]);
    } catch {
      ctx.skip(); // Needs root with mount rights (the CI machine has them); nothing else makes root's writes fail.
      return;
    }
    try {
      const wf = await createWatchfolder(ro);
      await waitFor(async () => (await tasksOf(wf)).length === 1, 15_000, 'task');
      await waitFor(
        async () => /lock|read-only|EROFS/i.test((await getWf(wf.id)).error),
        15_000,
        'lock error shown',
      );
      await sleep(3500);
      expect((await tasksOf(wf)).length).toBe(1);
      expect(existsSync(join(src, 'ro.mov.lock'))).toBe(false);
    } finally {
      execFileSync('umount', [ro]);
    }
  }, 60_000);
});

describe('watchfolders across several agents', () => {
  it('is scanned by one agent; when it is SIGKILLed another takes over, and no file ever gets two tasks', async () => {
    const a = await c.startAgent({ name: 'fa', slots: 0 });
    const b = await c.startAgent({ name: 'fb', slots: 0 });
    const dir = folder();
    for (let i = 0; i < 20; i++) writeFileSync(join(dir, `f${i}.mov`), `data ${i}`);
    const wf = await createWatchfolder(dir);
    await waitFor(async () => (await tasksOf(wf)).length === 20, 30_000, '20 tasks');
    const first = (await getWf(wf.id)).assignedAgent!.name;
    const [victim, survivor] = first === c.agentName('fa') ? [a, c.agentName('fb')] : [b, c.agentName('fa')];
    // New files arrive while the assigned agent dies.
    for (let i = 20; i < 40; i++) writeFileSync(join(dir, `f${i}.mov`), `data ${i}`);
    victim.signal('SIGKILL');
    await waitFor(async () => (await getWf(wf.id)).assignedAgent?.name === survivor, 30_000, 'failover');
    await waitFor(async () => (await tasksOf(wf)).length >= 40, 30_000, '40 tasks');
    await sleep(3000);
    const ts = await tasksOf(wf);
    expect(ts.length).toBe(40);
    expect(new Set(relPaths(ts)).size).toBe(40);
  }, 120_000);

  it('moves the folder to another agent as soon as its agent starts draining (SIGTERM) with a task running', async () => {
    const a = await c.startAgent({ name: 'da', slots: 1 });
    const dir = folder();
    const wf = await createWatchfolder(dir);
    await waitFor(async () => (await getWf(wf.id)).assignedAgent?.name === a.label, 15_000, 'assigned');
    await c.startAgent({ name: 'db', slots: 0 });
    // Long enough to outlast the waits below on a loaded machine (the cancel at the end stops it).
    const clip = await makeTestVideo(join(c.dir, 'media'), 'drain-clip.mp4', 30);
    const task = await c.api.createTask({
      command: `-re -y -i \${INPUT_FILE} -c:v mpeg4 \${OUTPUT_FILE}`,
      inputFile: clip,
      outputFile: join(c.dir, 'out', 'drain-watch.mp4'),
      requires: [`agent:${a.label}`],
    });
    await c.api.waitForTask(task.id, (t) => t.status === 'RUNNING', 30_000);
    a.signal('SIGTERM');
    // The draining agent still runs its task, and the folder is scanned by the other one meanwhile.
    await waitFor(
      async () => (await getWf(wf.id)).assignedAgent?.name === c.agentName('db'),
      10_000,
      'moved while draining',
    );
    expect((await c.api.getTask(task.id)).status).toBe('RUNNING');
    expect(a.running).toBe(true);
    writeFileSync(join(dir, 'late.mov'), 'data');
    await waitFor(async () => (await tasksOf(wf)).length === 1, 15_000, 'the new file picked up');
    await c.api.patch(`/api/v1/tasks/${task.id}/cancel`);
  }, 90_000);

  it('honours a pinned agent and reports it offline instead of moving the folder', async () => {
    await c.startLocalAgent({ name: 'p1', slots: 0 });
    const pinned = await c.startAgent({ name: 'p2', slots: 0 });
    const dir = folder();
    const wf = await createWatchfolder(dir, { agent: c.agentName('p2') });
    await waitFor(
      async () => (await getWf(wf.id)).assignedAgent?.name === c.agentName('p2'),
      15_000,
      'pinned',
    );
    pinned.signal('SIGKILL');
    await waitFor(async () => (await getWf(wf.id)).assignedAgent === null, 20_000, 'unassigned');
    expect((await getWf(wf.id)).error).toBe(`agent ${c.agentName('p2')} is not online (offline or draining)`);
  }, 60_000);

  it('says why a folder pinned to an agent that never connected is not scanned (a mistyped name)', async () => {
    const wf = await createWatchfolder(folder(), { agent: 'no-such-agent' });
    await waitFor(async () => (await getWf(wf.id)).error !== '', 10_000, 'the reason shown');
    expect(await getWf(wf.id)).toMatchObject({
      assignedAgent: null,
      error:
        'no agent named no-such-agent is known (none has connected under that name, or it was deleted): check the name; the folder is scanned once it connects',
    });
  });

  it('leaves a pinned inner folder’s files to its agent while that agent is offline, not to the outer folder', async () => {
    await c.startLocalAgent({ name: 'o1', slots: 0 });
    const dir = folder();
    const gpu = join(dir, 'gpu');
    mkdirSync(gpu);
    const inner = await createWatchfolder(gpu, { agent: c.agentName('gpu-box') });
    const outer = await createWatchfolder(dir);
    writeFileSync(join(dir, 'outer.mov'), 'data');
    writeFileSync(join(gpu, 'for-the-gpu-box.mov'), 'data');
    await waitFor(async () => (await tasksOf(outer)).length === 1, 15_000, 'the outer file');
    // Two more scans of the outer folder (interval 1 s): the inner folder's file stays untaken.
    await sleep(2_200);
    expect(relPaths(await tasksOf(outer))).toEqual(['outer.mov']);
    expect(await tasksOf(inner)).toEqual([]);
    // Its agent connects: the group moves to it, and the inner folder's file is the inner folder's.
    await c.startLocalAgent({ name: 'gpu-box', slots: 0 });
    await waitFor(async () => (await tasksOf(inner)).length === 1, 15_000, 'the inner file');
    await sleep(1_200);
    expect(relPaths(await tasksOf(inner))).toEqual(['for-the-gpu-box.mov']);
    expect(relPaths(await tasksOf(outer))).toEqual(['outer.mov']);
  }, 60_000);
});
