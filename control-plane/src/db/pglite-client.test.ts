import { PGlite } from '@electric-sql/pglite';
import { sql } from 'drizzle-orm';
import { boolean, integer, jsonb, pgTable, text, uuid } from 'drizzle-orm/pg-core';
import { drizzle } from 'drizzle-orm/pglite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { collectGarbage } from './client.ts';
import { PgliteClient } from './pglite-client.ts';

const items = pgTable('items', {
  id: uuid('id').primaryKey(),
  name: text('name').notNull().unique(),
  n: integer('n').notNull().default(0),
  tags: text('tags').array().notNull().default(sql`'{}'`),
  meta: jsonb('meta').$type<Record<string, unknown>>(),
  flag: boolean('flag').notNull().default(false),
});

describe('PgliteClient (PGlite over the wire protocol with named statements)', () => {
  let pg: PGlite;
  let client: PgliteClient;

  beforeAll(async () => {
    pg = new PGlite();
    await pg.exec(`create table items (id uuid primary key, name text not null unique, n integer not null default 0,
      tags text[] not null default '{}', meta jsonb, flag boolean not null default false, big bigint,
      at timestamptz default now())`);
    client = new PgliteClient(pg, { statementCache: 4 });
  });
  afterAll(() => pg.close());

  const prepared = async () =>
    (await pg.query<{ n: number }>('select count(*)::int as n from pg_prepared_statements')).rows[0]!.n;

  it('returns what PGlite.query returns: rows, fields, affectedRows, types and nulls', async () => {
    const insert =
      'insert into items (id, name, n, tags, meta, flag, big) values ($1, $2, $3, $4, $5, $6, $7) returning id, n, tags, meta, flag, big';
    const params = [
      '00000000-0000-4000-8000-000000000001',
      'a "quoted" name; $(x) ü',
      7,
      ['x y', 'z,{}'],
      { deep: { list: [1, 'two', null] } },
      true,
      9007199254740993n,
    ];
    const ours = await client.query(insert, params);
    const theirs = await pg.query('select id, n, tags, meta, flag, big from items where id = $1', [
      params[0],
    ]);
    expect(ours.rows).toEqual(theirs.rows);
    expect(ours.fields).toEqual(theirs.fields);
    expect(ours.affectedRows).toBe(1);
    expect(ours.rows[0]).toMatchObject({ n: 7, tags: ['x y', 'z,{}'], flag: true, big: 9007199254740993n });

    const select = 'select name, meta, at, null::text as nothing from items where id = $1';
    const array = await client.query(select, [params[0]], {
      rowMode: 'array',
      parsers: { 1184: (v) => `ts:${v}` },
    });
    const reference = await pg.query(select, [params[0]], {
      rowMode: 'array',
      parsers: { 1184: (v) => `ts:${v}` },
    });
    expect(array.rows).toEqual(reference.rows);
    expect((array.rows[0] as unknown[])[0]).toBe('a "quoted" name; $(x) ü');
    expect(String((array.rows[0] as unknown[])[2])).toMatch(/^ts:/);
    expect((array.rows[0] as unknown[])[3]).toBeNull();

    const update = await client.query('update items set n = n + 1 where n >= $1', [0]);
    expect(update).toMatchObject({ affectedRows: 1, rows: [] });
  });

  it('prepares a statement once and keeps at most the cache size, closing the least recently used', async () => {
    const before = await prepared();
    for (let i = 0; i < 5; i++) await client.query('select $1::int + 1 as v', [i]);
    expect(await prepared()).toBe(before + 1);
    for (let k = 0; k < 8; k++) {
      const r = await client.query<{ v: number }>(`select $1::int + ${k} as v`, [1]);
      expect(r.rows[0]!.v).toBe(1 + k);
    }
    // Evicted statements are closed with the next prepare, so at most one over the cache size.
    expect(client.preparedCount).toBe(4);
    expect(await prepared()).toBeLessThanOrEqual(5);
    // An evicted statement is prepared again transparently.
    expect((await client.query<{ v: number }>('select $1::int + 1 as v', [41])).rows[0]!.v).toBe(42);
  });

  it('names its statements apart from another client on the same PGlite', async () => {
    // Fresh clients number their statements from the same start.
    const a = new PgliteClient(pg);
    const b = new PgliteClient(pg);
    for (const c of [a, b, a, b]) {
      expect((await c.query<{ v: number }>('select $1::int * 2 as v', [21])).rows).toEqual([{ v: 42 }]);
    }
  });

  it('throws PostgreSQL errors with their fields, and the next statement runs', async () => {
    const dup = await client
      .query('insert into items (id, name) values ($1, $2)', [
        '00000000-0000-4000-8000-000000000002',
        'a "quoted" name; $(x) ü',
      ])
      .catch((e: unknown) => e);
    expect(dup).toMatchObject({
      code: '23505',
      constraint: 'items_name_key',
      table: 'items',
      severity: 'ERROR',
    });
    expect(String((dup as Error).message)).toMatch(/duplicate key/);

    const syntax = await client.query('selec 1').catch((e: unknown) => e);
    expect(syntax).toMatchObject({ code: '42601' });
    const missing = await client.query('select * from nowhere where x = $1', [1]).catch((e: unknown) => e);
    expect(missing).toMatchObject({ code: '42P01' });
    const arity = await client.query('select $1::int as v', []).catch((e: unknown) => e);
    expect(String((arity as Error).message)).toMatch(/requires 1/);

    expect((await client.query<{ v: number }>('select 1 as v')).rows).toEqual([{ v: 1 }]);
    expect(await client.query('select 1 as v where false')).toMatchObject({ rows: [], affectedRows: 0 });
  });

  it('commits, rolls back on a throw, and reports a transaction aborted by a failed statement', async () => {
    const id = (n: number) => `00000000-0000-4000-8000-0000000001${String(n).padStart(2, '0')}`;
    await client.transaction(async (tx) => {
      await tx.query('insert into items (id, name) values ($1, $2)', [id(1), 'tx-1']);
      await tx.query('insert into items (id, name) values ($1, $2)', [id(2), 'tx-2']);
    });
    const boom = await client
      .transaction(async (tx) => {
        await tx.query('insert into items (id, name) values ($1, $2)', [id(3), 'tx-3']);
        throw new Error('boom');
      })
      .catch((e: unknown) => e);
    expect(String(boom)).toMatch(/boom/);
    const swallowed = await client
      .transaction(async (tx) => {
        await tx.query('insert into items (id, name) values ($1, $2)', [id(4), 'tx-4']);
        await tx.query('insert into items (id, name) values ($1, $2)', [id(5), 'tx-1']).catch(() => {});
      })
      .catch((e: unknown) => e);
    expect(String(swallowed)).toMatch(/aborted/);
    const names = await pg.query<{ name: string }>(
      "select name from items where name like 'tx-%' order by name",
    );
    expect(names.rows.map((r) => r.name)).toEqual(['tx-1', 'tx-2']);
    // A transaction that runs nothing sends nothing, and the connection is idle afterwards.
    await client.transaction(async () => {});
    expect((await pg.query<{ s: string }>("select 'idle' as s")).rows[0]!.s).toBe('idle');
  });

  it('serialises queries and transactions, also against PGlite.query itself', async () => {
    const order: string[] = [];
    const tx = client.transaction(async (t) => {
      await t.query('update items set n = 100 where name = $1', ['tx-1']);
      order.push('tx-write');
      await new Promise((r) => setTimeout(r, 30));
      await t.query('update items set n = 200 where name = $1', ['tx-1']);
      order.push('tx-end');
    });
    const outside = client.query<{ n: number }>('select n from items where name = $1', ['tx-1']).then((r) => {
      order.push(`client-read ${r.rows[0]!.n}`);
    });
    const native = pg.query<{ n: number }>('select n from items where name = $1', ['tx-1']).then((r) => {
      order.push(`pglite-read ${r.rows[0]!.n}`);
    });
    await Promise.all([tx, outside, native]);
    expect(order).toEqual(['tx-write', 'tx-end', 'client-read 200', 'pglite-read 200']);
  });

  it('serves drizzle: builders, returning, savepoints and execute', async () => {
    const db = drizzle(client as unknown as PGlite);
    const [row] = await db
      .insert(items)
      .values({ id: '00000000-0000-4000-8000-000000000301', name: 'drizzle', tags: ['a'], meta: { k: 'v' } })
      .returning();
    expect(row).toMatchObject({ name: 'drizzle', n: 0, tags: ['a'], meta: { k: 'v' }, flag: false });
    await db.transaction(async (tx) => {
      await tx.update(items).set({ n: 1 }).where(sql`${items.name} = 'drizzle'`);
      await tx
        .transaction(async (inner) => {
          await inner.update(items).set({ n: 99 }).where(sql`${items.name} = 'drizzle'`);
          throw new Error('undo inner');
        })
        .catch(() => {});
    });
    const [after] = await db.select({ n: items.n }).from(items).where(sql`${items.name} = 'drizzle'`);
    expect(after).toEqual({ n: 1 });
    const exec = (await db.execute(sql`select count(*)::int as c from items`)) as unknown as {
      rows: { c: number }[];
    };
    expect(exec.rows[0]!.c).toBeGreaterThan(0);
    const multi = await client.exec('select 1 as a; select 2 as b');
    expect(multi.map((r) => r.rows)).toEqual([[{ a: 1 }], [{ b: 2 }]]);
  });
});

describe('PgliteClient answers', () => {
  let pg: PGlite;
  let client: PgliteClient;

  beforeAll(async () => {
    pg = new PGlite();
    await pg.waitReady;
    client = new PgliteClient(pg);
  });
  afterAll(() => pg.close());

  it('reads answers of any size whole: a 4 MB value, 20,000 rows', async () => {
    const big = await client.query<{ v: string }>("select repeat('ab', 2 * 1024 * 1024) as v");
    expect(big.rows[0]!.v.length).toBe(4 * 1024 * 1024);
    expect(big.rows[0]!.v.slice(0, 6)).toBe('ababab');
    const many = await client.query<{ i: number; s: string }>(
      "select i, 'row ' || i as s from generate_series(1, $1::int) as i",
      [20_000],
    );
    expect(many.rows).toHaveLength(20_000);
    expect(many.rows[19_999]).toEqual({ i: 20_000, s: 'row 20000' });
  });

  it('keeps nothing of an answer once it is read', async () => {
    // PGlite's own execProtocolRawSync parses every answer again and keeps the parsed messages until
    // its next query(): with that path the 400 answers below (20 kB each) stayed in the heap.
    const run = async () => {
      for (let i = 0; i < 400; i++) await client.query("select repeat('x', 20000) || $1::text as v", [i]);
    };
    await run(); // statement prepared, code warm
    collectGarbage();
    const before = process.memoryUsage().heapUsed;
    await run();
    collectGarbage();
    const grown = process.memoryUsage().heapUsed - before;
    expect(grown).toBeLessThan(2_000_000);
  });
});

describe('PgliteClient write failures (SQLSTATE class 53)', () => {
  let pg: PGlite;
  let client: PgliteClient;
  let now = Date.parse('2025-01-01T00:00:00.000Z');

  beforeAll(async () => {
    pg = new PGlite();
    await pg.exec('create table notes (id integer primary key, body text not null)');
    // A sort bigger than work_mem spills to a temporary file, which temp_file_limit caps: the database
    // then refuses the statement with 53400 (configuration limit exceeded), a real error of class 53
    // without a full disk (api/health-disk-full.test.ts fills one).
    await pg.exec("set work_mem = '64kB'");
    client = new PgliteClient(pg, { writeFailureHoldMs: 60_000, now: () => now });
  });
  afterAll(() => pg.close());

  const SORT = 'select count(*) from (select g from generate_series(1, 100000) as g order by g desc) as s';
  /** What the sort finds: room for its temporary file, or none. */
  const room = (yes: boolean) => pg.exec(yes ? 'reset temp_file_limit' : "set temp_file_limit = '64kB'");
  const refuse = async (tx: Pick<PgliteClient, 'query'> = client) => {
    expect(await tx.query(SORT).catch((e: unknown) => e)).toMatchObject({ code: '53400' });
  };
  const insert = (tx: Pick<PgliteClient, 'query'>, id: number) =>
    tx.query('insert into notes (id, body) values ($1, $2)', [id, `note ${id}`]);
  const ISO = '\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z';

  it('notes a refusal; reads, other writes, rollbacks and other errors leave it', async () => {
    await room(false);
    expect(client.writeFailure).toBeUndefined();
    await refuse();
    const failure = client.writeFailure;
    expect(failure).toBe('insufficient resources, SQLSTATE 53400, refused at 2025-01-01T00:00:00.000Z');

    // None of these ran the refused statement: a full disk lets a write into a page with room, too.
    await client.query('select count(*) from notes');
    await client.exec('select 1; select 2');
    await insert(client, 1);
    await client.query('update notes set body = $1 where id = $2', ['changed', 1]);
    await client.transaction(async (tx) => {
      await insert(tx, 2);
    });
    await client.exec('delete from notes where id = 2; select count(*) from notes');
    expect(await insert(client, 1).catch((e: unknown) => e)).toMatchObject({ code: '23505' });
    expect(client.writeFailure).toBe(failure);

    now += 5_000;
    await refuse();
    expect(client.writeFailure).toBe(
      'insufficient resources, SQLSTATE 53400, refused since 2025-01-01T00:00:00.000Z, the last time at 2025-01-01T00:00:05.000Z',
    );
  });

  it('ends when a refused statement runs again and commits: on its own, in a transaction, in a simple query', async () => {
    await room(false);
    await refuse();
    await room(true);
    expect(client.writeFailure).toMatch(/SQLSTATE 53400/);
    // It ran, but did not commit: rolled back, or in a transaction that failed afterwards.
    await client.transaction(async (tx) => {
      await tx.query(SORT);
      await tx.rollback();
    });
    const aborted = await client
      .transaction(async (tx) => {
        await tx.query(SORT);
        await tx.query('select 1 / 0').catch(() => {});
      })
      .catch((e: unknown) => e);
    expect(String(aborted)).toMatch(/aborted/);
    expect(client.writeFailure).toMatch(/SQLSTATE 53400/);
    await client.transaction(async (tx) => {
      await insert(tx, 10);
      await tx.query(SORT);
    });
    expect(client.writeFailure).toBeUndefined();

    // Refused inside a transaction, whose COMMIT answers ROLLBACK; then run on its own.
    await room(false);
    const refusedInside = await client
      .transaction(async (tx) => {
        await insert(tx, 11);
        await refuse(tx);
      })
      .catch((e: unknown) => e);
    expect(String(refusedInside)).toMatch(/aborted/);
    expect(client.writeFailure).toMatch(/SQLSTATE 53400/);
    await room(true);
    await client.query(SORT);
    expect(client.writeFailure).toBeUndefined();

    await room(false);
    expect(await client.exec(SORT).catch((e: unknown) => e)).toMatchObject({ code: '53400' });
    expect(client.writeFailure).toMatch(/SQLSTATE 53400/);
    await room(true);
    await client.exec(SORT);
    expect(client.writeFailure).toBeUndefined();
    expect((await pg.query('select id from notes order by id')).rows).toEqual([{ id: 1 }, { id: 10 }]);
  });

  it('ends a minute after the last refusal when no refused statement runs again', async () => {
    await room(false);
    await refuse();
    const since = new Date(now).toISOString();
    now += 30_000;
    await refuse();
    now += 59_999;
    expect(client.writeFailure).toMatch(new RegExp(`refused since ${since}, the last time at ${ISO}$`));
    now += 1;
    expect(client.writeFailure).toBeUndefined();
    // The next refusal starts anew.
    await refuse();
    expect(client.writeFailure).toBe(
      `insufficient resources, SQLSTATE 53400, refused at ${new Date(now).toISOString()}`,
    );
    await room(true);
  });
});
