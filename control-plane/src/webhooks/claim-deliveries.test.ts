import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { afterEach, describe, expect, it } from 'vitest';
import { openTestDatabase, type TestDatabase } from '../../../test/helpers/db.ts';
import { addWebhook, dbKinds, emit, listDeliveries, taskData } from '../../../test/webhooks/fixtures.ts';
import type { Db } from '../db/client.ts';
import { EmittedEvents } from '../events/outbox.ts';
import {
  type ClaimedDelivery,
  type ClaimOptions,
  claimDeliveries,
  hasDueDeliveries,
} from './claim-deliveries.ts';

const T0 = 1_800_000_000_000;

/** The task.updated data a claimed delivery carries. */
const dataOf = (d: ClaimedDelivery | undefined) => d?.payload?.data as { status: string; progress: number };

describe.each(dbKinds)('claimDeliveries on %s', (kind) => {
  let db: TestDatabase;
  afterEach(() => db.drop());

  const claim = (now: number, o: Partial<ClaimOptions> = {}) =>
    claimDeliveries(db, { now, limit: 10, leaseMs: 1_000, perUrlLimit: 10, inFlightByUrl: {}, ...o });
  const update = (taskId: string, status: string, now: number, progressOnly = false, progress = 0) =>
    emit(db, { event: 'task.updated', data: taskData(taskId, status, progress), taskId, progressOnly, now });

  it('leases what it claims until the lease runs out, and returns the payload', async () => {
    db = await openTestDatabase(kind);
    await addWebhook(db, { event: 'batch.created', url: 'http://a.test/hook', secret: 's' });
    const payload = await emit(db, { event: 'batch.created', data: { id: 'b' }, now: T0 });
    expect(await hasDueDeliveries(db, T0 - 1)).toBe(false);
    expect(await hasDueDeliveries(db, T0)).toBe(true);

    const [d] = await claim(T0);
    expect(d).toMatchObject({ eventId: payload.id, secret: 's', attempts: 0, lease: T0 + 1_000, payload });
    expect(await claim(T0 + 999)).toEqual([]);
    expect(await hasDueDeliveries(db, T0 + 999)).toBe(false);
    // A crashed owner's lease runs out: the row is due again.
    expect((await claim(T0 + 1_000)).map((r) => r.id)).toEqual([d!.id]);
  });

  it('never takes more per URL than the room left by attempts already in flight', async () => {
    db = await openTestDatabase(kind);
    await addWebhook(db, { event: 'batch.created', url: 'http://slow.test/' });
    await addWebhook(db, { event: 'batch.created', url: 'http://fast.test/' });
    for (let i = 0; i < 5; i++) await emit(db, { event: 'batch.created', data: { i }, now: T0 + i });
    const got = await claim(T0 + 10, { perUrlLimit: 3, inFlightByUrl: { 'http://slow.test/': 2 } });
    const count = (url: string) => got.filter((d) => d.url === url).length;
    expect(count('http://slow.test/')).toBe(1);
    expect(count('http://fast.test/')).toBe(3);
    expect(await claim(T0 + 10, { perUrlLimit: 3, inFlightByUrl: { 'http://slow.test/': 3 } })).toMatchObject(
      [{ url: 'http://fast.test/' }, { url: 'http://fast.test/' }],
    );
  });

  it('sends one task to one target in order: a newer delivery waits for an older pending one', async () => {
    db = await openTestDatabase(kind);
    await addWebhook(db, { event: 'task.updated', url: 'http://a.test/' });
    const task = randomUUID();
    const other = randomUUID();
    const first = await update(task, 'PRE_PROCESSING', T0);
    await update(task, 'RUNNING', T0 + 1);
    await update(other, 'RUNNING', T0 + 2);
    const round1 = await claim(T0 + 10);
    expect(round1.map((d) => d.payload?.id)).toContain(first.id);
    expect(round1).toHaveLength(2);
    // Still pending (in flight or waiting for a retry): RUNNING must wait.
    await db.rows(
      db.db,
      sql`UPDATE deliveries SET locked_until = 0, next_attempt_at = ${T0 + 5_000}
      WHERE event_id = ${first.id}`,
    );
    expect(await claim(T0 + 20)).toEqual([]);
    await db.rows(db.db, sql`UPDATE deliveries SET state = 'delivered' WHERE event_id = ${first.id}`);
    expect((await claim(T0 + 30)).map((d) => dataOf(d).status)).toEqual(['RUNNING']);
  });

  it('sends a task’s events of one millisecond in the order they were emitted', async () => {
    db = await openTestDatabase(kind);
    await addWebhook(db, { event: 'task.updated', url: 'http://a.test/' });
    // As a group commit applies two reports of each task: one statement, one `now` for all.
    const ids = Array.from({ length: 24 }, () => randomUUID());
    await db.db.transaction((tx) =>
      new EmittedEvents(tx as unknown as Db).emitMany(
        ids.flatMap((taskId) =>
          ['RUNNING', 'DONE_SUCCESSFUL'].map((status) => ({
            event: 'task.updated' as const,
            data: taskData(taskId, status),
            taskId,
            now: T0,
          })),
        ),
      ),
    );
    const first = await claim(T0 + 10, { limit: 100, perUrlLimit: 100 });
    // Ordered by their random ids, about half of the tasks had their DONE go first.
    expect(first.map((d) => dataOf(d).status)).toEqual(ids.map(() => 'RUNNING'));
    await db.rows(
      db.db,
      sql`UPDATE deliveries SET state = 'delivered', locked_until = 0 WHERE state = 'pending'
      AND locked_until > 0`,
    );
    const second = await claim(T0 + 20, { limit: 100, perUrlLimit: 100 });
    expect(second.map((d) => dataOf(d).status)).toEqual(ids.map(() => 'DONE_SUCCESSFUL'));
  });

  it('holds progress for 5 s after the last progress attempt also when that attempt failed', async () => {
    db = await openTestDatabase(kind);
    await addWebhook(db, { event: 'task.updated', url: 'http://a.test/' });
    const task = randomUUID();
    await update(task, 'RUNNING', T0, true, 10);
    const [p10] = await claim(T0 + 10);
    // The receiver failed it: a retry is due in 3 s.
    await db.rows(
      db.db,
      sql`UPDATE deliveries SET attempts = 1, locked_until = 0, next_attempt_at = ${T0 + 3_020},
        updated_at = ${T0 + 20} WHERE id = ${p10!.id}`,
    );
    await update(task, 'RUNNING', T0 + 100, true, 20);
    // Newer progress supersedes the failed one, but waits out the window of that attempt.
    expect(await claim(T0 + 200)).toEqual([]);
    expect((await listDeliveries(db)).map((d) => d.state)).toEqual(['superseded', 'pending']);
    expect(await claim(T0 + 5_100)).toEqual([]);
    expect((await claim(T0 + 5_201)).map((d) => dataOf(d).progress)).toEqual([20]);
  });

  it('supersedes older progress by anything newer and holds progress for 5 s after the last one', async () => {
    db = await openTestDatabase(kind);
    await addWebhook(db, { event: 'task.updated', url: 'http://a.test/' });
    const task = randomUUID();
    await update(task, 'RUNNING', T0, true, 10);
    await update(task, 'RUNNING', T0 + 1, true, 20);
    const [p20] = await claim(T0 + 10);
    expect(dataOf(p20).progress).toBe(20);
    expect((await listDeliveries(db)).map((d) => d.state)).toEqual(['superseded', 'pending']);
    await db.rows(
      db.db,
      sql`UPDATE deliveries SET state = 'delivered', attempts = 1, locked_until = 0, updated_at = ${T0 + 20} WHERE id = ${p20!.id}`,
    );

    await update(task, 'RUNNING', T0 + 100, true, 30);
    expect(await claim(T0 + 200)).toEqual([]); // window closed until T0 + 20 + 5 s
    expect(await claim(T0 + 5_019)).toHaveLength(0);
    const [p30] = await claim(T0 + 5_020);
    expect(dataOf(p30).progress).toBe(30);
    await db.rows(db.db, sql`UPDATE deliveries SET locked_until = 0 WHERE id = ${p30!.id}`);

    // A status change supersedes unclaimed older progress and is not held by the window.
    await update(task, 'RUNNING', T0 + 5_100, true, 40);
    await update(task, 'DONE_SUCCESSFUL', T0 + 5_101);
    const got = await claim(T0 + 5_200);
    expect(got.map((d) => dataOf(d).status)).toEqual(['DONE_SUCCESSFUL']);
    expect((await listDeliveries(db)).map((d) => d.state)).toEqual([
      'superseded',
      'delivered',
      'superseded',
      'superseded',
      'pending',
    ]);
  });
});
