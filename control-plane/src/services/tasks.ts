import {
  formatBytes,
  isDoneStatus,
  type PageQuery,
  type Task,
  type TaskCreate,
  type TaskListQuery,
  type TaskStatus,
} from '@ffleet/shared';
import { and, asc, count, desc, eq, ilike, inArray, or, type Placeholder, type SQL, sql } from 'drizzle-orm';
import { ConflictError, NotFoundError, ValidationError } from '../api/errors.ts';
import type { Db, RawStatement } from '../db/client.ts';
import { type TaskRow, toTask } from '../db/mappers.ts';
import { agents, batches, presets, taskCounts, taskIsOpen, taskLogs, tasks } from '../db/schema.ts';
import { ph, runCached } from '../db/statement-cache.ts';
import { compactTaskCounts } from '../db/task-counts.ts';
import { EmittedEvents } from '../events/outbox.ts';
import { type ServiceContext, transact } from './context.ts';
import { claimIdempotencyKey, type IdempotencyRequest, storeIdempotentResponse } from './idempotency.ts';
import { paginate } from './paginate.ts';
import { buildTaskRow, presetOf, storedTaskRow, type TaskInsert } from './task-input.ts';

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
export const isUuid = (s: string): boolean => UUID_RE.test(s);

/** The `data` of a task event (CONTRACT.md "Webhooks and deliveries"). */
export function taskEventData(t: Task) {
  return {
    taskId: t.id,
    inputFile: t.inputFile.resolved || t.inputFile.raw,
    outputFile: t.outputFile.resolved || t.outputFile.raw,
    status: t.status,
    name: t.name,
    progress: t.progress,
    error: t.error,
    batch: t.batch,
    source: t.source,
    task: t,
  };
}

export async function findPreset(tx: Db, id: string) {
  if (!isUuid(id)) return null;
  const [p] = await tx.select().from(presets).where(eq(presets.id, id));
  return p ?? null;
}

export async function getTaskRow(tx: Db, id: string, forUpdate = false): Promise<TaskRow | null> {
  if (!isUuid(id)) return null;
  const q = tx.select().from(tasks).where(eq(tasks.id, id));
  const [r] = forUpdate ? await q.for('update') : await q;
  return r ?? null;
}

/** Columns a task insert sets (the others take their defaults); `id`, `name`, `command_raw`, `status` are required. */
const INSERT_COLUMNS = [
  'id',
  'name',
  'commandRaw',
  'inputRaw',
  'outputRaw',
  'metadata',
  'status',
  'priority',
  'source',
  'preProcessing',
  'postProcessing',
  'createdAt',
  'updatedAt',
  'presetId',
  'batchId',
  'webhooks',
  'requires',
  'watchKey',
  'watchfolderId',
] as const;
const INSERT_SET = new Set<string>(INSERT_COLUMNS);
/** The fixed insert's text per number of rows (see insertTasks: at most 7 sizes are used). */
const insertTexts = new Map<number, string>();

function insertText(rows: number): string {
  let text = insertTexts.get(rows);
  if (text === undefined) {
    const n = INSERT_COLUMNS.length;
    const tuples = Array.from(
      { length: rows },
      (_, r) => `(${INSERT_COLUMNS.map((_, i) => `$${r * n + i + 1}`).join(', ')})`,
    );
    text = `new_task AS (INSERT INTO tasks (${INSERT_COLUMNS.map((k) => `"${tasks[k].name}"`).join(', ')})
  VALUES ${tuples.join(', ')}), `;
    insertTexts.set(rows, text);
  }
  return text;
}

/** The row sets exactly the fixed columns (the shape insertText writes). */
function isFixedRow(row: TaskInsert): boolean {
  for (const k of Object.keys(row)) if (!INSERT_SET.has(k)) return false;
  for (const k of INSERT_COLUMNS) if (row[k] === undefined) return false;
  return true;
}

/**
 * The insert of `rows` as a CTE for eventsStatement: a fixed column list (one text per row count, one
 * prepared statement each) and values encoded by their columns as drizzle's insert builder encodes
 * them. Rows that set other columns or leave one of these unset go through the builder.
 */
function taskInsertCte(db: Db, rows: readonly TaskInsert[]): RawStatement {
  if (!rows.every(isFixedRow)) {
    const q = db
      .insert(tasks)
      .values([...rows])
      .toSQL();
    return { text: `new_task AS (${q.sql}), `, params: q.params };
  }
  const params: unknown[] = [];
  for (const row of rows) {
    for (const k of INSERT_COLUMNS) {
      const v = row[k];
      params.push(v === null ? null : tasks[k].mapToDriverValue(v as never));
    }
  }
  return { text: insertText(rows.length), params };
}

/**
 * Rows one statement inserts at most. A power of two, and every statement takes the largest power of
 * two that fits the rest: a batch of any size is written with at most 7 statement shapes (64, 32, …,
 * 1 rows). 64 rows bind 64 × (19 + 6) parameters.
 */
const MAX_INSERT_ROWS = 64;

/**
 * Insert validated task rows and emit a `task.created` (global + direct) for each: the inserts are CTEs
 * of their events' statement, so up to MAX_INSERT_ROWS tasks, their events and deliveries are ONE
 * statement (one statement per task cost a 200-task batch ~1.1 ms of PGlite's CPU per task). Tasks are
 * built from their rows (storedTaskRow) rather than read back, and come back in the order of `rows`.
 */
export async function insertTasks(tx: Db, ev: EmittedEvents, rows: readonly TaskInsert[]): Promise<Task[]> {
  const out: Task[] = [];
  for (let i = 0; i < rows.length; ) {
    let size = MAX_INSERT_ROWS;
    while (size > rows.length - i) size /= 2;
    const chunk = rows.slice(i, i + size);
    const created = chunk.map((row) => toTask(storedTaskRow(row)));
    await ev.emitMany(
      created.map((task) => ({
        event: 'task.created' as const,
        data: taskEventData(task),
        direct: task.webhooks,
        taskId: task.id,
        now: task.createdAt,
      })),
      taskInsertCte(tx, chunk),
    );
    out.push(...created);
    i += size;
  }
  return out;
}

/** Insert one validated task row and emit its `task.created`: ONE statement (see insertTasks). */
export async function insertTask(tx: Db, ev: EmittedEvents, row: TaskInsert): Promise<Task> {
  return (await insertTasks(tx, ev, [row]))[0]!;
}

export async function createTask(
  ctx: ServiceContext,
  input: TaskCreate,
  idem?: IdempotencyRequest,
): Promise<Task> {
  const presetId = presetOf(input);
  if (!idem && presetId === undefined) {
    // Nothing to read first: the insert, its event and deliveries are one auto-committed statement.
    const built = buildTaskRow(input, null, { source: 'api', now: ctx.now() });
    if (!built.ok) throw new ValidationError('task is invalid', built.issues);
    const ev = new EmittedEvents(ctx.database.db);
    const task = await insertTask(ctx.database.db, ev, built.row);
    ev.publish(ctx.bus);
    ctx.fleet.workAvailable([task.requires]);
    return task;
  }
  const task = await transact(ctx, async (tx, ev) => {
    if (idem) await claimIdempotencyKey(tx, idem, ctx.now());
    const preset = presetId !== undefined ? await findPreset(tx, presetId) : null;
    if (presetId !== undefined && !preset) {
      throw new ValidationError('unknown preset', [
        { path: 'preset', message: `preset ${presetId} not found` },
      ]);
    }
    const built = buildTaskRow(input, preset, { source: 'api', now: ctx.now() });
    if (!built.ok) throw new ValidationError('task is invalid', built.issues);
    const t = await insertTask(tx, ev, built.row);
    if (idem)
      await storeIdempotentResponse(tx, idem, { status: 201, body: t, location: `/api/v1/tasks/${t.id}` });
    return t;
  });
  ctx.fleet.workAvailable([task.requires]);
  return task;
}

function listWhere(q: TaskListQuery): SQL | undefined {
  const conds: SQL[] = [];
  if (q.status?.length) conds.push(inArray(tasks.status, q.status));
  if (q.source) conds.push(eq(tasks.source, q.source));
  if (q.batch) conds.push(isUuid(q.batch) ? eq(tasks.batchId, q.batch) : sql`false`);
  if (q.preset) conds.push(isUuid(q.preset) ? eq(tasks.presetId, q.preset) : sql`false`);
  if (q.agent) {
    conds.push(
      isUuid(q.agent)
        ? or(eq(tasks.agentId, q.agent), eq(tasks.agentName, q.agent))!
        : eq(tasks.agentName, q.agent),
    );
  }
  if (q.q) conds.push(ilike(tasks.name, `%${q.q.replace(/[\\%_]/g, (m) => `\\${m}`)}%`));
  return conds.length ? and(...conds) : undefined;
}

/** Delta rows summed by a count before it folds them (compactTaskCounts). */
const COMPACT_AFTER_ROWS = 1000;
let compacting: Promise<void> | null = null;

/**
 * The exact number of tasks, optionally only those in `statuses`, from task_counts (maintained by
 * triggers in the writers' transactions): a sum over a few rows instead of counting the table.
 */
export async function countTasks(ctx: ServiceContext, statuses?: readonly string[]): Promise<number> {
  const db = ctx.database.db;
  const where = statuses?.length ? inArray(taskCounts.status, [...statuses]) : undefined;
  const [r] = await db
    .select({ n: sql<string | number | null>`sum(${taskCounts.n})`, rows: count() })
    .from(taskCounts)
    .where(where);
  if ((r?.rows ?? 0) > COMPACT_AFTER_ROWS && !compacting) {
    compacting = compactTaskCounts(db)
      .catch((err) => ctx.logger.warn({ err }, 'task count compaction failed'))
      .finally(() => {
        compacting = null;
      });
  }
  return Number(r?.n ?? 0);
}

/** Newest first, with the total matching count. */
export async function listTasks(ctx: ServiceContext, q: TaskListQuery, page: PageQuery) {
  const db = ctx.database.db;
  const where = listWhere(q);
  // Only a status filter (or none): the total comes from task_counts.
  const countedByStatus = !q.source && !q.batch && !q.preset && !q.agent && !q.q;
  const { rows, total } = await paginate(
    db
      .select()
      .from(tasks)
      .where(where)
      // NULLS LAST (the columns are NOT NULL, so the order is the same) matches tasks_created_idx, which
      // drizzle-kit created as DESC NULLS LAST: a plain DESC would sort the whole table.
      .orderBy(sql`${tasks.createdAt} DESC NULLS LAST`, sql`${tasks.id} DESC NULLS LAST`),
    // Both counts start before the page query, as they always have (PGlite runs statements in order).
    countedByStatus
      ? countTasks(ctx, q.status)
      : db
          .select({ n: count() })
          .from(tasks)
          .where(where)
          .then(([r]) => Number(r?.n ?? 0)),
    page,
  );
  return { items: rows.map(toTask), total };
}

export async function getTask(ctx: ServiceContext, id: string): Promise<Task> {
  const r = await getTaskRow(ctx.database.db, id);
  if (!r) throw new NotFoundError('task', id);
  return toTask(r);
}

/**
 * Write a task change, emit `task.updated` (global + direct) and, when the task reached a DONE_*
 * state, finish its batch if it was the last one. Every status change goes through here.
 */
export async function saveTaskChange(
  tx: Db,
  ev: EmittedEvents,
  id: string,
  patch: Partial<typeof tasks.$inferInsert>,
  opts: { progressOnly?: boolean; now: number },
): Promise<Task> {
  const changed = await applyTaskChange(tx, ev, eq(tasks.id, id), patch, opts);
  if (!changed) throw new Error(`task ${id} vanished inside its own transaction`);
  return changed.task;
}

/** `task.updated` for `task` as it now is, to global and the task's own webhooks. */
export function emitTaskUpdated(ev: EmittedEvents, task: Task, now: number, progressOnly = false) {
  return ev.emit({
    event: 'task.updated',
    data: taskEventData(task),
    direct: task.webhooks,
    taskId: task.id,
    progressOnly,
    now,
  });
}

/**
 * Update the task `where` selects (one row at most) and emit what the change means: `task.updated`,
 * and `batch.finished` when it finished its batch's last task. `finishBatch` defers that batch check
 * (a group commit runs them at its end). Null when `where` matched nothing (nothing emitted).
 */
export async function applyTaskChange(
  tx: Db,
  ev: EmittedEvents,
  where: SQL | undefined,
  patch: Partial<typeof tasks.$inferInsert>,
  opts: { progressOnly?: boolean; now: number; finishBatch?: (batchId: string) => void },
): Promise<{ row: TaskRow; task: Task } | null> {
  const [row] = await tx
    .update(tasks)
    .set({ ...patch, updatedAt: opts.now })
    .where(where)
    .returning();
  return row ? taskChanged(tx, ev, row, patch.status, opts) : null;
}

/**
 * What a task change that was written means: `task.updated` for the row as it now is, and, when it
 * moved the task to a DONE_* `status`, `batch.finished` if it was its batch's last open task
 * (`finishBatch`: leave that check to the end of the group).
 */
export async function taskChanged(
  tx: Db,
  ev: EmittedEvents,
  row: TaskRow,
  status: string | undefined,
  opts: { progressOnly?: boolean; now: number; finishBatch?: (batchId: string) => void },
): Promise<{ row: TaskRow; task: Task }> {
  const task = toTask(row);
  await emitTaskUpdated(ev, task, opts.now, opts.progressOnly);
  if (status && isDoneStatus(status) && task.batch) {
    if (opts.finishBatch) opts.finishBatch(task.batch);
    else await finishBatchIfDone(tx, ev, task.batch, opts.now);
  }
  return { row, task };
}

/** The tasks of a batch that are not finished yet (QUEUED or running): tasks_batch_open_idx. */
export const openBatchTasks = (batchId: string | Placeholder): SQL | undefined =>
  and(eq(tasks.batchId, batchId), taskIsOpen);

/**
 * One open task of the batch (`batchId` placeholder), if any. Without an order, a LIMIT 1 can look
 * cheapest as a sequential scan: a big batch's open tasks are "most of the table" to the planner, but
 * they sit at its end. Ordered, the only cheap plan is tasks_batch_open_idx read backwards.
 */
export const openBatchTaskProbe = (db: Db) =>
  db
    .select({ one: sql<number>`1` })
    .from(tasks)
    .where(openBatchTasks(ph('batchId')))
    .orderBy(desc(tasks.createdAt))
    .limit(1);

/**
 * `batch.finished` exactly once each time a batch reaches DONE. The batch row lock serialises
 * concurrent finishers; the check for open tasks runs after the lock, so the last committer sees every
 * task done. `serialized`: the database runs one transaction at a time (PGlite), so no finisher can
 * run concurrently and the check alone decides; the batch row is then only read when it says DONE.
 * The check looks for ONE open task of the batch in tasks_batch_open_idx, so it costs the same for a
 * batch of 10 or of 20,000 (counting them read every open task of the batch after each finish: 0.3 ms
 * per finish in a batch of 200, 1.1 ms in one of 2,000, on PGlite).
 */
export async function finishBatchIfDone(
  tx: Db,
  ev: EmittedEvents,
  batchId: string,
  now: number,
  opts: { serialized?: boolean } = {},
): Promise<void> {
  // These statements run once per finished batch task: built once (statement-cache.ts).
  const lockBatch = () =>
    runCached<{ status: string }[]>(
      tx,
      'batch-finish:lock',
      () =>
        tx
          .select({ status: batches.status })
          .from(batches)
          .where(eq(batches.id, ph('batchId')))
          .for('update'),
      { batchId },
    );
  const anyOpen = () =>
    runCached<{ one: number }[]>(tx, 'batch-finish:open', () => openBatchTaskProbe(tx), { batchId });
  if (!opts.serialized) {
    const [b] = await lockBatch();
    if (!b || b.status === 'DONE') return;
  }
  if ((await anyOpen()).length > 0) return;
  if (opts.serialized) {
    const [b] = await lockBatch();
    if (!b || b.status === 'DONE') return;
  }
  await tx
    .update(batches)
    .set({ status: 'DONE', finishedAt: now, updatedAt: now })
    .where(eq(batches.id, batchId));
  const { getBatchDto } = await import('./batches.ts');
  const dto = await getBatchDto(tx, batchId);
  await ev.emit({ event: 'batch.finished', data: dto, now });
}

/** A processing step as it is before a run: resolved values, times and error cleared. */
export const clearStep = (s: TaskRow['preProcessing']): TaskRow['preProcessing'] =>
  s
    ? {
        ...s,
        scriptPath: { raw: s.scriptPath.raw, resolved: '' },
        sidecarPath: { raw: s.sidecarPath.raw, resolved: '' },
        startedAt: 0,
        finishedAt: 0,
        error: '',
      }
    : null;

const RUNNING_STATES: TaskStatus[] = ['PRE_PROCESSING', 'RUNNING'];

/** QUEUED → DONE_CANCELED at once; running → the agent is told to stop; DONE_* → 409. */
export async function cancelTask(ctx: ServiceContext, id: string): Promise<Task> {
  let toStop: TaskRow | null = null;
  const task = await transact(ctx, async (tx, ev) => {
    const r = await getTaskRow(tx, id, true);
    if (!r) throw new NotFoundError('task', id);
    if (isDoneStatus(r.status)) throw new ConflictError('TASK_FINISHED', `task ${id} is already ${r.status}`);
    const now = ctx.now();
    if (r.status === 'QUEUED' || !r.agentId) {
      return saveTaskChange(
        tx,
        ev,
        id,
        { status: 'DONE_CANCELED', finishedAt: now, remaining: 0, leaseToken: null, cancelRequested: false },
        { now },
      );
    }
    toStop = r;
    if (!r.cancelRequested) {
      await tx.update(tasks).set({ cancelRequested: true, updatedAt: now }).where(eq(tasks.id, id));
    }
    return toTask({ ...r, cancelRequested: true });
  });
  if (!toStop) return task;
  const stopping: TaskRow = toStop;
  // An offline agent cannot answer: the task as it is now (its waitingFor says what the cancel waits for).
  const [agent] = await ctx.database.db
    .select({ online: agents.online })
    .from(agents)
    .where(eq(agents.id, stopping.agentId!));
  const finished = agent?.online ? untilFinished(ctx, id, CANCEL_ANSWER_WAIT_MS) : null;
  ctx.fleet.cancelRunning(stopping);
  return (await finished) ?? task;
}

/**
 * How long a cancel of running work waits for the agent to report the task finished before it answers
 * with the task as it is (still running; it ends DONE_CANCELED when the agent's report comes). ffmpeg
 * stops on SIGTERM within a fraction of a second, so a client usually gets the final state at once
 * (DONE_CANCELED, or DONE_SUCCESSFUL when the transcode ended before the cancel reached it).
 */
export const CANCEL_ANSWER_WAIT_MS = 3_000;

/** The task once an event says it finished, or null after `ms` (or if it was deleted meanwhile). */
function untilFinished(ctx: ServiceContext, id: string, ms: number): Promise<Task | null> {
  return new Promise((resolve) => {
    const done = (t: Task | null) => {
      clearTimeout(timer);
      unsubscribe();
      resolve(t);
    };
    const timer = setTimeout(() => done(null), ms);
    const unsubscribe = ctx.bus.subscribe((p) => {
      const data = p.data as { taskId?: string; task?: Task };
      if (data.taskId !== id || !data.task) return;
      if (p.event === 'task.deleted') done(null);
      else if (isDoneStatus(data.task.status)) done(data.task);
    });
  });
}

/** Only from DONE_*: back to QUEUED with progress, resolved values, errors and step times cleared. */
export async function restartTask(ctx: ServiceContext, id: string): Promise<Task> {
  const task = await transact(ctx, async (tx, ev) => {
    const r = await getTaskRow(tx, id, true);
    if (!r) throw new NotFoundError('task', id);
    if (!isDoneStatus(r.status)) {
      throw new ConflictError(
        'TASK_NOT_FINISHED',
        `task ${id} is ${r.status}; only finished tasks can be restarted`,
      );
    }
    const now = ctx.now();
    if (r.batchId) {
      await tx
        .update(batches)
        .set({ status: 'RUNNING', finishedAt: 0, updatedAt: now })
        .where(eq(batches.id, r.batchId));
    }
    return saveTaskChange(
      tx,
      ev,
      id,
      {
        status: 'QUEUED',
        progress: 0,
        remaining: 0,
        error: '',
        commandResolved: '',
        inputResolved: '',
        outputResolved: '',
        startedAt: 0,
        finishedAt: 0,
        preProcessing: clearStep(r.preProcessing),
        postProcessing: clearStep(r.postProcessing),
        agentId: null,
        agentName: null,
        leaseToken: null,
        leaseExpiresAt: 0,
        reportSeq: -1,
        cancelRequested: false,
        // A restart is a fresh run: the attempt budget for lost agents starts again, and a lost
        // attempt's late success no longer finishes it.
        maxAttempts: r.attempt + 3,
        lostRun: null,
      },
      { now },
    );
  });
  ctx.fleet.workAvailable([task.requires]);
  return task;
}

/** Cancels first if running (the agent is told to stop), then deletes; emits `task.deleted`. */
export async function deleteTask(ctx: ServiceContext, id: string): Promise<void> {
  // CONTRACT: "cancels first if running, then deletes". The cancel waits (briefly) for the agent's
  // report, so subscribers see the task end DONE_CANCELED, its partial output gone, before task.deleted
  // (whose snapshot said RUNNING before). An agent that does not answer in time is told again below.
  const current = isUuid(id) ? await getTaskRow(ctx.database.db, id) : null;
  if (current && !isDoneStatus(current.status) && current.agentId) {
    await cancelTask(ctx, id).catch((err: unknown) => {
      // Finished or deleted meanwhile: the delete below sees the row as it now is.
      if (!(err instanceof ConflictError || err instanceof NotFoundError)) throw err;
    });
  }
  let stop: TaskRow | null = null;
  await transact(ctx, async (tx, ev) => {
    const now = ctx.now();
    const r = await getTaskRow(tx, id, true);
    if (!r) throw new NotFoundError('task', id);
    if (RUNNING_STATES.includes(r.status as TaskStatus) && r.agentId) stop = r;
    await tx.delete(tasks).where(eq(tasks.id, id));
    await tx.delete(taskLogs).where(eq(taskLogs.taskId, id));
    const task = toTask(r);
    await ev.emit({
      event: 'task.deleted',
      data: taskEventData(task),
      direct: task.webhooks,
      taskId: id,
      now,
    });
    if (r.batchId) {
      await tx
        .update(batches)
        .set({ taskCount: sql`${batches.taskCount} - 1`, updatedAt: now })
        .where(eq(batches.id, r.batchId));
      if (!isDoneStatus(r.status)) await finishBatchIfDone(tx, ev, r.batchId, now);
    }
  });
  if (stop) ctx.fleet.cancelRunning(stop);
}

/** Most log text returned by /logs (the tail). */
export const LOG_TAIL_BYTES = 256 * 1024;

export async function getTaskLogs(ctx: ServiceContext, id: string): Promise<string> {
  const db = ctx.database.db;
  const r = await getTaskRow(db, id);
  if (!r) throw new NotFoundError('task', id);
  const rows = await db
    .select({ attempt: taskLogs.attempt, step: taskLogs.step, text: taskLogs.text })
    .from(taskLogs)
    .where(eq(taskLogs.taskId, id))
    .orderBy(asc(taskLogs.id));
  let out = '';
  for (const l of rows) {
    const prefix = `[attempt ${l.attempt} ${l.step}] `;
    out += l.text
      .split('\n')
      .filter((line, i, a) => line !== '' || i < a.length - 1)
      .map((line) => prefix + line)
      .join('\n');
    out += '\n';
  }
  if (out.length <= LOG_TAIL_BYTES) return out;
  // The tail from the first whole line in it, after a line saying how much came before.
  const cut = out.length - LOG_TAIL_BYTES;
  const start = out.indexOf('\n', cut - 1) + 1 || out.length;
  let lines = 0;
  for (let i = out.indexOf('\n'); i !== -1 && i < start; i = out.indexOf('\n', i + 1)) lines++;
  const size = formatBytes(Buffer.byteLength(out.slice(0, start)));
  return `[ffleet: ${lines} earlier ${lines === 1 ? 'line' : 'lines'} (${size}) left out; whole lines of the last 256 KiB follow]\n${out.slice(start)}`;
}
