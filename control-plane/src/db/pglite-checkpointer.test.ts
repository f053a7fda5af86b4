import { randomBytes, randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import pino from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { openTestDatabase, type TestDatabase } from '../../../test/helpers/db.ts';
import { dbKinds } from '../../../test/helpers/db-kinds.ts';
import type { Database } from './client.ts';
import { PgliteCheckpointer } from './pglite-checkpointer.ts';
import { events } from './schema.ts';

const MB = 1024 * 1024;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Control = { redo: string; sinceRedo: number; checkpointAt: number };

async function control(d: Database): Promise<Control> {
  const [row] = await d.rows<Control>(
    d.db,
    sql`SELECT c.redo_lsn::text AS redo,
        pg_wal_lsn_diff(pg_current_wal_insert_lsn(), c.redo_lsn)::float8 AS "sinceRedo",
        (extract(epoch FROM c.checkpoint_time) * 1000)::float8 AS "checkpointAt"
      FROM pg_control_checkpoint() c`,
  );
  return row!;
}

/** Writes event rows of ~64 kB of incompressible payload until `bytes` more WAL exist. */
async function writeWal(d: Database, bytes: number): Promise<void> {
  const start = (await control(d)).sinceRedo;
  while ((await control(d)).sinceRedo - start < bytes) {
    const id = randomUUID();
    await d.db.insert(events).values({
      id,
      event: 'task.updated',
      payload: {
        id,
        event: 'task.updated',
        timestamp: '',
        data: { blob: randomBytes(48_000).toString('base64') },
      },
      createdAt: Date.now(),
    });
  }
}

/** The database with every statement counted (`rows` runs its query through `db.execute` too). */
function counted(d: Database): { database: Database; statements: () => number } {
  let n = 0;
  const database: Database = {
    ...d,
    db: new Proxy(d.db, {
      get(target, prop, receiver) {
        if (prop === 'execute') n++;
        return Reflect.get(target, prop, receiver);
      },
    }),
  };
  return { database, statements: () => n };
}

function capturedLogger() {
  const lines: { level: number; msg: string; [k: string]: unknown }[] = [];
  const logger = pino({ level: 'debug' }, { write: (s: string) => lines.push(JSON.parse(s)) });
  return { logger, lines };
}

describe('PgliteCheckpointer on the embedded database', () => {
  let db: TestDatabase | null = null;
  afterEach(async () => {
    await db?.drop();
    db = null;
  });

  it('checkpoints once the WAL since the last checkpoint passes the threshold, and logs what it covered', async () => {
    db = await openTestDatabase('pglite');
    const { logger, lines } = capturedLogger();
    const ck = new PgliteCheckpointer({ database: db, logger, maxWalBytes: MB, maxAgeMs: 3_600_000 });
    await db.db.execute(sql`CHECKPOINT`);
    const first = await control(db);

    await writeWal(db, 200_000);
    expect(await ck.check()).toEqual({ checkpointed: false, reason: 'below-threshold' });
    expect((await control(db)).redo).toBe(first.redo);

    await writeWal(db, MB);
    const written = (await control(db)).sinceRedo;
    const outcome = await ck.check();
    expect(outcome).toMatchObject({ checkpointed: true, reason: 'wal' });
    if (!outcome.checkpointed) throw new Error('unreachable');
    expect(outcome.walBytes).toBeGreaterThanOrEqual(written);
    expect(outcome.walBytes).toBeLessThan(written + 8192);
    const after = await control(db);
    // The redo point moved up to the present: a crash restart now replays next to nothing.
    expect(after.redo).not.toBe(first.redo);
    expect(after.sinceRedo).toBeLessThan(8192);
    const done = lines.filter((l) => l.msg === 'checkpoint done');
    expect(done).toEqual([
      expect.objectContaining({
        level: 20,
        component: 'pglite-checkpointer',
        reason: 'wal',
        walBytes: outcome.walBytes,
      }),
    ]);
    expect(done[0]!.ms).toBeTypeOf('number');
    await ck.stop();
  });

  it('checkpoints a little WAL once the last checkpoint is old enough, and never while nothing is written', async () => {
    db = await openTestDatabase('pglite');
    await db.db.execute(sql`CHECKPOINT`);
    const { checkpointAt, redo } = await control(db);
    let now = checkpointAt + 1000;
    const ck = new PgliteCheckpointer({
      database: db,
      logger: pino({ level: 'silent' }),
      maxWalBytes: 64 * MB,
      maxAgeMs: 60_000,
      now: () => now,
    });
    // Nothing written since the checkpoint: no new one, however old it is.
    now = checkpointAt + 3_600_000;
    expect(await ck.check()).toEqual({ checkpointed: false, reason: 'idle' });
    expect((await control(db)).redo).toBe(redo);

    await writeWal(db, 1000);
    now = checkpointAt + 59_000;
    expect(await ck.check()).toEqual({ checkpointed: false, reason: 'below-threshold' });
    now = checkpointAt + 61_000;
    expect(await ck.check()).toMatchObject({ checkpointed: true, reason: 'age' });
    expect((await control(db)).redo).not.toBe(redo);
    // Its own checkpoint record is not taken for new work.
    expect(await ck.check()).toEqual({ checkpointed: false, reason: 'idle' });
    await ck.stop();
  });

  it('checks on its timer once started', async () => {
    db = await openTestDatabase('pglite');
    await writeWal(db, 1000);
    const { redo } = await control(db);
    const ck = new PgliteCheckpointer({
      database: db,
      logger: pino({ level: 'silent' }),
      everyMs: 10,
      maxWalBytes: 1,
    });
    ck.start();
    const deadline = Date.now() + 5000;
    while ((await control(db)).redo === redo && Date.now() < deadline) await sleep(10);
    await ck.stop();
    expect((await control(db)).redo).not.toBe(redo);
  });

  it('stop() ends the timer and waits for a checkpoint under way', async () => {
    db = await openTestDatabase('pglite');
    const base = db;
    await writeWal(base, 1000);
    const { redo } = await control(base);
    const { database, statements } = counted(base);
    const ck = new PgliteCheckpointer({
      database,
      logger: pino({ level: 'silent' }),
      everyMs: 10,
      maxWalBytes: 1,
    });
    // A transaction holds the database: the timer's check queues behind it.
    let release = () => {};
    const held = new Promise<void>((r) => {
      release = r;
    });
    const tx = base.db.transaction(async (t) => {
      await t.execute(sql`SELECT 1`);
      await held;
    });
    const checks = vi.spyOn(ck, 'check');
    ck.start();
    const deadline = Date.now() + 5000;
    while (statements() === 0 && Date.now() < deadline) await sleep(5);
    expect(statements()).toBe(1);

    let stopped = false;
    const stopping = ck.stop().then(() => {
      stopped = true;
    });
    await sleep(50);
    expect(stopped).toBe(false);
    release();
    await tx;
    await stopping;
    // The check went on to its CHECKPOINT before stop() returned.
    expect(statements()).toBe(2);
    expect((await control(base)).redo).not.toBe(redo);

    // The timer is gone: no more looks, let alone statements.
    const n = statements();
    const looks = checks.mock.calls.length;
    await sleep(60);
    expect(checks.mock.calls.length).toBe(looks);
    expect(statements()).toBe(n);
    expect(await ck.check()).toEqual({ checkpointed: false, reason: 'stopped' });
    expect(statements()).toBe(n);
    // Stopping again is harmless.
    await ck.stop();
  });

  it('logs a failed checkpoint as a warning and does not throw', async () => {
    db = await openTestDatabase('pglite');
    const { logger, lines } = capturedLogger();
    const ck = new PgliteCheckpointer({ database: db, logger, maxWalBytes: 1 });
    await db.close();
    expect(await ck.check()).toEqual({ checkpointed: false, reason: 'failed' });
    expect(lines).toEqual([
      expect.objectContaining({ level: 40, msg: 'checkpoint failed', component: 'pglite-checkpointer' }),
    ]);
  });
});

describe.skipIf(!dbKinds.includes('postgres'))('PgliteCheckpointer on a PostgreSQL server', () => {
  let db: TestDatabase | null = null;
  afterEach(async () => {
    await db?.drop();
    db = null;
  });

  it('does nothing: the server checkpoints by itself', async () => {
    db = await openTestDatabase('postgres');
    const { database, statements } = counted(db);
    const { logger, lines } = capturedLogger();
    const ck = new PgliteCheckpointer({ database, logger, everyMs: 5, maxWalBytes: 1, maxAgeMs: 0 });
    const checks = vi.spyOn(ck, 'check');
    ck.start();
    await sleep(50);
    // No timer at all.
    expect(checks).not.toHaveBeenCalled();
    expect(await ck.check()).toEqual({ checkpointed: false, reason: 'not-embedded' });
    await ck.stop();
    expect(statements()).toBe(0);
    expect(lines).toEqual([]);
  });
});
