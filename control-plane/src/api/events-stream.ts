import { EventName } from '@ffleet/shared';
import type { HttpBindings } from '@hono/node-server';
import type { Context } from 'hono';
import { streamSSE } from 'hono/streaming';
import type { Logger } from 'pino';
import type { EventBus } from '../events/event-bus.ts';
import { BadRequestError } from './errors.ts';

/** Comment line every 15 s so proxies keep the stream open and dead clients are noticed. */
const SSE_KEEPALIVE_MS = 15_000;

/**
 * Bytes of events one client may have waiting. A client that stops reading (a frozen tab, a half-open
 * connection) would otherwise hold every later event in the control plane's memory (1.35 GB after 120
 * large tasks, in a test); past this it is disconnected, and an EventSource reconnects by itself.
 */
export const SSE_MAX_QUEUED_BYTES = 8 * 1024 * 1024;

type Queued = { id: string; event: string; data: string };

/** `GET /api/v1/events[?events=a,b]` — one SSE message per emitted event, same payload as webhooks. */
export function eventStream(
  c: Context,
  bus: EventBus,
  logger?: Logger,
  maxQueuedBytes = SSE_MAX_QUEUED_BYTES,
) {
  const filter = c.req.query('events');
  let wanted: Set<string> | null = null;
  if (filter) {
    wanted = new Set();
    for (const e of filter.split(',').map((s) => s.trim())) {
      if (!EventName.safeParse(e).success)
        throw new BadRequestError('INVALID_QUERY', `unknown event ${JSON.stringify(e)}`);
      wanted.add(e);
    }
  }
  return streamSSE(c, async (stream) => {
    const queue: Queued[] = [];
    let queuedBytes = 0;
    let wake: (() => void) | null = null;
    const unsubscribe = bus.subscribe((p) => {
      if (stream.aborted || (wanted && !wanted.has(p.event))) return;
      const data = JSON.stringify(p);
      queuedBytes += data.length;
      if (queuedBytes > maxQueuedBytes) {
        logger?.warn(
          { queuedEvents: queue.length, limitBytes: maxQueuedBytes },
          'event stream client is not reading; disconnected',
        );
        queue.length = 0;
        stream.abort();
        // The socket too: its pending writes would otherwise wait for a reader that never comes.
        (c.env as Partial<HttpBindings> | undefined)?.outgoing?.destroy();
        return;
      }
      queue.push({ id: p.id, event: p.event, data });
      wake?.();
    });
    stream.onAbort(() => {
      unsubscribe();
      wake?.();
    });
    await stream.writeSSE({ event: 'ready', data: '{}' });
    while (!stream.aborted) {
      const next = queue.shift();
      if (next !== undefined) {
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
      if (!stream.aborted && queue.length === 0) await stream.write(': keepalive\n\n');
    }
    unsubscribe();
  });
}
