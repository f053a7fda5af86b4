import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultDbKind, openTestDatabase, TEST_PG_URL, type TestDatabase } from '../../../test/helpers/db.ts';
import { tcpRelay } from '../../../test/helpers/tcp-relay.ts';
import { POSTGRES_PATCH_MARKER, patchPostgres, postgresRoot } from '../../scripts/patch-postgres.mjs';
import { postgresDriverPatched } from './client.ts';

describe('the control plane’s check of the driver', () => {
  it('tells a patched copy of postgres.js from one a file of which lacks the fixes', () => {
    expect(postgresDriverPatched()).toBe(true);
    const dir = mkdtempSync(join(tmpdir(), 'ffleet-driver-'));
    try {
      const copy = join(dir, 'postgres');
      cpSync(postgresRoot(), copy, { recursive: true });
      expect(postgresDriverPatched(copy)).toBe(true);
      // As `npm install --ignore-scripts` leaves it (one of the patched files is enough).
      const file = join(copy, 'src', 'connection.js');
      writeFileSync(file, readFileSync(file, 'utf8').replaceAll(POSTGRES_PATCH_MARKER, ''));
      expect(postgresDriverPatched(copy)).toBe(false);
      expect(postgresDriverPatched(join(dir, 'nothing-here'))).toBe(false);
      // The installed one is still what the control plane checked.
      expect(postgresDriverPatched()).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/**
 * ffleet's fixes in postgres.js (control-plane/scripts/patch-postgres.mjs), on the real server: the
 * services pass only.
 */
describe.runIf(defaultDbKind() === 'postgres')('postgres.js with ffleet’s fixes', () => {
  let db: TestDatabase;
  let admin: postgres.Sql;
  beforeAll(async () => {
    db = await openTestDatabase('postgres');
    admin = postgres(TEST_PG_URL, { max: 1, onnotice: () => {} });
  });
  afterAll(async () => {
    await admin?.end();
    await db?.drop();
  });

  it('is installed (npm install patched it)', () => {
    const lines: string[] = [];
    expect(patchPostgres({ check: true, log: (l) => lines.push(l) }), lines.join('\n')).toBe(0);
  });

  it('a transaction whose session the server ended runs none of its later statements, in it or outside it', async () => {
    const sql = postgres(db.url!, { max: 1, onnotice: () => {} });
    try {
      await sql`CREATE TABLE driver_tx (n int)`;
      let afterEnd: unknown;
      const tx = sql.begin(async (t) => {
        const [row] = await t<{ pid: number }[]>`SELECT pg_backend_pid() AS pid`;
        await admin`SELECT pg_terminate_backend(${row!.pid})`;
        // The pool reconnects the same connection object for its next query, as the API's next request does.
        await expect(sql`SELECT 1`).resolves.toHaveLength(1);
        // Unpatched, this INSERT went out on the new session, outside any transaction, and was committed
        // (or, when the new socket was not there yet, it threw from a setImmediate and ended the process).
        afterEnd = await t`INSERT INTO driver_tx VALUES (1)`.then(
          () => 'ran',
          (err: { code?: string }) => err.code,
        );
      });
      await expect(tx).rejects.toMatchObject({
        code: expect.stringMatching(/57P01|CONNECTION_CLOSED|ECONNRESET/),
      });
      // The callback went on after its transaction failed; wait for its INSERT to settle.
      await expect.poll(() => afterEnd).toBeDefined();
      expect(afterEnd).not.toBe('ran');
      expect(await sql`SELECT count(*)::int AS n FROM driver_tx`).toEqual([{ n: 0 }]);
    } finally {
      await sql.end({ timeout: 1 });
    }
  });

  it('a query waiting for a connection gives up after wait_timeout, unsent, and the connection then serves the pool', async () => {
    const sql = postgres(db.url!, {
      max: 1,
      onnotice: () => {},
      ...({ wait_timeout: 0.3 } as object),
    });
    try {
      // A transaction holds the only connection for a second: the next query waits for it, at most 0.3 s.
      const long = sql.begin((t) => t`SELECT pg_sleep(1)`);
      await new Promise((r) => setTimeout(r, 100));
      const started = performance.now();
      await expect(sql`SELECT 2 AS n`).rejects.toMatchObject({ code: 'CONNECTION_WAIT_TIMEOUT' });
      expect(performance.now() - started).toBeLessThan(900);
      await long;
      expect(await sql`SELECT 3 AS n`).toEqual([{ n: 3 }]);
    } finally {
      await sql.end({ timeout: 1 });
    }
  });

  it('a new connection whose waiting query gave up joins the pool', async () => {
    // The server's answers come 600 ms late at first (a slow network, a busy server).
    let slow = true;
    const relay = await tcpRelay({ port: Number(new URL(db.url!).port || 5432) }, (client, server) => {
      const wire = () => {
        client.pipe(server);
        server.pipe(client);
      };
      client.on('close', () => server.destroy());
      server.on('close', () => client.destroy());
      if (slow) setTimeout(wire, 600);
      else wire();
    });
    const url = new URL(db.url!);
    url.port = new URL(relay.url).port;
    const sql = postgres(url.toString(), {
      max: 1,
      onnotice: () => {},
      ...({ wait_timeout: 0.3 } as object),
    });
    try {
      await expect(sql`SELECT 1 AS n`).rejects.toMatchObject({ code: 'CONNECTION_WAIT_TIMEOUT' });
      slow = false;
      await new Promise((r) => setTimeout(r, 700));
      // Unpatched, the connection stayed among those connecting, and the pool of one had none left.
      expect(await sql`SELECT 2 AS n`).toEqual([{ n: 2 }]);
    } finally {
      await sql.end({ timeout: 1 });
      await relay.close();
    }
  });
});
