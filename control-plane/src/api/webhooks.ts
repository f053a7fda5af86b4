import { ExecutionListQuery, WebhookCreate } from '@ffleet/shared';
import { Hono } from 'hono';
import {
  assertRedeliverable,
  createWebhook,
  deleteWebhook,
  getExecution,
  getWebhook,
  listExecutions,
  listWebhooks,
  updateWebhook,
} from '../services/webhooks.ts';
import type { DeliveryDispatcher } from '../webhooks/delivery-dispatcher.ts';
import type { ApiEnv } from './app-env.ts';
import { ConflictError, NotFoundError } from './errors.ts';
import { created, listResponse, parseJsonBody, parsePage, parseQuery } from './http.ts';

export const WEBHOOK_READ_ONLY = ['id', 'uuid', 'createdAt', 'updatedAt', 'hasSecret'];

/** Redelivery is installed by the webhook dispatcher (it owns delivery). */
export type Redeliver = (executionId: string) => Promise<unknown>;

/** The route's redelivery through `dispatcher`, its failures as API errors. */
export const redeliverThrough =
  (dispatcher: DeliveryDispatcher): Redeliver =>
  async (id) => {
    const r = await dispatcher.redeliver(id);
    if (r.ok) return r.delivery;
    // The route checked the webhook first; a delete can still land in between.
    if (r.error === 'webhook_deleted') {
      throw new ConflictError(
        'WEBHOOK_DELETED',
        `the webhook of execution ${id} was deleted; it cannot be redelivered`,
      );
    }
    if (r.error === 'webhook_event_changed') {
      throw new ConflictError(
        'WEBHOOK_EVENT_CHANGED',
        `the webhook of execution ${id} now receives another event; it cannot be redelivered`,
      );
    }
    throw new NotFoundError('execution', id);
  };

export const webhooksApi = (redeliver: Redeliver) =>
  new Hono<ApiEnv>()
    .post('/', async (c) => {
      const { data } = await parseJsonBody(c, WebhookCreate, {
        readOnly: WEBHOOK_READ_ONLY,
        nullIsAbsent: true,
      });
      const w = await createWebhook(c.var.ctx, data);
      return created(c, `/api/v1/webhooks/${w.id}`, w);
    })
    .get('/', async (c) => {
      const { items, total } = await listWebhooks(c.var.ctx, parsePage(c));
      return listResponse(c, items, total);
    })
    // Registered before /:id so "executions" is never read as a webhook id.
    .get('/executions', async (c) => {
      const page = parsePage(c);
      const q = parseQuery(c, ExecutionListQuery);
      const { items, total } = await listExecutions(c.var.ctx, q, page);
      return listResponse(c, items, total);
    })
    .get('/executions/:id', async (c) => c.json(await getExecution(c.var.ctx, c.req.param('id'))))
    .post('/executions/:id/redeliver', async (c) => {
      const exec = await getExecution(c.var.ctx, c.req.param('id'));
      await assertRedeliverable(c.var.ctx, exec);
      return c.json((await redeliver(exec.id)) as object, 202);
    })
    .get('/:id', async (c) => c.json(await getWebhook(c.var.ctx, c.req.param('id'))))
    .put('/:id', async (c) => {
      const { data } = await parseJsonBody(c, WebhookCreate, {
        readOnly: WEBHOOK_READ_ONLY,
        nullIsAbsent: true,
      });
      return c.json(await updateWebhook(c.var.ctx, c.req.param('id'), data));
    })
    .delete('/:id', async (c) => {
      await deleteWebhook(c.var.ctx, c.req.param('id'));
      return c.body(null, 204);
    });
