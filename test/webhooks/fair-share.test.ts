import { describe, expect, it, onTestFinished } from 'vitest';
import { DEFAULT_CONCURRENCY } from '../../control-plane/src/webhooks/delivery-dispatcher.ts';
import { openTestDatabase } from '../helpers/db.ts';
import { addWebhook, dbKinds, deferStack, emit, newDispatcher, sleep, waitUntil } from './fixtures.ts';
import { TestReceiver } from './receiver.ts';

const HANGING = 3;
/** Backlog per hanging receiver: more than the whole pool (claimed ahead included) could hold. */
const BACKLOG = 120;
const HEALTHY_EVENTS = 20;
/** Long enough that nothing a hanging receiver holds is freed by a timeout during the test. */
const TIMEOUT_MS = 15_000;

describe.each(dbKinds)('slot sharing between webhook receivers on %s', (kind) => {
  it('serves a healthy receiver at once while hanging receivers have a backlog and the default pool', {
    timeout: 60_000,
  }, async () => {
    const defer = deferStack(onTestFinished);
    const db = await openTestDatabase(kind);
    defer(() => db.drop());
    const hanging: TestReceiver[] = [];
    for (let i = 0; i < HANGING; i++) {
      const r = await TestReceiver.start(() => {});
      defer(() => r.close());
      hanging.push(r);
      await addWebhook(db, { event: 'batch.created', url: `${r.url}/dead` });
    }
    const healthy = await TestReceiver.start();
    defer(() => healthy.close());
    await addWebhook(db, { event: 'batch.finished', url: `${healthy.url}/ok` });
    // Node loads its fetch implementation on first use, which takes seconds on a busy machine.
    await (await fetch(`${healthy.url}/warm-up`)).arrayBuffer();
    const dispatcher = newDispatcher(db, { timeoutMs: TIMEOUT_MS });
    defer(() => dispatcher.stop(0));

    for (let i = 0; i < BACKLOG; i++) await emit(db, { event: 'batch.created', data: { id: `b${i}` } });
    dispatcher.start();
    const inFlight = () => hanging.reduce((n, r) => n + r.received.length, 0);
    // The hanging receivers took what the dispatcher lets them have (before the fix: every slot).
    await waitUntil(() => inFlight() > DEFAULT_CONCURRENCY / 2, 15_000);
    let settled = -1;
    while (settled !== inFlight()) {
      settled = inFlight();
      await sleep(500);
    }

    const t0 = Date.now();
    for (let i = 0; i < HEALTHY_EVENTS; i++)
      await emit(db, { event: 'batch.finished', data: { id: `f${i}` } });
    dispatcher.wake();
    await healthy.waitFor(HEALTHY_EVENTS + 1, 5_000);
    // Far sooner than a hanging request's timeout would free a slot.
    expect(Date.now() - t0).toBeLessThan(5_000);
    expect(inFlight()).toBeLessThanOrEqual(DEFAULT_CONCURRENCY);
  });
});
