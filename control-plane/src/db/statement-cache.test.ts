import { eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openTestDatabase, type TestDatabase } from '../../../test/helpers/db.ts';
import type { Db } from './client.ts';
import { presets } from './schema.ts';
import { cachedShapes, ph, runCached } from './statement-cache.ts';

// Runs on PGlite, and on the PostgreSQL server when DATABASE_URL is set (CI's second pass).
describe('runCached', () => {
  let d: TestDatabase;
  beforeAll(async () => {
    d = await openTestDatabase();
    const now = Date.now();
    await d.db.insert(presets).values(
      ['a', 'b'].map((name, i) => ({
        id: `00000000-0000-4000-8000-00000000000${i}`,
        name,
        command: `-i in ${name}`,
        createdAt: now,
        updatedAt: now,
      })),
    );
  });
  afterAll(async () => {
    await d?.drop();
  });

  const rename = (tx: Db, id: string, name: string, webhooks: unknown, calls: { n: number }) =>
    runCached<{ id: string; name: string; webhooks: unknown; updatedAt: number }[]>(
      tx,
      'test:rename-preset',
      () => {
        calls.n += 1;
        return tx
          .update(presets)
          .set({ name: ph('name'), webhooks: ph('webhooks'), updatedAt: ph('at') } as never)
          .where(eq(presets.id, ph('id')))
          .returning({
            id: presets.id,
            name: presets.name,
            webhooks: presets.webhooks,
            updatedAt: presets.updatedAt,
          });
      },
      { id, name, webhooks, at: 1_700_000_000_123 },
    );

  it('builds a shape once and runs it with each call’s own values, in each call’s transaction', async () => {
    const calls = { n: 0 };
    const before = cachedShapes();
    const hooks = [{ event: 'task.updated', url: 'http://example.test/h' }];
    const [a] = await d.db.transaction((tx) =>
      rename(tx as unknown as Db, '00000000-0000-4000-8000-000000000000', 'first', hooks, calls),
    );
    const [b] = await d.db.transaction((tx) =>
      rename(tx as unknown as Db, '00000000-0000-4000-8000-000000000001', 'second', [], calls),
    );
    expect(calls.n).toBe(1);
    expect(cachedShapes()).toBe(before + 1);
    // Values are not baked into the kept statement; columns are encoded (jsonb) and mapped back
    // (bigint milliseconds as numbers) as for a query built in place.
    expect(a).toEqual({
      id: '00000000-0000-4000-8000-000000000000',
      name: 'first',
      webhooks: hooks,
      updatedAt: 1_700_000_000_123,
    });
    expect(b).toMatchObject({ id: '00000000-0000-4000-8000-000000000001', name: 'second', webhooks: [] });
    const names = await d.db.select({ name: presets.name }).from(presets).orderBy(presets.name);
    expect(names.map((r) => r.name)).toEqual(['first', 'second']);
  });

  it('rolls back with the transaction it ran in', async () => {
    const calls = { n: 0 };
    await expect(
      d.db.transaction(async (tx) => {
        await rename(tx as unknown as Db, '00000000-0000-4000-8000-000000000000', 'gone', [], calls);
        throw new Error('abort');
      }),
    ).rejects.toThrow('abort');
    const [row] = await d.db
      .select({ name: presets.name })
      .from(presets)
      .where(sql`${presets.id} = '00000000-0000-4000-8000-000000000000'`);
    expect(row?.name).toBe('first');
  });

  it('fails clearly when a value is missing', async () => {
    await expect(
      runCached(
        d.db,
        'test:select-by-name',
        () =>
          d.db
            .select()
            .from(presets)
            .where(eq(presets.name, ph('name'))),
        {},
      ),
    ).rejects.toThrow(/No value for placeholder "name"/);
  });
});
