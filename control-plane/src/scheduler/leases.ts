import { and, eq, gte, lt, lte, sql } from 'drizzle-orm';
import { anyOf, unnestRows } from '../db/array-literal.ts';
import type { Db } from '../db/client.ts';
import type { TaskRow } from '../db/mappers.ts';
import { taskIsRunning, taskLogs, tasks } from '../db/schema.ts';
import { ph, runCached } from '../db/statement-cache.ts';
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
  return renewLeasesIn(ctx.database.db, ctx.now(), agentId, running, leaseTtlMs);
}

/**
 * `renewLeases` as ONE statement on `db` (a transaction in group commit): the fence (this agent, this
 * attempt, this lease token, still running) is the WHERE of the UPDATE; what it did not renew is stale.
 */
export async function renewLeasesIn(
  db: Db,
  now: number,
  agentId: string,
  running: readonly RunningRef[],
  leaseTtlMs: number,
): Promise<RunningRef[]> {
  if (running.length === 0) return [];
  const wellFormed = running.filter((r) => UUID_RE.test(r.taskId) && Number.isInteger(r.attempt));
  const renewed = new Set<string>();
  if (wellFormed.length) {
    const rows = await db
      .update(tasks)
      .set({ leaseExpiresAt: now + leaseTtlMs })
      .from(
        unnestRows('ref', [
          ['id', 'uuid', wellFormed.map((r) => r.taskId)],
          ['attempt', 'int', wellFormed.map((r) => r.attempt)],
          ['lease_token', 'text', wellFormed.map((r) => r.leaseToken)],
        ]),
      )
      .where(
        and(
          sql`${tasks.id} = ref.id AND ${tasks.attempt} = ref.attempt AND ${tasks.leaseToken} = ref.lease_token`,
          eq(tasks.agentId, agentId),
          taskIsRunning,
        ),
      )
      .returning({ id: tasks.id, attempt: tasks.attempt });
    for (const r of rows) renewed.add(`${r.id}/${r.attempt}`);
  }
  return running.filter((r) => !renewed.has(`${r.taskId.toLowerCase()}/${r.attempt}`));
}

export type UnreportedTask = { id: string; attempt: number; leaseToken: string | null; startedAt: number };

/**
 * The running tasks of `agentId` claimed between `from` and `until` (their `started_at`) that no report
 * of their attempt has reached yet (`report_seq` -1): those its heartbeats may leave out because it
 * never received them (unheard-claims.ts). An agent that reported on an attempt has received it. One
 * statement on tasks_agent_running_idx, usually of no row.
 */
export function unreportedTasksIn(
  db: Db,
  agentId: string,
  from: number,
  until: number,
): Promise<UnreportedTask[]> {
  return runCached<UnreportedTask[]>(
    db,
    'unreported-on-agent',
    () =>
      db
        .select({
          id: tasks.id,
          attempt: tasks.attempt,
          leaseToken: tasks.leaseToken,
          startedAt: tasks.startedAt,
        })
        .from(tasks)
        .where(
          and(
            eq(tasks.agentId, ph('agentId')),
            taskIsRunning,
            eq(tasks.reportSeq, -1),
            gte(tasks.startedAt, ph('from')),
            lte(tasks.startedAt, ph('until')),
          ),
        ),
    { agentId, from, until },
  );
}

/** Task ids are UUIDs; anything else cannot be a task (and must not reach a uuid cast). */
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Give every running task's lease at least until `until`. Used when the control plane (re)connects to
 * the broker: while it could not hear heartbeats, silence proves nothing about the agents.
 */
export async function extendRunningLeases(ctx: ServiceContext, until: number): Promise<void> {
  await ctx.database.db
    .update(tasks)
    .set({ leaseExpiresAt: until })
    .where(and(taskIsRunning, lt(tasks.leaseExpiresAt, until)));
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
  opts: {
    onlyIds?: string[];
    reason?: string;
    /**
     * These tasks only, each as it was read: swept only if its locked row still holds every value given
     * (a row that moved on since, renewed, reported on or given to another attempt, is left alone).
     */
    unchanged?: readonly TaskSnapshot[];
  } & RequeueOptions = {},
): Promise<SweepResult> {
  const now = ctx.now();
  const expected = opts.unchanged && new Map(opts.unchanged.map((u) => [u.id, u]));
  const onlyIds = opts.onlyIds ?? (expected && [...expected.keys()]);
  return transact(ctx, async (tx, ev) => {
    const conds = [taskIsRunning];
    if (onlyIds) {
      if (onlyIds.length === 0) return { requeued: [], failed: [], canceled: [] };
      conds.push(anyOf(tasks.id, onlyIds, 'uuid'));
    } else conds.push(lt(tasks.leaseExpiresAt, now));
    const expired = await tx
      .select()
      .from(tasks)
      .where(and(...conds))
      .for('update', { skipLocked: true });
    const result: SweepResult = { requeued: [], failed: [], canceled: [] };
    for (const t of expired) {
      if (expected && !holds(t, expected.get(t.id))) continue;
      const outcome = await requeueLostTask(tx, ev, t, now, opts.reason ?? 'lease expired', {
        countsAttempt: opts.countsAttempt,
        lost: opts.lost,
      });
      result[outcome].push(t.id);
    }
    return result;
  });
}

/**
 * The task's log says why an attempt ended without its agent's word (`GET /tasks/{id}/logs`:
 * `[attempt N control-plane] …`): else an operator sees attempts end with no reason.
 */
async function logRequeue(tx: Db, t: TaskRow, now: number, text: string): Promise<void> {
  await tx
    .insert(taskLogs)
    .values({ taskId: t.id, attempt: t.attempt, step: 'control-plane', text, createdAt: now });
}

/** Some of a task row's values as they were read, by its id (sweepExpiredLeases `unchanged`). */
type TaskSnapshot = { id: string } & Partial<TaskRow>;

const holds = (t: TaskRow, snap: TaskSnapshot | undefined): boolean =>
  snap !== undefined && (Object.keys(snap) as (keyof TaskRow)[]).every((k) => t[k] === snap[k]);

type RequeueOptions = {
  /** False for an attempt its agent gave back on purpose or never received (see requeueLostTask). */
  countsAttempt?: boolean;
  /** What became of the agent, after its name in the log line; default `was lost (<why>)`. */
  lost?: string;
};

/**
 * The one rule for work whose agent is gone (lease expired, restarted without it, handed back, never
 * received it): a pending cancel completes as DONE_CANCELED; past the attempt limit DONE_ERROR naming
 * the agent; otherwise back to QUEUED for another agent. An attempt a live agent gave back on purpose,
 * or one whose claim's answer it never received (`countsAttempt: false`), never ends the task: its limit
 * grows by one, as a restart's does.
 */
export async function requeueLostTask(
  tx: Db,
  ev: EmittedEvents,
  t: TaskRow,
  now: number,
  why: string,
  /** `explained`: the agent's own log line says why (a hand-back); the control plane adds none. */
  opts: RequeueOptions & { explained?: boolean } = {},
): Promise<'requeued' | 'failed' | 'canceled'> {
  const counts = opts.countsAttempt ?? true;
  const log = opts.explained ? async () => {} : (text: string) => logRequeue(tx, t, now, text);
  const who = t.agentName ?? t.agentId ?? 'unknown';
  // The lost attempt's late reports may still bring its output (applyClassified).
  const lost = {
    lostLeaseToken: t.leaseToken,
    lostAttempt: t.attempt,
    lostReportSeq: t.reportSeq,
    lostRun: null,
  };
  if (t.cancelRequested) {
    // The agent never confirmed the stop: say so, and what that leaves (an agent cut off from the control
    // plane may still run the step; it stops it when it is back in touch, keeping the partial output,
    // since by then the path may be new work's).
    await log(
      `canceled without agent ${who}, which did not confirm the stop (${why}); if its run is still going, ` +
        'the agent stops it when it is back in touch, and any partial output stays',
    );
    await saveTaskChange(
      tx,
      ev,
      t.id,
      { status: 'DONE_CANCELED', finishedAt: now, leaseToken: null, cancelRequested: false, ...lost },
      { now },
    );
    return 'canceled';
  }
  if (counts && t.attempt >= t.maxAttempts) {
    await logRequeue(
      tx,
      t,
      now,
      `agent ${who} was lost (${why}) on attempt ${t.attempt} of ${t.maxAttempts}; giving up`,
    );
    await saveTaskChange(
      tx,
      ev,
      t.id,
      {
        status: 'DONE_ERROR',
        finishedAt: now,
        leaseToken: null,
        ...lost,
        error: `agent ${who} was lost (${why}) on attempt ${t.attempt} of ${t.maxAttempts}; giving up`,
      },
      { now },
    );
    return 'failed';
  }
  await log(
    `attempt ${t.attempt} went back to the queue: agent ${who} ${opts.lost ?? `was lost (${why})`}${counts ? '' : '; it does not count against the attempts'}`,
  );
  await saveTaskChange(
    tx,
    ev,
    t.id,
    {
      status: 'QUEUED',
      ...(counts ? {} : { maxAttempts: t.maxAttempts + 1 }),
      leaseToken: null,
      ...lost,
      // ... and its late success may still finish the task while it waits here (adoptLateSuccess).
      lostRun: {
        agentId: t.agentId,
        agentName: t.agentName,
        startedAt: t.startedAt,
        commandResolved: t.commandResolved,
        inputResolved: t.inputResolved,
        outputResolved: t.outputResolved,
        preProcessing: t.preProcessing,
        postProcessing: t.postProcessing,
      },
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
