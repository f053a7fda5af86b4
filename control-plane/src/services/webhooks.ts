import { randomUUID } from 'node:crypto';
import type { ExecutionListQuery, PageQuery, Webhook, WebhookCreate } from '@ffleet/shared';
import { and, count, desc, eq, ne, type SQL } from 'drizzle-orm';
import { ConflictError, NotFoundError } from '../api/errors.ts';
import { toExecution, toWebhook } from '../db/mappers.ts';
import { deliveries, webhookExecutions, webhooks } from '../db/schema.ts';
import { WEBHOOK_DELETED, WEBHOOK_EVENT_CHANGED } from '../webhooks/record-attempt.ts';
import { type ServiceContext, transact } from './context.ts';
import { paginate } from './paginate.ts';
import { isUuid } from './tasks.ts';

export async function createWebhook(ctx: ServiceContext, input: WebhookCreate): Promise<Webhook> {
  return transact(ctx, async (tx, ev) => {
    const now = ctx.now();
    const [row] = await tx
      .insert(webhooks)
      .values({
        id: randomUUID(),
        event: input.event,
        url: input.url,
        secret: input.secret ?? null,
        createdAt: now,
        updatedAt: now,
      })
      .returning();
    const w = toWebhook(row!);
    // Written after the insert: a webhook subscribed to webhook.created receives its own creation.
    await ev.emit({ event: 'webhook.created', data: w, now });
    return w;
  });
}

export async function listWebhooks(ctx: ServiceContext, page: PageQuery) {
  const db = ctx.database.db;
  const { rows, total } = await paginate(
    db.select().from(webhooks).orderBy(desc(webhooks.createdAt), desc(webhooks.id)),
    db.select({ n: count() }).from(webhooks),
    page,
  );
  return { items: rows.map(toWebhook), total };
}

export async function getWebhook(ctx: ServiceContext, id: string): Promise<Webhook> {
  if (!isUuid(id)) throw new NotFoundError('webhook', id);
  const [r] = await ctx.database.db.select().from(webhooks).where(eq(webhooks.id, id));
  if (!r) throw new NotFoundError('webhook', id);
  return toWebhook(r);
}

/** PUT replaces event and url; the secret is replaced when given, removed when null, kept when omitted. */
export async function updateWebhook(ctx: ServiceContext, id: string, input: WebhookCreate): Promise<Webhook> {
  if (!isUuid(id)) throw new NotFoundError('webhook', id);
  return transact(ctx, async (tx, ev) => {
    const now = ctx.now();
    const [row] = await tx
      .update(webhooks)
      .set({
        event: input.event,
        url: input.url,
        ...(input.secret !== undefined ? { secret: input.secret } : {}),
        updatedAt: now,
      })
      .where(eq(webhooks.id, id))
      .returning();
    if (!row) throw new NotFoundError('webhook', id);
    // Deliveries of an event it no longer subscribes to are dropped, as deleteWebhook drops them all.
    await tx
      .update(deliveries)
      .set({ state: 'failed', lastError: WEBHOOK_EVENT_CHANGED, updatedAt: now })
      .where(
        and(eq(deliveries.webhookId, id), eq(deliveries.state, 'pending'), ne(deliveries.event, row.event)),
      );
    // Deliveries still to be (re)tried go to the webhook as it is now (its secret is read when they are
    // claimed and never stored on them). The URL is kept on the rows, not only
    // looked up when claimed (claim-deliveries.ts), because a row's URL is part of its target: the
    // one-at-a-time order of a task's deliveries and progress coalescing compare it.
    await tx
      .update(deliveries)
      .set({ url: row.url })
      .where(and(eq(deliveries.webhookId, id), eq(deliveries.state, 'pending')));
    const w = toWebhook(row);
    await ev.emit({ event: 'webhook.updated', data: w, now });
    return w;
  });
}

export async function deleteWebhook(ctx: ServiceContext, id: string): Promise<void> {
  if (!isUuid(id)) throw new NotFoundError('webhook', id);
  await transact(ctx, async (tx, ev) => {
    const [row] = await tx.delete(webhooks).where(eq(webhooks.id, id)).returning();
    if (!row) throw new NotFoundError('webhook', id);
    const now = ctx.now();
    // Its deliveries still to be (re)tried are dropped: 'failed' (a finished state retention prunes)
    // with the reason. A row a dispatcher holds keeps its lease: an attempt in flight completes and is
    // recorded without reviving the row (recordAttempts), one claimed ahead is dropped before it is
    // sent (refreshTargets).
    await tx
      .update(deliveries)
      .set({ state: 'failed', lastError: WEBHOOK_DELETED, updatedAt: now })
      .where(and(eq(deliveries.webhookId, id), eq(deliveries.state, 'pending')));
    await ev.emit({ event: 'webhook.deleted', data: toWebhook(row), now });
  });
}

export async function listExecutions(ctx: ServiceContext, q: ExecutionListQuery, page: PageQuery) {
  const db = ctx.database.db;
  const conds: SQL[] = [];
  const never = eq(webhookExecutions.id, '00000000-0000-0000-0000-000000000000');
  if (q.webhook) conds.push(isUuid(q.webhook) ? eq(webhookExecutions.webhookId, q.webhook) : never);
  if (q.task) conds.push(isUuid(q.task) ? eq(webhookExecutions.taskId, q.task) : never);
  if (q.event) conds.push(eq(webhookExecutions.event, q.event));
  if (q.success) conds.push(eq(webhookExecutions.success, q.success === 'true'));
  if (q.deliveryId) conds.push(eq(webhookExecutions.deliveryId, q.deliveryId));
  const where = conds.length ? and(...conds) : undefined;
  const { rows, total } = await paginate(
    db
      .select()
      .from(webhookExecutions)
      .where(where)
      .orderBy(desc(webhookExecutions.createdAt), desc(webhookExecutions.id)),
    db.select({ n: count() }).from(webhookExecutions).where(where),
    page,
  );
  return { items: rows.map(toExecution), total };
}

export async function getExecution(ctx: ServiceContext, id: string) {
  if (!isUuid(id)) throw new NotFoundError('execution', id);
  const [r] = await ctx.database.db.select().from(webhookExecutions).where(eq(webhookExecutions.id, id));
  if (!r) throw new NotFoundError('execution', id);
  return toExecution(r);
}

/**
 * A redelivery of a global webhook's attempt goes to the webhook as it is now; once the webhook is
 * deleted there is nowhere to send it. 409, not 404: the execution exists, its webhook does not.
 */
export async function assertRedeliverable(
  ctx: ServiceContext,
  execution: { webhook: string | null; event: string },
) {
  if (execution.webhook === null) return;
  const [w] = await ctx.database.db
    .select({ id: webhooks.id, event: webhooks.event })
    .from(webhooks)
    .where(eq(webhooks.id, execution.webhook));
  if (!w) {
    throw new ConflictError(
      'WEBHOOK_DELETED',
      `webhook ${JSON.stringify(execution.webhook)} of this execution was deleted; it cannot be redelivered`,
    );
  }
  if (w.event !== execution.event) throw eventChanged(execution.webhook, w.event, execution.event);
}

/** 409 for a redelivery to a global webhook that now subscribes to another event. */
const eventChanged = (webhook: string, now: string, was: string) =>
  new ConflictError(
    'WEBHOOK_EVENT_CHANGED',
    `webhook ${JSON.stringify(webhook)} now receives ${now}, not ${was}; it cannot be redelivered`,
  );
