import { randomUUID } from 'node:crypto';
import { eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openTestDatabase, postgresAvailable, type TestDatabase } from '../../../test/helpers/db.ts';
import { parseConfig } from '../config/config.ts';
import { openDatabase } from './client.ts';
import { tasks } from './schema.ts';

const PG = await postgresAvailable();

describe.skipIf(!PG)('prepared statements on PostgreSQL (FFLEET_PG_PREPARE)', () => {
  let base: TestDatabase;
  beforeAll(async () => {
    base = await openTestDatabase('postgres');
  });
  afterAll(() => base?.drop());

  /** Named statements on the (only) connection after one parameterised query. */
  async function preparedAfterQuery(prepare: boolean): Promise<number> {
    const d = await openDatabase({ kind: 'postgres', url: base.url!, max: 1, prepare });
    try {
      await d.db.select().from(tasks).where(eq(tasks.id, randomUUID()));
      const [r] = await d.rows<{ n: number }>(
        d.db,
        sql`select count(*)::int as n from pg_prepared_statements where not from_sql`,
      );
      return r!.n;
    } finally {
      await d.close();
    }
  }

  it('prepares by default and sends only unnamed statements with FFLEET_PG_PREPARE=0', async () => {
    expect(await preparedAfterQuery(true)).toBeGreaterThan(0);
    expect(await preparedAfterQuery(false)).toBe(0);
    expect(parseConfig({}).pgPrepare).toBe(true);
    expect(parseConfig({ FFLEET_PG_PREPARE: '0' }).pgPrepare).toBe(false);
  });
});
