import { EventName } from '@ffleet/shared';
import type { Context } from 'hono';
import { streamSSE } from 'hono/streaming';
import type { EventBus } from '../events/event-bus.ts';
import { BadRequestError } from './errors.ts';

/** Comment line every 15 s so proxies keep the stream open and dead clients are noticed. */
const SSE_KEEPALIVE_MS = 15_000;

/** `GET /api/v1/events[?events=a,b]` — one SSE message per emitted event, same payload as webhooks. */
export function eventStream(c: Context, bus: EventBus) {
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
    const queue: string[] = [];
    let wake: (() => void) | null = null;
    const unsubscribe = bus.subscribe((p) => {
      if (wanted && !wanted.has(p.event)) return;
      queue.push(JSON.stringify(p));
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
        const p = JSON.parse(next) as { id: string; event: string };
        await stream.writeSSE({ id: p.id, event: p.event, data: next });
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
