import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PGlite } from '@electric-sql/pglite';
import type { SQL } from 'drizzle-orm';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { migrate as migratePglite } from 'drizzle-orm/pglite/migrator';
import { drizzle as drizzlePostgres } from 'drizzle-orm/postgres-js';
import { migrate as migratePostgres } from 'drizzle-orm/postgres-js/migrator';
import postgres from 'postgres';
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
  close(): Promise<void>;
  /** PGlite runs one transaction at a time; callers may size concurrency by it. */
  singleConnection: boolean;
  /** The PGlite instance (embedded mode only), e.g. to dump a template data dir. */
  raw?: PGlite;
};

async function rowsOf<T>(db: Db, query: SQL): Promise<T[]> {
  const res = (await db.execute(query)) as unknown;
  // postgres-js returns an array of rows; PGlite returns { rows }.
  if (Array.isArray(res)) return res as T[];
  return ((res as { rows?: T[] }).rows ?? []) as T[];
}

export type OpenOptions =
  | { kind: 'postgres'; url: string; max?: number }
  | { kind: 'pglite'; dataDir?: string; loadDataDir?: Blob | File };

/** Open the database and apply the committed migrations. */
export async function openDatabase(opts: OpenOptions): Promise<Database> {
  if (opts.kind === 'postgres') {
    const client = postgres(opts.url, {
      max: opts.max ?? 10,
      onnotice: () => {},
      // bigint columns are read as numbers by drizzle's mode:'number'; keep types default otherwise.
    });
    const db = drizzlePostgres(client, { schema }) as unknown as Db;
    await migratePostgres(drizzlePostgres(client), { migrationsFolder: MIGRATIONS_DIR });
    return {
      db,
      kind: 'postgres',
      rows: rowsOf,
      singleConnection: false,
      ping: async () => {
        try {
          await client`select 1`;
          return true;
        } catch {
          return false;
        }
      },
      close: () => client.end({ timeout: 5 }),
    };
  }
  if (opts.dataDir) mkdirSync(dirname(opts.dataDir), { recursive: true });
  const pg = new PGlite({ dataDir: opts.dataDir, loadDataDir: opts.loadDataDir });
  await pg.waitReady;
  const db = drizzlePglite(pg, { schema }) as unknown as Db;
  await migratePglite(drizzlePglite(pg), { migrationsFolder: MIGRATIONS_DIR });
  let closed = false;
  return {
    db,
    kind: 'pglite',
    rows: rowsOf,
    singleConnection: true,
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
    close: async () => {
      if (closed) return;
      closed = true;
      await pg.close();
    },
  };
}
