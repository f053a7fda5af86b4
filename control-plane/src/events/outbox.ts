import { randomUUID } from 'node:crypto';
import type { DirectWebhook, EventName, EventPayload } from '@ffleet/shared';
import { eq } from 'drizzle-orm';
import type { Db } from '../db/client.ts';
import { deliveries, events, webhooks } from '../db/schema.ts';

export type EmitOptions = {
  event: EventName;
  data: unknown;
  /** Direct webhooks (task's or preset's) that also receive this event. */
  direct?: readonly { event: string; url: string }[];
  /** Task the event is about (for coalescing and the executions filter). */
  taskId?: string;
  /** A task.updated that only moved progress/remaining. */
  progressOnly?: boolean;
  now?: number;
};

/**
 * Write one event and its webhook deliveries in the caller's transaction (the outbox). Returns the
 * payload to publish on the in-process bus once the transaction has committed.
 */
export async function writeEvent(tx: Db, opts: EmitOptions): Promise<EventPayload> {
  const now = opts.now ?? Date.now();
  const id = randomUUID();
  const payload: EventPayload = {
    id,
    event: opts.event,
    timestamp: new Date(now).toISOString(),
    data: opts.data,
  };
  await tx.insert(events).values({ id, event: opts.event, payload, createdAt: now });
  const globals = await tx
    .select({ id: webhooks.id, url: webhooks.url, secret: webhooks.secret })
    .from(webhooks)
    .where(eq(webhooks.event, opts.event));
  const rows = globals.map((w) => ({
    id: randomUUID(),
    eventId: id,
    event: opts.event,
    webhookId: w.id,
    source: 'global',
    url: w.url,
    secret: w.secret,
    taskId: opts.taskId ?? null,
    progressOnly: opts.progressOnly ?? false,
    nextAttemptAt: now,
    createdAt: now,
    updatedAt: now,
  }));
  for (const d of (opts.direct ?? []) as DirectWebhook[]) {
    if (d.event !== opts.event) continue;
    rows.push({
      id: randomUUID(),
      eventId: id,
      event: opts.event,
      webhookId: null as unknown as string,
      source: 'direct',
      url: d.url,
      secret: null,
      taskId: opts.taskId ?? null,
      progressOnly: opts.progressOnly ?? false,
      nextAttemptAt: now,
      createdAt: now,
      updatedAt: now,
    });
  }
  if (rows.length > 0) await tx.insert(deliveries).values(rows);
  return payload;
}

/** Collects the payloads a transaction emitted; `flush` publishes them after commit. */
export class EmittedEvents {
  readonly items: EventPayload[] = [];
  constructor(private readonly tx: Db) {}

  async emit(opts: EmitOptions): Promise<EventPayload> {
    const p = await writeEvent(this.tx, opts);
    this.items.push(p);
    return p;
  }
}
