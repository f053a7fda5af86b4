import { isDoneStatus, type LogText, type TaskPatch, type TaskReport, type TaskStatus } from '@ffleet/shared';
import { and, eq, getTableColumns, inArray, lt, type SQL, sql } from 'drizzle-orm';
import { textArrayLiteral } from '../db/array-literal.ts';
import type { Db } from '../db/client.ts';
import type { TaskRow } from '../db/mappers.ts';
import { taskLogs, tasks } from '../db/schema.ts';
import { ph, runCached, wrapped } from '../db/statement-cache.ts';
import { type EmittedEvents, webhooksExist } from '../events/outbox.ts';
import { getTaskRow, isUuid, saveTaskChange, taskChanged } from '../services/tasks.ts';
import { requeueLostTask } from './leases.ts';

/** What the control plane answers a report with. */
export type ReportOutcome =
  | { kind: 'applied'; status: TaskStatus; finished: boolean; cancelRequested: boolean }
  | { kind: 'duplicate' }
  /** Wrong attempt/token, unknown or deleted task: the agent must stop this work. */
  | { kind: 'stale'; reason: string }
  | { kind: 'rejected'; reason: string };

/** Moves an agent may report. Everything else (going back, leaving DONE_*) is refused. */
const ALLOWED: Record<string, readonly TaskStatus[]> = {
  PRE_PROCESSING: ['PRE_PROCESSING', 'RUNNING', 'DONE_SUCCESSFUL', 'DONE_ERROR', 'DONE_CANCELED'],
  RUNNING: ['RUNNING', 'DONE_SUCCESSFUL', 'DONE_ERROR', 'DONE_CANCELED'],
};

const PROGRESS_KEYS = new Set(['progress', 'remaining']);

/** For each status an agent may report: the statuses it may come from (ALLOWED inverted). */
const ALLOWED_FROM = new Map<TaskStatus, TaskStatus[]>();
for (const [from, tos] of Object.entries(ALLOWED)) {
  for (const to of tos) ALLOWED_FROM.set(to, [...(ALLOWED_FROM.get(to) ?? []), from as TaskStatus]);
}

function columnsOf(p: TaskPatch): Partial<typeof tasks.$inferInsert> {
  const set: Partial<typeof tasks.$inferInsert> = {};
  if (p.status !== undefined) set.status = p.status;
  if (p.progress !== undefined) set.progress = p.progress;
  if (p.remaining !== undefined) set.remaining = p.remaining;
  if (p.error !== undefined) set.error = p.error;
  // The task's startedAt is the claim's (the control plane's clock) and stays for the attempt; the
  // agent's own is not taken. finishedAt: see finishedAtWithin.
  if (p.finishedAt !== undefined) set.finishedAt = p.finishedAt;
  if (p.name !== undefined) set.name = p.name;
  if (p.priority !== undefined) set.priority = p.priority;
  if (p.metadata !== undefined) set.metadata = p.metadata;
  if (p.webhooks !== undefined) set.webhooks = p.webhooks;
  if (p.command) Object.assign(set, { commandRaw: p.command.raw, commandResolved: p.command.resolved });
  if (p.inputFile) Object.assign(set, { inputRaw: p.inputFile.raw, inputResolved: p.inputFile.resolved });
  if (p.outputFile)
    Object.assign(set, { outputRaw: p.outputFile.raw, outputResolved: p.outputFile.resolved });
  if (p.preProcessing !== undefined) set.preProcessing = p.preProcessing;
  if (p.postProcessing !== undefined) set.postProcessing = p.postProcessing;
  return set;
}

function fence(row: TaskRow | null, r: TaskReport): ReportOutcome | null {
  if (!row) return { kind: 'stale', reason: 'task no longer exists' };
  if (row.attempt === r.attempt && r.seq <= row.reportSeq) return { kind: 'duplicate' };
  if (row.attempt !== r.attempt || row.leaseToken !== r.leaseToken) {
    return {
      kind: 'stale',
      reason: `attempt ${r.attempt} is no longer current (task is on attempt ${row.attempt}, ${row.status})`,
    };
  }
  return null;
}

/** A report of the task's last lost attempt (its lease token) not stored yet (a new seq). */
const fromLostAttempt = (row: TaskRow, r: TaskReport): boolean =>
  row.lostLeaseToken !== null &&
  r.leaseToken === row.lostLeaseToken &&
  r.attempt === row.lostAttempt &&
  r.seq > row.lostReportSeq;

/**
 * Apply one agent report in the caller's transaction: fenced by attempt + lease token, each seq once,
 * the status move checked, the lease renewed, events written in the same transaction. The common case (the current attempt of a task this
 * agent runs, a new seq, a legal move) is ONE fenced `UPDATE … WHERE id, attempt, lease token, agent,
 * report_seq < seq, status RETURNING`; only when that matches nothing is the row read and the report
 * classified (duplicate, stale, rejected, hand-back). The report's strings are storable already: the
 * control plane's MQTT client makes every agent message's strings storable (toStorable) as it parses it.
 */
export async function applyReportIn(
  tx: Db,
  ev: EmittedEvents,
  now: number,
  agentId: string,
  report: TaskReport,
  leaseTtlMs: number,
  /** Leave batch.finished to the end of the group (group commit); default: check it here. */
  finishBatch?: (batchId: string) => void,
): Promise<ReportOutcome> {
  if (!isUuid(report.taskId)) return { kind: 'stale', reason: 'task no longer exists' };
  const call: ReportCall = { tx, ev, now, agentId, report, leaseTtlMs };
  return (await applyFenced(call, finishBatch)) ?? applyClassified(call);
}

/** One report being applied: what both the fenced and the classified path need. */
type ReportCall = {
  tx: Db;
  ev: EmittedEvents;
  now: number;
  agentId: string;
  report: TaskReport;
  leaseTtlMs: number;
};

/** What a log report writes on the task row: its seq, and a renewed lease. */
const logReportColumns = (c: ReportCall) => ({
  reportSeq: c.report.seq,
  leaseExpiresAt: c.now + c.leaseTtlMs,
});

/**
 * What an update report writes on the task row: the patch, its seq, and the lease — renewed while the
 * task runs, cleared (with its token and any cancel request) when the report finishes it.
 */
function updateReportColumns(c: ReportCall, patch: TaskPatch, finished: boolean) {
  return Object.assign(columnsOf(patch), {
    reportSeq: c.report.seq,
    leaseExpiresAt: finished ? 0 : c.now + c.leaseTtlMs,
    ...(finished ? { leaseToken: null, cancelRequested: false, finishedAt: patch.finishedAt ?? c.now } : {}),
  });
}

/**
 * The agent's finishedAt (its own clock) kept between the task's startedAt (the claim, this clock) and
 * now: an encode box whose clock is behind had its tasks finish before they were created, ahead after
 * they were read. `finished` is a placeholder or a value.
 */
const finishedAtWithin = (finished: unknown, now: unknown): SQL =>
  sql`GREATEST(${tasks.startedAt}, LEAST(${finished}::bigint, ${now}::bigint))`;

/** A patch of progress fields only (its event is marked progress-only for subscribers). */
const isProgressOnly = (patch: TaskPatch): boolean => Object.keys(patch).every((k) => PROGRESS_KEYS.has(k));

/** Keep captured output as rows of the task's logs, in order; empty texts are skipped. */
async function storeLogs(tx: Db, r: TaskReport, logs: readonly LogText[], now: number): Promise<void> {
  const kept = logs.filter((l) => l.text.length > 0);
  if (!kept.length) return;
  // One statement per number of rows (built once per count, see statement-cache.ts).
  const values: Record<string, unknown> = { taskId: r.taskId, attempt: r.attempt, now };
  for (const [i, l] of kept.entries()) {
    values[`step${i}`] = l.step;
    values[`text${i}`] = l.text;
  }
  await runCached(
    tx,
    `report-logs:${kept.length}`,
    () =>
      tx.insert(taskLogs).values(
        kept.map((_, i) => ({
          taskId: ph('taskId'),
          attempt: ph('attempt'),
          step: ph(`step${i}`),
          text: ph(`text${i}`),
          createdAt: ph('now'),
        })) as unknown as (typeof taskLogs.$inferInsert)[],
      ),
    values,
  );
}

/**
 * The fenced UPDATE of a report: `set` on the task if it is this attempt, this lease, this agent, a seq
 * not applied yet and (`from`) one of these statuses. Built once per shape (the columns set, `from`,
 * what it returns, whether it stores logs) and reused with the report's values: building it every time
 * cost ~200 µs.
 *
 * The output the report carries (`logs`, empty texts skipped) is stored by the same statement, as rows
 * of the task's logs in order, only when the update matched (the fence held): a data-modifying CTE
 * inserts one row per updated row and log, given as two array parameters (one text for any number of
 * logs). One statement instead of two for every report that carries output.
 */
function fencedUpdate<T>(
  c: ReportCall,
  set: Record<string, unknown>,
  from: readonly string[] | null,
  returning: 'row' | 'status',
  logs: readonly LogText[],
): Promise<T[]> {
  const kept = logs.filter((l) => l.text.length > 0);
  const cols = Object.keys(set).sort();
  const r = c.report;
  const values: Record<string, unknown> = {
    id: r.taskId,
    attempt: r.attempt,
    token: r.leaseToken,
    agent: c.agentId,
    seq: r.seq,
  };
  for (const k of cols) values[`set_${k}`] = set[k];
  if ('finishedAt' in set) values.now = c.now;
  if (kept.length) {
    values.logSteps = textArrayLiteral(kept.map((l) => l.step));
    values.logTexts = textArrayLiteral(kept.map((l) => l.text));
    values.logAt = c.now;
  }
  const check = returning === 'row' && c.ev.wantsWebhookCheck;
  const key = `report:${returning}:${cols.join(',')}:${from?.join(',') ?? '*'}:${kept.length > 0}:${check}`;
  return runCached<T[]>(
    c.tx,
    key,
    () => {
      const q = c.tx
        .update(tasks)
        .set(
          Object.fromEntries(
            cols.map((k) => [
              k,
              k === 'finishedAt' ? finishedAtWithin(ph('set_finishedAt'), ph('now')) : ph(`set_${k}`),
            ]),
          ) as Partial<typeof tasks.$inferInsert>,
        )
        .where(
          and(
            eq(tasks.id, ph('id')),
            eq(tasks.attempt, ph('attempt')),
            eq(tasks.leaseToken, ph('token')),
            eq(tasks.agentId, ph('agent')),
            lt(tasks.reportSeq, ph('seq')),
            from ? inArray(tasks.status, from as TaskStatus[]) : undefined,
          ),
        );
      // An update report's row comes with whether its events need the events statement (outbox.ts).
      const update =
        returning === 'row'
          ? q.returning(check ? { ...getTableColumns(tasks), webhooksExist } : getTableColumns(tasks))
          : // id and attempt for the logs' rows (below).
            q.returning({
              status: tasks.status,
              cancelRequested: tasks.cancelRequested,
              id: tasks.id,
              attempt: tasks.attempt,
            });
      if (!kept.length) return update;
      return wrapped(
        update,
        (text, n) => `WITH u AS (${text}), l AS (
  INSERT INTO task_logs (task_id, attempt, step, text, created_at)
  SELECT u.id, u.attempt, x.step, x.text, $${n + 2}::bigint
  FROM u, unnest($${n}::text[], $${n + 1}::text[]) WITH ORDINALITY AS x(step, text, ord) ORDER BY x.ord
) SELECT * FROM u`,
        [ph('logSteps'), ph('logTexts'), ph('logAt')],
      );
    },
    values,
  );
}

/** The output a report carries: a log report's text, or the lines sent along with an update. */
const logsOf = (r: TaskReport): readonly LogText[] =>
  r.kind === 'log' ? [{ step: r.step, text: r.text }] : (r.logs ?? []);

async function applyFenced(
  c: ReportCall,
  finishBatch: ((batchId: string) => void) | undefined,
): Promise<ReportOutcome | null> {
  const { tx, ev, now, report } = c;
  if (report.kind === 'log') {
    const [r] = await fencedUpdate<{ status: string; cancelRequested: boolean }>(
      c,
      logReportColumns(c),
      null,
      'status',
      logsOf(report),
    );
    if (!r) return null;
    return {
      kind: 'applied',
      status: r.status as TaskStatus,
      finished: false,
      cancelRequested: r.cancelRequested,
    };
  }
  const patch = report.patch;
  if (patch.status === 'QUEUED') return null;
  const from = patch.status ? ALLOWED_FROM.get(patch.status) : ['PRE_PROCESSING', 'RUNNING'];
  if (!from?.length) return null;
  const finished = patch.status !== undefined && isDoneStatus(patch.status);
  const [returned] = await fencedUpdate<TaskRow & { webhooksExist?: boolean }>(
    c,
    { ...updateReportColumns(c, patch, finished), updatedAt: now },
    from,
    'row',
    logsOf(report),
  );
  if (!returned) return null;
  const { webhooksExist: hooks, ...updated } = returned;
  if (hooks !== undefined) ev.sawWebhooks(hooks);
  const changed = await taskChanged(tx, ev, updated, patch.status, {
    progressOnly: isProgressOnly(patch),
    now,
    finishBatch,
  });
  const { row } = changed;
  return {
    kind: 'applied',
    status: row.status as TaskStatus,
    finished,
    cancelRequested: !finished && row.cancelRequested,
  };
}

/**
 * A lost attempt's late `DONE_SUCCESSFUL` (its agent finished the run while cut off past its lease and
 * kept the result in its outbox) finishes the task when the task is still waiting in the queue: its
 * output is complete, and running it again would only redo the work. The requeue kept what it cleared
 * of that run (`lostRun`), which comes back with the report's own fields; the attempt number stays the
 * lost one's. Once another attempt has started (or the task was canceled or given up) the late result
 * changes nothing, as before. Null when the report is not such a success.
 */
async function adoptLateSuccess(c: ReportCall, row: TaskRow): Promise<ReportOutcome | null> {
  const { tx, ev, now, agentId, report } = c;
  const run = row.lostRun;
  if (report.kind !== 'update' || report.patch.status !== 'DONE_SUCCESSFUL') return null;
  if (row.status !== 'QUEUED' || row.attempt !== report.attempt || !run || run.agentId !== agentId)
    return null;
  const finishedAt = Math.max(run.startedAt, Math.min(report.patch.finishedAt ?? now, now));
  await saveTaskChange(
    tx,
    ev,
    report.taskId,
    {
      // LostRun's keys are the task's columns the requeue cleared.
      ...run,
      ...columnsOf(report.patch),
      status: 'DONE_SUCCESSFUL',
      progress: 100,
      remaining: 0,
      error: '',
      finishedAt,
      leaseToken: null,
      leaseExpiresAt: 0,
      cancelRequested: false,
      reportSeq: report.seq,
      lostReportSeq: report.seq,
      lostRun: null,
    },
    { now },
  );
  return { kind: 'applied', status: 'DONE_SUCCESSFUL', finished: true, cancelRequested: false };
}

/** The slow path: read the row (locked) and say why the fenced update did not apply, or apply it. */
async function applyClassified(c: ReportCall): Promise<ReportOutcome> {
  const { tx, ev, now, agentId, report } = c;
  const row = await getTaskRow(tx, report.taskId, true);
  const fenced = fence(row, report);
  if (fenced) {
    if (fenced.kind === 'stale' && row && fromLostAttempt(row, report)) {
      // The attempt lost with its agent reports after all (a box refused by the broker until its lease
      // ran out, a partition healed): its output is the attempt's, and its success, while no other
      // attempt has started, finishes the task; anything else changes nothing.
      await storeLogs(tx, report, logsOf(report), now);
      const adopted = await adoptLateSuccess(c, row);
      if (adopted) return adopted;
      await tx.update(tasks).set({ lostReportSeq: report.seq }).where(eq(tasks.id, report.taskId));
    }
    return fenced;
  }
  if (row!.agentId !== agentId) return { kind: 'stale', reason: 'task is assigned to another agent' };
  // The current attempt's output is kept whatever its patch does (a hand-back, an illegal move).
  await storeLogs(tx, report, logsOf(report), now);
  if (report.kind === 'log') {
    await tx.update(tasks).set(logReportColumns(c)).where(eq(tasks.id, report.taskId));
    return {
      kind: 'applied',
      status: row!.status as TaskStatus,
      finished: false,
      cancelRequested: row!.cancelRequested,
    };
  }
  const patch = report.patch;
  const current = row!.status as TaskStatus;
  if (patch.status === 'QUEUED') {
    // Hand-back: the agent is shutting down and killed this run; another agent takes it.
    await tx.update(tasks).set({ reportSeq: report.seq }).where(eq(tasks.id, report.taskId));
    await requeueLostTask(tx, ev, row!, now, `handed back by agent ${row!.agentName ?? agentId}`, {
      countsAttempt: patch.deliberate !== true,
      explained: true,
    });
    return { kind: 'applied', status: 'QUEUED', finished: false, cancelRequested: false };
  }
  const next = patch.status ?? current;
  if (!ALLOWED[current]?.includes(next)) {
    // The report is consumed (acked) but changes nothing: an illegal move must not be retried forever.
    await tx.update(tasks).set({ reportSeq: report.seq }).where(eq(tasks.id, report.taskId));
    return { kind: 'rejected', reason: `illegal status move ${current} → ${next}` };
  }
  const finished = isDoneStatus(next);
  const columns = updateReportColumns(c, patch, finished);
  if (typeof columns.finishedAt === 'number')
    (columns as Record<string, unknown>).finishedAt = finishedAtWithin(columns.finishedAt, now);
  await saveTaskChange(tx, ev, report.taskId, columns, {
    now,
    progressOnly: isProgressOnly(patch),
  });
  return { kind: 'applied', status: next, finished, cancelRequested: !finished && row!.cancelRequested };
}
