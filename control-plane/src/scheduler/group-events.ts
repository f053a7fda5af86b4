import { randomUUID } from 'node:crypto';
import type { DirectWebhook, EventPayload } from '@ffleet/shared';
import { type Db, execRaw, type RawStatement } from '../db/client.ts';
import { type EmitOptions, EmittedEvents } from '../events/outbox.ts';

/** Events written by one statement at most (bounds its parameter count: 6 per event + 2 per direct URL). */
const MAX_ROWS = 256;

const texts = new Map<string, string>();

type Pending = { payload: EventPayload; opts: EmitOptions; now: number; direct: DirectWebhook[] };

/**
 * The statement that writes many events and their webhook deliveries (what `eventStatement` in
 * events/outbox.ts writes for one): the events rows, one delivery per event and global subscription
 * (read from `webhooks` by the same statement) and one per matching direct webhook. The text depends
 * only on the number of events and of direct URLs.
 */
export function eventsStatement(items: readonly Pending[]): RawStatement {
  const nDirect = items.reduce((n, it) => n + it.direct.length, 0);
  const key = `${items.length}|${nDirect}`;
  let text = texts.get(key);
  if (text === undefined) {
    let p = 0;
    const next = () => `$${++p}`;
    // Per event: id, event name, payload, now, task id, progressOnly.
    const rows = items.map(
      () =>
        `(${next()}::uuid, ${next()}::text, ${next()}::jsonb, ${next()}::bigint, ${next()}::uuid, ${next()}::boolean)`,
    );
    const directRows = Array.from({ length: nDirect }, () => `(${next()}::uuid, ${next()}::text)`);
    // Delivery columns: id, event_id, event, webhook_id, source, url, secret, task_id, progress_only,
    // next_attempt_at, created_at, updated_at (ids are random v4 UUIDs, like randomUUID()).
    const tail = 'ev.task_id, ev.progress_only, ev.created_at, ev.created_at, ev.created_at';
    const direct = nDirect
      ? ` UNION ALL SELECT gen_random_uuid(), ev.id, ev.event, NULL::uuid, 'direct', d.url, NULL::text, ${tail}
  FROM (VALUES ${directRows.join(', ')}) AS d(event_id, url) JOIN ev ON ev.id = d.event_id`
      : '';
    text = `WITH ev(id, event, payload, created_at, task_id, progress_only) AS (
  VALUES ${rows.join(', ')}
), ins AS (
  INSERT INTO events (id, event, payload, created_at) SELECT id, event, payload, created_at FROM ev
)
INSERT INTO deliveries (id, event_id, event, webhook_id, source, url, secret, task_id, progress_only,
  next_attempt_at, created_at, updated_at)
SELECT gen_random_uuid(), ev.id, ev.event, w.id, 'global', w.url, w.secret, ${tail}
  FROM ev JOIN webhooks w ON w.event = ev.event${direct}`;
    if (texts.size < 1000) texts.set(key, text);
  }
  const params: unknown[] = [];
  for (const it of items) {
    params.push(
      it.payload.id,
      it.opts.event,
      JSON.stringify(it.payload),
      it.now,
      it.opts.taskId ?? null,
      it.opts.progressOnly ?? false,
    );
  }
  for (const it of items) for (const d of it.direct) params.push(it.payload.id, d.url);
  return { text, params };
}

/**
 * The events of a group-commit transaction: emits without a `before` statement are held and written
 * together by `flush` (before the commit, so still in the same transaction: the outbox holds), up to
 * MAX_ROWS per statement. Every cycle of an agent (claim, RUNNING, DONE) emits three task.updated
 * events; written one statement each they were half of a group's statements. An emit that carries
 * a statement (a task insert) writes the held ones first, then itself, so the order stays.
 */
export class GroupEvents extends EmittedEvents {
  readonly #db: Db;
  #pending: Pending[] = [];

  constructor(tx: Db) {
    super(tx);
    this.#db = tx;
  }

  override async emit(opts: EmitOptions, before?: RawStatement): Promise<EventPayload> {
    if (before) {
      await this.flush();
      return super.emit(opts, before);
    }
    const now = opts.now ?? Date.now();
    const payload: EventPayload = {
      id: randomUUID(),
      event: opts.event,
      timestamp: new Date(now).toISOString(),
      data: opts.data,
    };
    const direct = ((opts.direct ?? []) as DirectWebhook[]).filter((d) => d.event === opts.event);
    this.#pending.push({ payload, opts, now, direct });
    this.items.push(payload);
    return payload;
  }

  /** Write every held event. */
  async flush(): Promise<void> {
    while (this.#pending.length) {
      const chunk = this.#pending.splice(0, MAX_ROWS);
      this.deliveries += await execRaw(this.#db, eventsStatement(chunk));
    }
  }
}
