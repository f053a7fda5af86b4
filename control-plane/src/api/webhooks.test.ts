import { randomUUID } from 'node:crypto';
import { EventName } from '@ffleet/shared';
import { sql } from 'drizzle-orm';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  countRows,
  errorPaths,
  eventRows,
  expectProblem,
  insertFailedAttempt,
  json,
  readList,
  UNKNOWN_ID,
  VALID,
} from '../../../test/api/support.ts';
import { useTestApp } from '../../../test/helpers/app.ts';
import { deliveries, webhookExecutions } from '../db/schema.ts';
import { claimDeliveries } from '../webhooks/claim-deliveries.ts';
import { queueRedelivery } from '../webhooks/redeliver.ts';

describe('webhook routes', () => {
  const t = useTestApp({ receiveAllEvents: true });

  const create = async (body: object) => json(await t.call('POST', '/api/v1/webhooks', body), 201);

  it('creates a webhook for each of the 14 global events: 201, Location, id and uuid', async () => {
    expect(EventName.options).toHaveLength(14);
    for (const event of EventName.options) {
      const res = await t.call('POST', '/api/v1/webhooks', { event, url: `http://127.0.0.1:9/${event}` });
      const w = await json(res, 201);
      expect(res.headers.get('location')).toBe(`/api/v1/webhooks/${w.id}`);
      expect(w).toEqual({
        id: w.id,
        uuid: w.id,
        event,
        url: `http://127.0.0.1:9/${event}`,
        hasSecret: false,
        createdAt: w.createdAt,
        updatedAt: w.createdAt,
      });
    }
  });

  it('rejects an unknown event or a URL that is not absolute http(s) with 422', async () => {
    const before = await countRows(t.db);
    const cases: [object, string][] = [
      [{ event: 'task.progress', url: 'http://h.test' }, 'event'],
      [{ event: 'TASK.CREATED', url: 'http://h.test' }, 'event'],
      [{ event: '', url: 'http://h.test' }, 'event'],
      [{ url: 'http://h.test' }, 'event'],
      [{ event: 'task.created', url: 'ftp://h.test/x' }, 'url'],
      [{ event: 'task.created', url: '/relative/hook' }, 'url'],
      [{ event: 'task.created', url: 'h.test/hook' }, 'url'],
      [{ event: 'task.created', url: 'javascript:alert(1)' }, 'url'],
      [{ event: 'task.created' }, 'url'],
      [{ event: 'task.created', url: 'http://h.test', secret: '' }, 'secret'],
      [{ event: 'task.created', url: 'http://h.test', hmm: 1 }, 'hmm'],
    ];
    for (const [body, path] of cases) {
      const p = await expectProblem(await t.call('POST', '/api/v1/webhooks', body), 422, 'VALIDATION_FAILED');
      expect(errorPaths(p), JSON.stringify(body)).toEqual([path]);
    }
    expect(await countRows(t.db)).toEqual(before);
  });

  it('rejects a URL with a user name or password, port 0 or surrounding whitespace with 422 on url', async () => {
    const before = await countRows(t.db);
    const w = await create(VALID.webhook());
    const cases: [string, RegExp][] = [
      ['http://user:s3cret-pw@h.test/hook', /user name or password/],
      ['https://user@h.test/hook', /user name or password/],
      ['http://:s3cret-pw@h.test/hook', /user name or password/],
      ['http://h.test:0/hook', /port 0/],
      ['http://127.0.0.1:00/hook', /port 0/],
      [' http://h.test/hook', /whitespace/],
      ['http://h.test/hook ', /whitespace/],
      ['http://h.test/hook\n', /whitespace/],
      ['http://h.\ttest/hook', /control characters/],
    ];
    for (const [url, message] of cases) {
      for (const [method, path] of [
        ['POST', '/api/v1/webhooks'],
        ['PUT', `/api/v1/webhooks/${w.id}`],
      ] as const) {
        const res = await t.call(method, path, { event: 'task.created', url, secret: 'x' });
        const text = await res.clone().text();
        const p = await expectProblem(res, 422, 'VALIDATION_FAILED');
        expect(p.errors, `${method} ${JSON.stringify(url)}`).toEqual([
          { path: 'url', message: expect.stringMatching(message) },
        ]);
        expect(text).not.toContain('s3cret-pw');
      }
    }
    expect(await json(await t.call('GET', `/api/v1/webhooks/${w.id}`))).toEqual(w);
    expect((await countRows(t.db)).webhooks).toBe(before.webhooks + 1);
  });

  it('applies the same URL rules to the direct webhooks of tasks and presets', async () => {
    const bad = 'http://user:s3cret-pw@h.test/hook';
    const preset = await t.call('POST', '/api/v1/presets', {
      ...VALID.preset(),
      webhooks: [{ event: 'preset.created', url: bad }],
    });
    expect(errorPaths(await expectProblem(preset, 422, 'VALIDATION_FAILED'))).toEqual(['webhooks.0.url']);
    const task = await t.call('POST', '/api/v1/tasks', {
      ...VALID.task(),
      webhooks: [
        { event: 'task.created', url: 'http://127.0.0.1:8080/fine' },
        { event: 'task.updated', url: 'http://h.test:0/hook' },
      ],
    });
    expect(errorPaths(await expectProblem(task, 422, 'VALIDATION_FAILED'))).toEqual(['webhooks.1.url']);
  });

  it('accepts loopback and private addresses (studio networks)', async () => {
    for (const url of [
      'http://localhost:8080/h',
      'https://10.1.2.3/h',
      'http://[::1]:9000/h',
      'http://192.168.0.7/h',
    ]) {
      await create({ event: 'task.updated', url });
    }
  });

  it('keeps the secret write-only: hasSecret in responses, never the secret itself', async () => {
    const w = await create({ event: 'task.deleted', url: 'https://h.test/s', secret: 's3cr3t-value' });
    expect(w.hasSecret).toBe(true);
    expect(JSON.stringify(w)).not.toContain('s3cr3t-value');
    const got = await t.call('GET', `/api/v1/webhooks/${w.id}`);
    expect(await got.clone().text()).not.toContain('s3cr3t');
    expect((await json(got)).hasSecret).toBe(true);
    expect(await (await t.call('GET', '/api/v1/webhooks?perPage=1000')).text()).not.toContain('s3cr3t');
    // PUT without a secret keeps it; `hasSecret` sent back is ignored (read-only).
    const kept = await json(
      await t.call('PUT', `/api/v1/webhooks/${w.id}`, {
        event: 'task.deleted',
        url: 'https://h.test/s2',
        hasSecret: false,
      }),
    );
    expect(kept).toMatchObject({ url: 'https://h.test/s2', hasSecret: true });
    const replaced = await json(
      await t.call('PUT', `/api/v1/webhooks/${w.id}`, {
        event: 'task.deleted',
        url: 'https://h.test/s2',
        secret: 'other-secret',
      }),
    );
    expect(JSON.stringify(replaced)).not.toContain('other-secret');
    // null removes it: deliveries go out unsigned from then on.
    const removed = await json(
      await t.call('PUT', `/api/v1/webhooks/${w.id}`, {
        event: 'task.deleted',
        url: 'https://h.test/s2',
        secret: null,
      }),
    );
    expect(removed.hasSecret).toBe(false);
    expect((await json(await t.call('GET', `/api/v1/webhooks/${w.id}`))).hasSecret).toBe(false);
    // Event payloads (sent to other webhooks and SSE) never carry it either.
    const payloads = JSON.stringify(await eventRows(t.db));
    expect(payloads).toContain(w.id);
    expect(payloads).not.toContain('s3cr3t-value');
    expect(payloads).not.toContain('other-secret');
  });

  it('gets, lists (X-Total), replaces and deletes webhooks; unknown ids are 404', async () => {
    const w = await create(VALID.webhook());
    expect(await json(await t.call('GET', `/api/v1/webhooks/${w.id}`))).toEqual(w);
    const all = await readList(await t.call('GET', '/api/v1/webhooks'));
    expect(all.total).toBe(all.items.length);
    expect(all.items[0]).toEqual(w);
    const second = await readList(await t.call('GET', '/api/v1/webhooks?perPage=2&page=1'));
    expect(second).toEqual({ items: all.items.slice(2, 4), total: all.total });

    const put = await json(
      await t.call('PUT', `/api/v1/webhooks/${w.id}`, {
        ...w,
        event: 'batch.finished',
        url: 'https://h.test/new',
      }),
    );
    expect(put).toMatchObject({
      id: w.id,
      event: 'batch.finished',
      url: 'https://h.test/new',
      createdAt: w.createdAt,
    });
    expect((await eventRows(t.db, 'webhook.updated')).filter((e) => e.payload.data.id === w.id)).toHaveLength(
      1,
    );

    const del = await t.call('DELETE', `/api/v1/webhooks/${w.id}`);
    expect(del.status).toBe(204);
    expect(await del.text()).toBe('');
    expect((await eventRows(t.db, 'webhook.deleted')).filter((e) => e.payload.data.id === w.id)).toHaveLength(
      1,
    );
    for (const [method, body] of [['GET'], ['PUT', VALID.webhook()], ['DELETE']] as const) {
      await expectProblem(await t.call(method, `/api/v1/webhooks/${w.id}`, body), 404, 'WEBHOOK_NOT_FOUND');
    }
    await expectProblem(await t.call('GET', '/api/v1/webhooks/nope'), 404, 'WEBHOOK_NOT_FOUND');
    await expectProblem(
      await t.call('PUT', `/api/v1/webhooks/${UNKNOWN_ID}`, { event: 'x' }),
      422,
      'VALIDATION_FAILED',
    );
  });
});

describe('webhook execution routes', () => {
  const hook = randomUUID();
  const task = randomUUID();
  const execs: string[] = [];
  const t = useTestApp();
  beforeAll(async () => {
    const rows = [
      { webhookId: hook, source: 'global', event: 'task.created', success: true, taskId: task },
      { webhookId: hook, source: 'global', event: 'task.updated', success: false, taskId: task },
      { webhookId: null, source: 'direct', event: 'task.created', success: true, taskId: randomUUID() },
      { webhookId: randomUUID(), source: 'global', event: 'preset.created', success: false, taskId: null },
    ];
    let at = 1_700_000_000_000;
    for (const r of rows) {
      const id = randomUUID();
      execs.push(id);
      await t.db.db.insert(webhookExecutions).values({
        id,
        deliveryId: randomUUID(),
        url: 'http://127.0.0.1:9/h',
        attempt: 1,
        request: { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' },
        response: r.success ? { status: 200, headers: {}, body: 'ok' } : null,
        error: r.success ? '' : 'ECONNREFUSED',
        durationMs: 3,
        createdAt: at++,
        ...r,
      });
    }
  });

  const list = async (qs: string) =>
    readList<{ id: string }>(await t.call('GET', `/api/v1/webhooks/executions${qs}`)).then((l) => ({
      total: l.total,
      ids: l.items.map((x) => execs.indexOf(x.id)),
    }));

  it('lists delivery attempts newest first with X-Total and the filters webhook, event, success, task', async () => {
    expect(await list('')).toEqual({ total: 4, ids: [3, 2, 1, 0] });
    expect(await list(`?webhook=${hook}`)).toEqual({ total: 2, ids: [1, 0] });
    expect(await list('?webhook=not-a-uuid')).toEqual({ total: 0, ids: [] });
    expect(await list('?event=task.created')).toEqual({ total: 2, ids: [2, 0] });
    expect(await list('?success=false')).toEqual({ total: 2, ids: [3, 1] });
    expect(await list(`?task=${task}&success=true`)).toEqual({ total: 1, ids: [0] });
    expect(await list('?perPage=1&page=2')).toEqual({ total: 4, ids: [1] });
    await expectProblem(
      await t.call('GET', '/api/v1/webhooks/executions?success=maybe'),
      400,
      'INVALID_QUERY',
    );
    // An event name that does not exist is a mistake, as on /api/v1/events, not an empty list.
    await expectProblem(
      await t.call('GET', '/api/v1/webhooks/executions?event=task.exploded'),
      400,
      'INVALID_QUERY',
    );
    await expectProblem(
      await t.call('GET', '/api/v1/webhooks/executions?perPage=1001'),
      400,
      'INVALID_QUERY',
    );
  });

  it('gets one attempt with the recorded request and response; unknown ids are 404', async () => {
    const e = await json(await t.call('GET', `/api/v1/webhooks/executions/${execs[0]}`));
    expect(e).toMatchObject({
      id: execs[0],
      uuid: execs[0],
      webhook: hook,
      source: 'global',
      event: 'task.created',
      attempt: 1,
      request: { method: 'POST', body: '{}' },
      response: { status: 200, body: 'ok' },
      success: true,
      error: '',
    });
    const direct = await json(await t.call('GET', `/api/v1/webhooks/executions/${execs[2]}`));
    expect(direct).toMatchObject({ webhook: null, source: 'direct' });
    await expectProblem(
      await t.call('GET', `/api/v1/webhooks/executions/${UNKNOWN_ID}`),
      404,
      'EXECUTION_NOT_FOUND',
    );
    await expectProblem(await t.call('GET', '/api/v1/webhooks/executions/abc'), 404, 'EXECUTION_NOT_FOUND');
    await expectProblem(
      await t.call('POST', `/api/v1/webhooks/executions/${UNKNOWN_ID}/redeliver`),
      404,
      'EXECUTION_NOT_FOUND',
    );
  });

  /** An attempt of a delivery as the dispatcher leaves them: the delivery row and its execution. */
  const attempted = async (d: { webhookId: string | null; url: string; secret: string | null }) =>
    (await insertFailedAttempt(t.db, d)).executionId;

  const secretOf = async (deliveryId: string) =>
    (await t.db.db.select().from(deliveries)).find((d) => d.id === deliveryId)?.secret;

  it('redelivers to the global webhook as it is now; 409 WEBHOOK_DELETED once it is deleted', async () => {
    const w = await json(
      await t.call('POST', '/api/v1/webhooks', {
        event: 'preset.updated',
        url: 'http://127.0.0.1:9/first',
        secret: 'first-secret',
      }),
      201,
    );
    const exec = await attempted({
      webhookId: w.id,
      url: 'http://127.0.0.1:9/first',
      secret: 'first-secret',
    });
    await json(
      await t.call('PUT', `/api/v1/webhooks/${w.id}`, {
        event: 'preset.updated',
        url: 'http://127.0.0.1:9/moved',
        secret: 'second-secret',
      }),
    );
    const queued = await json(await t.call('POST', `/api/v1/webhooks/executions/${exec}/redeliver`), 202);
    expect(queued).toMatchObject({ webhook: w.id, source: 'global', url: 'http://127.0.0.1:9/moved' });
    // No secret is stored on a delivery; the claim signs with the webhook's current one.
    expect(await secretOf(queued.deliveryId)).toBeNull();
    const claimed = await claimDeliveries(t.db, {
      now: Date.now() + 1,
      limit: 10,
      leaseMs: 1_000,
      perUrlLimit: 10,
      inFlightByUrl: {},
    });
    expect(claimed.find((d) => d.id === queued.deliveryId)).toMatchObject({ secret: 'second-secret' });
    await t.db.rows(t.db.db, sql`UPDATE deliveries SET locked_until = 0`);

    expect((await t.call('DELETE', `/api/v1/webhooks/${w.id}`)).status).toBe(204);
    const p = await expectProblem(
      await t.call('POST', `/api/v1/webhooks/executions/${exec}/redeliver`),
      409,
      'WEBHOOK_DELETED',
    );
    expect(p.detail).toContain(w.id);
    // The redelivery queued before the delete is dropped with the webhook's other pending deliveries.
    expect((await t.db.db.select().from(deliveries)).find((d) => d.id === queued.deliveryId)).toMatchObject({
      state: 'failed',
      lastError: 'webhook deleted',
    });
    // The dispatcher's own answer, for a delete that lands between the route's check and the insert.
    expect(await queueRedelivery(t.db, exec, Date.now())).toEqual({ ok: false, error: 'webhook_deleted' });
  });

  it('redelivers a direct webhook attempt to the URL it was sent to', async () => {
    const exec = await attempted({ webhookId: null, url: 'http://127.0.0.1:9/direct', secret: null });
    const queued = await json(await t.call('POST', `/api/v1/webhooks/executions/${exec}/redeliver`), 202);
    expect(queued).toMatchObject({ webhook: null, source: 'direct', url: 'http://127.0.0.1:9/direct' });
  });
});

describe('webhook execution routes: the attempts of one delivery', () => {
  const t = useTestApp();
  const eventId = randomUUID();
  const followed = randomUUID();
  const other = randomUUID(); // the same event to another target, or a redelivery: its own delivery
  const execs: Record<string, string> = {};

  beforeAll(async () => {
    const attempts: [string, string, number, boolean][] = [
      ['f1', followed, 1, false],
      ['o1', other, 1, true],
      ['f2', followed, 2, false],
      ['f3', followed, 3, true],
    ];
    let at = 1_700_000_000_000;
    for (const [name, deliveryId, attempt, success] of attempts) {
      execs[name] = randomUUID();
      await t.db.db.insert(webhookExecutions).values({
        id: execs[name]!,
        deliveryId,
        webhookId: null,
        source: 'direct',
        event: 'task.updated',
        url: `http://127.0.0.1:9/${deliveryId === followed ? 'a' : 'b'}`,
        attempt,
        request: { method: 'POST', headers: {}, body: JSON.stringify({ id: eventId }) },
        response: success ? { status: 204, headers: {}, body: '' } : null,
        error: success ? '' : 'ECONNREFUSED',
        success,
        durationMs: 2,
        createdAt: at++,
      });
    }
  });

  const list = async (qs: string) => {
    const l = await readList<{ id: string; deliveryId: string; attempt: number }>(
      await t.call('GET', `/api/v1/webhooks/executions${qs}`),
    );
    return { total: l.total, attempts: l.items.map((x) => [x.deliveryId === followed, x.attempt]) };
  };

  it('?deliveryId= lists the attempts (retries) of that delivery only, newest first, with the other filters', async () => {
    expect(await list('')).toMatchObject({ total: 4 });
    expect(await list(`?deliveryId=${followed}`)).toEqual({
      total: 3,
      attempts: [
        [true, 3],
        [true, 2],
        [true, 1],
      ],
    });
    expect(await list(`?deliveryId=${followed.toUpperCase()}`)).toEqual(
      await list(`?deliveryId=${followed}`),
    );
    expect(await list(`?deliveryId=${followed}&success=false&perPage=1&page=1`)).toEqual({
      total: 2,
      attempts: [[true, 1]],
    });
    expect(await list(`?deliveryId=${other}`)).toEqual({ total: 1, attempts: [[false, 1]] });
    expect(await list(`?deliveryId=${UNKNOWN_ID}`)).toEqual({ total: 0, attempts: [] });
  });

  it('?deliveryId= that is not a UUID is a 400 naming the field', async () => {
    for (const bad of ['not-a-uuid', '', `${followed}0`, execs.f1!.replaceAll('-', '')]) {
      const p = await expectProblem(
        await t.call('GET', `/api/v1/webhooks/executions?deliveryId=${encodeURIComponent(bad)}`),
        400,
        'INVALID_QUERY',
      );
      expect(p.errors, bad).toEqual([{ path: 'deliveryId', message: 'must be a UUID' }]);
    }
  });
});
