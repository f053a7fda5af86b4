import { randomUUID } from 'node:crypto';
import type { Batch, BatchCreate, PageQuery } from '@ffleet/shared';
import { count, desc, eq } from 'drizzle-orm';
import { ConflictError, NotFoundError, ValidationError } from '../api/errors.ts';
import { anyOf } from '../db/array-literal.ts';
import type { Db } from '../db/client.ts';
import { type PresetRow, type TaskRow, toBatch, toTask } from '../db/mappers.ts';
import { batches, presets, tasks } from '../db/schema.ts';
import { type ServiceContext, transact } from './context.ts';
import { claimIdempotencyKey, type IdempotencyRequest, storeIdempotentResponse } from './idempotency.ts';
import { paginate } from './paginate.ts';
import { buildTaskRow, type Issue, presetOf, type TaskInsert } from './task-input.ts';
import { applyTaskChange, finishBatchIfDone, insertTasks, isUuid, openBatchTasks } from './tasks.ts';

/** The batch object with its status counts and task ids. */
export async function getBatchDto(db: Db, id: string): Promise<Batch | null> {
  if (!isUuid(id)) return null;
  const [b] = await db.select().from(batches).where(eq(batches.id, id));
  if (!b) return null;
  const rows = await db
    .select({ id: tasks.id, status: tasks.status })
    .from(tasks)
    .where(eq(tasks.batchId, id))
    .orderBy(tasks.createdAt, tasks.id);
  const counts: Record<string, number> = {};
  for (const r of rows) counts[r.status] = (counts[r.status] ?? 0) + 1;
  return toBatch(
    b,
    counts,
    rows.map((r) => r.id),
  );
}

/** All-or-nothing: every item is validated first; one failure → 422 listing every bad path. */
export async function createBatch(
  ctx: ServiceContext,
  input: BatchCreate,
  idem?: IdempotencyRequest,
): Promise<Batch> {
  // The tasks the transaction queued, for the fleet once it has committed.
  let queued: TaskInsert[] = [];
  const batch = await transact(ctx, async (tx, ev) => {
    if (idem) await claimIdempotencyKey(tx, idem, ctx.now());
    const presetIds = [...new Set(input.tasks.map(presetOf).filter((p): p is string => p !== undefined))];
    const found = new Map<string, PresetRow>();
    const validIds = presetIds.filter(isUuid);
    if (validIds.length) {
      for (const p of await tx
        .select()
        .from(presets)
        .where(anyOf(presets.id, validIds, 'uuid')))
        found.set(p.id, p);
    }
    const now = ctx.now();
    const batchId = randomUUID();
    const issues: Issue[] = [];
    const rows: TaskInsert[] = [];
    queued = rows;
    // Every task of a batch has the same created_at, so lists and the claim order ("FIFO within a
    // priority": created_at, then id) fall back to the id. Random v4 ids handed out in ascending order
    // keep that tie-break equal to the submission order.
    const taskIds = input.tasks.map(() => randomUUID()).sort();
    input.tasks.forEach((item, i) => {
      const presetId = presetOf(item);
      const preset = presetId !== undefined ? (found.get(presetId) ?? null) : null;
      if (presetId !== undefined && !preset) {
        issues.push({ path: `tasks.${i}.preset`, message: `preset ${presetId} not found` });
        return;
      }
      const built = buildTaskRow(item, preset, { source: 'api', batchId, now, id: taskIds[i] });
      if (!built.ok)
        for (const is of built.issues) issues.push({ path: `tasks.${i}.${is.path}`, message: is.message });
      else rows.push(built.row);
    });
    if (issues.length) throw new ValidationError('batch is invalid; nothing was created', issues);
    await tx.insert(batches).values({
      id: batchId,
      name: input.name ?? '',
      status: 'RUNNING',
      taskCount: rows.length,
      createdAt: now,
      updatedAt: now,
    });
    await insertTasks(tx, ev, rows);
    const dto = (await getBatchDto(tx, batchId))!;
    await ev.emit({ event: 'batch.created', data: dto, now });
    if (idem)
      await storeIdempotentResponse(tx, idem, {
        status: 201,
        body: dto,
        location: `/api/v1/batches/${batchId}`,
      });
    return dto;
  });
  ctx.fleet.workAvailable(queued.map((r) => r.requires ?? []));
  return batch;
}

export async function listBatches(ctx: ServiceContext, page: PageQuery) {
  const db = ctx.database.db;
  const { rows, total } = await paginate(
    db.select().from(batches).orderBy(desc(batches.createdAt), desc(batches.id)),
    db.select({ n: count() }).from(batches),
    page,
  );
  const items: Batch[] = [];
  for (const r of rows) items.push((await getBatchDto(db, r.id))!);
  return { items, total };
}

export async function getBatch(ctx: ServiceContext, id: string): Promise<Batch> {
  const b = await getBatchDto(ctx.database.db, id);
  if (!b) throw new NotFoundError('batch', id);
  return b;
}

export async function listBatchTasks(ctx: ServiceContext, id: string, page: PageQuery) {
  const db = ctx.database.db;
  await getBatch(ctx, id);
  const where = eq(tasks.batchId, id);
  const { rows, total } = await paginate(
    db.select().from(tasks).where(where).orderBy(desc(tasks.createdAt), desc(tasks.id)),
    db.select({ n: count() }).from(tasks).where(where),
    page,
  );
  return { items: rows.map(toTask), total };
}

/** Cancels every task of the batch that is not finished yet; a finished batch is 409. */
export async function cancelBatch(ctx: ServiceContext, id: string): Promise<Batch> {
  const b = await getBatch(ctx, id);
  if (b.status === 'DONE') throw new ConflictError('BATCH_FINISHED', `batch ${id} is already finished`);
  // One transaction for the whole batch: queued tasks end DONE_CANCELED together (a transaction per
  // task took 4.9 s for 1,000 and held up other requests meanwhile; a failure half-way left half the
  // batch canceled); running ones are marked and stopped on their agents once it has committed.
  const toStop: TaskRow[] = [];
  await transact(ctx, async (tx, ev) => {
    const now = ctx.now();
    let finished = false;
    const open = await tx.select().from(tasks).where(openBatchTasks(id)).orderBy(tasks.id).for('update');
    for (const r of open) {
      if (r.status === 'QUEUED' || !r.agentId) {
        const patch = { status: 'DONE_CANCELED', finishedAt: now, remaining: 0, leaseToken: null } as const;
        await applyTaskChange(
          tx,
          ev,
          eq(tasks.id, r.id),
          { ...patch, cancelRequested: false },
          {
            now,
            finishBatch: () => {
              finished = true;
            },
          },
        );
      } else {
        if (!r.cancelRequested) {
          await tx.update(tasks).set({ cancelRequested: true, updatedAt: now }).where(eq(tasks.id, r.id));
        }
        toStop.push(r);
      }
    }
    if (finished) await finishBatchIfDone(tx, ev, id, now);
  });
  for (const r of toStop) ctx.fleet.cancelRunning(r);
  return getBatch(ctx, id);
}
