import { and, eq, inArray, lt } from 'drizzle-orm';
import type { Db } from '../db/client.ts';
import type { TaskRow } from '../db/mappers.ts';
import { tasks } from '../db/schema.ts';
import type { EmittedEvents } from '../events/outbox.ts';
import { type ServiceContext, transact } from '../services/context.ts';
import { clearStep, saveTaskChange } from '../services/tasks.ts';

export type RunningRef = { taskId: string; attempt: number; leaseToken: string };

/**
 * Renew the leases of the tasks an agent says it runs. Returns the ones that are not (or no longer)
 * this agent's current attempt: the agent must stop them.
 */
export async function renewLeases(
  ctx: ServiceContext,
  agentId: string,
  running: readonly RunningRef[],
  leaseTtlMs: number,
): Promise<RunningRef[]> {
  if (running.length === 0) return [];
  const db = ctx.database.db;
  const now = ctx.now();
  const ids = running.map((r) => r.taskId).filter((id) => /^[0-9a-f-]{36}$/i.test(id));
  const rows = ids.length
    ? await db
        .select({
          id: tasks.id,
          attempt: tasks.attempt,
          leaseToken: tasks.leaseToken,
          agentId: tasks.agentId,
          status: tasks.status,
        })
        .from(tasks)
        .where(inArray(tasks.id, ids))
    : [];
  const byId = new Map(rows.map((r) => [r.id, r]));
  const valid: string[] = [];
  const stale: RunningRef[] = [];
  for (const r of running) {
    const row = byId.get(r.taskId);
    const ok =
      row &&
      row.agentId === agentId &&
      row.attempt === r.attempt &&
      row.leaseToken === r.leaseToken &&
      (row.status === 'PRE_PROCESSING' || row.status === 'RUNNING');
    if (ok) valid.push(r.taskId);
    else stale.push(r);
  }
  if (valid.length) {
    await db
      .update(tasks)
      .set({ leaseExpiresAt: now + leaseTtlMs })
      .where(and(inArray(tasks.id, valid), eq(tasks.agentId, agentId)));
  }
  return stale;
}

/**
 * Give every running task's lease at least until `until`. Used when the control plane (re)connects to
 * the broker: while it could not hear heartbeats, silence proves nothing about the agents.
 */
export async function extendRunningLeases(ctx: ServiceContext, until: number): Promise<void> {
  await ctx.database.db
    .update(tasks)
    .set({ leaseExpiresAt: until })
    .where(and(inArray(tasks.status, ['PRE_PROCESSING', 'RUNNING']), lt(tasks.leaseExpiresAt, until)));
}

export type SweepResult = { requeued: string[]; failed: string[]; canceled: string[] };

/**
 * Requeue the running tasks whose lease expired (their agent is lost: crash, partition, SIGSTOP).
 * Losing an agent is not an encode failure: the task goes back to QUEUED with its attempt counted,
 * until `maxAttempts`, then DONE_ERROR naming the agent. A task whose cancel was pending ends
 * DONE_CANCELED (the agent is unreachable, so lease expiry finishes the cancel).
 */
export async function sweepExpiredLeases(
  ctx: ServiceContext,
  opts: { onlyIds?: string[]; reason?: string } = {},
): Promise<SweepResult> {
  const now = ctx.now();
  return transact(ctx, async (tx, ev) => {
    const conds = [inArray(tasks.status, ['PRE_PROCESSING', 'RUNNING'])];
    if (opts.onlyIds) {
      if (opts.onlyIds.length === 0) return { requeued: [], failed: [], canceled: [] };
      conds.push(inArray(tasks.id, opts.onlyIds));
    } else conds.push(lt(tasks.leaseExpiresAt, now));
    const expired = await tx
      .select()
      .from(tasks)
      .where(and(...conds))
      .for('update', { skipLocked: true });
    const result: SweepResult = { requeued: [], failed: [], canceled: [] };
    for (const t of expired) {
      const outcome = await requeueLostTask(tx, ev, t, now, opts.reason ?? 'lease expired');
      result[outcome].push(t.id);
    }
    return result;
  });
}

/**
 * The one rule for work whose agent is gone (lease expired, restarted without it, handed back):
 * a pending cancel completes as DONE_CANCELED; past the attempt limit DONE_ERROR naming the agent;
 * otherwise back to QUEUED for another agent.
 */
export async function requeueLostTask(
  tx: Db,
  ev: EmittedEvents,
  t: TaskRow,
  now: number,
  why: string,
): Promise<'requeued' | 'failed' | 'canceled'> {
  const who = t.agentName ?? t.agentId ?? 'unknown';
  if (t.cancelRequested) {
    await saveTaskChange(
      tx,
      ev,
      t.id,
      { status: 'DONE_CANCELED', finishedAt: now, leaseToken: null, cancelRequested: false },
      { now },
    );
    return 'canceled';
  }
  if (t.attempt >= t.maxAttempts) {
    await saveTaskChange(
      tx,
      ev,
      t.id,
      {
        status: 'DONE_ERROR',
        finishedAt: now,
        leaseToken: null,
        error: `agent ${who} was lost (${why}) on attempt ${t.attempt} of ${t.maxAttempts}; giving up`,
      },
      { now },
    );
    return 'failed';
  }
  await saveTaskChange(
    tx,
    ev,
    t.id,
    {
      status: 'QUEUED',
      leaseToken: null,
      leaseExpiresAt: 0,
      agentId: null,
      agentName: null,
      progress: 0,
      remaining: 0,
      startedAt: 0,
      reportSeq: -1,
      error: '',
      commandResolved: '',
      inputResolved: '',
      outputResolved: '',
      preProcessing: clearStep(t.preProcessing),
      postProcessing: clearStep(t.postProcessing),
    },
    { now },
  );
  return 'requeued';
}
