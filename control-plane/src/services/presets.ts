import { randomUUID } from 'node:crypto';
import {
  checkCommand,
  type PageQuery,
  type Preset,
  type PresetCreate,
  type PresetListQuery,
} from '@ffleet/shared';
import { count, desc, eq, ilike, sql } from 'drizzle-orm';
import { ConflictError, NotFoundError, ValidationError } from '../api/errors.ts';
import { toPreset } from '../db/mappers.ts';
import { presets, watchfolders } from '../db/schema.ts';
import { type ServiceContext, transact } from './context.ts';
import { paginate } from './paginate.ts';
import { isUuid } from './tasks.ts';

function values(input: PresetCreate) {
  const checked = checkCommand(input.command);
  if (!checked.ok)
    throw new ValidationError('preset is invalid', [{ path: 'command', message: checked.error }]);
  return {
    name: input.name,
    description: input.description ?? '',
    command: input.command,
    outputFile: input.outputFile ?? '',
    priority: input.priority ?? 0,
    preProcessing: input.preProcessing
      ? {
          scriptPath: input.preProcessing.scriptPath ?? '',
          sidecarPath: input.preProcessing.sidecarPath ?? '',
          importSidecar: input.preProcessing.importSidecar ?? false,
        }
      : null,
    postProcessing: input.postProcessing
      ? {
          scriptPath: input.postProcessing.scriptPath ?? '',
          sidecarPath: input.postProcessing.sidecarPath ?? '',
        }
      : null,
    webhooks: input.webhooks ?? [],
    requires: input.requires ?? [],
  };
}

/** `preset.*` events go to global webhooks and to the preset's own matching direct webhooks. */
export async function createPreset(ctx: ServiceContext, input: PresetCreate): Promise<Preset> {
  const v = values(input);
  return transact(ctx, async (tx, ev) => {
    const now = ctx.now();
    const [row] = await tx
      .insert(presets)
      .values({ id: randomUUID(), ...v, createdAt: now, updatedAt: now })
      .returning();
    const p = toPreset(row!);
    await ev.emit({ event: 'preset.created', data: p, direct: p.webhooks, now });
    return p;
  });
}

/** `name`: contains, ignoring case; LIKE's wildcards and escape in it are matched as themselves. */
export async function listPresets(
  ctx: ServiceContext,
  page: PageQuery,
  q: PresetListQuery = { name: undefined },
) {
  const db = ctx.database.db;
  const where = q.name ? ilike(presets.name, `%${q.name.replace(/[\\%_]/g, (m) => `\\${m}`)}%`) : undefined;
  const { rows, total } = await paginate(
    db.select().from(presets).where(where).orderBy(desc(presets.createdAt), desc(presets.id)),
    db.select({ n: count() }).from(presets).where(where),
    page,
  );
  return { items: rows.map(toPreset), total };
}

export async function getPreset(ctx: ServiceContext, id: string): Promise<Preset> {
  if (!isUuid(id)) throw new NotFoundError('preset', id);
  const [r] = await ctx.database.db.select().from(presets).where(eq(presets.id, id));
  if (!r) throw new NotFoundError('preset', id);
  return toPreset(r);
}

export async function updatePreset(ctx: ServiceContext, id: string, input: PresetCreate): Promise<Preset> {
  if (!isUuid(id)) throw new NotFoundError('preset', id);
  const v = values(input);
  return transact(ctx, async (tx, ev) => {
    const now = ctx.now();
    const [row] = await tx
      .update(presets)
      .set({ ...v, updatedAt: now })
      .where(eq(presets.id, id))
      .returning();
    if (!row) throw new NotFoundError('preset', id);
    const p = toPreset(row);
    await ev.emit({ event: 'preset.updated', data: p, direct: p.webhooks, now });
    return p;
  });
}

/** 409 while a watchfolder still uses the preset. */
export async function deletePreset(ctx: ServiceContext, id: string): Promise<void> {
  if (!isUuid(id)) throw new NotFoundError('preset', id);
  await transact(ctx, async (tx, ev) => {
    const [row] = await tx.select().from(presets).where(eq(presets.id, id)).for('update');
    if (!row) throw new NotFoundError('preset', id);
    const users = await tx
      .select({ name: watchfolders.name, total: sql<number>`count(*) over ()`.mapWith(Number) })
      .from(watchfolders)
      .where(eq(watchfolders.presetId, id))
      .orderBy(watchfolders.name)
      .limit(5);
    if (users.length) {
      const names = users.map((u) => JSON.stringify(u.name)).join(', ');
      const more = users[0]!.total - users.length;
      throw new ConflictError(
        'PRESET_IN_USE',
        `preset ${id} is used by ${users[0]!.total} watchfolder(s): ${names}${more > 0 ? ` and ${more} more` : ''}`,
      );
    }
    await tx.delete(presets).where(eq(presets.id, id));
    const p = toPreset(row);
    await ev.emit({ event: 'preset.deleted', data: p, direct: p.webhooks, now: ctx.now() });
  });
}
