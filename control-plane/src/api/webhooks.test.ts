import { randomUUID } from 'node:crypto';
import { EventName } from '@ffleet/shared';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  countRows,
  errorPaths,
  eventRows,
  expectProblem,
  json,
  readList,
  UNKNOWN_ID,
  VALID,
} from '../../../test/api/support.ts';
import { useTestApp } from '../../../test/helpers/app.ts';
import { webhookExecutions } from '../db/schema.ts';

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
});
