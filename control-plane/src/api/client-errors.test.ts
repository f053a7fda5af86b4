import type { Server } from 'node:http';
import { connect } from 'node:net';
import { Hono } from 'hono';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiServer } from './client-errors.ts';

/**
 * One raw HTTP exchange: what the server wrote before it closed the connection. The client keeps its
 * side open, as an HTTP client does (a half-close would end the server's side too).
 */
function exchange(port: number, request: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(request));
    setTimeout(() => socket.destroy(), 3_000).unref();
    let text = '';
    socket.on('data', (d) => {
      text += d.toString();
    });
    socket.on('close', () => resolve(text));
    socket.on('error', reject);
  });
}

describe('requests Node rejects before the app sees them', () => {
  let server: Server;
  let port = 0;
  beforeAll(async () => {
    const app = new Hono()
      .get('/ok', (c) => c.text('ok'))
      .get('/slow', async (c) => {
        await new Promise((r) => setTimeout(r, 100));
        return c.text('slow');
      });
    server = createApiServer(app.fetch, '127.0.0.1');
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const address = server.address();
    port = typeof address === 'object' && address ? address.port : 0;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  const problemOf = (raw: string) => {
    const [head, body] = raw.split('\r\n\r\n');
    return { head: head ?? '', body: JSON.parse(body ?? '') as Record<string, unknown> };
  };

  it('answers a URL over 16 KB with a 431 problem', async () => {
    const r = await fetch(`http://127.0.0.1:${port}/ok?status=${'x'.repeat(20_000)}`);
    expect(r.status).toBe(431);
    expect(r.headers.get('content-type')).toBe('application/problem+json');
    expect(await r.json()).toMatchObject({ status: 431, code: 'HEADERS_TOO_LARGE' });
    // The server goes on serving.
    expect(await (await fetch(`http://127.0.0.1:${port}/ok`)).text()).toBe('ok');
  });

  it('answers a pipelined request before the malformed one behind it', async () => {
    // Still being answered when the parser meets the garbage behind it.
    const raw = await exchange(port, 'GET /slow HTTP/1.1\r\nHost: x\r\n\r\nHELLO there\r\n\r\n');
    expect(raw).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(raw).toContain('\r\n\r\nslow');
  });

  it('answers an HTTP/1.1 request without a Host header, or with an invalid one, with a 400 problem', async () => {
    for (const request of ['GET /ok HTTP/1.1\r\n\r\n', 'GET /ok HTTP/1.1\r\nHost: a b\r\n\r\n']) {
      const { head, body } = problemOf(await exchange(port, `${request}`));
      expect(head).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
      expect(head.toLowerCase()).toContain('content-type: application/problem+json');
      expect(body).toMatchObject({ status: 400, code: 'MALFORMED_REQUEST' });
      expect(body.detail).not.toBe('');
    }
    // HTTP/1.0 (a load balancer's health check) may leave it out: served as for the listen address.
    const raw = await exchange(port, 'GET /ok HTTP/1.0\r\n\r\n');
    expect(raw).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(raw.endsWith('\r\n\r\nok')).toBe(true);
  });

  it('answers a request that is not HTTP with a 400 problem', async () => {
    const { head, body } = problemOf(await exchange(port, 'HELLO there\r\n\r\n'));
    expect(head).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
    expect(head).toContain('Content-Type: application/problem+json');
    expect(body).toMatchObject({ status: 400, code: 'MALFORMED_REQUEST', title: 'Bad Request' });
  });
});
