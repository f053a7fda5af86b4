import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLocalControlPlane } from '../../../test/helpers/control-plane.ts';
import { defaultDbKind, openTestDatabase, type TestDatabase } from '../../../test/helpers/db.ts';
import { claimControlPlaneLock } from './control-plane-lock.ts';
import { agents } from './schema.ts';

const silent = pino({ level: 'silent' });

// The services pass: a lock on a PostgreSQL server (the embedded database has its data dir's lock file).
describe.runIf(defaultDbKind() === 'postgres')('one control plane per PostgreSQL database', () => {
  let db: TestDatabase;
  let url = '';
  beforeAll(async () => {
    db = await openTestDatabase('postgres');
    url = db.url!;
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('refuses a second holder, naming the first one, until the first releases it', async () => {
    const release = await claimControlPlaneLock(url, silent);
    try {
      await expect(claimControlPlaneLock(url, silent)).rejects.toMatchObject({
        code: 'ELOCKED',
        message: expect.stringMatching(
          /^another ffleet control plane uses this database \(its session is PostgreSQL backend \d+ from 127\.0\.0\.1, connected since \d{4}-.*\): ffleet runs one control plane per database/,
        ),
      });
    } finally {
      await release();
    }
    await (await claimControlPlaneLock(url, silent))();
  });

  it('refuses a second control plane at start, before it marks the first one’s agents offline', async () => {
    const dirs = [0, 1].map(() => mkdtempSync(join(tmpdir(), 'ffleet-cp-lock-')));
    const first = await startLocalControlPlane(dirs[0]!, { DATABASE_URL: url });
    try {
      await db.db.insert(agents).values({
        id: '00000000-0000-4000-8000-0000000000c1',
        name: 'box-1',
        online: true,
        reportedSlots: 1,
        createdAt: 1,
        lastSeen: Date.now(),
        connectedAt: 1,
      });
      await expect(startLocalControlPlane(dirs[1]!, { DATABASE_URL: url })).rejects.toMatchObject({
        code: 'ELOCKED',
        message: expect.stringContaining('another ffleet control plane uses this database'),
      });
      // Before, the second one started, and its start marked every agent offline in the shared database.
      const [row] = await db.db.select({ online: agents.online }).from(agents);
      expect(row?.online).toBe(true);
    } finally {
      await first.stop();
      for (const d of dirs) rmSync(d, { recursive: true, force: true });
    }
    // Its stop released the lock.
    await (await claimControlPlaneLock(url, silent))();
  });

  it('takes the lock again after its session was cut, and says so when another control plane took it', async () => {
    const records: Array<{ msg?: string }> = [];
    const logger = pino(
      { level: 'error' },
      new Writable({
        write(chunk, _enc, cb) {
          records.push(JSON.parse(String(chunk)));
          cb();
        },
      }),
    );
    const admin = postgres(url, { max: 1, onnotice: () => {} });
    const cut = () =>
      admin`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
            WHERE datname = current_database() AND application_name = 'ffleet control plane'`;
    const release = await claimControlPlaneLock(url, logger, { checkMs: 100 });
    let other: (() => Promise<void>) | undefined;
    try {
      // A cut session (a server restart): the lock goes with it and comes back at the next check.
      await cut();
      await expect
        .poll(
          async () =>
            claimControlPlaneLock(url, silent).then(
              (r) => r().then(() => 'taken'),
              () => 'refused',
            ),
          {
            timeout: 5_000,
          },
        )
        .toBe('refused');
      // Cut again, and another control plane takes the lock first: the first one says so.
      await cut();
      other = await claimControlPlaneLock(url, silent);
      await expect
        .poll(
          () =>
            records.some((r) => String(r.msg).startsWith('another ffleet control plane took this database')),
          {
            timeout: 5_000,
          },
        )
        .toBe(true);
    } finally {
      await other?.();
      await release();
      await admin.end();
    }
  });
});
