import { WatchfolderCreate, WatchfolderPatch } from '@ffleet/shared';
import { Hono } from 'hono';
import {
  createWatchfolder,
  deleteWatchfolder,
  getWatchfolder,
  listWatchfolders,
  updateWatchfolder,
} from '../services/watchfolders.ts';
import type { ApiEnv } from './app-env.ts';
import { created, listResponse, parseJsonBody, parsePage } from './http.ts';

export const WATCHFOLDER_READ_ONLY = [
  'id',
  'uuid',
  'createdAt',
  'updatedAt',
  'assignedAgent',
  'lastCheck',
  'error',
];

export const watchfoldersApi = new Hono<ApiEnv>()
  .post('/', async (c) => {
    const { data } = await parseJsonBody(c, WatchfolderCreate, {
      readOnly: WATCHFOLDER_READ_ONLY,
      nullIsAbsent: true,
    });
    const wf = await createWatchfolder(c.var.ctx, data);
    return created(c, `/api/v1/watchfolders/${wf.id}`, wf);
  })
  .get('/', async (c) => {
    const { items, total } = await listWatchfolders(c.var.ctx, parsePage(c));
    return listResponse(c, items, total);
  })
  .get('/:id', async (c) => c.json(await getWatchfolder(c.var.ctx, c.req.param('id'))))
  .put('/:id', async (c) => {
    const { data } = await parseJsonBody(c, WatchfolderCreate, {
      readOnly: WATCHFOLDER_READ_ONLY,
      nullIsAbsent: true,
    });
    return c.json(await updateWatchfolder(c.var.ctx, c.req.param('id'), data));
  })
  // The fields given replace theirs (`filter` whole), the rest stays as stored: `{"suspended": true}`
  // pauses a folder without sending back, and so overwriting, its whole definition.
  .patch('/:id', async (c) => {
    const { data } = await parseJsonBody(c, WatchfolderPatch, { readOnly: WATCHFOLDER_READ_ONLY });
    return c.json(
      await updateWatchfolder(c.var.ctx, c.req.param('id'), (current) => ({ ...current, ...data })),
    );
  })
  .delete('/:id', async (c) => {
    await deleteWatchfolder(c.var.ctx, c.req.param('id'));
    return c.body(null, 204);
  });
