import { EventName } from '@ffleet/shared';
import type { HttpBindings } from '@hono/node-server';
import type { Context } from 'hono';
import { streamSSE } from 'hono/streaming';
import type { Logger } from 'pino';
import type { EventHistory, HistoryEntry } from '../events/event-history.ts';
import { BadRequestError } from './errors.ts';

/** Comment line every 15 s so proxies keep the stream open and dead clients are noticed. */
const SSE_KEEPALIVE_MS = 15_000;

/**
 * Bytes of events one client may have waiting. A client that stops reading (a frozen tab, a half-open
 * connection) would otherwise hold every later event in the control plane's memory (1.35 GB after 120
 * large tasks, in a test); past this it is disconnected, and an EventSource reconnects by itself.
 * Replayed events count too: a resumption whose missed events pass this is not resumed (see below).
 */
export const SSE_MAX_QUEUED_BYTES = 8 * 1024 * 1024;

/** Event ids are UUIDs; anything else cannot be in the history (and is not looked for). */
const EVENT_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const MAX_LAST_EVENT_ID = 100;

/**
 * `GET /api/v1/events[?events=a,b][&lastEventId=id]` — one SSE message per emitted event, same payload
 * as webhooks, `id:` = the event id.
 *
 * Resumption: with a `Last-Event-ID` header (an EventSource sends it when it reconnects) or, for clients
 * that cannot set headers, a `lastEventId` query parameter (the header wins: an EventSource that was
 * opened with the parameter keeps it in its URL and sends newer ids in the header), the events recorded
 * after that id (and passing `?events=`) are sent first, then live ones, with no gap and no duplicate.
 * The first message, `ready`, says what happened: `{}` without an id; `{"resumed":true,"replayed":N}`;
 * `{"resumed":false,"lastEventId":id}` when the id is not in the history (too old, another process, not
 * an event id) or its missed events exceed `maxQueuedBytes` — the client then resyncs through the REST API.
 */
export function eventStream(
  c: Context,
  history: EventHistory,
  logger?: Logger,
  maxQueuedBytes = SSE_MAX_QUEUED_BYTES,
) {
  const filter = c.req.queries('events')?.join(','); // given twice: both lists
  let wanted: Set<string> | null = null;
  if (filter) {
    wanted = new Set();
    for (const e of filter.split(',').map((s) => s.trim())) {
      if (!EventName.safeParse(e).success)
        throw new BadRequestError('INVALID_QUERY', `unknown event ${JSON.stringify(e)}`);
      wanted.add(e);
    }
  }
  const ids = c.req.queries('lastEventId') ?? [];
  if (ids.length > 1)
    throw new BadRequestError('INVALID_QUERY', 'the query parameters are invalid', [
      { path: 'lastEventId', message: `is given ${ids.length} times; it takes one value` },
    ]);
  const lastEventId = c.req.header('last-event-id') || ids[0] || undefined;
  return streamSSE(c, async (stream) => {
    // Waiting entries are queue[head…]; the strings are the history's own, not copies.
    let queue: (HistoryEntry | undefined)[] = [];
    let head = 0;
    let queuedBytes = 0;
    let wake: (() => void) | null = null;
    // Subscribed before the history is read (below), so nothing published in between can be missed.
    const unsubscribe = history.subscribe((e) => {
      if (stream.aborted || (wanted && !wanted.has(e.event))) return;
      queuedBytes += e.data.length;
      if (queuedBytes > maxQueuedBytes) {
        logger?.warn(
          { queuedEvents: queue.length - head, limitBytes: maxQueuedBytes },
          'event stream client is not reading; disconnected',
        );
        queue = [];
        head = 0;
        stream.abort();
        // The socket too: its pending writes would otherwise wait for a reader that never comes.
        (c.env as Partial<HttpBindings> | undefined)?.outgoing?.destroy();
        return;
      }
      queue.push(e);
      wake?.();
    });
    stream.onAbort(() => {
      unsubscribe();
      wake?.();
    });

    let ready = '{}';
    if (lastEventId !== undefined) {
      const id = lastEventId.toLowerCase();
      const valid = id.length <= MAX_LAST_EVENT_ID && EVENT_ID.test(id);
      const missed = valid ? history.after(id, wanted ? (e) => wanted.has(e.event) : undefined) : undefined;
      let missedBytes = 0;
      for (const e of missed ?? []) missedBytes += e.data.length;
      if (missed && queuedBytes + missedBytes <= maxQueuedBytes) {
        // In one process the listener cannot run between subscribe and `after` (no await in between),
        // so `queue` holds nothing yet; still de-duplicate by position rather than rely on that.
        const last = missed.length > 0 ? missed[missed.length - 1]!.seq : 0;
        const live = queue.slice(head).filter((e) => e!.seq > last);
        queue = [...missed, ...live];
        head = 0;
        queuedBytes = 0;
        for (const e of queue) queuedBytes += e!.data.length;
        ready = JSON.stringify({ resumed: true, replayed: missed.length });
      } else {
        if (missed)
          logger?.info({ missedBytes, limitBytes: maxQueuedBytes }, 'event stream resume too large');
        ready = JSON.stringify({ resumed: false, lastEventId: lastEventId.slice(0, MAX_LAST_EVENT_ID) });
      }
    }
    await stream.writeSSE({ event: 'ready', data: ready });
    while (!stream.aborted) {
      if (head < queue.length) {
        const next = queue[head]!;
        queue[head++] = undefined;
        if (head === queue.length) {
          queue = [];
          head = 0;
        } else if (head >= 1024 && head * 2 >= queue.length) {
          queue = queue.slice(head);
          head = 0;
        }
        await stream.writeSSE(next);
        queuedBytes -= next.data.length;
        continue;
      }
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, SSE_KEEPALIVE_MS);
        wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
      wake = null;
      if (!stream.aborted && head === queue.length) await stream.write(': keepalive\n\n');
    }
    unsubscribe();
  });
}
