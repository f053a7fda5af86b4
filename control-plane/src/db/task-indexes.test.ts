import type { TaskReport } from '@ffleet/shared';
import { type SQL, sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { claimAsNewAgent, json, VALID } from '../../../test/api/support.ts';
import { useTestApp } from '../../../test/helpers/app.ts';
import { dbKinds } from '../../../test/helpers/db-kinds.ts';
import { GroupCommit } from '../scheduler/group-commit.ts';
import { renewLeasesIn } from '../scheduler/leases.ts';
import { applyReportIn } from '../scheduler/reports.ts';
import { openBatchTaskProbe } from '../services/tasks.ts';
import type { Db } from './client.ts';

/**
 * What the tasks table's indexes cost and serve (migration 0004), on both backends: the writes a
 * running task makes most often touch no index, and the batch check after every finished task reads
 * one index entry, not the batch.
 */
describe.each(dbKinds)('tasks indexes on %s', (kind) => {
  const t = useTestApp({ kind });

  /**
   * Row updates of tasks that `write` makes, and how many of them were HOT. The backend's counters
   * are read before and after, in the same transaction: they are pending (not yet flushed) counts,
   * which on PostgreSQL 15 also hold earlier transactions of the same connection.
   */
  const updatesBy = async (tx: Db, write: () => Promise<unknown>) => {
    const read = async () =>
      (
        await t.db.rows<{ updated: number; hot: number }>(
          tx,
          sql`SELECT pg_stat_get_xact_tuples_updated('tasks'::regclass)::int AS updated,
            pg_stat_get_xact_tuples_hot_updated('tasks'::regclass)::int AS hot`,
        )
      )[0]!;
    const before = await read();
    const result = await write();
    const after = await read();
    return { result, updated: after.updated - before.updated, hot: after.hot - before.hot };
  };

  it('a progress report and a lease renewal are HOT updates (no index writes); a status change is not', async () => {
    await json(await t.call('POST', '/api/v1/tasks', VALID.task()), 201);
    const { agent, claims, now } = await claimAsNewAgent(t, 1);
    const claim = claims[0]!;
    const ref = { taskId: claim.task.id, attempt: claim.attempt, leaseToken: claim.leaseToken };
    const group = new GroupCommit(t.ctx);
    // Later than the claim, so every write below really moves the lease (an unchanged value would
    // not stop a HOT update even if the column were indexed).
    const report = (r: { seq: number; patch: Extract<TaskReport, { kind: 'update' }>['patch'] }) =>
      group.run(async (tx, ev, scope) => {
        const report: TaskReport = { kind: 'update', ...ref, ...r };
        const { result, ...counts } = await updatesBy(tx, () =>
          applyReportIn(tx, ev, now + 500, agent.id, report, 60_000, (b) => scope.finishBatch(b)),
        );
        return { kind: (result as { kind: string }).kind, ...counts };
      });

    expect(await report({ seq: 0, patch: { progress: 40, remaining: 12.5 } })).toEqual({
      kind: 'applied',
      updated: 1,
      hot: 1,
    });
    const renewal = await group.run((tx) =>
      updatesBy(tx, () => renewLeasesIn(tx, now + 1_000, agent.id, [ref], 60_000)),
    );
    expect(renewal).toEqual({ result: [], updated: 1, hot: 1 });
    // The status is indexed: moving it writes every index (the counters do tell the two apart).
    expect(await report({ seq: 1, patch: { status: 'DONE_SUCCESSFUL', progress: 100 } })).toEqual({
      kind: 'applied',
      updated: 1,
      hot: 0,
    });
  });

  it('looks for an open task of a finishing batch in tasks_batch_open_idx, even when the batch is most of the table', async () => {
    const tasks = Array.from({ length: 1000 }, () => VALID.task());
    const batch = await json<{ id: string }>(await t.call('POST', '/api/v1/batches', { tasks }), 201);
    // Statistics that say what the planner must not fall for: this batch is almost every row.
    await t.db.rows(t.db.db, sql`ANALYZE tasks`);
    const probe = openBatchTaskProbe(t.db.db).toSQL();
    // The probe's parameters: the batch id (a placeholder) and the LIMIT.
    const args = probe.params.map((p) => (typeof p === 'number' ? String(p) : `'${batch.id}'::uuid`));
    const explain = (tx: Db, q: SQL) =>
      t.db
        .rows<Record<string, string>>(tx, q)
        .then((rows) => rows.map((r) => Object.values(r)[0]).join('\n'));
    const plans = await t.db.db.transaction(async (tx) => {
      await t.db.rows(tx, sql.raw(`PREPARE open_probe AS ${probe.sql}`));
      // The first five runs get custom plans (which see this batch's statistics), then a generic one.
      const out: string[] = [];
      for (let i = 0; i < 7; i++)
        out.push(await explain(tx, sql.raw(`EXPLAIN EXECUTE open_probe(${args.join(', ')})`)));
      await t.db.rows(tx, sql`DEALLOCATE open_probe`);
      return out;
    });
    for (const plan of plans) {
      expect(plan).toContain('tasks_batch_open_idx');
      expect(plan).not.toContain('Seq Scan');
    }
  });
});
