import { sql } from 'drizzle-orm';
import { readMigrationFiles } from 'drizzle-orm/migrator';
import { afterEach, describe, expect, it } from 'vitest';
import { openTestDatabase, type TestDatabase } from '../../../test/helpers/db.ts';
import { dbKinds } from '../../../test/helpers/db-kinds.ts';
import { VERSION } from '../version.ts';
import {
  type Database,
  MIGRATIONS_DIR,
  NewerDatabaseError,
  type OpenOptions,
  openDatabase,
} from './client.ts';

/** The newest migration this build ships, as drizzle records it (`created_at` = the journal's `when`). */
const NEWEST = Math.max(
  ...readMigrationFiles({ migrationsFolder: MIGRATIONS_DIR }).map((m) => m.folderMillis),
);
const DAY_MS = 86_400_000;

/**
 * A database a newer ffleet has migrated holds migrations this build does not know; drizzle's migrator
 * would skip them without a word and this build would run on a schema it does not know.
 */
describe.each(dbKinds)('a database migrated by a newer ffleet, on %s', (kind) => {
  let test: TestDatabase | undefined;
  let reopened: Database | undefined;
  afterEach(async () => {
    await reopened?.close();
    reopened = undefined;
    await test?.drop();
    test = undefined;
  });

  /** Options that open the test database again as the control plane would, from its current state. */
  const sameDatabase = async (d: TestDatabase): Promise<OpenOptions> => {
    if (kind === 'postgres') return { kind: 'postgres', url: d.url!, max: 2 };
    const dump = await d.raw!.dumpDataDir('gzip');
    return { kind: 'pglite', loadDataDir: dump };
  };
  const migrationRows = async (d: Database) =>
    (await d.rows<{ n: number }>(d.db, sql`SELECT count(*)::int AS n FROM drizzle.__drizzle_migrations`))[0]!
      .n;

  it('opens again with only the migrations this build ships, and refuses a newer one, naming it and this version', async () => {
    test = await openTestDatabase(kind);
    const applied = await migrationRows(test);
    reopened = await openDatabase(await sameDatabase(test));
    expect(await migrationRows(reopened)).toBe(applied);
    await reopened.close();
    reopened = undefined;

    const future = NEWEST + DAY_MS;
    await test.rows(
      test.db,
      sql`INSERT INTO drizzle.__drizzle_migrations (hash, created_at) VALUES ('from-the-future', ${future})`,
    );
    const opening = openDatabase(await sameDatabase(test));
    await expect(opening).rejects.toBeInstanceOf(NewerDatabaseError);
    await expect(opening).rejects.toThrow(
      `this database was migrated by a newer ffleet (migration at ${new Date(future).toISOString()} is unknown to ${VERSION}); run that version or newer, or restore a backup`,
    );
    // Two of them: counted, the last one named.
    await test.rows(
      test.db,
      sql`INSERT INTO drizzle.__drizzle_migrations (hash, created_at) VALUES ('further', ${future + DAY_MS})`,
    );
    await expect(openDatabase(await sameDatabase(test))).rejects.toThrow(
      `(2 migrations, the last at ${new Date(future + DAY_MS).toISOString()}, are unknown to ${VERSION})`,
    );
  });
});
