import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import type { DeliveryDispatcher } from '../../control-plane/src/webhooks/delivery-dispatcher.ts';
import { openTestDatabase, type TestDatabase } from '../helpers/db.ts';
import {
  addWebhook,
  dbKinds,
  emit,
  listDeliveries,
  listExecutions,
  newDispatcher,
  taskData,
  waitForExecutions,
  waitUntil,
} from './fixtures.ts';
import { type Received, type Respond, statusSequence, TestReceiver } from './receiver.ts';

/** What a request carried: `T1:RUNNING` for a status change, `T1:40%` for progress. */
function label(r: Received, names: Record<string, string>): string {
  const { data } = JSON.parse(r.body) as { data: { taskId: string; status: string; progress: number } };
  const task = names[data.taskId] ?? data.taskId;
  return data.progress > 0 ? `${task}:${data.progress}%` : `${task}:${data.status}`;
}

describe.each(dbKinds)('progress coalescing and per-task order on %s', (kind) => {
  let db: TestDatabase;
  let receiver: TestReceiver;
  let dispatcher: DeliveryDispatcher | undefined;
  // Strictly increasing event times: deliveries written in one millisecond have no defined order.
  let last = 0;
  const tick = () => {
    last = Math.max(last + 1, Date.now());
    return last;
  };
  const T1 = randomUUID();
  const T2 = randomUUID();
  const names = { [T1]: 'T1', [T2]: 'T2' };
  const progress = (taskId: string, pct: number) =>
    emit(db, {
      event: 'task.updated',
      data: taskData(taskId, 'RUNNING', pct),
      taskId,
      progressOnly: true,
      now: tick(),
    });
  const status = (taskId: string, s: string) =>
    emit(db, { event: 'task.updated', data: taskData(taskId, s), taskId, now: tick() });
  const labels = () => receiver.received.map((r) => label(r, names));

  async function setup(respond?: Respond) {
    db = await openTestDatabase(kind);
    receiver = await TestReceiver.start(respond);
    dispatcher = newDispatcher(db);
    await addWebhook(db, { event: 'task.updated', url: receiver.url });
  }

  afterEach(async () => {
    await dispatcher?.stop(0);
    await receiver.close();
    await db.drop();
  });

  it('sends only the newest of several pending progress updates and supersedes the rest', async () => {
    await setup();
    for (const pct of [10, 20, 30, 40, 50]) await progress(T1, pct);
    dispatcher!.start();
    await waitForExecutions(db, 1);
    await waitUntil(async () => (await listDeliveries(db)).every((d) => d.state !== 'pending'));
    expect(labels()).toEqual(['T1:50%']);
    expect((await listDeliveries(db)).map((d) => d.state)).toEqual([
      'superseded',
      'superseded',
      'superseded',
      'superseded',
      'delivered',
    ]);
    expect(await listExecutions(db)).toHaveLength(1);
  });

  it('sends progress at most once per 5 s per task while status changes go out at once', {
    timeout: 30_000,
  }, async () => {
    await setup();
    dispatcher!.start();
    await progress(T1, 10);
    dispatcher!.wake();
    await receiver.waitFor(1);
    await progress(T1, 20); // held: the window is closed
    await status(T1, 'POST_PROCESSING'); // sent at once; the held 20% is now stale
    dispatcher!.wake();
    await receiver.waitFor(2, 2_000);
    const statusAt = Date.now();
    await progress(T1, 30);
    await progress(T1, 40); // supersedes 30%
    await progress(T2, 70); // another task: its own window
    dispatcher!.wake();
    await receiver.waitFor(3, 2_000);
    expect(Date.now() - statusAt).toBeLessThan(2_000);
    await receiver.waitFor(4, 10_000);
    const [p10, , t2, p40] = receiver.received;
    expect(labels()).toEqual(['T1:10%', 'T1:POST_PROCESSING', 'T2:70%', 'T1:40%']);
    expect(t2!.at - p10!.at).toBeLessThan(5_000);
    expect(p40!.at - p10!.at).toBeGreaterThanOrEqual(5_000);

    await status(T1, 'DONE_SUCCESSFUL');
    const doneAt = Date.now();
    dispatcher!.wake();
    await receiver.waitFor(5, 2_000);
    expect(receiver.received[4]!.at - doneAt).toBeLessThan(1_500);
    expect(labels()[4]).toBe('T1:DONE_SUCCESSFUL');
    await waitForExecutions(db, 5);
    const states = (await listDeliveries(db)).map((d) => d.state);
    expect(states.filter((s) => s === 'superseded')).toHaveLength(2);
  });

  it('sends one task in order, one at a time, even when an earlier delivery is being retried', {
    timeout: 30_000,
  }, async () => {
    await setup(statusSequence(500));
    await status(T1, 'PRE_PROCESSING');
    dispatcher!.start();
    await receiver.waitFor(1);
    // Written while PRE_PROCESSING waits for its retry: they must wait too, but T2 must not.
    await status(T1, 'RUNNING');
    await progress(T1, 50);
    await status(T1, 'DONE_SUCCESSFUL');
    await status(T2, 'RUNNING');
    dispatcher!.wake();
    await receiver.waitFor(5, 10_000);
    await waitUntil(async () => (await listDeliveries(db)).every((d) => d.state !== 'pending'));
    expect(labels()).toEqual([
      'T1:PRE_PROCESSING',
      'T2:RUNNING',
      'T1:PRE_PROCESSING',
      'T1:RUNNING',
      // The 50% progress was superseded by the newer DONE_SUCCESSFUL before it could go out.
      'T1:DONE_SUCCESSFUL',
    ]);
    expect(receiver.received[2]!.at - receiver.received[0]!.at).toBeGreaterThanOrEqual(3_000);
  });

  it('never coalesces progress across tasks or across webhooks sharing a URL', async () => {
    await setup();
    await addWebhook(db, { event: 'task.updated', url: receiver.url, secret: 'second webhook' });
    await progress(T1, 10);
    await progress(T2, 20);
    dispatcher!.start();
    await receiver.waitFor(4);
    await waitUntil(async () => (await listDeliveries(db)).every((d) => d.state === 'delivered'));
    expect(labels().sort()).toEqual(['T1:10%', 'T1:10%', 'T2:20%', 'T2:20%']);
  });
});
