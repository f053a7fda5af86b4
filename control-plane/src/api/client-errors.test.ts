import { connect } from 'node:net';
import { type ServerType, serve } from '@hono/node-server';
import { Hono } from 'hono';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { answerClientErrors } from './client-errors.ts';

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
  let server: ServerType;
  let port = 0;
  beforeAll(async () => {
    const app = new Hono()
      .get('/ok', (c) => c.text('ok'))
      .get('/slow', async (c) => {
        await new Promise((r) => setTimeout(r, 100));
        return c.text('slow');
      });
    await new Promise<void>((resolve) => {
      server = serve({ fetch: app.fetch, hostname: '127.0.0.1', port: 0 }, (info) => {
        port = info.port;
        resolve();
      });
    });
    answerClientErrors(server);
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

  it('answers a request that is not HTTP with a 400 problem', async () => {
    const { head, body } = problemOf(await exchange(port, 'HELLO there\r\n\r\n'));
    expect(head).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
    expect(head).toContain('Content-Type: application/problem+json');
    expect(body).toMatchObject({ status: 400, code: 'MALFORMED_REQUEST', title: 'Bad Request' });
  });
});
