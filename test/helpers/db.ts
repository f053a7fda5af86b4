import { createHash, randomBytes } from 'node:crypto';
import { cpSync, existsSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { PGlite } from '@electric-sql/pglite';
import postgres from 'postgres';
import { type Database, MIGRATIONS_DIR, openDatabase } from '../../control-plane/src/db/client.ts';

export type DbKind = 'pglite' | 'postgres';

/** The PostgreSQL server tests use when DATABASE_URL is set (CI's second run) or for dual-backend tests. */
export const TEST_PG_URL = process.env.FFLEET_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** Which backend the suite runs on: the real server when DATABASE_URL is set, else embedded PGlite. */
export const defaultDbKind = (): DbKind => (process.env.DATABASE_URL ? 'postgres' : 'pglite');

const serverUrl = () => process.env.DATABASE_URL ?? TEST_PG_URL;

function migrationsHash(): string {
  const h = createHash('sha256');
  for (const f of readdirSync(MIGRATIONS_DIR).sort()) {
    if (f.endsWith('.sql')) h.update(readFileSync(join(MIGRATIONS_DIR, f)));
  }
  return h.digest('hex').slice(0, 16);
}

/**
 * A migrated PGlite data dir, dumped once and loaded by every test: a fresh database in ~0.3 s
 * instead of running migrations each time. Uncompressed (41 MB in the temp dir): PGlite untarred the
 * untyped gzipped dump, failed, then gunzipped and untarred it, ~0.1 s and 0.1–0.2 s of CPU more per
 * database (121 databases in the embedded pass). Read once per test worker (a worker runs file after
 * file): reading it into a Blob took 60–110 ms and 100–220 ms of CPU per database on a 2-vCPU VM.
 */
let template: Promise<Blob> | undefined;
function pgliteTemplate(): Promise<Blob> {
  template ??= readPgliteTemplate().catch((err: unknown) => {
    template = undefined;
    throw err;
  });
  return template;
}

async function readPgliteTemplate(): Promise<Blob> {
  const file = join(tmpdir(), `ffleet-pglite-template-${migrationsHash()}.tar`);
  if (!existsSync(file)) {
    const d = await openDatabase({ kind: 'pglite' });
    const pg = (d as unknown as { raw?: PGlite }).raw;
    if (!pg) throw new Error('pglite handle missing');
    const dump = await pg.dumpDataDir('none');
    await d.close();
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(tmp, Buffer.from(await dump.arrayBuffer()));
    renameSync(tmp, file);
  }
  return new Blob([readFileSync(file)]);
}

export type TestDatabase = Database & { drop(): Promise<void>; url?: string };

/** A fresh, migrated database of the given kind; `drop()` closes and removes it. */
export async function openTestDatabase(kind: DbKind = defaultDbKind()): Promise<TestDatabase> {
  if (kind === 'pglite') {
    const d = await openDatabase({ kind: 'pglite', loadDataDir: await pgliteTemplate() });
    return Object.assign(d, { drop: () => d.close() });
  }
  const name = `ffleet_t_${randomBytes(6).toString('hex')}`;
  const admin = postgres(serverUrl(), { max: 1, onnotice: () => {} });
  await admin.unsafe(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = new URL(serverUrl());
  url.pathname = `/${name}`;
  const d = await openDatabase({ kind: 'postgres', url: url.toString(), max: 10 });
  return Object.assign(d, {
    url: url.toString(),
    drop: async () => {
      await d.close();
      const a = postgres(serverUrl(), { max: 1, onnotice: () => {} });
      await a.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await a.end();
    },
  });
}

/** Is the PostgreSQL server reachable (dual-backend tests skip it only when it is not)? */
export async function postgresAvailable(): Promise<boolean> {
  const c = postgres(serverUrl(), { max: 1, connect_timeout: 2, onnotice: () => {} });
  try {
    await c`select 1`;
    return true;
  } catch {
    return false;
  } finally {
    await c.end({ timeout: 1 });
  }
}

/**
 * An outage of a test database on the server (services pass): `begin` refuses new connections to it
 * and cuts the open ones, `end` lets them in again, `close` ends it if still on and releases the
 * admin connection.
 */
export function databaseOutage(db: TestDatabase) {
  const name = new URL(db.url ?? 'x:/').pathname.slice(1);
  if (!name) throw new Error('an outage needs a database on the PostgreSQL server');
  const admin = postgres(serverUrl(), { max: 1, onnotice: () => {} });
  const allow = async (on: boolean) => {
    await admin.unsafe(`ALTER DATABASE ${name} ALLOW_CONNECTIONS ${on}`);
  };
  return {
    name,
    async begin() {
      await allow(false);
      await admin`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = ${name}`;
    },
    end: () => allow(true),
    async close() {
      await allow(true).catch(() => {});
      await admin.end();
    },
  };
}

/**
 * A migrated, empty PGlite data dir kept in the temp dir per migrations hash and copied into each
 * control plane a test starts whose first start is not what it tests (clusters, CLI runs, in-process
 * control planes): a fresh PGlite (initdb + migrations) takes 20+ s on a loaded 2-core box, a copy ms.
 */
export async function seedPgliteDir(target: string): Promise<void> {
  const cache = join(tmpdir(), `ffleet-pglite-datadir-${migrationsHash()}`);
  if (!existsSync(cache)) {
    const staging = `${cache}.${process.pid}.tmp`;
    const d = await openDatabase({ kind: 'pglite', dataDir: staging });
    await d.close();
    try {
      renameSync(staging, cache);
    } catch {
      rmSync(staging, { recursive: true, force: true }); // Another worker made it first.
    }
  }
  cpSync(cache, target, { recursive: true });
}
