import { afterEach, describe, expect, it } from 'vitest';
import type { DeliveryDispatcher } from '../../control-plane/src/webhooks/delivery-dispatcher.ts';
import { MAX_RESPONSE_BODY_BYTES } from '../../control-plane/src/webhooks/send-webhook.ts';
import { openTestDatabase, type TestDatabase } from '../helpers/db.ts';
import {
  addWebhook,
  dbKinds,
  emit,
  listDeliveries,
  listExecutions,
  newDispatcher,
  waitForExecutions,
  waitUntil,
} from './fixtures.ts';
import { TestReceiver } from './receiver.ts';

// Generous: PGlite shares this thread with the receiver, and a cold PGlite blocks it for a while.
const TIMEOUT_MS = 4_000;

/** One receiver, three hostile behaviours by path. */
const hostile = () =>
  TestReceiver.start((req, res) => {
    if (req.path === '/huge') {
      // 100 MiB as fast as the socket takes it.
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      const chunk = Buffer.alloc(1024 * 1024, 'z');
      let left = 100;
      const pump = () => {
        while (left > 0 && res.write(chunk)) left--;
        if (left > 0) res.once('drain', pump);
        else res.end();
      };
      res.on('error', () => {});
      pump();
    } else if (req.path === '/drip') {
      res.writeHead(200, { 'content-type': 'text/plain' });
      const t = setInterval(() => res.write('.'), 100);
      res.on('close', () => clearInterval(t));
    } else {
      // Invalid UTF-8, a NUL, a lone surrogate's bytes, and latin-1 in a header value.
      res.writeHead(502, { 'x-weird': 'caf\u00e9' });
      res.end(Buffer.from([0x62, 0x61, 0x64, 0x00, 0xff, 0xed, 0xa0, 0x80, 0xc3]));
    }
  });

describe.each(dbKinds)('hostile webhook receivers on %s', (kind) => {
  let db: TestDatabase;
  let receiver: TestReceiver;
  let dispatcher: DeliveryDispatcher;

  afterEach(async () => {
    await dispatcher.stop(0);
    await receiver.close();
    await db.drop();
  });

  it('records huge, slow-drip and non-UTF-8 responses safely and keeps going', {
    timeout: 30_000,
  }, async () => {
    db = await openTestDatabase(kind);
    receiver = await hostile();
    dispatcher = newDispatcher(db, { timeoutMs: TIMEOUT_MS });
    // Node loads its fetch implementation on first use, which takes seconds on a busy machine.
    await (await fetch(`${receiver.url}/warm-up`)).arrayBuffer();
    for (const path of ['/huge', '/drip', '/garbage']) {
      await addWebhook(db, { event: 'watchfolder.created', url: `${receiver.url}${path}` });
    }
    dispatcher.start();
    await emit(db, { event: 'watchfolder.created', data: { id: 'w' } });
    dispatcher.wake();

    // First attempt per path (the failing ones are retried meanwhile).
    const byPath = await waitUntil(async () => {
      const first = Object.fromEntries(
        (await listExecutions(db)).filter((e) => e.attempt === 1).map((e) => [new URL(e.url).pathname, e]),
      );
      return Object.keys(first).length === 3 && first;
    }, 15_000);

    expect(byPath['/huge']).toMatchObject({ success: true, response: { status: 200 } });
    expect(byPath['/huge']!.response!.body).toHaveLength(MAX_RESPONSE_BODY_BYTES);
    expect(byPath['/huge']!.durationMs).toBeLessThan(TIMEOUT_MS);

    // A 2xx is delivered even when its body outlives the timeout (the receiver has the event).
    expect(byPath['/drip']).toMatchObject({ success: true, response: { status: 200 } });
    expect(byPath['/drip']!.durationMs).toBeLessThan(TIMEOUT_MS + 1_000);
    expect(byPath['/drip']!.response!.body).toMatch(/^\.+$/);

    expect(byPath['/garbage']).toMatchObject({ success: false, error: 'HTTP 502' });
    expect(byPath['/garbage']!.response).toMatchObject({
      status: 502,
      body: 'bad\ufffd\ufffd\ufffd\ufffd\ufffd\ufffd',
      headers: { 'x-weird': 'caf\u00e9' },
    });

    const states = Object.fromEntries(
      (await listDeliveries(db)).map((d) => [new URL(d.url).pathname, d.state]),
    );
    expect(states).toEqual({ '/huge': 'delivered', '/drip': 'delivered', '/garbage': 'pending' });
    // Still alive and delivering after all that.
    await addWebhook(db, { event: 'watchfolder.deleted', url: `${receiver.url}/huge` });
    await emit(db, { event: 'watchfolder.deleted', data: { id: 'w' } });
    dispatcher.wake();
    await waitForExecutions(db, 4, 10_000);
  });
});
