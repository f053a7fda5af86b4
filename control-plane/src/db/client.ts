import { spawn } from 'node:child_process';
import { existsSync, fsyncSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { PGlite } from '@electric-sql/pglite';
import { makeDirectory } from '@ffleet/shared';
import { type SQL, sql } from 'drizzle-orm';
import { readMigrationFiles } from 'drizzle-orm/migrator';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { migrate as migratePglite } from 'drizzle-orm/pglite/migrator';
import { drizzle as drizzlePostgres } from 'drizzle-orm/postgres-js';
import { migrate as migratePostgres } from 'drizzle-orm/postgres-js/migrator';
import postgres from 'postgres';
import { patchPostgres } from '../../scripts/patch-postgres.mjs';
import { VERSION } from '../version.ts';
import { PgliteClient } from './pglite-client.ts';
import * as schema from './schema.ts';

export type Schema = typeof schema;
/** A database or a transaction: every query function accepts either. */
export type Db = PgDatabase<PgQueryResultHKT, Schema>;

export const MIGRATIONS_DIR = join(dirname(fileURLToPath(import.meta.url)), '../../drizzle');

export type Database = {
  db: Db;
  kind: 'pglite' | 'postgres';
  /** Run raw SQL and get rows back, whatever the driver. */
  rows<T = Record<string, unknown>>(db: Db, query: SQL): Promise<T[]>;
  /** Cheap liveness check for /health. */
  ping(): Promise<boolean>;
  /**
   * Why the embedded database refuses statements for lack of resources (disk full, out of memory:
   * SQLSTATE class 53) while `ping` still succeeds, and since when; undefined when it does not
   * (PgliteClient.writeFailure). Always undefined on a PostgreSQL server.
   */
  writeFailure(): string | undefined;
  close(): Promise<void>;
  /** PGlite runs one transaction at a time; callers may size concurrency by it. */
  singleConnection: boolean;
  /**
   * What is wrong with this install although the database works (an unpatched postgres.js): the
   * control plane logs each at `error` when it starts and `/health` lists them.
   */
  warnings: readonly string[];
  /** The PGlite instance (embedded mode only), e.g. to dump a template data dir. */
  raw?: PGlite;
};

/** A statement as text with `$n` placeholders and its already-encoded parameters. */
export type RawStatement = { text: string; params: unknown[] };

type RawClient =
  | { unsafe(text: string, params: unknown[], opts: { prepare: boolean }): Promise<unknown> }
  | { query(text: string, params: unknown[]): Promise<unknown> };

/**
 * Run a statement on `db`'s connection (or transaction) without drizzle's SQL builder: for hot
 * statements whose text is built once. Parameters must be encoded as drizzle encodes them for their
 * columns (`column.mapToDriverValue`). Returns how many rows the (outermost) statement wrote.
 */
export async function execRaw(db: Db, stmt: RawStatement): Promise<number> {
  const client = (db as unknown as { session: { client: RawClient } }).session.client;
  if ('unsafe' in client) {
    const res = (await client.unsafe(stmt.text, stmt.params, { prepare: true })) as { count?: number };
    return res.count ?? 0;
  }
  const res = (await client.query(stmt.text, stmt.params)) as { affectedRows?: number };
  return res.affectedRows ?? 0;
}

async function rowsOf<T>(db: Db, query: SQL): Promise<T[]> {
  const res = (await db.execute(query)) as unknown;
  // postgres-js returns an array of rows; PGlite returns { rows }.
  if (Array.isArray(res)) return res as T[];
  return ((res as { rows?: T[] }).rows ?? []) as T[];
}

export type OpenOptions =
  | {
      kind: 'postgres';
      url: string;
      max?: number;
      /** Named statements (default true); false behind a transaction-mode pooler. */
      prepare?: boolean;
      /** Distinct texts prepared at most (default {@link MAX_PREPARED_TEXTS}); the rest run unnamed. */
      maxPrepared?: number;
    }
  | { kind: 'pglite'; dataDir?: string; loadDataDir?: Blob | File };

/**
 * The postgres.js client with every query prepared (a named statement per connection and query text).
 * drizzle asks postgres.js for unnamed statements, and postgres.js sends an unnamed statement that has
 * parameters in TWO round trips (Parse+Describe to learn the parameter types, then Bind+Execute); a
 * prepared statement is described once per connection and then runs in one round trip. Transactions and
 * savepoints hand their client to a callback, so those are wrapped too.
 *
 * A prepared statement lives as long as its connection (postgres.js never closes one), so the set of
 * texts must stay bounded: statements whose size varies bind their lists as arrays (array-literal.ts)
 * instead of a parameter per item. As a safety net, `admit` lets at most `maxPrepared` distinct texts
 * of this client become named statements; any text beyond them runs unnamed (two round trips, nothing
 * kept).
 */
/** See {@link preparing}: the 256 sizes of the old events statement held 165 MB in one server backend. */
export const MAX_PREPARED_TEXTS = 1000;
/**
 * A check that admits at most `max` distinct texts as named statements (those it admitted stay
 * admitted); it warns once when it first turns a text away.
 */
export function preparedAdmission(max: number): (text: string) => boolean {
  const admitted = new Set<string>();
  let warned = false;
  return (text) => {
    if (admitted.has(text)) return true;
    if (admitted.size < max) {
      admitted.add(text);
      return true;
    }
    if (!warned) {
      warned = true;
      process.emitWarning(
        `more than ${max} distinct SQL statements: new ones run unprepared (a statement whose text varies with its input?)`,
      );
    }
    return false;
  };
}

function preparing(client: postgres.Sql, admit: (text: string) => boolean): postgres.Sql {
  return new Proxy(client, {
    get(target, prop, receiver) {
      if (prop === 'unsafe') {
        return (query: string, params?: unknown[], opts?: Record<string, unknown>) =>
          target.unsafe(query, params as never, { ...opts, prepare: admit(query) });
      }
      if (prop === 'begin' || prop === 'savepoint') {
        return (...args: unknown[]) => {
          const fn = args.pop() as (c: postgres.Sql) => unknown;
          const method = Reflect.get(target, prop, receiver) as (...a: unknown[]) => unknown;
          return method.call(target, ...args, (c: postgres.Sql) => fn(preparing(c, admit)));
        };
      }
      return Reflect.get(target, prop, receiver);
    },
  });
}

/**
 * PostgreSQL settings for the embedded database. PGlite's shared_buffers default (128 MB) lives in the
 * WASM heap, resident for the life of the process; the embedded database serves one box, and its data
 * files stay in the OS page cache, so a smaller buffer pool costs little and saves ~110 MB RSS.
 */
const PGLITE_SETTINGS = ['-c', 'shared_buffers=16MB'];

/**
 * Creating a data dir runs initdb in a second WASM instance (~430 MB of WASM memory and file bundles)
 * that is garbage once PGlite is up, but an idle process allocates nothing, so V8 may never collect it:
 * an idle all-in-one stayed at ~900 MB RSS after a first start. Collect once, right after (also used by
 * tests that measure what stays in the heap).
 */
export function collectGarbage(): void {
  try {
    let gc = (globalThis as { gc?: () => void }).gc;
    if (!gc) {
      setFlagsFromString('--expose-gc');
      gc = runInNewContext('gc') as () => void;
    }
    gc();
  } catch {
    // Only memory: V8 collects it by itself once the process allocates.
  }
}

/**
 * Create a PGlite data dir in a short-lived child process, so initdb's memory (a second WASM instance,
 * file bundles, the dumped data dir) goes back to the OS with it instead of staying in this process's
 * heap. False when that failed (the caller then creates it in-process).
 */
async function initDataDirInChild(dataDir: string): Promise<boolean> {
  const script = `const { PGlite } = require(process.env.FFLEET_PGLITE_MODULE);
const pg = new PGlite({ dataDir: process.env.FFLEET_PGLITE_DIR, startParams: [...PGlite.defaultStartParams, ...JSON.parse(process.env.FFLEET_PGLITE_SETTINGS)] });
pg.waitReady.then(() => pg.close()).then(() => process.exit(0), (err) => { console.error(err); process.exit(1); });`;
  try {
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      FFLEET_PGLITE_MODULE: createRequire(import.meta.url).resolve('@electric-sql/pglite'),
      FFLEET_PGLITE_DIR: dataDir,
      FFLEET_PGLITE_SETTINGS: JSON.stringify(PGLITE_SETTINGS),
    };
    delete env.NODE_OPTIONS; // no loaders (tsx) needed for a CommonJS one-liner
    const code = await new Promise<number | null>((resolve, reject) => {
      const child = spawn(process.execPath, ['-e', script], { env, stdio: ['ignore', 'ignore', 'pipe'] });
      child.stderr.resume();
      child.on('error', reject);
      child.on('exit', resolve);
    });
    return code === 0 && existsSync(join(dataDir, 'PG_VERSION'));
  } catch {
    return false;
  }
}

/**
 * Commits on disk that survive a power cut. PGlite starts PostgreSQL with fsync off (`-F`), and its
 * Emscripten file system syncs nothing (fdatasync is a no-op, NODEFS has no fsync): every commit is
 * written to the OS (the WAL is pwrite'n), so a killed process loses nothing, but a kernel crash or a
 * power cut could lose transactions already answered (a 201 for a task, an acknowledged agent report).
 * With a data directory, fsync is on, the WAL is synced with fsync() (the call Emscripten routes to
 * the file system), and NODEFS's fsync is the real one. Measured: +0.13 ms per commit on this ext4 disk.
 */
const DURABLE_SETTINGS = ['-c', 'fsync=on', '-c', 'wal_sync_method=fsync'];

type NodeFsStream = { nfd?: number };
type PgliteModule = { NODEFS?: { stream_ops?: Record<string, unknown> } };

/** Install a real fsync under PGlite's NODEFS; throws if this PGlite build has no NODEFS to hook. */
function installDurableFsync(pg: PGlite, onError: (err: Error) => void): void {
  const ops = (pg as unknown as { mod?: PgliteModule }).mod?.NODEFS?.stream_ops;
  if (!ops) throw new Error('this PGlite build exposes no NODEFS: cannot make its commits durable');
  ops.fsync = (stream: NodeFsStream): number => {
    if (stream.nfd === undefined) return 0;
    try {
      fsyncSync(stream.nfd);
      return 0;
    } catch (err) {
      onError(err as Error);
      // WASI EIO: PostgreSQL treats a failed fsync as a PANIC rather than go on without its data.
      return 29;
    }
  };
}

/** The database holds migrations this build does not ship: a newer ffleet wrote it. */
export class NewerDatabaseError extends Error {
  readonly code = 'ENEWERDB';
}

/**
 * Refuse a database a newer ffleet has migrated. drizzle's migrator records each applied migration
 * with its journal time (`created_at`, the journal's `when`) and applies only the migrations newer than
 * the newest recorded one, so on such a database it would apply nothing and say nothing, and this build
 * would then read and write tables whose shape or meaning it does not know.
 */
async function refuseNewerDatabase(db: Db): Promise<void> {
  const [table] = await rowsOf<{ present: boolean }>(
    db,
    sql`SELECT to_regclass('drizzle.__drizzle_migrations') IS NOT NULL AS present`,
  );
  if (!table?.present) return;
  const shipped = readMigrationFiles({ migrationsFolder: MIGRATIONS_DIR });
  const newest = Math.max(...shipped.map((m) => m.folderMillis));
  const [unknown] = await rowsOf<{ n: number; last: number | null }>(
    db,
    sql`SELECT count(*)::int AS n, max(created_at)::float8 AS last
      FROM drizzle.__drizzle_migrations WHERE created_at > ${newest}`,
  );
  if (!unknown?.n || unknown.last === null) return;
  const at = new Date(Number(unknown.last)).toISOString();
  const what = unknown.n === 1 ? `migration at ${at} is` : `${unknown.n} migrations, the last at ${at}, are`;
  throw new NewerDatabaseError(
    `this database was migrated by a newer ffleet (${what} unknown to ${VERSION}); run that version or newer, or restore a backup`,
  );
}

/**
 * How long a statement waits for a connection to the PostgreSQL server (one free in the pool, or a new
 * one) before it fails, unsent, with CONNECTION_WAIT_TIMEOUT: a 503 for an API request. Without it a
 * statement waited as long as the driver kept trying: its reconnect backoff grows to 20 s while the server
 * refuses connections (QA measured 4–17 s per 503, 13 s here with every connection reset), a connection to a
 * server that does not answer waits out connect_timeout, and while the server ends every new connection
 * (pg_terminate_backend in a loop) the wait had no end. A statement that found an open connection
 * (the normal path) arms nothing.
 */
export const WAIT_FOR_CONNECTION_S = 2;
/**
 * A connection attempt the server does not answer (a host gone, packets dropped) is given up after this
 * long (postgres.js: 30 s): the driver then tries again, so a server back after such an outage is found
 * within this time plus one reconnect delay. Local and LAN servers accept in milliseconds; TLS and SCRAM
 * over a slow link take a few round trips.
 */
export const CONNECT_TIMEOUT_S = 5;
/**
 * The delay before a connection tries again after its last attempt failed (seconds; postgres.js: 10–20 s
 * after a few failures, counted across the pool, so a server back after an outage was found that late).
 * At most half a second: at most `max` attempts per half second while statements wait.
 */
export function reconnectDelayS(failures: number): number {
  return Math.min(0.02 * 2 ** failures, 0.5) * (0.5 + Math.random() / 2);
}

let driverPatched: boolean | undefined;

/**
 * Whether the installed postgres.js (or the copy at `root`) carries ffleet's fixes
 * (control-plane/scripts/patch-postgres.mjs, run by `npm install`): the install script's own check of
 * every file it patches. False too for a layout it cannot read. The installed one is checked once.
 */
export function postgresDriverPatched(root?: string): boolean {
  if (root === undefined && driverPatched !== undefined) return driverPatched;
  let patched: boolean;
  try {
    patched = patchPostgres({ check: true, log: () => {}, ...(root === undefined ? {} : { root }) }) === 0;
  } catch {
    patched = false;
  }
  if (root === undefined) driverPatched = patched;
  return patched;
}

/** What an operator must hear when the driver is not patched (the control plane logs it, /health shows it). */
const UNPATCHED_DRIVER_WARNING =
  "postgres.js lacks ffleet's fixes (a lost connection can crash the control plane or hang its requests): run `npm install`, or `node control-plane/scripts/patch-postgres.mjs`";

/**
 * Open the database and apply the committed migrations; rejects with a {@link NewerDatabaseError}
 * (the database left untouched) when a newer ffleet has migrated it.
 */
export async function openDatabase(opts: OpenOptions): Promise<Database> {
  if (opts.kind === 'postgres') {
    const warnings = postgresDriverPatched() ? [] : [UNPATCHED_DRIVER_WARNING];
    const client = postgres(opts.url, {
      max: opts.max ?? 10,
      onnotice: () => {},
      prepare: opts.prepare ?? true,
      connect_timeout: CONNECT_TIMEOUT_S,
      backoff: reconnectDelayS,
      // wait_timeout: ffleet's patch of the driver (control-plane/scripts/patch-postgres.mjs).
      ...({ wait_timeout: WAIT_FOR_CONNECTION_S } as object),
      // bigint columns are read as numbers by drizzle's mode:'number'; keep types default otherwise.
    });
    const admit = preparedAdmission(opts.maxPrepared ?? MAX_PREPARED_TEXTS);
    const db = drizzlePostgres(opts.prepare === false ? client : preparing(client, admit), {
      schema,
    }) as unknown as Db;
    const migrator = drizzlePostgres(client);
    try {
      await refuseNewerDatabase(migrator as unknown as Db);
      await migratePostgres(migrator, { migrationsFolder: MIGRATIONS_DIR });
    } catch (err) {
      await client.end({ timeout: 5 }).catch(() => {});
      throw err;
    }
    return {
      db,
      kind: 'postgres',
      rows: rowsOf,
      singleConnection: false,
      warnings,
      ping: async () => {
        try {
          await client`select 1`;
          return true;
        } catch {
          return false;
        }
      },
      // A server's full disk is every replica's: taking one control plane out of a load balancer would
      // not help, and the server is watched as a server. Its refusals stay 503s of the API.
      writeFailure: () => undefined,
      close: () => client.end({ timeout: 5 }),
    };
  }
  if (opts.dataDir) await makeDirectory(dirname(opts.dataDir));
  let fresh = !opts.loadDataDir && !(opts.dataDir && existsSync(join(opts.dataDir, 'PG_VERSION')));
  if (fresh && opts.dataDir && (await initDataDirInChild(opts.dataDir))) fresh = false;
  const onDisk = opts.dataDir !== undefined && !opts.dataDir.includes('://');
  const pg = new PGlite({
    dataDir: opts.dataDir,
    loadDataDir: opts.loadDataDir,
    startParams: onDisk
      ? [...PGlite.defaultStartParams.filter((p) => p !== '-F'), ...PGLITE_SETTINGS, ...DURABLE_SETTINGS]
      : [...PGlite.defaultStartParams, ...PGLITE_SETTINGS],
  });
  await pg.waitReady;
  // Before the migrations, so they are durable too. (initdb in its child process ran without fsync.)
  if (onDisk)
    installDurableFsync(pg, (err) =>
      console.error(`ffleet: fsync of the embedded database failed: ${err.message}`),
    );
  const migrator = drizzlePglite(pg);
  try {
    await refuseNewerDatabase(migrator as unknown as Db);
    await migratePglite(migrator, { migrationsFolder: MIGRATIONS_DIR });
  } catch (err) {
    await pg.close().catch(() => {});
    throw err;
  }
  // Named statements over PGlite's wire protocol (pglite-client.ts); migrations above use PGlite itself.
  const client = new PgliteClient(pg);
  const db = drizzlePglite(client as unknown as PGlite, { schema }) as unknown as Db;
  if (fresh) collectGarbage();
  let closed = false;
  return {
    db,
    kind: 'pglite',
    rows: rowsOf,
    singleConnection: true,
    warnings: [],
    raw: pg,
    ping: async () => {
      if (closed) return false;
      try {
        await pg.query('select 1');
        return true;
      } catch {
        return false;
      }
    },
    writeFailure: () => client.writeFailure,
    close: async () => {
      if (closed) return;
      closed = true;
      await pg.close();
    },
  };
}
