import { BatchCreate } from '@ffleet/shared';
import { Hono } from 'hono';
import { cancelBatch, createBatch, getBatch, listBatches, listBatchTasks } from '../services/batches.ts';
import { commandIssuesOf } from '../services/task-input.ts';
import { withWaitingFor } from '../services/waiting-for.ts';
import type { ApiEnv } from './app-env.ts';
import { created, listResponse, parseJsonBody, parsePage } from './http.ts';
import { idempotencyOf, withReplay } from './tasks.ts';

export const batchesApi = new Hono<ApiEnv>()
  .post('/', async (c) => {
    const body = await parseJsonBody(c, BatchCreate, {
      nullIsAbsent: true,
      alsoCheck: (j) => {
        const items = (j as { tasks?: unknown }).tasks;
        return Array.isArray(items) ? items.flatMap((t, i) => commandIssuesOf(t, `tasks.${i}`)) : [];
      },
    });
    const idem = idempotencyOf(c, 'POST /batches', body);
    return withReplay(c, async () => {
      const batch = await createBatch(c.var.ctx, body.data, idem);
      return created(c, `/api/v1/batches/${batch.id}`, batch);
    });
  })
  .get('/', async (c) => {
    const { items, total } = await listBatches(c.var.ctx, parsePage(c));
    return listResponse(c, items, total);
  })
  .get('/:id', async (c) => c.json(await getBatch(c.var.ctx, c.req.param('id'))))
  .get('/:id/tasks', async (c) => {
    const { items, total } = await listBatchTasks(c.var.ctx, c.req.param('id'), parsePage(c));
    return listResponse(c, await withWaitingFor(c.var.ctx, items), total);
  })
  .on(['PATCH', 'POST'], '/:id/cancel', async (c) => c.json(await cancelBatch(c.var.ctx, c.req.param('id'))));
