import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import type { Server } from 'node:http';
import { type AddressInfo, connect, type Socket } from 'node:net';
import type { EventPayload } from '@ffleet/shared';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, VALID } from '../../../test/api/support.ts';
import { waitFor } from '../../../test/fleet/support/media.ts';
import { useTestApp } from '../../../test/helpers/app.ts';
import { EventBus } from '../events/event-bus.ts';
import { EventHistory } from '../events/event-history.ts';
import { eventStream } from './events-stream.ts';

// Resumption of GET /api/v1/events with Last-Event-ID, over real HTTP (the basics of the stream are in
// system.test.ts).

type Message = { event: string; data: string; id?: string };

/** Listen on a free loopback port; `close` also ends the open streams. */
async function listen(fetch: (req: Request) => Response | Promise<Response>) {
  const server = serve({ fetch, port: 0, hostname: '127.0.0.1' }) as Server;
  const sockets = new Set<Socket>();
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  });
  await once(server, 'listening');
  const port = (server.address() as AddressInfo).port;
  return {
    port,
    base: `http://127.0.0.1:${port}`,
    /** Whether the server still holds the connection of this client socket. */
    serves: (client: Socket) => [...sockets].some((s) => s.remotePort === client.localPort),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** An SSE connection read message by message (comments skipped). */
/** A client that connects and leaves: the history records from the first client on. */
async function connectOnce(url: string): Promise<void> {
  await withStream(url, {}, async (s) => {
    await s.ready();
  });
}

/** Open a stream, hand it to `use`, and close it whatever happens. */
async function withStream<T>(
  url: string,
  headers: Record<string, string>,
  use: (s: Awaited<ReturnType<typeof openStream>>) => Promise<T>,
): Promise<T> {
  const s = await openStream(url, headers);
  try {
    return await use(s);
  } finally {
    await s.close();
  }
}

async function openStream(url: string, headers: Record<string, string> = {}) {
  const res = await fetch(url, { headers });
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  const next = async (timeoutMs = 5000): Promise<Message> => {
    for (;;) {
      const end = buffer.indexOf('\n\n');
      if (end >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (block.startsWith(':')) continue;
        const m: Message = { event: 'message', data: '' };
        for (const line of block.split('\n')) {
          if (line.startsWith('event: ')) m.event = line.slice(7);
          else if (line.startsWith('data: ')) m.data += line.slice(6);
          else if (line.startsWith('id: ')) m.id = line.slice(4);
        }
        return m;
      }
      let timer: NodeJS.Timeout | undefined;
      const chunk = await Promise.race([
        reader.read(),
        new Promise<never>((_, fail) => {
          timer = setTimeout(() => fail(new Error(`no SSE message within ${timeoutMs} ms`)), timeoutMs);
        }),
      ]).finally(() => clearTimeout(timer));
      if (chunk.done) throw new Error('the stream ended');
      buffer += decoder.decode(chunk.value, { stream: true });
    }
  };
  const take = async (n: number) => {
    const out: Message[] = [];
    while (out.length < n) out.push(await next());
    return out;
  };
  /** The `ready` message's data (it must come first). */
  const ready = async () => {
    const m = await next();
    expect(m.event).toBe('ready');
    expect(m.id).toBeUndefined();
    return JSON.parse(m.data) as Record<string, unknown>;
  };
  return { res, next, take, ready, close: () => reader.cancel().catch(() => {}) };
}

const payload = (event: EventPayload['event'] = 'task.updated', data: unknown = {}): EventPayload => ({
  id: randomUUID(),
  event,
  timestamp: new Date().toISOString(),
  data,
});

/** What a stream sends for these payloads: `id:`, `event:`, `data:` = the payload's JSON. */
const asMessages = (payloads: EventPayload[]): Message[] =>
  payloads.map((p) => ({ event: p.event, id: p.id, data: JSON.stringify(p) }));

describe('GET /api/v1/events resumption (Last-Event-ID), on the app', () => {
  const t = useTestApp();
  let server: Awaited<ReturnType<typeof listen>>;
  beforeAll(async () => {
    server = await listen(t.app.fetch);
    // The history records from the first client on; connect one so each test also passes alone.
    await connectOnce(`${server.base}/api/v1/events`);
  });
  afterAll(() => server?.close());

  const publish = (...payloads: EventPayload[]) => {
    for (const p of payloads) t.bus.publish(p);
    return payloads;
  };

  it('replays exactly the missed events, in order, then live ones', async () => {
    const first = await openStream(`${server.base}/api/v1/events`);
    let seen: EventPayload[];
    try {
      expect(await first.ready()).toEqual({});
      seen = publish(payload(), payload('task.created'), payload());
      expect(await first.take(3)).toEqual(asMessages(seen));
    } finally {
      await first.close();
    }
    const missed = publish(
      payload('task.updated', { n: 1 }),
      payload('task.deleted'),
      payload('batch.created'),
    );

    await withStream(`${server.base}/api/v1/events`, { 'Last-Event-ID': seen[2]!.id }, async (again) => {
      expect(again.res.status).toBe(200);
      expect(await again.ready()).toEqual({ resumed: true, replayed: 3 });
      expect(await again.take(3)).toEqual(asMessages(missed));
      // Live events follow the replay, none of it twice: a real one from the API, then published ones.
      const task = await json(await t.call('POST', '/api/v1/tasks', VALID.task()), 201);
      const created = await again.next();
      expect(created.event).toBe('task.created');
      expect(JSON.parse(created.data).data.taskId).toBe(task.id);
      const live = publish(payload(), payload());
      expect(await again.take(2)).toEqual(asMessages(live));
    });

    // From the newest id: nothing to replay, the stream is resumed all the same.
    const newest = publish(payload())[0]!;
    await withStream(`${server.base}/api/v1/events`, { 'Last-Event-ID': newest.id }, async (upToDate) => {
      expect(await upToDate.ready()).toEqual({ resumed: true, replayed: 0 });
      const live = publish(payload());
      expect(await upToDate.next()).toEqual(asMessages(live)[0]);
    });
  });

  it('takes the id from ?lastEventId= too, and prefers the header', async () => {
    const [a, b, c] = publish(payload(), payload(), payload());
    await withStream(`${server.base}/api/v1/events?lastEventId=${a!.id}`, {}, async (byQuery) => {
      expect(await byQuery.ready()).toEqual({ resumed: true, replayed: 2 });
      expect(await byQuery.take(2)).toEqual(asMessages([b!, c!]));
    });
    // An EventSource opened with ?lastEventId= keeps it in its URL and sends newer ids in the header.
    const both = await openStream(`${server.base}/api/v1/events?lastEventId=${a!.id}`, {
      'Last-Event-ID': b!.id.toUpperCase(),
    });
    try {
      expect(await both.ready()).toEqual({ resumed: true, replayed: 1 });
      expect(await both.next()).toEqual(asMessages([c!])[0]);
    } finally {
      await both.close();
    }
  });

  it('refuses ?lastEventId= given twice (400 INVALID_QUERY), as any single-valued parameter', async () => {
    const [a, b] = publish(payload(), payload());
    const res = await fetch(`${server.base}/api/v1/events?lastEventId=${a!.id}&lastEventId=${b!.id}`);
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({
      code: 'INVALID_QUERY',
      errors: [{ path: 'lastEventId', message: 'is given 2 times; it takes one value' }],
    });
  });

  it('applies ?events= to the replay', async () => {
    const url = `${server.base}/api/v1/events?events=task.deleted,batch.created`;
    const first = await openStream(url);
    const last = payload('task.deleted');
    try {
      await first.ready();
      publish(last);
      expect(await first.next()).toEqual(asMessages([last])[0]);
    } finally {
      await first.close();
    }
    // Missed: a real task.created (filtered out) and task.deleted, and published ones.
    const task = await json(await t.call('POST', '/api/v1/tasks', VALID.task()), 201);
    expect((await t.call('DELETE', `/api/v1/tasks/${task.id}`)).status).toBe(204);
    const [, batch, , deleted] = publish(
      payload('task.updated'),
      payload('batch.created'),
      payload('task.created'),
      payload('task.deleted'),
    );

    await withStream(url, { 'Last-Event-ID': last.id }, async (again) => {
      expect(await again.ready()).toEqual({ resumed: true, replayed: 3 });
      const [realDeleted, ...rest] = await again.take(3);
      expect(realDeleted!.event).toBe('task.deleted');
      expect(JSON.parse(realDeleted!.data).data.taskId).toBe(task.id);
      expect(rest).toEqual(asMessages([batch!, deleted!]));
      const [, live] = publish(payload('task.updated'), payload('task.deleted'));
      expect(await again.next()).toEqual(asMessages([live!])[0]);
    });
  });

  it('opens with resumed: false for an id it does not hold, and streams live events', async () => {
    const unknown = randomUUID();
    await withStream(`${server.base}/api/v1/events`, { 'Last-Event-ID': unknown }, async (s) => {
      expect(s.res.status).toBe(200);
      expect(await s.ready()).toEqual({ resumed: false, lastEventId: unknown });
      const live = publish(payload(), payload('task.deleted'));
      expect(await s.take(2)).toEqual(asMessages(live));
    });
  });

  it('treats a malformed Last-Event-ID as unknown, never a 500', async () => {
    // Ids that are not UUIDs are not looked up, even when an event carries one.
    const [notUuid, after] = publish({ ...payload(), id: 'plain-id' }, payload());
    const long = 'x'.repeat(300);
    for (const id of ['not-a-uuid', long, `${randomUUID()}x`, notUuid!.id, ' ']) {
      await withStream(`${server.base}/api/v1/events`, { 'Last-Event-ID': id }, async (s) => {
        expect(s.res.status).toBe(200);
        const ready = await s.ready();
        if (id.trim() === '') expect(ready).toEqual({});
        else expect(ready).toEqual({ resumed: false, lastEventId: id.slice(0, 100) });
        const live = publish(payload());
        expect(await s.next()).toEqual(asMessages(live)[0]);
      });
    }
    const byQuery = await openStream(
      `${server.base}/api/v1/events?lastEventId=${encodeURIComponent('%<>"')}`,
    );
    try {
      expect(byQuery.res.status).toBe(200);
      expect(await byQuery.ready()).toEqual({ resumed: false, lastEventId: '%<>"' });
    } finally {
      await byQuery.close();
    }
    expect(after).toBeDefined();
  });

  it('still disconnects a resumed client that stops reading', async () => {
    const blob = { blob: 'x'.repeat(256 * 1024) };
    const [anchor] = publish(payload());
    // 4 MB to replay, under the 8 MB limit: the stream resumes, then the client reads nothing.
    for (let i = 0; i < 16; i++) publish(payload('task.updated', blob));
    const socket = connect(server.port, '127.0.0.1');
    try {
      socket.write(`GET /api/v1/events HTTP/1.1\r\nHost: localhost\r\nLast-Event-ID: ${anchor!.id}\r\n\r\n`);
      // Not `for await … break`: leaving that loop destroys the socket.
      const head = await new Promise<string>((ready) => {
        let head = '';
        const onData = (chunk: Buffer) => {
          head += String(chunk);
          if (!/event: ready\ndata: .*\n/.test(head)) return;
          socket.off('data', onData);
          socket.pause(); // from here on the client reads nothing
          ready(head);
        };
        socket.on('data', onData);
      });
      expect(head).toContain('data: {"resumed":true,"replayed":16}');
      expect(server.serves(socket)).toBe(true);
      // 60 MB: more than the limit plus whatever the kernel's socket buffers take on loopback.
      for (let i = 0; i < 240 && server.serves(socket); i++) {
        publish(payload('task.updated', blob));
        await new Promise((r) => setImmediate(r));
      }
      await waitFor(() => !server.serves(socket), 10_000, 'the stuck client disconnected');
    } finally {
      socket.destroy();
    }
  });
});

describe('GET /api/v1/events resumption, history and client bounds', () => {
  /** A stream over its own bus and history (small bounds), served on a free port. */
  async function streamServer(history: EventHistory, maxQueuedBytes?: number) {
    const app = new Hono();
    app.get('/events', (c) => eventStream(c, history, undefined, maxQueuedBytes));
    return listen(app.fetch);
  }

  it('forgets the oldest events past maxEvents: their ids are unknown, later ones resume', async () => {
    const bus = new EventBus();
    const history = new EventHistory(bus, { maxEvents: 3 });
    const server = await streamServer(history);
    try {
      await connectOnce(`${server.base}/events`);
      const p = Array.from({ length: 5 }, () => payload());
      for (const e of p) bus.publish(e);
      for (const gone of [p[0]!, p[1]!]) {
        await withStream(`${server.base}/events`, { 'Last-Event-ID': gone.id }, async (s) => {
          expect(await s.ready()).toEqual({ resumed: false, lastEventId: gone.id });
          const live = payload();
          bus.publish(live);
          expect(await s.next()).toEqual(asMessages([live])[0]);
        });
      }
      // The two published in the loop above pushed p[2] and p[3] out as well.
      await withStream(`${server.base}/events`, { 'Last-Event-ID': p[4]!.id }, async (s) => {
        expect(await s.ready()).toEqual({ resumed: true, replayed: 2 });
        expect((await s.take(2)).map((m) => m.event)).toEqual(['task.updated', 'task.updated']);
      });
    } finally {
      await server.close();
      history.stop();
    }
  });

  it('forgets the oldest events past maxBytes', async () => {
    const bus = new EventBus();
    const pad = { pad: 'x'.repeat(2000) };
    const size = JSON.stringify(payload('task.updated', pad)).length;
    const history = new EventHistory(bus, { maxBytes: 3 * size });
    const server = await streamServer(history);
    try {
      await connectOnce(`${server.base}/events`);
      const p = Array.from({ length: 5 }, () => payload('task.updated', pad));
      for (const e of p) bus.publish(e);
      await withStream(`${server.base}/events`, { 'Last-Event-ID': p[1]!.id }, async (gone) => {
        expect(await gone.ready()).toEqual({ resumed: false, lastEventId: p[1]!.id });
      });
      await withStream(`${server.base}/events`, { 'Last-Event-ID': p[2]!.id }, async (held) => {
        expect(await held.ready()).toEqual({ resumed: true, replayed: 2 });
        expect(await held.take(2)).toEqual(asMessages(p.slice(3)));
      });
    } finally {
      await server.close();
      history.stop();
    }
  });

  it('does not resume when the missed events pass the per-client limit (replay counts toward it)', async () => {
    const bus = new EventBus();
    const history = new EventHistory(bus);
    const pad = { pad: 'x'.repeat(3000) };
    const size = JSON.stringify(payload('task.updated', pad)).length;
    // Room for three of them, and the small live one published below.
    const server = await streamServer(history, 3 * size + 500);
    try {
      await connectOnce(`${server.base}/events`);
      const p = Array.from({ length: 5 }, () => payload('task.updated', pad));
      for (const e of p) bus.publish(e);
      // 4 missed events: more than the client may have waiting, so no replay; the client resyncs.
      await withStream(`${server.base}/events`, { 'Last-Event-ID': p[0]!.id }, async (tooFar) => {
        expect(await tooFar.ready()).toEqual({ resumed: false, lastEventId: p[0]!.id });
        const live = payload();
        bus.publish(live);
        expect(await tooFar.next()).toEqual(asMessages([live])[0]);
      });
      // Three of them and the live one fit; the filter counts only what is sent.
      await withStream(`${server.base}/events`, { 'Last-Event-ID': p[1]!.id }, async (fits) => {
        expect(await fits.ready()).toEqual({ resumed: true, replayed: 4 });
        expect((await fits.take(4)).slice(0, 3)).toEqual(asMessages(p.slice(2)));
      });
      const filtered = await openStream(`${server.base}/events?events=task.created`, {
        'Last-Event-ID': p[0]!.id,
      });
      try {
        expect(await filtered.ready()).toEqual({ resumed: true, replayed: 0 });
      } finally {
        await filtered.close();
      }
    } finally {
      await server.close();
      history.stop();
    }
  });
});
