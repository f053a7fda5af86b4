import { randomUUID } from 'node:crypto';
import type { DirectWebhook, EventName, EventPayload } from '@ffleet/shared';
import { type Db, execRaw, type RawStatement } from '../db/client.ts';
import type { EventBus } from './event-bus.ts';

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

const eventTexts = new Map<string, string>();

/**
 * The statement that writes one event and its webhook deliveries: the events row, one delivery per
 * global subscription (read from `webhooks` by the same statement, so a subscription created on any
 * replica is seen) and one per matching direct webhook. `before` are further data-modifying CTEs
 * (`name AS (…), `, numbered from $1) run by the same statement, e.g. the task insert the event is
 * about. The text depends only on `before`'s text and the number of direct webhooks, so it is built
 * once per shape (and prepared once per connection).
 */
export function eventStatement(
  payload: EventPayload,
  opts: EmitOptions,
  now: number,
  before?: RawStatement,
): RawStatement {
  const direct = ((opts.direct ?? []) as DirectWebhook[]).filter((d) => d.event === opts.event);
  const head = before?.text ?? '';
  const base = before?.params.length ?? 0;
  const key = `${direct.length}|${base}|${head}`;
  let text = eventTexts.get(key);
  if (text === undefined) {
    const p = (i: number) => `$${base + i}`;
    // $1 event id, $2 event name, $3 payload, $4 now, $5 task id, $6 progressOnly, $7… direct URLs.
    // Delivery columns: id, event_id, event, webhook_id, source, url, secret, task_id, progress_only,
    // next_attempt_at, created_at, updated_at (ids are random v4 UUIDs, like randomUUID()).
    const tail = `${p(5)}::uuid, ${p(6)}::boolean, ${p(4)}::bigint, ${p(4)}::bigint, ${p(4)}::bigint`;
    const directRows = direct.length
      ? ` UNION ALL SELECT gen_random_uuid(), ${p(1)}::uuid, ${p(2)}::text, NULL::uuid, 'direct', d.url, NULL::text, ${tail}
    FROM (VALUES ${direct.map((_, i) => `(${p(7 + i)}::text)`).join(', ')}) AS d(url)`
      : '';
    text = `WITH ${head}ev AS (
  INSERT INTO events (id, event, payload, created_at)
  VALUES (${p(1)}::uuid, ${p(2)}::text, ${p(3)}::jsonb, ${p(4)}::bigint)
)
INSERT INTO deliveries (id, event_id, event, webhook_id, source, url, secret, task_id, progress_only,
  next_attempt_at, created_at, updated_at)
SELECT gen_random_uuid(), ${p(1)}::uuid, ${p(2)}::text, w.id, 'global', w.url, w.secret, ${tail}
  FROM webhooks w WHERE w.event = ${p(2)}::text${directRows}`;
    if (eventTexts.size < 1000) eventTexts.set(key, text);
  }
  return {
    text,
    params: [
      ...(before?.params ?? []),
      payload.id,
      opts.event,
      JSON.stringify(payload),
      now,
      opts.taskId ?? null,
      opts.progressOnly ?? false,
      ...direct.map((d) => d.url),
    ],
  };
}

function payloadOf(opts: EmitOptions, now: number): EventPayload {
  return { id: randomUUID(), event: opts.event, timestamp: new Date(now).toISOString(), data: opts.data };
}

/**
 * Write one event and its webhook deliveries in the caller's transaction (the outbox), in one
 * statement. Returns the payload to publish on the in-process bus once the transaction has committed,
 * and how many deliveries the statement wrote.
 */
export async function writeEvent(
  tx: Db,
  opts: EmitOptions,
  before?: RawStatement,
): Promise<{ payload: EventPayload; deliveries: number }> {
  const now = opts.now ?? Date.now();
  const payload = payloadOf(opts, now);
  const deliveries = await execRaw(tx, eventStatement(payload, opts, now, before));
  return { payload, deliveries };
}

/** Collects the payloads a transaction emitted; `publish` hands them to the bus after commit. */
export class EmittedEvents {
  readonly items: EventPayload[] = [];
  /** Webhook deliveries the emitted events wrote. */
  deliveries = 0;
  constructor(private readonly tx: Db) {}

  /** `before`: data-modifying CTEs to run in the same statement (see eventStatement). */
  async emit(opts: EmitOptions, before?: RawStatement): Promise<EventPayload> {
    const { payload, deliveries } = await writeEvent(this.tx, opts, before);
    this.items.push(payload);
    this.deliveries += deliveries;
    return payload;
  }

  /** After the commit: publish every event, and say so when deliveries became due. */
  publish(bus: EventBus): void {
    for (const p of this.items) bus.publish(p);
    if (this.deliveries > 0) bus.deliveriesWritten();
  }
}
