import { gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { appVariant, countRows, expectProblem, json, UNKNOWN_ID, VALID } from '../../../test/api/support.ts';
import { createTestApp, useTestApp } from '../../../test/helpers/app.ts';

const MiB = 1024 * 1024;

/** Every list route: each takes page/perPage. */
const LISTS = [
  '/api/v1/tasks',
  '/api/v1/batches',
  '/api/v1/presets',
  '/api/v1/watchfolders',
  '/api/v1/webhooks',
  '/api/v1/webhooks/executions',
  '/api/v1/agents',
];

// One database for the whole file: a fresh one per describe costs seconds and nothing here needs it.
const t = useTestApp();

describe('error responses', () => {
  it('400 MALFORMED_JSON for a body that does not parse or is empty', async () => {
    for (const body of ['{', '{"command": "x",}', "{'a':1}", 'nul', '   ']) {
      await expectProblem(await t.call('POST', '/api/v1/tasks', body), 400, 'MALFORMED_JSON');
    }
    const p = await expectProblem(
      await t.call('PUT', `/api/v1/presets/${UNKNOWN_ID}`, '{"name":'),
      400,
      'MALFORMED_JSON',
    );
    expect(p.type).toMatch(/^https:\/\//);
  });

  it('400 REQUEST_ABORTED, not a logged 500, when the client goes away while its body is read', async () => {
    const body = new ReadableStream({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('{"name":'));
        controller.error(Object.assign(new Error('aborted'), { code: 'ECONNRESET' }));
      },
    });
    const r = await t.app.fetch(
      new Request('http://127.0.0.1/api/v1/presets', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
        duplex: 'half',
      } as RequestInit),
    );
    await expectProblem(r, 400, 'REQUEST_ABORTED');
    // With a Content-Length the route reads the body itself (not the body-limit middleware).
    const counted = await t.app.fetch(
      new Request('http://127.0.0.1/api/v1/presets', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-length': '100' },
        body: new ReadableStream({
          start(controller) {
            controller.enqueue(new TextEncoder().encode('{"name":'));
            controller.error(Object.assign(new Error('aborted'), { code: 'ECONNRESET' }));
          },
        }),
        duplex: 'half',
      } as RequestInit),
    );
    await expectProblem(counted, 400, 'REQUEST_ABORTED');
  });

  it('422 when the JSON is not an object', async () => {
    for (const body of ['[]', '"text"', '42', 'null', 'true']) {
      await expectProblem(await t.call('POST', '/api/v1/webhooks', body), 422, 'VALIDATION_FAILED');
    }
  });

  it('422 names a missing field "is required" and an empty one "must not be empty", once per field', async () => {
    const preset = await expectProblem(
      await t.call('POST', '/api/v1/presets', { name: '' }),
      422,
      'VALIDATION_FAILED',
    );
    expect(preset.errors).toEqual([
      { path: 'name', message: 'must not be empty' },
      { path: 'command', message: 'is required' },
    ]);
    const folder = await expectProblem(
      await t.call('POST', '/api/v1/watchfolders', {
        name: '',
        path: '/in',
        interval: 5,
        growthChecks: 1,
        preset: '',
      }),
      422,
      'VALIDATION_FAILED',
    );
    expect(folder.errors).toEqual([
      { path: 'name', message: 'must not be empty' },
      { path: 'preset', message: 'must not be empty' },
    ]);
    const missing = await expectProblem(await t.call('POST', '/api/v1/watchfolders', { name: 'x' }), 422);
    expect(missing.errors).toEqual(
      expect.arrayContaining([
        { path: 'path', message: 'is required' },
        { path: 'interval', message: 'is required' },
      ]),
    );
    // Bounds, types and choices in words, not zod's ("Too big: expected number to be <=1000").
    const worded = async (path: string, body: object) =>
      (await expectProblem(await t.call('POST', path, body), 422)).errors;
    const task = { command: '-i a b' };
    expect(await worded('/api/v1/tasks', { ...task, priority: 5000 })).toEqual([
      { path: 'priority', message: 'must be at most 1000' },
    ]);
    expect(
      await worded('/api/v1/tasks', { ...task, priority: 1.5, metadata: 5, name: 'x'.repeat(1001) }),
    ).toEqual([
      { path: 'name', message: 'must be at most 1000 characters' },
      { path: 'priority', message: 'must be a whole number' },
      { path: 'metadata', message: 'must be an object' },
    ]);
    expect(await worded('/api/v1/tasks', { ...task, priority: 'high' })).toEqual([
      { path: 'priority', message: 'must be a number' },
    ]);
    const [event] = (await worded('/api/v1/webhooks', { event: 'nope', url: 'http://x/' })) ?? [];
    expect(event).toEqual({
      path: 'event',
      message: expect.stringMatching(/^must be one of: task\.created, /),
    });
    // A schema's own words are kept.
    expect(await worded('/api/v1/tasks', { ...task, requires: ['bad label!'] })).toEqual([
      { path: 'requires.0', message: 'letters, digits and _ . : - / only' },
    ]);
    // A capability prefix with no name is offered by no agent: the task would wait forever.
    expect(await worded('/api/v1/tasks', { ...task, requires: ['gpu', 'Encoder:'] })).toEqual([
      { path: 'requires.1', message: '"Encoder:" names nothing after its prefix (e.g. encoder:libx264)' },
    ]);
    expect(await worded('/api/v1/presets', { name: 'p', command: '-i a b', requires: ['agent:'] })).toEqual([
      { path: 'requires.0', message: '"agent:" names nothing after its prefix (e.g. agent:encode-01)' },
    ]);
    // A body failing its schema names a bad or missing command too (checked once the schema passes
    // otherwise), so a client fixes it in one round.
    const priority = { path: 'priority', message: 'must be at most 1000' };
    const segment2 = (found: string) =>
      `command segment 2 must start with \${TRANSCODER} or \${FFMPEG} (found "${found}")`;
    expect(await worded('/api/v1/tasks', { command: '-i a && rm -rf /', priority: 5000 })).toEqual([
      priority,
      {
        path: 'command',
        message: segment2('rm'),
      },
    ]);
    const required = 'command is required unless a preset with a command is given';
    expect(await worded('/api/v1/tasks', { priority: 5000 })).toEqual([
      priority,
      { path: 'command', message: required },
    ]);
    // A preset may hold the command; a command of the wrong type is the schema's to name.
    expect(await worded('/api/v1/tasks', { priority: 5000, preset: 'p' })).toEqual([priority]);
    expect(await worded('/api/v1/tasks', { command: 5 })).toEqual([
      { path: 'command', message: 'must be a string' },
    ]);
    expect(
      await worded('/api/v1/batches', {
        tasks: [{ command: '-i a b', priority: 5000 }, {}, { command: 'x && y' }],
      }),
    ).toEqual([
      { path: 'tasks.0.priority', message: 'must be at most 1000' },
      { path: 'tasks.1.command', message: required },
      {
        path: 'tasks.2.command',
        message: segment2('y'),
      },
    ]);
    const blank = await expectProblem(
      await t.call('POST', '/api/v1/presets', { name: '  ', command: '-i a b' }),
      422,
    );
    expect(blank.errors).toEqual([{ path: 'name', message: 'must not be blank' }]);
  });

  it('400 INVALID_QUERY for bad pagination on every list', async () => {
    for (const path of LISTS) {
      for (const qs of ['page=-1', 'perPage=0', 'perPage=1001', 'page=abc', 'perPage=x']) {
        await expectProblem(await t.call('GET', `${path}?${qs}`), 400, 'INVALID_QUERY');
      }
      // The documented bounds are accepted.
      expect((await t.call('GET', `${path}?page=0&perPage=1000`)).status).toBe(200);
    }
  });

  it('404 ROUTE_NOT_FOUND for unknown routes and methods', async () => {
    const p = await expectProblem(await t.call('GET', '/api/v1/nope'), 404, 'ROUTE_NOT_FOUND');
    expect(p.detail).toContain('/api/v1/nope');
    await expectProblem(await t.call('GET', '/api/v2/tasks'), 404, 'ROUTE_NOT_FOUND');
    await expectProblem(await t.call('PUT', '/api/v1/tasks'), 404, 'ROUTE_NOT_FOUND');
    await expectProblem(await t.call('POST', '/api/v1/agents', {}), 404, 'ROUTE_NOT_FOUND');
  });

  it('404 <RESOURCE>_NOT_FOUND for unknown ids of every resource', async () => {
    const cases: [string, string, string][] = [
      ['GET', `/api/v1/tasks/${UNKNOWN_ID}`, 'TASK_NOT_FOUND'],
      ['DELETE', `/api/v1/tasks/${UNKNOWN_ID}`, 'TASK_NOT_FOUND'],
      ['GET', `/api/v1/tasks/${UNKNOWN_ID}/logs`, 'TASK_NOT_FOUND'],
      ['PATCH', `/api/v1/tasks/${UNKNOWN_ID}/cancel`, 'TASK_NOT_FOUND'],
      ['PATCH', `/api/v1/tasks/${UNKNOWN_ID}/restart`, 'TASK_NOT_FOUND'],
      ['GET', `/api/v1/batches/${UNKNOWN_ID}`, 'BATCH_NOT_FOUND'],
      ['PATCH', `/api/v1/batches/${UNKNOWN_ID}/cancel`, 'BATCH_NOT_FOUND'],
      ['GET', `/api/v1/presets/${UNKNOWN_ID}`, 'PRESET_NOT_FOUND'],
      ['DELETE', `/api/v1/presets/${UNKNOWN_ID}`, 'PRESET_NOT_FOUND'],
      ['GET', `/api/v1/watchfolders/${UNKNOWN_ID}`, 'WATCHFOLDER_NOT_FOUND'],
      ['DELETE', `/api/v1/watchfolders/${UNKNOWN_ID}`, 'WATCHFOLDER_NOT_FOUND'],
      ['GET', `/api/v1/webhooks/${UNKNOWN_ID}`, 'WEBHOOK_NOT_FOUND'],
      ['DELETE', `/api/v1/webhooks/${UNKNOWN_ID}`, 'WEBHOOK_NOT_FOUND'],
      ['GET', `/api/v1/webhooks/executions/${UNKNOWN_ID}`, 'EXECUTION_NOT_FOUND'],
      ['GET', `/api/v1/agents/${UNKNOWN_ID}`, 'AGENT_NOT_FOUND'],
      ['DELETE', `/api/v1/agents/${UNKNOWN_ID}`, 'AGENT_NOT_FOUND'],
    ];
    for (const [method, path, code] of cases) {
      await expectProblem(await t.call(method, path), 404, code);
      // Ids that are not even UUIDs are unknown too, never a database error.
      await expectProblem(
        await t.call(method, path.replace(UNKNOWN_ID, "x'; drop table tasks;--")),
        404,
        code,
      );
    }
  });

  it('413 PAYLOAD_TOO_LARGE for a body over 1 MiB, with or without Content-Length; nothing is written', async () => {
    const before = await countRows(t.db);
    const big = JSON.stringify({ command: '-i a b', metadata: { blob: 'x'.repeat(MiB) } });
    await expectProblem(await t.call('POST', '/api/v1/tasks', big), 413, 'PAYLOAD_TOO_LARGE');
    await expectProblem(
      await t.app.request('/api/v1/tasks', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', 'Content-Length': String(big.length) },
        body: big,
      }),
      413,
      'PAYLOAD_TOO_LARGE',
    );
    // A chunked body (no Content-Length) is counted while it streams.
    const chunk = new TextEncoder().encode('x'.repeat(64 * 1024));
    let sent = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull(ctl) {
        if (sent > 2 * MiB) return ctl.close();
        sent += chunk.length;
        ctl.enqueue(chunk);
      },
    });
    await expectProblem(
      await t.app.request('/api/v1/batches', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: stream,
        duplex: 'half',
      } as RequestInit),
      413,
      'PAYLOAD_TOO_LARGE',
    );
    expect(await countRows(t.db)).toEqual(before);
    // Just under the limit is fine.
    const fits = JSON.stringify({ command: '-i a b', metadata: { blob: 'x'.repeat(MiB - 100) } });
    expect(fits.length).toBeLessThanOrEqual(MiB);
    await json(await t.call('POST', '/api/v1/tasks', fits), 201);
  });

  it('415 UNSUPPORTED_MEDIA_TYPE for a body that is not declared JSON', async () => {
    const body = JSON.stringify(VALID.task());
    for (const type of [
      'text/plain',
      'application/x-www-form-urlencoded',
      'multipart/form-data; boundary=x',
      'application/jsonp',
    ]) {
      await expectProblem(
        await t.app.request('/api/v1/tasks', { method: 'POST', headers: { 'Content-Type': type }, body }),
        415,
        'UNSUPPORTED_MEDIA_TYPE',
      );
    }
    await expectProblem(
      await t.app.request('/api/v1/tasks', { method: 'POST', body: new Uint8Array([123, 125]) }),
      415,
    );
    // A compressed JSON body says why it is refused, not "Unexpected token".
    const gzipped = await expectProblem(
      await t.app.request('/api/v1/tasks', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', 'Content-Encoding': 'gzip' },
        body: gzipSync(body),
      }),
      415,
      'UNSUPPORTED_MEDIA_TYPE',
    );
    expect(gzipped.detail).toContain('Content-Encoding "gzip"');
    // JSON with a charset or a +json suffix is JSON.
    for (const type of [
      'application/json; charset=utf-8',
      'Application/JSON',
      'application/merge-patch+json',
    ]) {
      const res = await t.app.request('/api/v1/tasks', {
        method: 'POST',
        headers: { 'Content-Type': type },
        body,
      });
      expect(res.status, type).toBe(201);
    }
  });

  it('400 for an Idempotency-Key longer than 255 characters', async () => {
    await expectProblem(
      await t.call('POST', '/api/v1/tasks', VALID.task(), { 'Idempotency-Key': 'k'.repeat(256) }),
      400,
      'INVALID_IDEMPOTENCY_KEY',
    );
  });

  it('echoes or assigns X-Request-Id on every response, errors included', async () => {
    const res = await t.call('GET', '/api/v1/nope', undefined, { 'X-Request-Id': 'req-123' });
    expect(res.headers.get('x-request-id')).toBe('req-123');
    expect((await t.call('GET', '/api/v1/tasks')).headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
  });
});

describe('authentication', () => {
  it('with API tokens configured: 401 without or with a wrong token, 200 with a valid one', async () => {
    const api = appVariant(t, { apiTokens: ['tok-one', 'tok-two'] });
    const before = await countRows(t.db);
    const missing = await api.call('GET', '/api/v1/tasks');
    expect(missing.headers.get('www-authenticate')).toMatch(/^Bearer/);
    await expectProblem(missing, 401, 'UNAUTHORIZED');
    for (const auth of ['Bearer nope', 'Bearer tok-one-x', 'Basic dG9rLW9uZQ==', 'tok-one', 'Bearer ']) {
      await expectProblem(
        await api.call('GET', '/api/v1/tasks', undefined, { Authorization: auth }),
        401,
        'UNAUTHORIZED',
      );
    }
    // Auth comes before everything else: no body is read, no route is revealed.
    await expectProblem(await api.call('POST', '/api/v1/tasks', VALID.task()), 401, 'UNAUTHORIZED');
    await expectProblem(await api.call('POST', '/api/v1/tasks', '{'), 401, 'UNAUTHORIZED');
    await expectProblem(await api.call('GET', '/api/v1/nope'), 401, 'UNAUTHORIZED');
    await expectProblem(await api.call('GET', '/metrics'), 401, 'UNAUTHORIZED');
    expect(await countRows(t.db)).toEqual(before);
    for (const auth of ['Bearer tok-one', 'bearer tok-two', 'Bearer   tok-two ']) {
      expect((await api.call('GET', '/api/v1/tasks', undefined, { Authorization: auth })).status, auth).toBe(
        200,
      );
    }
    await json(
      await api.call('POST', '/api/v1/tasks', VALID.task(), { Authorization: 'Bearer tok-two' }),
      201,
    );
    // Health stays open for probes, and the API reference for browsers (which cannot send a token).
    expect((await api.call('GET', '/health')).status).toBe(200);
    expect((await api.call('GET', '/api/v1/openapi.json')).status).toBe(200);
    const docs = await api.call('GET', '/api/v1/docs');
    expect(docs.status).toBe(200);
    const asset = /(?:src|href)="(\/api\/v1\/docs\/[^"]+)"/.exec(await docs.text())?.[1];
    expect(asset).toBeDefined();
    expect((await api.call('GET', asset!)).status).toBe(200);
    expect((await api.call('GET', '/')).status).toBe(302);
    for (const path of [
      '/api/v1/version',
      '/api/v1/docs/../tasks',
      '/api/v1/docs/%2e%2e/tasks',
      '/api/v1/docsx',
    ]) {
      await expectProblem(await api.call('GET', path), 401, 'UNAUTHORIZED');
    }
  });

  it('without API tokens: loopback clients only, others get 401', async () => {
    let remote = '10.0.0.5';
    const api = appVariant(t, { remote: () => remote });
    const before = await countRows(t.db);
    await expectProblem(await api.call('GET', '/api/v1/tasks'), 401, 'UNAUTHORIZED');
    await expectProblem(await api.call('POST', '/api/v1/tasks', VALID.task()), 401, 'UNAUTHORIZED');
    // A bearer header cannot help when no tokens exist.
    await expectProblem(
      await api.call('GET', '/api/v1/tasks', undefined, { Authorization: 'Bearer x' }),
      401,
      'UNAUTHORIZED',
    );
    expect((await api.call('GET', '/health')).status).toBe(200);
    expect(await countRows(t.db)).toEqual(before);
    for (const addr of ['::1', '127.0.0.1', '127.1.2.3', '::ffff:127.0.0.1']) {
      remote = addr;
      expect((await api.call('GET', '/api/v1/tasks')).status, addr).toBe(200);
    }
    for (const addr of ['10.0.0.5', '192.168.1.1', '::ffff:10.0.0.1', '128.0.0.1', '']) {
      remote = addr;
      await expectProblem(await api.call('GET', '/api/v1/tasks'), 401, 'UNAUTHORIZED');
    }
  });

  it('without API tokens: a loopback connection addressed to another host name gets 401 (DNS rebinding)', async () => {
    const before = await countRows(t.db);
    for (const host of [
      'attacker.example.com',
      'attacker.example.com:3000',
      '10.0.0.5',
      'localhost.evil.com',
      '127.0.0.1.nip.io',
    ]) {
      await expectProblem(
        await t.call('POST', '/api/v1/tasks', VALID.task(), { Host: host }),
        401,
        'UNAUTHORIZED',
      );
      await expectProblem(
        await t.call('GET', '/api/v1/events', undefined, { Host: host }),
        401,
        'UNAUTHORIZED',
      );
    }
    expect(await countRows(t.db)).toEqual(before);
    // Health and the API reference stay public, as with any client.
    expect((await t.call('GET', '/health', undefined, { Host: 'attacker.example.com' })).status).toBe(200);
    for (const host of [
      'localhost',
      'localhost:3000',
      'LOCALHOST.',
      'box.localhost:8080',
      '127.0.0.1',
      '127.0.0.1:3000',
      '127.1.2.3',
      '[::1]',
      '[::1]:3000',
    ]) {
      expect((await t.call('GET', '/api/v1/tasks', undefined, { Host: host })).status, host).toBe(200);
    }
  });

  it('serves a remote client that presents a valid token when tokens are configured', async () => {
    const remote = await createTestApp({ remote: '10.0.0.5', apiTokens: ['remote-token'] });
    try {
      expect(
        (await remote.call('GET', '/api/v1/tasks', undefined, { Authorization: 'Bearer remote-token' }))
          .status,
      ).toBe(200);
      await expectProblem(await remote.call('GET', '/api/v1/tasks'), 401, 'UNAUTHORIZED');
    } finally {
      await remote.close();
    }
  });
});
