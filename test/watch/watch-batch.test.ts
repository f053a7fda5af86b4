import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { GroupCommit } from '../../control-plane/src/scheduler/group-commit.ts';
import { createWatchTask, createWatchTasksIn } from '../../control-plane/src/scheduler/watch-tasks.ts';
import { claimAsNewAgent, json, type ReportFields, VALID } from '../api/support.ts';
import { useTestApp } from '../helpers/app.ts';

describe('watch.file batches through the group commit', () => {
  const t = useTestApp();

  it("gives a new file's task the preset's requires, for the fleet's check of who can run it", async () => {
    const preset = { ...VALID.preset(), requires: ['hdr', 'encoder:libx265'] };
    const presetId = (await json(await t.call('POST', '/api/v1/presets', preset), 201)).id;
    const wf = await json(await t.call('POST', '/api/v1/watchfolders', VALID.watchfolder(presetId)), 201);
    const req = { watchfolderId: wf.id as string, relativePath: 'hdr.mov', size: 1, mtimeMs: 1 };
    const [r] = await new GroupCommit(t.ctx).run((tx, ev) => createWatchTasksIn(tx, ev, Date.now(), [req]));
    expect(r).toMatchObject({ ok: true, created: true, requires: ['hdr', 'encoder:libx265'] });
    const task = await json(await t.call('GET', `/api/v1/tasks/${(r as { taskId: string }).taskId}`));
    expect(task.requires).toEqual(['hdr', 'encoder:libx265']);
  });

  it('answers every file as one request would, with one task per file version', async () => {
    // A receiver for task.created, so each event is stored with its delivery (counted below).
    await json(
      await t.call('POST', '/api/v1/webhooks', { event: 'task.created', url: 'http://127.0.0.1:9/w' }),
      201,
    );
    const presetId = (await json(await t.call('POST', '/api/v1/presets', VALID.preset()), 201)).id;
    const wf = await json(await t.call('POST', '/api/v1/watchfolders', VALID.watchfolder(presetId)), 201);
    const group = new GroupCommit(t.ctx);
    const file = (relativePath: string, size = 1) => ({
      watchfolderId: wf.id as string,
      relativePath,
      size,
      mtimeMs: 1000.7,
    });
    const out = await group.run((tx, ev) =>
      createWatchTasksIn(tx, ev, Date.now(), [
        file('a/one.mov'),
        file('a/one.mov'),
        file('../x.mov'),
        { ...file('b.mov'), watchfolderId: randomUUID() },
        file('a/two.mov'),
        file('a/one.mov', 2),
      ]),
    );
    const id = (i: number) => (out[i] as { taskId: string }).taskId;
    expect(out[0]).toMatchObject({ ok: true, created: true });
    expect(out[1]).toEqual({ ok: true, taskId: id(0), created: false });
    expect(out[2]).toMatchObject({ ok: false, error: expect.stringMatching(/invalid relative path/) });
    expect(out[3]).toEqual({ ok: false, error: 'watchfolder no longer exists' });
    expect(out[4]).toMatchObject({ ok: true, created: true });
    // Another size is another version of the file: a task of its own.
    expect(out[5]).toMatchObject({ ok: true, created: true });
    expect(new Set([id(0), id(4), id(5)]).size).toBe(3);

    // Repeats in a later batch and through the one-file path return the tasks that exist.
    const again = await group.run((tx, ev) => createWatchTasksIn(tx, ev, Date.now(), [file('a/one.mov')]));
    expect(again).toEqual([{ ok: true, taskId: id(0), created: false }]);
    expect(await createWatchTask(t.ctx, file('a/two.mov'))).toEqual({
      ok: true,
      taskId: id(4),
      created: false,
    });

    const task = await json(await t.call('GET', `/api/v1/tasks/${id(0)}`));
    expect(task).toMatchObject({
      name: 'one.mov',
      source: 'watchfolder',
      inputFile: { raw: '/srv/watch/in/a/one.mov' },
      metadata: {
        ffleet: {
          watchfolder: { path: '/srv/watch/in', relativeDir: 'a', relativePath: 'a/one.mov', uuid: wf.id },
        },
      },
    });
    const created = await t.db.rows<{ n: number }>(
      t.db.db,
      sql`SELECT count(*)::int AS n FROM events WHERE event = 'task.created'`,
    );
    expect(created[0]!.n).toBe(3);
  });
});

describe('events of a group', () => {
  const t = useTestApp();

  it('are written together with every global and direct delivery', async () => {
    const hook = { event: 'task.updated', url: 'http://127.0.0.1:9/global' };
    await json(await t.call('POST', '/api/v1/webhooks', hook), 201);
    const task = await json(
      await t.call('POST', '/api/v1/tasks', {
        ...VALID.task(),
        webhooks: [{ event: 'task.updated', url: 'http://127.0.0.1:9/direct' }],
      }),
      201,
    );
    const { now, claims, report: send } = await claimAsNewAgent(t, 1);
    expect(claims.map((c) => c.task.id)).toEqual([task.id]);
    const report = (seq: number, patch: Record<string, unknown>) =>
      send(claims[0]!, { kind: 'update', seq, patch } as ReportFields);
    // Queued in the same turn: one group, one transaction, one events statement.
    const outcomes = await Promise.all([
      report(0, { status: 'RUNNING', startedAt: now }),
      report(1, { status: 'DONE_SUCCESSFUL', progress: 100, finishedAt: now }),
    ]);
    expect(outcomes.map((o) => o.kind === 'applied' && o.status)).toEqual(['RUNNING', 'DONE_SUCCESSFUL']);
    const events = await t.db.rows<{ status: string }>(
      t.db.db,
      sql`SELECT payload->'data'->>'status' AS status FROM events
          WHERE event = 'task.updated' AND payload->'data'->>'taskId' = ${task.id}`,
    );
    expect(events.map((e) => e.status).sort()).toEqual(['DONE_SUCCESSFUL', 'RUNNING', 'RUNNING']);
    const deliveries = await t.db.rows<{ source: string; url: string; n: number }>(
      t.db.db,
      sql`SELECT source, url, count(*)::int AS n FROM deliveries
          WHERE event = 'task.updated' AND task_id = ${task.id} GROUP BY source, url ORDER BY source`,
    );
    expect(deliveries).toEqual([
      { source: 'direct', url: 'http://127.0.0.1:9/direct', n: 3 },
      { source: 'global', url: 'http://127.0.0.1:9/global', n: 3 },
    ]);
  });
});
