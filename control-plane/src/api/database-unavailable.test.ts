import type { Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import { expectProblem, UNKNOWN_ID, VALID } from '../../../test/api/support.ts';
import { createTestApp, testAppOn } from '../../../test/helpers/app.ts';
import { databaseOutage, defaultDbKind, openTestDatabase } from '../../../test/helpers/db.ts';
import { tcpRelay } from '../../../test/helpers/tcp-relay.ts';
import { openDatabase, WAIT_FOR_CONNECTION_S } from '../db/client.ts';
import { databaseUnavailableReason } from '../db/errors.ts';
import { healthFacts } from './health-facts.ts';

// The services pass (DATABASE_URL set) only: postgres.js takes its whole 5 s end() timeout to close a
// pool one of whose connections the server terminated.
const withPostgres = defaultDbKind() === 'postgres';

/**
 * A request the database cannot serve is the server's fault and temporary: 503 DATABASE_UNAVAILABLE
 * with Retry-After, not an opaque 500, and the API serves again once the database is back.
 */
/** The API on its own pool (of `max` connections) to the test server's database, reached through a relay. */
async function apiThrough(databaseUrl: string, relayUrl: string, max: number) {
  const url = new URL(databaseUrl);
  url.port = new URL(relayUrl).port;
  const database = await openDatabase({ kind: 'postgres', url: url.toString(), max });
  return { database, call: testAppOn(database).call };
}

describe('the database unavailable under the API', () => {
  it('503 with Retry-After once the embedded database is closed', async () => {
    const t = await createTestApp({ kind: 'pglite' });
    try {
      await t.db.close();
      for (const [method, path, body] of [
        ['GET', '/api/v1/tasks', undefined],
        ['POST', '/api/v1/tasks', VALID.task()],
      ] as const) {
        const res = await t.call(method, path, body);
        expect(res.headers.get('retry-after')).toBe('5');
        const p = await expectProblem(res, 503, 'DATABASE_UNAVAILABLE');
        expect(p.detail).toContain('the embedded database is closed');
      }
    } finally {
      await t.close().catch(() => {});
    }
  });

  it.runIf(withPostgres)(
    '503, not 400 REQUEST_ABORTED, when a connection to PostgreSQL is reset under a route without a body',
    async () => {
      // PostgreSQL behind a relay that resets its connections (a proxy or load balancer that lost its
      // backend): postgres.js fails the statement with ECONNRESET, as a client going away does.
      const real = await openTestDatabase('postgres');
      const clients = new Set<Socket>();
      let resetting = false;
      const relay = await tcpRelay({ port: Number(new URL(real.url!).port || 5432) }, (client, server) => {
        if (resetting) {
          client.resetAndDestroy();
          server.destroy();
          return;
        }
        clients.add(client);
        client.pipe(server);
        server.pipe(client);
      });
      const { database, call } = await apiThrough(real.url!, relay.url, 2);
      try {
        expect((await call('GET', '/api/v1/presets')).status).toBe(200);
        resetting = true;
        for (const c of clients) c.resetAndDestroy();
        for (const [method, path] of [
          ['DELETE', `/api/v1/webhooks/${UNKNOWN_ID}`],
          ['PATCH', `/api/v1/tasks/${UNKNOWN_ID}/cancel`],
          ['DELETE', `/api/v1/presets/${UNKNOWN_ID}`],
        ] as const) {
          const res = await call(method, path);
          expect(res.headers.get('retry-after'), `${method} ${path}`).toBe('5');
          await expectProblem(res, 503, 'DATABASE_UNAVAILABLE');
        }
      } finally {
        await relay.close();
        await database.close().catch(() => {});
        await real.drop();
      }
    },
    30_000,
  );

  it.runIf(withPostgres)(
    '503 within a bound while PostgreSQL resets or ignores every connection, and served as soon as it is back',
    async () => {
      const real = await openTestDatabase('postgres');
      let mode: 'pass' | 'reset' | 'silent' = 'pass';
      const relay = await tcpRelay({ port: Number(new URL(real.url!).port || 5432) }, (client, server) => {
        if (mode === 'reset') {
          client.resetAndDestroy();
          server.destroy();
        } else if (mode === 'silent') {
          server.destroy(); // accepted, and never a byte back (a host gone, packets dropped)
        } else {
          client.pipe(server);
          server.pipe(client);
          client.on('close', () => server.destroy());
          server.on('close', () => client.destroy());
        }
      });
      const { database, call } = await apiThrough(real.url!, relay.url, 4);
      // Each answer within `ms`, else the test fails at once (not at the driver's 30 s connect timeout).
      const timed = async (method: string, path: string, ms: number, body?: unknown) => {
        const started = performance.now();
        let timer: NodeJS.Timeout | undefined;
        const res = await Promise.race([
          call(method, path, body),
          new Promise<never>((_, reject) => {
            timer = setTimeout(() => reject(new Error(`${method} ${path}: no answer within ${ms} ms`)), ms);
          }),
        ]).finally(() => clearTimeout(timer));
        return { res, ms: performance.now() - started };
      };
      const bound = (WAIT_FOR_CONNECTION_S + 1) * 1000;
      try {
        expect((await call('POST', '/api/v1/tasks', VALID.task())).status).toBe(201);
        // The server resets every connection (it restarts, a proxy lost it): the driver's backoff used to
        // grow with each failure, to 13 s and more per request.
        mode = 'reset';
        relay.drop();
        for (let i = 0; i < 8; i++) {
          const [method, path, body] =
            i % 2 ? ['POST', '/api/v1/tasks', VALID.task()] : ['GET', '/api/v1/tasks'];
          const { res } = await timed(method!, path!, bound, body);
          expect(res.headers.get('retry-after'), `${method} ${path}`).toBe('5');
          await expectProblem(res, 503, 'DATABASE_UNAVAILABLE');
        }
        const health = await timed('GET', '/health', bound);
        expect(health.res.status).toBe(503);
        mode = 'pass';
        expect((await timed('GET', '/api/v1/tasks', 1500)).res.status).toBe(200);

        // The server answers nothing (connect_timeout is 30 s in postgres.js).
        mode = 'silent';
        relay.drop();
        for (const [method, path, body] of [
          ['GET', '/api/v1/tasks', undefined],
          ['POST', '/api/v1/tasks', VALID.task()],
        ] as const) {
          const { res } = await timed(method, path, bound, body);
          const p = await expectProblem(res, 503, 'DATABASE_UNAVAILABLE');
          expect(p.detail).toMatch(/CONNECTION_WAIT_TIMEOUT|CONNECT_TIMEOUT|CONNECTION_/);
        }
        expect((await timed('GET', '/health', bound)).res.status).toBe(503);
        mode = 'pass';
        relay.drop();
        expect((await timed('GET', '/api/v1/tasks', 1500)).res.status).toBe(200);
        // Nothing a 503 answered happened: only the first task exists.
        const list = await call('GET', '/api/v1/tasks');
        expect(list.headers.get('x-total')).toBe('1');
        expect(await list.json()).toHaveLength(1);
        expect((await timed('POST', '/api/v1/tasks', 1500, VALID.task())).res.status).toBe(201);
      } finally {
        await relay.close();
        await database.close().catch(() => {});
        await real.drop();
      }
    },
    30_000,
  );

  it('still serves /metrics, saying the database is down, and /health names the broker', async () => {
    const t = await createTestApp({ kind: 'pglite' });
    try {
      const up = await (await t.call('GET', '/metrics')).text();
      expect(up).toMatch(/^ffleet_database_up 1$/m);
      expect(up).toMatch(/^ffleet_tasks\{status="QUEUED"\} 0$/m);
      await t.db.close();
      expect((await t.call('GET', '/api/v1/tasks')).status).toBe(503);
      const res = await t.call('GET', '/metrics');
      expect(res.status).toBe(200);
      const down = await res.text();
      expect(down).toMatch(/^ffleet_database_up 0$/m);
      // The last known values, and everything that needs no database.
      expect(down).toMatch(/^ffleet_tasks\{status="QUEUED"\} 0$/m);
      expect(down).toMatch(/^ffleet_process_cpu_seconds_total /m);
      expect(down).toMatch(
        /^ffleet_http_request_duration_seconds_count\{.*route="\/api\/v1\/tasks".*status="503"/m,
      );
      expect(await healthFacts(t.db, () => true)).toEqual({ broker: 'ok', agents: { online: null } });
    } finally {
      await t.close().catch(() => {});
    }
  });

  it.runIf(withPostgres)(
    'PostgreSQL refusing connections: 503 naming the SQLSTATE, then served again when it is back',
    async () => {
      const t = await createTestApp({ kind: 'postgres' });
      const outage = databaseOutage(t.db);
      try {
        expect((await t.call('GET', '/api/v1/tasks')).status).toBe(200);
        await outage.begin();
        for (const [method, path, body] of [
          ['GET', '/api/v1/tasks', undefined],
          ['POST', '/api/v1/tasks', VALID.task()],
          ['GET', '/api/v1/agents', undefined],
        ] as const) {
          const res = await t.call(method, path, body);
          expect(res.headers.get('retry-after')).toBe('5');
          const p = await expectProblem(res, 503, 'DATABASE_UNAVAILABLE');
          // The terminated connection (57P01, or the reset socket) or the refused reconnection (55000, FATAL).
          expect(p.detail).toMatch(/SQLSTATE (57P01|55000)|ECONNRESET|CONNECTION_/);
          expect(p.detail).not.toContain(outage.name);
        }
        await outage.end();
        expect((await t.call('GET', '/api/v1/tasks')).status).toBe(200);
        expect((await t.call('POST', '/api/v1/tasks', VALID.task())).status).toBe(201);
      } finally {
        await outage.close();
        await t.close();
      }
    },
  );
});

describe('databaseUnavailableReason', () => {
  const pgError = (code: string, severity = 'ERROR') =>
    Object.assign(new Error('server said no'), { code, severity, name: 'PostgresError' });
  const wrapped = (cause: unknown) => Object.assign(new Error('Failed query: select 1\nparams: '), { cause });

  it('names what the server lacks or why it dropped the connection, under drizzle’s wrapper', () => {
    expect(databaseUnavailableReason(wrapped(pgError('53100')))).toBe('disk full, SQLSTATE 53100');
    expect(databaseUnavailableReason(wrapped(pgError('53300', 'FATAL')))).toBe(
      'too many connections, SQLSTATE 53300',
    );
    expect(databaseUnavailableReason(pgError('57P01', 'FATAL'))).toBe('shutting down, SQLSTATE 57P01');
    expect(databaseUnavailableReason(pgError('08006'))).toBe('connection failure, SQLSTATE 08006');
    expect(databaseUnavailableReason(pgError('28P01', 'FATAL'))).toBe(
      'connection refused by the server, SQLSTATE 28P01',
    );
    const refused = Object.assign(new Error('connect ECONNREFUSED 10.0.0.9:5432'), { code: 'ECONNREFUSED' });
    expect(databaseUnavailableReason(wrapped(refused))).toBe('cannot reach it, ECONNREFUSED');
    expect(
      databaseUnavailableReason(wrapped(Object.assign(new Error('x'), { code: 'CONNECTION_CLOSED' }))),
    ).toBe('cannot reach it, CONNECTION_CLOSED');
    expect(
      databaseUnavailableReason(wrapped(Object.assign(new Error('x'), { code: 'CONNECTION_WAIT_TIMEOUT' }))),
    ).toBe('no connection to it in time, CONNECTION_WAIT_TIMEOUT');
  });

  it('leaves the request’s own faults and bugs alone (they stay 4xx or 500)', () => {
    expect(databaseUnavailableReason(wrapped(pgError('23505')))).toBeUndefined();
    expect(databaseUnavailableReason(wrapped(pgError('22P02')))).toBeUndefined();
    expect(databaseUnavailableReason(wrapped(pgError('55000')))).toBeUndefined();
    expect(databaseUnavailableReason(new TypeError('x is undefined'))).toBeUndefined();
    expect(databaseUnavailableReason(undefined)).toBeUndefined();
  });
});
