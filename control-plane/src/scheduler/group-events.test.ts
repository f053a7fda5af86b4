import { sql } from 'drizzle-orm';
import { beforeEach, describe, expect, it } from 'vitest';
import { claimAsNewAgent, insertAgent, json, VALID } from '../../../test/api/support.ts';
import { useTestApp } from '../../../test/helpers/app.ts';
import type { Db } from '../db/client.ts';
import { claimTasksIn } from './claim.ts';
import { GroupCommit } from './group-commit.ts';
import { applyReportIn } from './reports.ts';

/**
 * A group's task events need no statement when the group's own claim or report statement saw no global
 * webhook and no direct webhook receives them (outbox.ts `needNoStatement`); every event a webhook
 * receives is still stored with its delivery.
 */
describe('the events of a group commit', () => {
  const t = useTestApp();
  // Each test starts with no webhook, delivery or task (the app is shared).
  beforeEach(async () => {
    await t.db.db.execute(sql`DELETE FROM deliveries`);
    await t.db.db.execute(sql`DELETE FROM events`);
    await t.db.db.execute(sql`DELETE FROM webhooks`);
    await t.db.db.execute(sql`DELETE FROM tasks`);
  });

  const deliveries = async (taskId: string) =>
    (
      await t.db.rows<{ event: string; status: string | null }>(
        t.db.db,
        sql`SELECT d.event, e.payload->'data'->>'status' AS status FROM deliveries d JOIN events e ON e.id = d.event_id
            WHERE d.task_id = ${taskId} ORDER BY d.seq`,
      )
    ).map((r) => `${r.event} ${r.status}`);

  it('stores the claim and report events of a task for a global webhook created before them', async () => {
    const task = await json(await t.call('POST', '/api/v1/tasks', VALID.task()), 201);
    await json(
      await t.call('POST', '/api/v1/webhooks', { event: 'task.updated', url: 'http://127.0.0.1:9/h' }),
      201,
    );
    const { claims, report } = await claimAsNewAgent(t, 1);
    const claim = claims[0]!;
    await report(claim, { kind: 'update', seq: 0, patch: { progress: 50, remaining: 1 } });
    await report(claim, {
      kind: 'update',
      seq: 1,
      patch: { status: 'DONE_SUCCESSFUL', progress: 100, finishedAt: Date.now() },
    });
    expect(await deliveries(task.id)).toEqual([
      'task.updated RUNNING',
      'task.updated RUNNING',
      'task.updated DONE_SUCCESSFUL',
    ]);
  });

  it('stores the events of a task for a global webhook created while it runs', async () => {
    const task = await json(await t.call('POST', '/api/v1/tasks', VALID.task()), 201);
    const { claims, report } = await claimAsNewAgent(t, 1);
    const claim = claims[0]!;
    await report(claim, { kind: 'update', seq: 0, patch: { progress: 50, remaining: 1 } });
    // No webhook yet: nothing stored for the claim or the progress.
    expect(await deliveries(task.id)).toEqual([]);
    await json(
      await t.call('POST', '/api/v1/webhooks', { event: 'task.updated', url: 'http://127.0.0.1:9/h' }),
      201,
    );
    await report(claim, {
      kind: 'update',
      seq: 1,
      patch: { status: 'DONE_SUCCESSFUL', progress: 100, finishedAt: Date.now() },
    });
    expect(await deliveries(task.id)).toEqual(['task.updated DONE_SUCCESSFUL']);
  });

  it("stores the events a task's own webhook receives when no global webhook exists", async () => {
    const task = await json(
      await t.call('POST', '/api/v1/tasks', {
        ...VALID.task(),
        webhooks: [{ event: 'task.updated', url: 'http://127.0.0.1:9/direct' }],
      }),
      201,
    );
    const { claims, report } = await claimAsNewAgent(t, 1);
    await report(claims[0]!, {
      kind: 'update',
      seq: 0,
      patch: { status: 'DONE_ERROR', error: 'x', finishedAt: Date.now() },
    });
    expect(await deliveries(task.id)).toEqual(['task.updated RUNNING', 'task.updated DONE_ERROR']);
  });

  it("learns from the claim's and the report's own statements that no webhook exists (PGlite)", async (ctx) => {
    if (!t.db.singleConnection) ctx.skip();
    const task = await json(await t.call('POST', '/api/v1/tasks', VALID.task()), 201);
    const agent = await insertAgent(t.db);
    const group = new GroupCommit(t.ctx);
    const as = { id: agent.id, name: agent.name, capabilities: [] };
    // A webhook inserted after the statement looked: its events are not stored, so the statement's
    // answer, not a later look, decided.
    const hookAfter = (tx: Db, url: string) =>
      tx.execute(
        sql`INSERT INTO webhooks (id, event, url, secret, created_at, updated_at)
            VALUES (gen_random_uuid(), 'task.updated', ${url}, 's', 0, 0)`,
      );
    const [claim] = await group.run(async (tx, ev) => {
      const claimed = await claimTasksIn(tx, ev, Date.now(), as, 1, 60_000);
      await hookAfter(tx, 'http://127.0.0.1:9/after-claim');
      return claimed;
    });
    expect(claim?.task.id).toBe(task.id);
    expect(await deliveries(task.id)).toEqual([]);
    await t.db.db.execute(sql`DELETE FROM webhooks`);
    await group.run(async (tx, ev) => {
      await applyReportIn(
        tx,
        ev,
        Date.now(),
        agent.id,
        {
          taskId: task.id,
          attempt: claim!.attempt,
          leaseToken: claim!.leaseToken,
          kind: 'update',
          seq: 0,
          patch: { status: 'DONE_SUCCESSFUL', finishedAt: Date.now() },
        },
        60_000,
      );
      await hookAfter(tx, 'http://127.0.0.1:9/after-report');
    });
    expect(await deliveries(task.id)).toEqual([]);
  });

  it('writes no events statement once a transaction run alone saw no webhook, and does once it saw one', async (ctx) => {
    // Only where the database runs one transaction at a time (PGlite); PostgreSQL: the next test.
    if (!t.db.singleConnection) ctx.skip();
    const group = new GroupCommit(t.ctx);
    const taskId = (await json(await t.call('POST', '/api/v1/tasks', VALID.task()), 201)).id as string;
    // A webhook the transaction's events statement would find (it checks the table itself) but the
    // transaction saw none earlier: the events are not stored, so no statement ran.
    const emitAfterSeeing = (exist: boolean, url: string) =>
      group.run(async (tx, ev) => {
        ev.sawWebhooks(exist);
        await tx.execute(
          sql`INSERT INTO webhooks (id, event, url, secret, created_at, updated_at)
              VALUES (gen_random_uuid(), 'task.updated', ${url}, 's', 0, 0)`,
        );
        await ev.emit({ event: 'task.updated', data: { status: 'RUNNING' }, taskId });
      });
    await emitAfterSeeing(false, 'http://127.0.0.1:9/a');
    expect(await deliveries(taskId)).toEqual([]);
    // Seen once as some, the transaction stays "some".
    await group.run(async (tx, ev) => {
      ev.sawWebhooks(true);
      ev.sawWebhooks(false);
      await ev.emit({ event: 'task.updated', data: { status: 'QUEUED' }, taskId });
      void tx;
    });
    expect(await deliveries(taskId)).toEqual(['task.updated QUEUED']);
    await emitAfterSeeing(true, 'http://127.0.0.1:9/b');
    expect(await deliveries(taskId)).toEqual([
      'task.updated QUEUED',
      'task.updated RUNNING',
      'task.updated RUNNING',
    ]);
  });

  it('stores the events of a transaction that saw no webhook for one created while it waited for a lock', async (ctx) => {
    // PostgreSQL: another transaction can commit while this one runs (here while it waits for a batch's
    // row, as before its batch.finished); the events statement checks for webhooks just before the commit.
    if (t.db.singleConnection) ctx.skip();
    const group = new GroupCommit(t.ctx);
    const taskId = (await json(await t.call('POST', '/api/v1/tasks', VALID.task()), 201)).id as string;
    await group.run(async (_tx, ev) => {
      ev.sawWebhooks(false);
      // Created and committed on another connection while this transaction is open.
      await json(
        await t.call('POST', '/api/v1/webhooks', { event: 'task.updated', url: 'http://127.0.0.1:9/l' }),
        201,
      );
      await ev.emit({ event: 'task.updated', data: { status: 'DONE_SUCCESSFUL' }, taskId });
    });
    expect(await deliveries(taskId)).toEqual(['task.updated DONE_SUCCESSFUL']);
  });
});
