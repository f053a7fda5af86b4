import { basename, dirname, isAbsolute, join, normalize } from 'node:path';
import { and, eq } from 'drizzle-orm';
import { isUniqueViolation } from '../db/errors.ts';
import { tasks, watchfolders } from '../db/schema.ts';
import { type ServiceContext, transact } from '../services/context.ts';
import { buildTaskRow } from '../services/task-input.ts';
import { findPreset, insertTask } from '../services/tasks.ts';

export type WatchFileRequest = { watchfolderId: string; relativePath: string; size: number; mtimeMs: number };
export type WatchFileResult = { ok: true; taskId: string; created: boolean } | { ok: false; error: string };

/**
 * Create the task for a finished watchfolder file, idempotently per (watchfolder, relative path,
 * size, mtime): a repeat (lost answer, agent restart, another agent taking over before the lock was
 * written) returns the task that already exists.
 */
export async function createWatchTask(ctx: ServiceContext, req: WatchFileRequest): Promise<WatchFileResult> {
  const rel = normalize(req.relativePath);
  if (isAbsolute(rel) || rel.split(/[\\/]/).includes('..') || rel === '.' || rel === '') {
    return { ok: false, error: `invalid relative path ${JSON.stringify(req.relativePath)}` };
  }
  if (!/^[0-9a-f-]{36}$/i.test(req.watchfolderId)) return { ok: false, error: 'unknown watchfolder' };
  const [wfRow] = await ctx.database.db
    .select({ path: watchfolders.path })
    .from(watchfolders)
    .where(eq(watchfolders.id, req.watchfolderId));
  if (!wfRow) return { ok: false, error: 'watchfolder no longer exists' };
  // The absolute path is part of the key, so moving a watchfolder to another directory never mistakes a
  // file there for one already processed.
  const watchKey = `${req.watchfolderId}:${join(wfRow.path, rel)}:${req.size}:${Math.trunc(req.mtimeMs)}`;
  const existing = async () => {
    const [t] = await ctx.database.db
      .select({ id: tasks.id })
      .from(tasks)
      .where(eq(tasks.watchKey, watchKey));
    return t?.id ?? null;
  };
  const found = await existing();
  if (found) return { ok: true, taskId: found, created: false };
  try {
    const taskId = await transact(ctx, async (tx, ev) => {
      const [wf] = await tx
        .select()
        .from(watchfolders)
        .where(and(eq(watchfolders.id, req.watchfolderId)));
      if (!wf) throw new WatchError('watchfolder no longer exists');
      if (wf.suspended) throw new WatchError('watchfolder is suspended');
      const preset = await findPreset(tx, wf.presetId);
      if (!preset) throw new WatchError(`preset ${wf.presetId} of watchfolder ${wf.name} no longer exists`);
      const relDir = dirname(rel);
      const built = buildTaskRow(
        {
          name: basename(rel),
          inputFile: join(wf.path, rel),
          metadata: {
            ffleet: { watchfolder: { path: wf.path, relativeDir: relDir, relativePath: rel, uuid: wf.id } },
          },
        },
        preset,
        { source: 'watchfolder', now: ctx.now(), watchKey, watchfolderId: wf.id },
      );
      if (!built.ok) throw new WatchError(built.issues.map((i) => `${i.path}: ${i.message}`).join('; '));
      return (await insertTask(tx, ev, built.row)).id;
    });
    ctx.fleet.workAvailable();
    return { ok: true, taskId, created: true };
  } catch (err) {
    if (err instanceof WatchError) return { ok: false, error: err.message };
    if (isUniqueViolation(err)) {
      const id = await existing();
      if (id) return { ok: true, taskId: id, created: false };
    }
    throw err;
  }
}

class WatchError extends Error {}

/**
 * The agent wrote the task's `.lock`. From now on a submit of the same file version can only mean the
 * lock was removed ("process again", spec rule 3), not a retry, so the idempotency key is released.
 * Until this confirmation every repeat (lost answer, agent restart, failover) returns the first task.
 */
export async function confirmWatchLock(
  ctx: ServiceContext,
  watchfolderId: string,
  taskId: string,
): Promise<void> {
  if (!/^[0-9a-f-]{36}$/i.test(taskId)) return;
  await ctx.database.db
    .update(tasks)
    .set({ watchKey: null })
    .where(and(eq(tasks.id, taskId), eq(tasks.watchfolderId, watchfolderId)));
}
