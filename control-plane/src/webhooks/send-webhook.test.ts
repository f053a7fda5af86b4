import { randomUUID } from 'node:crypto';
import dns from 'node:dns';
import { createServer as createHttpServer } from 'node:http';
import { createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { installFailingResolver } from '../../../test/webhooks/failing-resolver.ts';
import { type Respond, TestReceiver } from '../../../test/webhooks/receiver.ts';
import {
  LOOKUP_REUSE_MS,
  MAX_RESPONSE_BODY_BYTES,
  type SendWebhookOptions,
  sendWebhook,
} from './send-webhook.ts';

const receivers: TestReceiver[] = [];
afterEach(async () => {
  await Promise.all(receivers.splice(0).map((r) => r.close()));
});

async function receiver(respond: Respond) {
  const r = await TestReceiver.start(respond);
  receivers.push(r);
  return r;
}

/** A free loopback port nobody listens on. */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as { port: number };
  await new Promise((r) => s.close(r));
  return port;
}

/** Both clients: the built-in node:http one (the dispatcher's default) and an injected fetch. */
const clients = [
  ['node:http', undefined],
  ['fetch', (i: string | URL | Request, init?: RequestInit) => fetch(i, init)],
] as const;

describe.each(clients)('sendWebhook via %s', (_name, client) => {
  const send = (url: string, o: Partial<SendWebhookOptions> = {}) =>
    sendWebhook({
      url,
      eventId: '7c1a8f3e-0000-4000-8000-000000000001',
      body: '{"id":"7c1a8f3e-0000-4000-8000-000000000001","event":"task.created"}',
      secret: null,
      userAgent: 'ffleet/test',
      timeoutMs: 2_000,
      fetch: client,
      now: Date.now,
      ...o,
    });

  describe('sendWebhook', () => {
    it('reads at most 64 KiB of a huge response body and does not wait for the rest', async () => {
      const r = await receiver((_req, res) => {
        res.writeHead(200, { 'content-type': 'application/octet-stream' });
        const chunk = Buffer.alloc(1024 * 1024, 'a');
        let sent = 0;
        // 200 MiB, written as fast as the socket drains; we must stop reading long before the end.
        const pump = () => {
          while (sent < 200 && res.write(chunk)) sent++;
          if (sent < 200) res.once('drain', pump);
          else res.end();
        };
        pump();
      });
      const t0 = Date.now();
      const result = await send(r.url);
      expect(Date.now() - t0).toBeLessThan(1_500);
      expect(result.ok).toBe(true);
      expect(result.response?.body.length).toBe(MAX_RESPONSE_BODY_BYTES);
    });

    /** Sends `status` at once, then its body one byte per 50 ms, forever; the attempt times out at 400 ms. */
    async function sendToDrip(status: number) {
      const r = await receiver((_req, res) => {
        res.writeHead(status, { 'content-type': 'text/plain' });
        const t = setInterval(() => res.write('x'), 50);
        res.on('close', () => clearInterval(t));
      });
      const t0 = Date.now();
      const result = await send(r.url, { timeoutMs: 400 });
      expect(Date.now() - t0).toBeLessThan(1_000);
      expect(result.response?.body).toMatch(/^x+$/);
      return result;
    }

    it('times out a slow-drip error response: the timeout covers the body, partial body kept', async () => {
      const result = await sendToDrip(500);
      expect(result.ok).toBe(false);
      if (result.ok) return;
      expect(result.error).toBe('timeout after 400 ms');
      expect(result.shutdown).toBe(false);
      expect(result.response?.status).toBe(500);
    });

    it('counts a 2xx as delivered when its body drips past the timeout or is cut off', async () => {
      expect(await sendToDrip(200)).toMatchObject({ ok: true, response: { status: 200 } });

      const cut = await receiver((_req, res) => {
        res.writeHead(200, { 'content-length': '100' });
        res.write('abc', () => res.destroy());
      });
      expect(await send(cut.url)).toMatchObject({ ok: true, response: { status: 200, body: 'abc' } });
    });

    it('decodes a non-UTF-8 body with replacement characters', async () => {
      const r = await receiver((_req, res) => {
        res.writeHead(500);
        res.end(Buffer.from([0x6f, 0x6b, 0xff, 0xfe, 0x00, 0xc3]));
      });
      const result = await send(r.url);
      expect(result.ok).toBe(false);
      expect(result.response).toMatchObject({ status: 500, body: 'ok\ufffd\ufffd\u0000\ufffd' });
    });

    it('does not follow redirects and records the 3xx as a failure', async () => {
      const target = await receiver((_req, res) => {
        res.end('should not be reached');
      });
      const r = await receiver((_req, res) => {
        res.writeHead(307, { location: `${target.url}/elsewhere` });
        res.end();
      });
      const result = await send(r.url);
      expect(result.ok).toBe(false);
      if (result.ok) return;
      expect(result.error).toBe(`redirect not followed: HTTP 307 to ${target.url}/elsewhere`);
      expect(result.response?.status).toBe(307);
      expect(target.received).toHaveLength(0);
    });

    it('returns transport errors as values', async () => {
      const refused = await send(`http://127.0.0.1:${await closedPort()}/hook`);
      expect(refused).toMatchObject({ ok: false, permanent: false, response: null });
      expect(refused.ok || refused.error).toMatch(/ECONNREFUSED/);

      const unresolvable = await send('http://nonexistent.invalid/hook');
      expect(unresolvable).toMatchObject({ ok: false, permanent: false, response: null });
      expect(unresolvable.ok || unresolvable.error).toMatch(/ENOTFOUND|EAI_AGAIN/);
    });

    it('fails bad and non-http URLs permanently without sending anything', async () => {
      expect(await send('not a url')).toMatchObject({
        ok: false,
        permanent: true,
        error: 'invalid URL: not a url',
      });
      expect(await send('data:text/plain,hi')).toMatchObject({
        ok: false,
        permanent: true,
        error: 'unsupported URL scheme data:',
      });
    });

    it('stops at once when its signal is aborted and says so', async () => {
      const r = await receiver(() => {});
      const stop = new AbortController();
      const pending = send(r.url, { signal: stop.signal, timeoutMs: 10_000 });
      await r.waitFor(1);
      stop.abort('dispatcher stopped');
      expect(await pending).toMatchObject({ ok: false, shutdown: true, error: 'dispatcher stopped' });
    });
  });
});

/** A receiver that reads each request and answers 204 (not listening yet). */
const noContentReceiver = () =>
  createHttpServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(204);
      res.end();
    });
  });

describe('sendWebhook built-in client', () => {
  const base = {
    eventId: '7c1a8f3e-0000-4000-8000-000000000001',
    body: '{}',
    secret: null,
    userAgent: 'ffleet/test',
    timeoutMs: 2_000,
    now: Date.now,
  };

  it('reuses one keep-alive connection for consecutive attempts to the same receiver', async () => {
    const server = noContentReceiver();
    let connections = 0;
    server.on('connection', () => connections++);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as { port: number }).port}/hook`;
    try {
      for (let i = 0; i < 3; i++) expect(await sendWebhook({ ...base, url })).toMatchObject({ ok: true });
      expect(connections).toBe(1);
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });

  it('delivers to a port fetch refuses (its "bad ports"): a receiver may listen there', async () => {
    const server = noContentReceiver();
    // The first of fetch's bad ports free here.
    let port = 0;
    for (const candidate of [6665, 6666, 6667, 6668, 6669, 6679, 6697, 10080, 6000, 6566, 5060, 5061]) {
      const bound = await new Promise<boolean>((r) => {
        server.once('error', () => r(false));
        server.listen(candidate, '127.0.0.1', () => r(true));
      });
      if (bound) {
        port = candidate;
        break;
      }
    }
    expect(port).toBeGreaterThan(0);
    try {
      expect(await sendWebhook({ ...base, url: `http://127.0.0.1:${port}/hook` })).toMatchObject({
        ok: true,
      });
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });

  it('words transport errors exactly as fetch does', async () => {
    const missing = `missing-${randomUUID().slice(0, 8)}.invalid`;
    const resolver = installFailingResolver(missing, { delayMs: 10 });
    try {
      for (const url of [`http://127.0.0.1:${await closedPort()}/hook`, `http://${missing}/hook`]) {
        const viaNode = await sendWebhook({ ...base, url });
        const viaFetch = await sendWebhook({ ...base, url, fetch: (i, init) => fetch(i, init) });
        expect(viaNode.ok || viaNode.error).toBe(viaFetch.ok || viaFetch.error);
      }
      expect(resolver.calls()).toBe(2);
    } finally {
      resolver.restore();
    }
  });

  it('looks a host name up once for a burst of attempts, each with its own answer, and again later', async () => {
    const server = noContentReceiver();
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    const missing = `burst-${randomUUID().slice(0, 8)}.invalid`;
    const calls = new Map<string, number>();
    const real = dns.lookup;
    // Counts the real lookups of localhost (net calls dns.lookup at connect time); each still happens.
    dns.lookup = ((name: string, ...rest: unknown[]) => {
      calls.set(name, (calls.get(name) ?? 0) + 1);
      return (real as (...a: unknown[]) => void)(name, ...rest);
    }) as unknown as typeof dns.lookup;
    // Installed over the counter: the missing name fails on a fixed schedule (failing-resolver.ts).
    const resolver = installFailingResolver(missing, { delayMs: 50 });
    const burst = (url: string) =>
      Promise.all(Array.from({ length: 20 }, () => sendWebhook({ ...base, url })));
    try {
      // 20 at once open 20 connections: one lookup (or none, if one of the last second still serves).
      const delivered = await burst(`http://localhost:${port}/hook`);
      expect(delivered.map((r) => r.ok)).toEqual(Array(20).fill(true));
      expect(calls.get('localhost') ?? 0).toBeLessThanOrEqual(1);

      const failed = await burst(`http://${missing}/hook`);
      for (const r of failed) {
        expect(r).toMatchObject({ ok: false, permanent: false, response: null });
        expect(r.ok || r.error).toMatch(
          new RegExp(`^fetch failed: getaddrinfo (ENOTFOUND|EAI_AGAIN) ${missing}$`),
        );
      }
      expect(resolver.calls()).toBe(1);
      // The answer serves for LOOKUP_REUSE_MS, then the name is looked up again.
      await sendWebhook({ ...base, url: `http://${missing}/hook` });
      expect(resolver.calls()).toBe(1);
      await new Promise((r) => setTimeout(r, LOOKUP_REUSE_MS + 50));
      await sendWebhook({ ...base, url: `http://${missing}/hook` });
      expect(resolver.calls()).toBe(2);
    } finally {
      resolver.restore();
      dns.lookup = real;
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });
});
