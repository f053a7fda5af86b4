import { z } from 'zod';
import { EventName, HttpUrl, Millis } from './common.ts';

/**
 * Body of `POST/PUT /api/v1/webhooks`. `secret` is write-only (responses show `hasSecret`), so a PUT
 * without it keeps the one set (a client cannot send back what it never sees); `null` removes it.
 */
export const WebhookCreate = z.strictObject({
  event: EventName,
  url: HttpUrl,
  secret: z.string().min(1).max(500).nullable().optional(),
});
export type WebhookCreate = z.infer<typeof WebhookCreate>;

export const Webhook = z.object({
  id: z.string(),
  uuid: z.string(),
  event: EventName,
  url: z.string(),
  hasSecret: z.boolean(),
  createdAt: Millis,
  updatedAt: Millis,
});
export type Webhook = z.infer<typeof Webhook>;

/** One recorded delivery attempt. */
export const WebhookExecution = z.object({
  id: z.string(),
  uuid: z.string(),
  deliveryId: z.string(),
  webhook: z.string().nullable(),
  source: z.enum(['global', 'direct']),
  event: z.string(),
  url: z.string(),
  attempt: z.number().int(),
  request: z.object({ method: z.string(), headers: z.record(z.string(), z.string()), body: z.string() }),
  response: z
    .object({ status: z.number().int(), headers: z.record(z.string(), z.string()), body: z.string() })
    .nullable(),
  error: z.string(),
  success: z.boolean(),
  durationMs: z.number().int(),
  createdAt: Millis,
});
export type WebhookExecution = z.infer<typeof WebhookExecution>;

/**
 * Filters of `GET /api/v1/webhooks/executions`. `deliveryId`: the attempts of one delivery (the
 * retries of one event to one target). Text that is not a UUID (empty too) cannot name a delivery and
 * is refused, not answered with every attempt or none.
 */
export const ExecutionListQuery = z.object({
  webhook: z.string().max(100).optional(),
  event: EventName.optional(),
  success: z.enum(['true', 'false']).optional(),
  task: z.string().max(100).optional(),
  deliveryId: z
    .string()
    .regex(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i, 'must be a UUID')
    .optional(),
});
export type ExecutionListQuery = z.infer<typeof ExecutionListQuery>;

/** The body POSTed to a webhook URL and sent on SSE. `id` is the event id, stable across retries. */
export const EventPayload = z.object({
  id: z.string(),
  event: EventName,
  timestamp: z.string(),
  data: z.unknown(),
});
export type EventPayload = z.infer<typeof EventPayload>;
