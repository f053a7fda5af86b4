import { afterEach, describe, expect, it } from 'vitest';
import { openTestDatabase, type TestDatabase } from '../../../test/helpers/db.ts';
import {
  addWebhook,
  dbKinds,
  emit,
  listDeliveries,
  listExecutions,
} from '../../../test/webhooks/fixtures.ts';
import { AttemptRecorder } from './attempt-recorder.ts';
import { type ClaimedDelivery, claimDeliveries } from './claim-deliveries.ts';
import { decideOutcome, type FinishedAttempt, MAX_ATTEMPTS } from './record-attempt.ts';
import type { AttemptResult } from './send-webhook.ts';

const request = { method: 'POST' as const, headers: { 'webhook-id': 'e' }, body: '{}' };
const ok: AttemptResult = {
  ok: true,
  startedAt: 1_000,
  request,
  response: { status: 200, headers: {}, body: 'fine' },
  durationMs: 5,
};
const failed = (permanent = false): AttemptResult => ({
  ok: false,
  startedAt: 1_000,
  request,
  response: { status: 500, headers: { 'x-nul': 'a\u0000b' }, body: 'bad\u0000\ud800' },
  error: 'HTTP 500',
  durationMs: 5,
  permanent,
  shutdown: false,
});

describe('decideOutcome', () => {
  it('retries after 3, 5 and 10 s, then fails; permanent failures fail at once', () => {
    expect(decideOutcome(ok, 1, 0)).toEqual({ state: 'delivered' });
    expect([1, 2, 3].map((n) => decideOutcome(failed(), n, 100))).toEqual([
      { state: 'pending', nextAttemptAt: 3_100 },
      { state: 'pending', nextAttemptAt: 5_100 },
      { state: 'pending', nextAttemptAt: 10_100 },
    ]);
    expect(MAX_ATTEMPTS).toBe(4);
    expect(decideOutcome(failed(), 4, 100)).toEqual({ state: 'failed' });
    expect(decideOutcome(failed(true), 1, 100)).toEqual({ state: 'failed' });
  });
});

describe.each(dbKinds)('AttemptRecorder on %s', (kind) => {
  let db: TestDatabase;
  afterEach(() => db.drop());

  it('records batches in one statement and isolates an attempt that cannot be recorded', async () => {
    db = await openTestDatabase(kind);
    await addWebhook(db, { event: 'batch.created', url: 'http://127.0.0.1:9/hook' });
    for (let i = 0; i < 3; i++) await emit(db, { event: 'batch.created', data: { i } });
    const now = Date.now();
    const claimed = await claimDeliveries(db, {
      now,
      limit: 10,
      leaseMs: 60_000,
      perUrlLimit: 10,
      inFlightByUrl: {},
    });
    expect(claimed).toHaveLength(3);
    const poison: ClaimedDelivery = { ...claimed[0]!, id: 'not-a-uuid' };
    const attempt = (delivery: ClaimedDelivery, result: AttemptResult): FinishedAttempt => ({
      delivery,
      result,
      outcome: decideOutcome(result, delivery.attempts + 1, now),
      now,
    });

    const recorder = new AttemptRecorder(db);
    // The first goes out alone; the next three queue behind it and form one batch with the poison.
    const results = await Promise.allSettled([
      recorder.record(attempt(claimed[0]!, ok)),
      recorder.record(attempt(claimed[1]!, failed())),
      recorder.record(attempt(poison, ok)),
      recorder.record(attempt(claimed[2]!, failed(true))),
    ]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled', 'rejected', 'fulfilled']);
    expect(results.filter((r) => r.status === 'fulfilled').map((r) => r.value)).toEqual([true, true, true]);

    const byId = Object.fromEntries((await listDeliveries(db)).map((d) => [d.id, d]));
    expect(byId[claimed[0]!.id]).toMatchObject({ state: 'delivered', attempts: 1, lockedUntil: 0 });
    expect(byId[claimed[1]!.id]).toMatchObject({ state: 'pending', attempts: 1, nextAttemptAt: now + 3_000 });
    expect(byId[claimed[2]!.id]).toMatchObject({ state: 'failed', attempts: 1, lastError: 'HTTP 500' });
    const execs = await listExecutions(db);
    expect(execs).toHaveLength(3);
    const failedExec = execs.find((e) => e.deliveryId === claimed[1]!.id)!;
    expect(failedExec.response).toEqual({
      status: 500,
      headers: { 'x-nul': 'a\ufffdb' },
      body: 'bad\ufffd\ufffd',
    });
    expect(execs.find((e) => e.deliveryId === claimed[0]!.id)!.response).toMatchObject({ body: 'fine' });
  });

  it('does not move a delivery whose lease another dispatcher now holds, but keeps the execution', async () => {
    db = await openTestDatabase(kind);
    await addWebhook(db, { event: 'batch.created', url: 'http://127.0.0.1:9/hook' });
    await emit(db, { event: 'batch.created', data: {} });
    const now = Date.now();
    const [mine] = await claimDeliveries(db, {
      now,
      limit: 1,
      leaseMs: 10,
      perUrlLimit: 1,
      inFlightByUrl: {},
    });
    // The lease ran out and someone else claimed the row.
    const [theirs] = await claimDeliveries(db, {
      now: now + 100,
      limit: 1,
      leaseMs: 60_000,
      perUrlLimit: 1,
      inFlightByUrl: {},
    });
    expect(theirs!.id).toBe(mine!.id);
    const ours = await new AttemptRecorder(db).record({
      delivery: mine!,
      result: ok,
      outcome: { state: 'delivered' },
      now,
    });
    expect(ours).toBe(false);
    expect(await listDeliveries(db)).toMatchObject([{ state: 'pending', lockedUntil: theirs!.lease }]);
    expect(await listExecutions(db)).toHaveLength(1);
  });
});
