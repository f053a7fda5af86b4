import { randomUUID } from 'node:crypto';
import { posix, win32 } from 'node:path';
import type { PageQuery, Watchfolder, WatchfolderCreate } from '@ffleet/shared';
import { and, count, desc, eq, ne } from 'drizzle-orm';
import { ConflictError, NotFoundError, ValidationError } from '../api/errors.ts';
import { anyOf } from '../db/array-literal.ts';
import type { Db } from '../db/client.ts';
import { isUniqueViolation } from '../db/errors.ts';
import { toWatchfolder, type WatchfolderRow } from '../db/mappers.ts';
import { agents, presets, watchfolders } from '../db/schema.ts';
import { type ServiceContext, transact } from './context.ts';
import { paginate } from './paginate.ts';
import { isUuid } from './tasks.ts';

async function withAssigned(db: Db, rows: WatchfolderRow[]): Promise<Watchfolder[]> {
  const ids = [...new Set(rows.map((r) => r.assignedAgentId).filter((x): x is string => !!x))];
  const names = new Map<string, string>();
  if (ids.length) {
    for (const a of await db
      .select({ id: agents.id, name: agents.name })
      .from(agents)
      .where(anyOf(agents.id, ids, 'uuid'))) {
      names.set(a.id, a.name);
    }
  }
  return rows.map((r) =>
    toWatchfolder(
      r,
      r.assignedAgentId ? { id: r.assignedAgentId, name: names.get(r.assignedAgentId) ?? '' } : null,
    ),
  );
}

export async function watchfolderDto(db: Db, row: WatchfolderRow): Promise<Watchfolder> {
  return (await withAssigned(db, [row]))[0]!;
}

async function checkRefs(tx: Db, input: WatchfolderCreate, selfId: string | null): Promise<void> {
  // KEY SHARE: a concurrent deletePreset (which locks the row FOR UPDATE, then counts its watchfolders)
  // waits for this transaction and then sees its watchfolder (409), or this one waits for the delete and
  // finds no preset (422). A plain read let both succeed on PostgreSQL: a watchfolder on a deleted preset.
  if (
    !isUuid(input.preset) ||
    !(await tx.select({ id: presets.id }).from(presets).where(eq(presets.id, input.preset)).for('key share'))
      .length
  ) {
    throw new ValidationError('unknown preset', [
      { path: 'preset', message: `preset ${input.preset} not found` },
    ]);
  }
  const clash = await tx
    .select({ id: watchfolders.id })
    .from(watchfolders)
    .where(
      selfId
        ? and(eq(watchfolders.name, input.name), ne(watchfolders.id, selfId))
        : eq(watchfolders.name, input.name),
    );
  if (clash.length) throw nameTaken(input.name);
}

/**
 * The folder's path as stored and shown: `/media/in/`, `/media//in` and `/media/x/../in` are one folder,
 * `/media/in` (a rename or a changed pin compares paths, and tasks carry it in their metadata).
 */
export function normalizeFolderPath(path: string): string {
  const flavour = path.startsWith('/') ? posix : win32;
  const p = flavour.normalize(path);
  const root = flavour.parse(p).root;
  return p.length > root.length ? p.replace(/[\\/]+$/, '') : p;
}

/**
 * Paths stored before they were normalised on write (an upgrade from a release that kept them as
 * given), normalised once at start, so tasks and PUTs see one spelling. Returns how many changed.
 */
export async function normalizeStoredFolderPaths(db: Db): Promise<number> {
  let changed = 0;
  for (const r of await db.select({ id: watchfolders.id, path: watchfolders.path }).from(watchfolders)) {
    const path = normalizeFolderPath(r.path);
    if (path === r.path) continue;
    await db.update(watchfolders).set({ path }).where(eq(watchfolders.id, r.id));
    changed++;
  }
  return changed;
}

const values = (input: WatchfolderCreate) => ({
  name: input.name,
  description: input.description ?? '',
  interval: input.interval,
  growthChecks: input.growthChecks,
  presetId: input.preset,
  path: normalizeFolderPath(input.path),
  suspended: input.suspended ?? false,
  filter: {
    extensions: {
      include: input.filter?.extensions?.include ?? [],
      exclude: input.filter?.extensions?.exclude ?? [],
    },
  },
  agent: input.agent ?? null,
});

/** The 409 of a name another watchfolder has, naming the field so that forms can mark it. */
const nameTaken = (name: string) =>
  new ConflictError('WATCHFOLDER_NAME_TAKEN', `a watchfolder named ${JSON.stringify(name)} exists`, [
    { path: 'name', message: 'another watchfolder has this name' },
  ]);

/** Run a write; a unique violation on the name (a concurrent create/rename) becomes the 409. */
async function withUniqueName<T>(name: string | (() => string), write: () => Promise<T>): Promise<T> {
  try {
    return await write();
  } catch (err) {
    if (isUniqueViolation(err)) {
      throw nameTaken(typeof name === 'function' ? name() : name);
    }
    throw err;
  }
}

export async function createWatchfolder(ctx: ServiceContext, input: WatchfolderCreate): Promise<Watchfolder> {
  const wf = await withUniqueName(input.name, () =>
    transact(ctx, async (tx, ev) => {
      await checkRefs(tx, input, null);
      const now = ctx.now();
      const [row] = await tx
        .insert(watchfolders)
        .values({ id: randomUUID(), ...values(input), createdAt: now, updatedAt: now })
        .returning();
      const dto = await watchfolderDto(tx, row!);
      await ev.emit({ event: 'watchfolder.created', data: dto, now });
      return dto;
    }),
  );
  ctx.fleet.watchfoldersChanged();
  return wf;
}

export async function listWatchfolders(ctx: ServiceContext, page: PageQuery) {
  const db = ctx.database.db;
  const { rows, total } = await paginate(
    db.select().from(watchfolders).orderBy(desc(watchfolders.createdAt), desc(watchfolders.id)),
    db.select({ n: count() }).from(watchfolders),
    page,
  );
  return { items: await withAssigned(db, rows), total };
}

export async function getWatchfolder(ctx: ServiceContext, id: string): Promise<Watchfolder> {
  if (!isUuid(id)) throw new NotFoundError('watchfolder', id);
  const [r] = await ctx.database.db.select().from(watchfolders).where(eq(watchfolders.id, id));
  if (!r) throw new NotFoundError('watchfolder', id);
  return watchfolderDto(ctx.database.db, r);
}

/** The stored definition as a create body (what a PATCH changes fields of). */
const definitionOf = (row: WatchfolderRow): WatchfolderCreate => ({
  name: row.name,
  description: row.description,
  interval: row.interval,
  growthChecks: row.growthChecks,
  preset: row.presetId,
  path: row.path,
  suspended: row.suspended,
  filter: row.filter,
  agent: row.agent,
});

/**
 * PUT replaces the definition; live state (assignment, lastCheck, error) is kept. PATCH gives a
 * function of the stored definition instead (the fields it names replace theirs, `filter` whole),
 * applied under the row's lock: a suspend does not undo another client's edit made meanwhile.
 */
export async function updateWatchfolder(
  ctx: ServiceContext,
  id: string,
  change: WatchfolderCreate | ((current: WatchfolderCreate) => WatchfolderCreate),
): Promise<Watchfolder> {
  if (!isUuid(id)) throw new NotFoundError('watchfolder', id);
  let name = typeof change === 'function' ? '' : change.name;
  const wf = await withUniqueName(
    () => name,
    () =>
      transact(ctx, async (tx, ev) => {
        const [cur] = await tx.select().from(watchfolders).where(eq(watchfolders.id, id)).for('update');
        if (!cur) throw new NotFoundError('watchfolder', id);
        const input = typeof change === 'function' ? change(definitionOf(cur)) : change;
        name = input.name;
        await checkRefs(tx, input, id);
        const now = ctx.now();
        const v = values(input);
        // A new path or pinned agent invalidates the last scan's error.
        const reset = v.path !== cur.path || v.agent !== cur.agent ? { error: '' } : {};
        const [row] = await tx
          .update(watchfolders)
          .set({ ...v, ...reset, updatedAt: now })
          .where(eq(watchfolders.id, id))
          .returning();
        const dto = await watchfolderDto(tx, row!);
        await ev.emit({ event: 'watchfolder.updated', data: dto, now });
        return dto;
      }),
  );
  ctx.fleet.watchfoldersChanged();
  return wf;
}

export async function deleteWatchfolder(ctx: ServiceContext, id: string): Promise<void> {
  if (!isUuid(id)) throw new NotFoundError('watchfolder', id);
  await transact(ctx, async (tx, ev) => {
    const [row] = await tx.delete(watchfolders).where(eq(watchfolders.id, id)).returning();
    if (!row) throw new NotFoundError('watchfolder', id);
    await ev.emit({ event: 'watchfolder.deleted', data: await watchfolderDto(tx, row), now: ctx.now() });
  });
  ctx.fleet.watchfoldersChanged();
}
