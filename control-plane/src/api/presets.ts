import { PresetCreate, PresetListQuery } from '@ffleet/shared';
import { Hono } from 'hono';
import { createPreset, deletePreset, getPreset, listPresets, updatePreset } from '../services/presets.ts';
import type { ApiEnv } from './app-env.ts';
import { created, listResponse, parseJsonBody, parsePage, parseQuery } from './http.ts';

export const PRESET_READ_ONLY = ['id', 'uuid', 'createdAt', 'updatedAt'];

export const presetsApi = new Hono<ApiEnv>()
  .post('/', async (c) => {
    const { data } = await parseJsonBody(c, PresetCreate, { readOnly: PRESET_READ_ONLY, nullIsAbsent: true });
    const p = await createPreset(c.var.ctx, data);
    return created(c, `/api/v1/presets/${p.id}`, p);
  })
  .get('/', async (c) => {
    const page = parsePage(c);
    const q = parseQuery(c, PresetListQuery);
    const { items, total } = await listPresets(c.var.ctx, page, q);
    return listResponse(c, items, total);
  })
  .get('/:id', async (c) => c.json(await getPreset(c.var.ctx, c.req.param('id'))))
  .put('/:id', async (c) => {
    const { data } = await parseJsonBody(c, PresetCreate, { readOnly: PRESET_READ_ONLY, nullIsAbsent: true });
    return c.json(await updatePreset(c.var.ctx, c.req.param('id'), data));
  })
  .delete('/:id', async (c) => {
    await deletePreset(c.var.ctx, c.req.param('id'));
    return c.body(null, 204);
  });
