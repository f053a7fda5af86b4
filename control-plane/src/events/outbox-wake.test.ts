import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, VALID } from '../../../test/api/support.ts';
import { createTestApp, type TestApp } from '../../../test/helpers/app.ts';

/**
 * The webhook dispatcher is woken only by commits that wrote deliveries: most events (progress of a
 * task nobody subscribed to) must not cost it a claim query.
 */
describe('delivery wake-up', () => {
  let t: TestApp;
  let wakes = 0;
  beforeAll(async () => {
    t = await createTestApp();
    t.bus.onDeliveries(() => {
      wakes += 1;
    });
  });
  afterAll(() => t.close());

  it('stays quiet for events no webhook receives, and fires once per commit that wrote deliveries', async () => {
    await json(await t.call('POST', '/api/v1/tasks', VALID.task()), 201);
    expect(wakes).toBe(0);

    // A direct webhook on the task: its task.created is a delivery.
    await json(
      await t.call('POST', '/api/v1/tasks', {
        ...VALID.task(),
        webhooks: [{ event: 'task.created', url: 'http://direct.test/created' }],
      }),
      201,
    );
    expect(wakes).toBe(1);

    // A global subscription (its own webhook.created has no subscriber yet).
    await json(
      await t.call('POST', '/api/v1/webhooks', { event: 'task.created', url: 'http://global.test/c' }),
      201,
    );
    expect(wakes).toBe(1);
    await json(await t.call('POST', '/api/v1/tasks', VALID.task()), 201);
    expect(wakes).toBe(2);
  });
});
