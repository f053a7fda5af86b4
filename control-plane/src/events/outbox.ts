import { randomUUID } from 'node:crypto';
import type { DirectWebhook, EventName, EventPayload } from '@ffleet/shared';
import { sql } from 'drizzle-orm';
import { textArrayLiteral } from '../db/array-literal.ts';
import { type Db, execRaw, type RawStatement } from '../db/client.ts';
import { webhooks } from '../db/schema.ts';
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

/** An event about to be written: its payload and the direct webhooks that receive it. */
export type PendingEvent = {
  payload: EventPayload;
  opts: EmitOptions;
  now: number;
  direct: DirectWebhook[];
};

export function pendingEvent(opts: EmitOptions): PendingEvent {
  const now = opts.now ?? Date.now();
  return {
    payload: { id: randomUUID(), event: opts.event, timestamp: new Date(now).toISOString(), data: opts.data },
    opts,
    now,
    direct: ((opts.direct ?? []) as DirectWebhook[]).filter((d) => d.event === opts.event),
  };
}

/**
 * The statement that writes events and their webhook deliveries: one delivery per event and global
 * subscription (read from `webhooks` by the same statement, so a subscription created on any replica
 * is seen) and one per matching direct webhook, and the events rows those deliveries need. `before`
 * are further data-modifying CTEs (`name AS (…), `, numbered from $1) run by the same statement, e.g.
 * the task insert the event is about. Returns rows written = deliveries.
 *
 * The events table is the deliveries' payload store (one payload however many webhooks receive it;
 * nothing else reads it): an event no webhook receives is published on the bus (SSE) only, not stored.
 * Every running task emits a progress-only `task.updated` up to twice a second, each payload a full
 * task snapshot (~1.3 kB stored, `pg_column_size`): stored, 40 running encodes wrote ~9 GB a day, kept
 * 7 days by the retention sweep, with no webhook at all; and two payloads cost 0.25–0.35 ms of PGlite
 * CPU per transaction (measured: 840–950 µs with their rows, 550–600 µs without). When no webhook
 * exists and the events have no direct webhook, their array is not even parsed (another ~50 µs).
 *
 * The events travel as ONE jsonb array and the direct webhooks as two array literals, so the text
 * depends on `before`'s text alone: one prepared statement per `before` shape, whatever the number of
 * events and direct webhooks. (With a VALUES row per event and per direct webhook, every group size was
 * a statement of its own, prepared again on every pooled PostgreSQL connection and never released:
 * the 256 sizes of a busy group commit held 165 MB in ONE server backend.)
 */
export function eventsStatement(items: readonly PendingEvent[], before?: RawStatement): RawStatement {
  const head = before?.text ?? '';
  // A `before` text fixes its number of parameters, so it alone keys the statement.
  let text = eventTexts.get(head);
  if (text === undefined) {
    const base = before?.params.length ?? 0;
    const [events, directIds, directUrls] = [base + 1, base + 2, base + 3];
    // The deliveries (`dl`: one per global subscription, one per direct webhook) decide which events
    // are stored: exactly those they point at. Delivery ids are random v4 UUIDs, like randomUUID(); rows
    // are inserted in the order the events were emitted, which numbers their `seq` (delivery order).
    text = `WITH ${head}ev(id, event, payload, created_at, task_id, progress_only, ord) AS (
  SELECT (e->'p'->>'id')::uuid, e->'p'->>'event', e->'p', (e->>'n')::bigint, (e->>'t')::uuid, (e->>'g')::boolean, e.ord
  FROM jsonb_array_elements(CASE WHEN cardinality($${directIds}::uuid[]) > 0 OR EXISTS (SELECT 1 FROM webhooks)
    THEN $${events}::jsonb ELSE '[]'::jsonb END) WITH ORDINALITY AS e(e, ord)
), dl(event_id, event, webhook_id, source, url, secret, task_id, progress_only, created_at, ord) AS (
  SELECT ev.id, ev.event, w.id, 'global', w.url, NULL::text, ev.task_id, ev.progress_only, ev.created_at, ev.ord
    FROM ev JOIN webhooks w ON w.event = ev.event
  UNION ALL SELECT ev.id, ev.event, NULL::uuid, 'direct', d.url, NULL::text, ev.task_id, ev.progress_only, ev.created_at, ev.ord
    FROM unnest($${directIds}::uuid[], $${directUrls}::text[]) AS d(event_id, url) JOIN ev ON ev.id = d.event_id
), ins AS (
  INSERT INTO events (id, event, payload, created_at)
  SELECT id, event, payload, created_at FROM ev WHERE id IN (SELECT event_id FROM dl)
)
INSERT INTO deliveries (id, event_id, event, webhook_id, source, url, secret, task_id, progress_only,
  next_attempt_at, created_at, updated_at)
SELECT gen_random_uuid(), event_id, event, webhook_id, source, url, secret, task_id, progress_only,
  created_at, created_at, created_at FROM dl ORDER BY ord`;
    if (eventTexts.size < 1000) eventTexts.set(head, text);
  }
  // Per event: its payload, created_at, task id and progressOnly, as one JSON array.
  const rows = items.map(
    (it) =>
      `{"p":${JSON.stringify(it.payload)},"n":${it.now},"t":${it.opts.taskId ? JSON.stringify(it.opts.taskId) : 'null'},"g":${it.opts.progressOnly === true}}`,
  );
  const ids: string[] = [];
  const urls: string[] = [];
  for (const it of items)
    for (const d of it.direct) {
      ids.push(it.payload.id);
      urls.push(d.url);
    }
  return {
    text,
    params: [...(before?.params ?? []), `[${rows.join(',')}]`, textArrayLiteral(ids), textArrayLiteral(urls)],
  };
}

/**
 * `EXISTS (SELECT 1 FROM webhooks)` as a column of a statement's RETURNING (the claim, a report's fenced
 * update): the statement says whether any global webhook exists, and the transaction tells its
 * EmittedEvents (`sawWebhooks`), so that on PGlite events no webhook receives need no statement of their
 * own (~1 ms of the control plane's CPU per short task there).
 */
export const webhooksExist = sql<boolean>`EXISTS (SELECT 1 FROM ${webhooks})`;

/** Collects the payloads a transaction emitted; `publish` hands them to the bus after commit. */
export class EmittedEvents {
  readonly items: EventPayload[] = [];
  /** Webhook deliveries the emitted events wrote. */
  deliveries = 0;
  /** What this transaction's statements saw of the global webhooks (see `sawWebhooks`). */
  #webhooks: 'none' | 'some' | undefined;
  readonly #alone: boolean;

  /**
   * `alone`: the database runs this transaction alone (PGlite: one transaction at a time), so what one of
   * its statements saw of the webhooks still holds at its commit.
   */
  constructor(
    private readonly tx: Db,
    opts: { alone?: boolean } = {},
  ) {
    this.#alone = opts.alone === true;
  }

  /**
   * Whether a statement's answer to `webhooksExist` is of use (`sawWebhooks`): only where the
   * transaction runs alone. Elsewhere statements leave the column out.
   */
  get wantsWebhookCheck(): boolean {
    return this.#alone;
  }

  /**
   * A statement of this transaction saw whether any global webhook exists (`webhooksExist`). Once one saw
   * some, the answer stays "some" for the transaction. Kept only when the transaction runs alone.
   */
  sawWebhooks(exist: boolean): void {
    if (!this.#alone) return;
    if (exist) this.#webhooks = 'some';
    else this.#webhooks ??= 'none';
  }

  /**
   * Whether these events need no statement: no direct webhook receives them, and a statement of this
   * transaction saw no global webhook (what the events statement would check first, and then write
   * nothing). Only where the transaction runs alone (PGlite), where no webhook can be created between
   * that statement and the commit. On PostgreSQL the events statement checks for itself, just before the
   * commit: a transaction may wait for a lock in between (a batch row, before its batch.finished), and a
   * webhook created while it waits must receive what it commits afterwards.
   */
  needNoStatement(items: readonly PendingEvent[]): boolean {
    return this.#webhooks === 'none' && items.every((it) => it.direct.length === 0);
  }

  /** `before`: data-modifying CTEs to run in the same statement (see eventsStatement). */
  async emit(opts: EmitOptions, before?: RawStatement): Promise<EventPayload> {
    return (await this.emitMany([opts], before))[0]!;
  }

  /** Several events (and `before`, e.g. the insert of the tasks they are about) in ONE statement. */
  async emitMany(list: readonly EmitOptions[], before?: RawStatement): Promise<EventPayload[]> {
    const items = list.map(pendingEvent);
    if (before || !this.needNoStatement(items))
      this.deliveries += await execRaw(this.tx, eventsStatement(items, before));
    for (const it of items) this.items.push(it.payload);
    return items.map((it) => it.payload);
  }

  /** After the commit: publish every event, and say so when deliveries became due. */
  publish(bus: EventBus): void {
    for (const p of this.items) bus.publish(p);
    if (this.deliveries > 0) bus.deliveriesWritten();
  }
}
