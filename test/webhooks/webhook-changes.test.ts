import { createHmac } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { DeliveryDispatcherOptions } from '../../control-plane/src/webhooks/delivery-dispatcher.ts';
import { json, VALID } from '../api/support.ts';
import { createTestApp, type TestApp } from '../helpers/app.ts';
import {
  addWebhook,
  dbKinds,
  deferStack,
  emit,
  listDeliveries,
  listExecutions,
  newDispatcher,
  sleep,
  waitUntil,
} from './fixtures.ts';
import { statusSequence, TestReceiver } from './receiver.ts';

/** Standard Webhooks `v1` signature of a received request, computed here from the spec. */
function signedWith(secret: string, r: TestReceiver['received'][number]): boolean {
  const content = `${r.headers['webhook-id']}.${r.headers['webhook-timestamp']}.${r.body}`;
  const expected = createHmac('sha256', Buffer.from(secret)).update(content).digest('base64');
  return String(r.headers['webhook-signature']).split(' ').includes(`v1,${expected}`);
}

describe.each(dbKinds)('changing or deleting a global webhook with deliveries pending, on %s', (kind) => {
  /** The API over a fresh database, with a dispatcher woken by its commits as in control-plane.ts. */
  async function setup(opts: Partial<DeliveryDispatcherOptions> = {}) {
    const defer = deferStack(onTestFinished);
    const t: TestApp = await createTestApp({ kind });
    defer(() => t.close());
    const dispatcher = newDispatcher(t.db, opts);
    defer(() => dispatcher.stop(0));
    defer(t.bus.onDeliveries(() => dispatcher.wake()));
    const receiver = async (respond?: Parameters<typeof TestReceiver.start>[0]) => {
      const r = await TestReceiver.start(respond);
      defer(() => r.close());
      return r;
    };
    return { t, dispatcher, receiver };
  }

  it('sends the retries of a webhook moved by PUT to its new URL, signed with its new secret', {
    timeout: 30_000,
  }, async () => {
    const { t, dispatcher, receiver } = await setup();
    dispatcher.start();
    const old = await receiver(statusSequence(500, 500, 500, 500));
    const moved = await receiver();
    const hook = await json(
      await t.call('POST', '/api/v1/webhooks', { event: 'preset.created', url: `${old.url}/hook` }),
      201,
    );
    await json(await t.call('POST', '/api/v1/presets', VALID.preset()), 201);
    await old.waitFor(1);
    await json(
      await t.call('PUT', `/api/v1/webhooks/${hook.id}`, {
        event: 'preset.created',
        url: `${moved.url}/moved`,
        secret: 'rotated-secret',
      }),
    );

    // The retry 3 s later goes to the new URL only.
    await moved.waitFor(1, 10_000);
    const [delivery] = await waitUntil(async () => {
      const rows = await listDeliveries(t.db);
      return rows[0]?.state === 'delivered' && rows;
    });
    expect(old.received).toHaveLength(1);
    expect(moved.received[0]!.path).toBe('/moved');
    expect(signedWith('rotated-secret', moved.received[0]!)).toBe(true);
    expect(moved.received[0]!.body).toBe(old.received[0]!.body);
    // Signed with the webhook's secret as it is now, which is never stored on the delivery.
    expect(delivery).toMatchObject({ url: `${moved.url}/moved`, secret: null, attempts: 2 });
    // Each attempt records the URL it really went to.
    expect((await listExecutions(t.db)).map((e) => [e.attempt, e.url, e.success])).toEqual([
      [1, `${old.url}/hook`, false],
      [2, `${moved.url}/moved`, true],
    ]);
  });

  it('drops the pending deliveries of a deleted webhook, claimed-ahead ones too; attempts in flight finish', {
    timeout: 30_000,
  }, async () => {
    // Two attempts in flight (the URL cap) and two rows claimed ahead, waiting for a slot.
    const { t, dispatcher, receiver } = await setup({
      concurrency: 4,
      perUrlConcurrency: 2,
      timeoutMs: 1_500,
    });
    dispatcher.start();
    const dead = await receiver(() => {});
    const hook = await json(
      await t.call('POST', '/api/v1/webhooks', { event: 'task.deleted', url: dead.url }),
      201,
    );
    for (let i = 0; i < 6; i++) await emit(t.db, { event: 'task.deleted', data: { taskId: `t${i}` } });
    dispatcher.wake();
    await dead.waitFor(2);
    await waitUntil(async () => (await listDeliveries(t.db)).filter((d) => d.lockedUntil > 0).length === 4);

    expect((await t.call('DELETE', `/api/v1/webhooks/${hook.id}`)).status).toBe(204);
    // The two in flight time out and are recorded; past that, nothing more is sent.
    await waitUntil(async () => (await listExecutions(t.db)).length === 2, 10_000);
    await sleep(1_500);
    expect(dead.received).toHaveLength(2);
    expect(await listExecutions(t.db)).toHaveLength(2);
    const rows = await listDeliveries(t.db);
    expect(rows.map((d) => [d.state, d.lastError])).toEqual(
      Array.from({ length: 6 }, () => ['failed', 'webhook deleted']),
    );
    expect(rows.map((d) => d.attempts).sort()).toEqual([0, 0, 0, 0, 1, 1]);
  });

  it('sends a row written before its webhook moved to the current URL, and fails one whose webhook is gone', {
    timeout: 20_000,
  }, async () => {
    const { t, dispatcher, receiver } = await setup();
    const old = await receiver();
    const current = await receiver();
    const moving = await addWebhook(t.db, { event: 'batch.created', url: `${old.url}/a`, secret: 'first' });
    const vanishing = await addWebhook(t.db, { event: 'batch.created', url: `${old.url}/b` });
    await emit(t.db, { event: 'batch.created', data: { id: 'b1' } });
    // Changes that commit between the rows' insert and their claim (the services also rewrite or fail
    // pending rows; these bypass them, as a concurrent transaction would).
    await t.db.rows(
      t.db.db,
      sql`UPDATE webhooks SET url = ${`${current.url}/a2`}, secret = 'second' WHERE id = ${moving}`,
    );
    await t.db.rows(t.db.db, sql`DELETE FROM webhooks WHERE id = ${vanishing}`);
    dispatcher.start();
    await current.waitFor(1);
    await waitUntil(async () => (await listDeliveries(t.db)).every((d) => d.state !== 'pending'));
    await sleep(200);
    expect(old.received).toHaveLength(0);
    expect(signedWith('second', current.received[0]!)).toBe(true);
    const byHook = Object.fromEntries((await listDeliveries(t.db)).map((d) => [d.webhookId, d]));
    expect(byHook[moving]).toMatchObject({ state: 'delivered', url: `${current.url}/a2`, secret: null });
    expect(byHook[vanishing]).toMatchObject({ state: 'failed', attempts: 0, lastError: 'webhook deleted' });
    expect((await listExecutions(t.db)).map((e) => e.url)).toEqual([`${current.url}/a2`]);
  });

  it('stops retrying the old event of a webhook whose event PUT changed, and sends it the new one', {
    timeout: 30_000,
  }, async () => {
    const { t, dispatcher, receiver } = await setup();
    dispatcher.start();
    const r = await receiver(statusSequence(500, 500, 500, 500));
    const hook = await json(
      await t.call('POST', '/api/v1/webhooks', { event: 'preset.created', url: r.url }),
      201,
    );
    await json(await t.call('POST', '/api/v1/presets', VALID.preset()), 201);
    await r.waitFor(1);
    await json(await t.call('PUT', `/api/v1/webhooks/${hook.id}`, { event: 'batch.created', url: r.url }));
    await emit(t.db, { event: 'preset.created', data: { id: 'not subscribed any more' } });
    await emit(t.db, { event: 'batch.created', data: { id: 'b1' } });
    dispatcher.wake();
    await r.waitFor(2);
    // The first retry of preset.created would have come 3 s after its first attempt.
    await sleep(4_000);
    const sent = r.received.map((x) => JSON.parse(x.body).event as string);
    // preset.created once (no retry); batch.created (answered 500 too) retried as usual.
    expect(sent.filter((e) => e === 'preset.created')).toHaveLength(1);
    expect(sent.filter((e) => e === 'batch.created').length).toBeGreaterThanOrEqual(2);
    const rows = await listDeliveries(t.db);
    expect(rows.find((d) => d.event === 'preset.created')).toMatchObject({
      state: 'failed',
      attempts: 1,
      lastError: 'webhook event changed',
    });
    expect(rows.find((d) => d.event === 'batch.created')?.state).not.toBe('failed');
    // Its attempt cannot be redelivered to it any more: the webhook receives another event now.
    const [old] = (await listExecutions(t.db)).filter((e) => e.event === 'preset.created');
    const again = await t.call('POST', `/api/v1/webhooks/executions/${old!.id}/redeliver`);
    expect(again.status).toBe(409);
    expect(await again.json()).toMatchObject({ code: 'WEBHOOK_EVENT_CHANGED' });
  });

  it('fails a row written before its webhook changed event, at its claim, without sending it', {
    timeout: 20_000,
  }, async () => {
    const { t, dispatcher, receiver } = await setup();
    const r = await receiver();
    const hook = await addWebhook(t.db, { event: 'batch.created', url: r.url });
    await emit(t.db, { event: 'batch.created', data: { id: 'b1' } });
    // A change that commits between the row's insert and its claim, bypassing the service.
    await t.db.rows(t.db.db, sql`UPDATE webhooks SET event = 'batch.finished' WHERE id = ${hook}`);
    dispatcher.start();
    await waitUntil(async () => (await listDeliveries(t.db)).every((d) => d.state !== 'pending'));
    await sleep(200);
    expect(r.received).toHaveLength(0);
    expect(await listDeliveries(t.db)).toMatchObject([
      { state: 'failed', attempts: 0, lastError: 'webhook event changed' },
    ]);
  });
});
