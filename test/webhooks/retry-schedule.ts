import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { type Database, openDatabase } from '../../control-plane/src/db/client.ts';
import { type DbKind, openTestDatabase, type TestDatabase } from '../helpers/db.ts';
import {
  addWebhook,
  deferStack,
  emit,
  listDeliveries,
  newDispatcher,
  waitForExecutions,
  waitUntil,
} from './fixtures.ts';
import { statusSequence, TestReceiver } from './receiver.ts';

/** Receiver-side gaps between consecutive attempts, in ms. */
const gaps = (r: TestReceiver) => r.received.slice(1).map((x, i) => x.at - r.received[i]!.at);

// Slack at the receiver for the attempt itself, recording it, and claiming once the retry is due: on a
// loaded CI box (and with PGlite sharing this thread with the receiver) that can reach a second or two.
const SLACK_MS = 2_000;
const HANG_TIMEOUT_MS = 1_000;

/**
 * The retry schedule with real delays (3 s, 5 s, 10 s), for one backend. The two schedule tests run
 * concurrently (~18 s instead of ~26 s) on databases opened beforehand: opening PGlite blocks this
 * thread for seconds and would skew the other tests' timing. The restart test runs alone afterwards.
 * One file per backend so the two run in separate workers.
 */
export function describeRetrySchedule(kind: DbKind): void {
  const fresh: TestDatabase[] = [];
  beforeAll(async () => {
    for (let i = 0; i < 2; i++) fresh.push(await openTestDatabase(kind));
  });
  afterAll(async () => {
    for (const db of fresh) await db.drop();
  });

  describe.concurrent(`webhook retry schedule on ${kind}`, () => {
    it('a 500, 500, 200 receiver gets three attempts, 3 s then 5 s apart', {
      timeout: 40_000,
    }, async (t) => {
      const defer = deferStack(t.onTestFinished);
      const db = fresh[0]!;
      const receiver = await TestReceiver.start(statusSequence(500, 500));
      defer(() => receiver.close());
      const dispatcher = newDispatcher(db);
      defer(() => dispatcher.stop(0));
      await addWebhook(db, { event: 'batch.finished', url: receiver.url });
      const payload = await emit(db, { event: 'batch.finished', data: { id: 'b' } });
      dispatcher.start();

      // The schedule as stored: exact, whatever the machine's load.
      for (const [attempts, delay] of [
        [1, 3_000],
        [2, 5_000],
      ] as const) {
        const [d] = await waitUntil(async () => {
          const rows = await listDeliveries(db);
          return rows[0]?.attempts === attempts && rows;
        }, 15_000);
        t.expect(d!.nextAttemptAt - d!.updatedAt).toBe(delay);
      }
      const execs = await waitForExecutions(db, 3, 20_000);
      const [g1, g2] = gaps(receiver);
      t.expect(g1).toBeGreaterThanOrEqual(3_000);
      t.expect(g1).toBeLessThan(3_000 + SLACK_MS);
      t.expect(g2).toBeGreaterThanOrEqual(5_000);
      t.expect(g2).toBeLessThan(5_000 + SLACK_MS);
      t.expect(execs.map((e) => [e.attempt, e.success, e.response?.status, e.error])).toEqual([
        [1, false, 500, 'HTTP 500'],
        [2, false, 500, 'HTTP 500'],
        [3, true, 200, ''],
      ]);
      // Same event id and body on every retry.
      t.expect(new Set(receiver.received.map((r) => r.headers['webhook-id']))).toEqual(new Set([payload.id]));
      t.expect(new Set(receiver.received.map((r) => r.body)).size).toBe(1);
      t.expect(await listDeliveries(db)).toMatchObject([{ state: 'delivered', attempts: 3, lastError: '' }]);
    });

    it('an always-500 receiver gets exactly four attempts 3, 5 and 10 s apart, then the delivery fails', {
      timeout: 40_000,
    }, async (t) => {
      const defer = deferStack(t.onTestFinished);
      const db = fresh[1]!;
      const receiver = await TestReceiver.start((_req, res) => {
        res.writeHead(500);
        res.end('nope');
      });
      defer(() => receiver.close());
      const dispatcher = newDispatcher(db);
      defer(() => dispatcher.stop(0));
      await addWebhook(db, { event: 'batch.finished', url: receiver.url });
      await emit(db, { event: 'batch.finished', data: { id: 'b' } });
      dispatcher.start();

      await waitUntil(async () => (await listDeliveries(db))[0]?.state === 'failed', 30_000);
      const [g1, g2, g3] = gaps(receiver);
      for (const [gap, delay] of [
        [g1, 3_000],
        [g2, 5_000],
        [g3, 10_000],
      ] as const) {
        t.expect(gap).toBeGreaterThanOrEqual(delay);
        t.expect(gap).toBeLessThan(delay + SLACK_MS);
      }
      const execs = await waitForExecutions(db, 4);
      t.expect(execs.map((e) => [e.attempt, e.success])).toEqual([
        [1, false],
        [2, false],
        [3, false],
        [4, false],
      ]);
      t.expect(await listDeliveries(db)).toMatchObject([
        { state: 'failed', attempts: 4, lastError: 'HTTP 500' },
      ]);
      // Nothing more is ever sent.
      await new Promise((r) => setTimeout(r, 1_000));
      t.expect(receiver.received).toHaveLength(4);
    });
  });

  // Alone, not concurrently: these open databases and time out on purpose, which would skew the others.
  describe(`webhook timeouts and restarts on ${kind}`, () => {
    it('a hanging receiver times out and the retry delivers', { timeout: 30_000 }, async (t) => {
      const defer = deferStack(t.onTestFinished);
      const db = await openTestDatabase(kind);
      defer(() => db.drop());
      // First request never answered; the second is.
      const receiver = await TestReceiver.start((req, res) => {
        if (req.n > 1) res.end('ok');
      });
      defer(() => receiver.close());
      const dispatcher = newDispatcher(db, { timeoutMs: HANG_TIMEOUT_MS });
      defer(() => dispatcher.stop(0));
      await addWebhook(db, { event: 'preset.deleted', url: receiver.url });
      await emit(db, { event: 'preset.deleted', data: { id: 'p' } });
      dispatcher.start();

      const execs = await waitForExecutions(db, 2, 15_000);
      t.expect(execs[0]).toMatchObject({
        attempt: 1,
        success: false,
        error: `timeout after ${HANG_TIMEOUT_MS} ms`,
        response: null,
      });
      t.expect(execs[0]!.durationMs).toBeGreaterThanOrEqual(HANG_TIMEOUT_MS - 10);
      t.expect(execs[1]).toMatchObject({ attempt: 2, success: true });
      t.expect(gaps(receiver)[0]).toBeGreaterThanOrEqual(3_000 + HANG_TIMEOUT_MS - 100);
    });
    it('a restart in the middle of the retry schedule still completes the delivery', {
      timeout: 60_000,
    }, async (t) => {
      const defer = deferStack(t.onTestFinished);
      const receiver = await TestReceiver.start(statusSequence(500));
      defer(() => receiver.close());
      // Reopen the same database the way a restarted control plane does.
      let reopen: () => Promise<Database>;
      let first: Database;
      if (kind === 'pglite') {
        const dir = mkdtempSync(join(tmpdir(), 'ffleet-wh-restart-'));
        defer(() => rmSync(dir, { recursive: true, force: true }));
        const dataDir = join(dir, 'pglite');
        // Seed the data dir from a migrated database (running the migrations here is slow).
        const seed = await openTestDatabase('pglite');
        const dump = await seed.raw!.dumpDataDir('gzip');
        await seed.drop();
        first = await openDatabase({ kind: 'pglite', dataDir, loadDataDir: dump });
        reopen = () => openDatabase({ kind: 'pglite', dataDir });
      } else {
        const test = await openTestDatabase('postgres');
        defer(() => test.drop());
        const url = (test as unknown as { url: string }).url;
        reopen = () => openDatabase({ kind: 'postgres', url, max: 4 });
        first = test;
      }
      await addWebhook(first, { event: 'batch.created', url: receiver.url });
      await emit(first, { event: 'batch.created', data: { id: 'b' } });
      const before = newDispatcher(first);
      before.start();
      await waitForExecutions(first, 1);
      await before.stop();
      if (kind === 'pglite') await first.close();

      const again = await reopen();
      defer(() => again.close());
      t.expect(await listDeliveries(again)).toMatchObject([
        { state: 'pending', attempts: 1, lockedUntil: 0 },
      ]);
      const after = newDispatcher(again);
      defer(() => after.stop(0));
      after.start();
      await waitUntil(async () => (await listDeliveries(again))[0]?.state === 'delivered', 20_000);
      t.expect(receiver.received).toHaveLength(2);
      t.expect(gaps(receiver)[0]).toBeGreaterThanOrEqual(3_000);
      t.expect((await waitForExecutions(again, 2)).map((e) => [e.attempt, e.success])).toEqual([
        [1, false],
        [2, true],
      ]);
    });
  });
}
