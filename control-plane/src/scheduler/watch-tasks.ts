import { basename, dirname, isAbsolute, join, normalize } from 'node:path';
import { and, eq } from 'drizzle-orm';
import { anyOf } from '../db/array-literal.ts';
import type { Db } from '../db/client.ts';
import { isUniqueViolation } from '../db/errors.ts';
import { presets, tasks, watchfolders } from '../db/schema.ts';
import type { EmittedEvents } from '../events/outbox.ts';
import { type ServiceContext, transact } from '../services/context.ts';
import { buildTaskRow } from '../services/task-input.ts';
import { insertTask } from '../services/tasks.ts';

export type WatchFileRequest = {
  watchfolderId: string;
  relativePath: string;
  size: number;
  mtimeMs: number;
  /**
   * The agent that submits it. A folder assigned to another agent refuses it: it is a late replay
   * (an outbox after a restart, an agent back from a freeze) of a folder that moved, whose new owner
   * scans and locks its files itself. Once that lock is confirmed the file's version is forgotten,
   * and the replay would make a second task.
   */
  agentId?: string;
};
export type WatchFileResult =
  | { ok: true; taskId: string; created: boolean; requires?: readonly string[] }
  | { ok: false; error: string };

/**
 * Create the task for a finished watchfolder file, idempotently per (watchfolder, relative path,
 * size, mtime): a repeat (lost answer, agent restart, another agent taking over before the lock was
 * written) returns the task that already exists. One transaction (createWatchTasksIn for one file);
 * when another transaction committed the same key meanwhile (unique violation), once more, which then
 * finds that task. The fleet batches files through its group commit and uses this as the fallback.
 */
export async function createWatchTask(ctx: ServiceContext, req: WatchFileRequest): Promise<WatchFileResult> {
  for (let attempt = 0; ; attempt++) {
    try {
      const [r] = await transact(ctx, (tx, ev) => createWatchTasksIn(tx, ev, ctx.now(), [req]));
      if (r!.ok && r!.created) ctx.fleet.workAvailable([r!.requires ?? []]);
      return r!;
    } catch (err) {
      if (attempt === 0 && isUniqueViolation(err)) continue;
      throw err;
    }
  }
}

const invalidRelative = (rel: string): boolean =>
  isAbsolute(rel) || rel.split(/[\\/]/).includes('..') || rel === '.' || rel === '';
const WF_ID_RE = /^[0-9a-f-]{36}$/i;

/**
 * `createWatchTask` for many files in the caller's transaction (the fleet's group commit), with the
 * same answers in the same order of checks: one statement reads every watchfolder (with its preset),
 * one reads the tasks that already hold one of the watch keys, and each new file is one statement
 * (task insert + task.created event + deliveries). A file submitted twice in `reqs` gets one task.
 * `created` lists the new tasks (the caller hints work after the commit).
 *
 * A unique violation (another transaction committed the same key meanwhile: two agents during a
 * failover, on PostgreSQL) fails the caller's transaction; the caller then falls back to
 * `createWatchTask` per file, which answers with the task that won.
 */
export async function createWatchTasksIn(
  tx: Db,
  ev: EmittedEvents,
  now: number,
  reqs: readonly WatchFileRequest[],
): Promise<WatchFileResult[]> {
  const out: (WatchFileResult | null)[] = reqs.map((r) => {
    const rel = normalize(r.relativePath);
    if (invalidRelative(rel))
      return { ok: false, error: `invalid relative path ${JSON.stringify(r.relativePath)}` };
    if (!WF_ID_RE.test(r.watchfolderId)) return { ok: false, error: 'unknown watchfolder' };
    return null;
  });
  const wfIds = [...new Set(reqs.filter((_, i) => !out[i]).map((r) => r.watchfolderId))];
  if (!wfIds.length) return out as WatchFileResult[];
  const rows = await tx
    .select({ wf: watchfolders, preset: presets })
    .from(watchfolders)
    .leftJoin(presets, eq(presets.id, watchfolders.presetId))
    .where(anyOf(watchfolders.id, wfIds, 'uuid'));
  const byId = new Map(rows.map((r) => [r.wf.id, r]));
  const keys: (string | null)[] = reqs.map((r, i) => {
    if (out[i]) return null;
    const wf = byId.get(r.watchfolderId)?.wf;
    if (!wf) {
      out[i] = { ok: false, error: 'watchfolder no longer exists' };
      return null;
    }
    if (r.agentId !== undefined && wf.assignedAgentId !== r.agentId) {
      out[i] = { ok: false, error: 'this watchfolder is assigned to another agent now' };
      return null;
    }
    // The absolute path is part of the key, so moving a watchfolder to another directory never
    // mistakes a file there for one already processed.
    return `${r.watchfolderId}:${join(wf.path, normalize(r.relativePath))}:${r.size}:${Math.trunc(r.mtimeMs)}`;
  });
  const wanted = [...new Set(keys.filter((k): k is string => k !== null))];
  const taskOf = new Map<string, string>();
  if (wanted.length) {
    const found = await tx
      .select({ id: tasks.id, watchKey: tasks.watchKey })
      .from(tasks)
      .where(anyOf(tasks.watchKey, wanted, 'text'));
    for (const t of found) if (t.watchKey) taskOf.set(t.watchKey, t.id);
  }
  for (const [i, r] of reqs.entries()) {
    const key = keys[i];
    if (!key) continue;
    const existing = taskOf.get(key);
    if (existing) {
      out[i] = { ok: true, taskId: existing, created: false };
      continue;
    }
    const { wf, preset } = byId.get(r.watchfolderId)!;
    if (wf.suspended) {
      out[i] = { ok: false, error: 'watchfolder is suspended' };
      continue;
    }
    if (!preset) {
      out[i] = { ok: false, error: `preset ${wf.presetId} of watchfolder ${wf.name} no longer exists` };
      continue;
    }
    const rel = normalize(r.relativePath);
    const built = buildTaskRow(
      {
        name: basename(rel),
        inputFile: join(wf.path, rel),
        metadata: {
          ffleet: {
            watchfolder: { path: wf.path, relativeDir: dirname(rel), relativePath: rel, uuid: wf.id },
          },
        },
      },
      preset,
      { source: 'watchfolder', now, watchKey: key, watchfolderId: wf.id },
    );
    if (!built.ok) {
      out[i] = { ok: false, error: built.issues.map((x) => `${x.path}: ${x.message}`).join('; ') };
      continue;
    }
    const taskId = (await insertTask(tx, ev, built.row)).id;
    taskOf.set(key, taskId);
    out[i] = { ok: true, taskId, created: true, requires: built.row.requires ?? [] };
  }
  return out as WatchFileResult[];
}

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
