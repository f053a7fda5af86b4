import { eq } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import {
  countRows,
  errorPaths,
  expectProblem,
  insertAgent,
  json,
  readList,
  recordingFleet,
  UNKNOWN_ID,
} from '../../../test/api/support.ts';
import { useTestApp } from '../../../test/helpers/app.ts';
import { agents, tasks } from '../db/schema.ts';

describe('agent routes', () => {
  const rec = recordingFleet();
  const t = useTestApp({ fleet: rec.fleet });

  it('lists agents with X-Total and shows online, draining and offline', async () => {
    const on = await insertAgent(t.db, { name: 'list-on', online: true, lastSeen: 3 });
    const drain = await insertAgent(t.db, { name: 'list-drain', online: true, paused: true, lastSeen: 2 });
    const off = await insertAgent(t.db, { name: 'list-off', online: false, lastSeen: 1 });
    const all = await readList<{ id: string; status: string }>(await t.call('GET', '/api/v1/agents'));
    const byId = new Map(all.items.map((a) => [a.id, a.status]));
    expect(all.total).toBe(all.items.length);
    expect([byId.get(on.id), byId.get(drain.id), byId.get(off.id)]).toEqual([
      'online',
      'draining',
      'offline',
    ]);
    const page = await readList(await t.call('GET', '/api/v1/agents?perPage=1'));
    expect(page.items).toHaveLength(1);
    expect(page.total).toBe(all.total);
  });

  it('pages through agents in a stable order, newest first, whatever their last_seen does meanwhile', async () => {
    const names = ['page-a', 'page-b', 'page-c', 'page-d', 'page-e'];
    const made = [];
    // Joined after every other agent of this database (so they are the first pages), in this order.
    const base = Date.now() + 1e9;
    for (const [i, name] of names.entries())
      made.push(await insertAgent(t.db, { name, online: true, lastSeen: i, createdAt: base + i }));
    const seen: string[] = [];
    for (let page = 0; page < 3; page++) {
      const list = await readList<{ name: string }>(
        await t.call('GET', `/api/v1/agents?perPage=2&page=${page}`),
      );
      seen.push(...list.items.map((a) => a.name).filter((n) => n.startsWith('page-')));
      // The fleet's sweep stamps last_seen of online agents between two page requests.
      for (const [i, a] of made.entries())
        await t.db.db
          .update(agents)
          .set({ lastSeen: 1000 * (page + 1) + (i % 2 ? i : -i) })
          .where(eq(agents.id, a.id));
    }
    expect(seen).toEqual([...names].reverse());
  });

  it('gets an agent by id or by name with its running tasks; unknown is 404', async () => {
    const a = await insertAgent(t.db, { name: 'get-me', online: true });
    const task = await json(await t.call('POST', '/api/v1/tasks', { command: '-i a b' }), 201);
    await t.db.db
      .update(tasks)
      .set({ status: 'RUNNING', agentId: a.id, agentName: a.name })
      .where(eq(tasks.id, task.id));
    const got = await json(await t.call('GET', `/api/v1/agents/${a.id}`));
    expect(got).toEqual({
      id: a.id,
      uuid: a.id,
      name: 'get-me',
      status: 'online',
      version: '0.1.0',
      hostname: 'host-a',
      os: 'linux',
      arch: 'amd64',
      transcoder: { path: '/usr/bin/ffmpeg', version: '5.1' },
      encoders: ['libx264'],
      hwaccels: [],
      labels: ['cpu'],
      slots: 2,
      paused: false,
      local: false,
      runningTasks: [task.id],
      lastSeen: a.lastSeen,
      connectedAt: a.connectedAt,
      createdAt: a.createdAt,
    });
    expect(await json(await t.call('GET', '/api/v1/agents/get-me'))).toEqual(got);
    await expectProblem(await t.call('GET', `/api/v1/agents/${UNKNOWN_ID}`), 404, 'AGENT_NOT_FOUND');
    await expectProblem(await t.call('GET', '/api/v1/agents/nobody'), 404, 'AGENT_NOT_FOUND');
  });

  it('says why an agent has no working transcoder', async () => {
    const a = await insertAgent(t.db, {
      name: 'no-ffmpeg',
      online: true,
      transcoder: null,
      transcoderError: 'FFLEET_TRANSCODER=/opt/ffmpeg: not found',
    });
    const got = await json(await t.call('GET', `/api/v1/agents/${a.id}`));
    expect(got).toMatchObject({
      transcoder: null,
      transcoderError: 'FFLEET_TRANSCODER=/opt/ffmpeg: not found',
    });
  });

  it('PATCH pauses (drain), overrides labels and slots, and tells the fleet', async () => {
    const a = await insertAgent(t.db, { name: 'patch-me', online: true });
    const paused = await json(await t.call('PATCH', `/api/v1/agents/${a.id}`, { paused: true }));
    expect(paused).toMatchObject({ paused: true, status: 'draining', labels: ['cpu'], slots: 2 });
    expect(rec.calls.agentChanged).toContain(a.id);
    const work = rec.calls.workAvailable;
    const resumed = await json(
      await t.call('PATCH', '/api/v1/agents/patch-me', {
        paused: false,
        labels: ['gpu', 'fast-disk'],
        slots: 0,
      }),
    );
    expect(resumed).toMatchObject({
      paused: false,
      status: 'online',
      labels: ['gpu', 'fast-disk'],
      slots: 0,
    });
    expect(rec.calls.workAvailable).toBeGreaterThan(work);
    expect(await json(await t.call('GET', `/api/v1/agents/${a.id}`))).toEqual(resumed);
    // An empty patch changes nothing.
    expect(await json(await t.call('PATCH', `/api/v1/agents/${a.id}`, {}))).toEqual(resumed);
    // null clears an override: the agent's own labels and slots apply again.
    const cleared = await json(
      await t.call('PATCH', `/api/v1/agents/${a.id}`, { labels: null, slots: null }),
    );
    expect(cleared).toMatchObject({ labels: ['cpu'], slots: 2 });
    expect(rec.calls.workAvailable).toBeGreaterThan(work + 1);
  });

  it('rejects invalid patches with 422 and unknown agents with 404', async () => {
    const a = await insertAgent(t.db, { name: 'bad-patch' });
    const cases: [object, string][] = [
      [{ slots: 65 }, 'slots'],
      [{ slots: -1 }, 'slots'],
      [{ slots: 1.5 }, 'slots'],
      [{ paused: 'yes' }, 'paused'],
      [{ labels: 'gpu' }, 'labels'],
      [{ labels: [''] }, 'labels.0'],
      // What the box is and can do comes from the agent itself: a label may not claim it.
      [{ labels: ['gpu', 'encoder:h264_nvenc'] }, 'labels.1'],
      [{ labels: ['agent:encode-01'] }, 'labels.0'],
      [{ labels: ['HWACCEL:cuda'] }, 'labels.0'],
      [{ labels: ['os:windows'] }, 'labels.0'],
      [{ labels: ['arch:arm64'] }, 'labels.0'],
      [{ labels: ['gpu', 'fast', 'gpu'] }, 'labels.2'],
      [{ name: 'rename' }, 'name'],
    ];
    const before = await countRows(t.db);
    for (const [body, path] of cases) {
      const p = await expectProblem(
        await t.call('PATCH', `/api/v1/agents/${a.id}`, body),
        422,
        'VALIDATION_FAILED',
      );
      expect(errorPaths(p), JSON.stringify(body)).toEqual([path]);
    }
    expect(await countRows(t.db)).toEqual(before);
    await expectProblem(
      await t.call('PATCH', `/api/v1/agents/${UNKNOWN_ID}`, { paused: true }),
      404,
      'AGENT_NOT_FOUND',
    );
  });

  it('deletes an offline agent with 204; an online agent is 409 AGENT_ONLINE', async () => {
    const on = await insertAgent(t.db, { name: 'del-on', online: true });
    const off = await insertAgent(t.db, { name: 'del-off', online: false });
    await expectProblem(await t.call('DELETE', `/api/v1/agents/${on.id}`), 409, 'AGENT_ONLINE');
    expect((await t.call('GET', `/api/v1/agents/${on.id}`)).status).toBe(200);
    const res = await t.call('DELETE', '/api/v1/agents/del-off');
    expect(res.status).toBe(204);
    expect(await res.text()).toBe('');
    await expectProblem(await t.call('GET', `/api/v1/agents/${off.id}`), 404, 'AGENT_NOT_FOUND');
    await expectProblem(await t.call('DELETE', `/api/v1/agents/${off.id}`), 404, 'AGENT_NOT_FOUND');
  });
});
