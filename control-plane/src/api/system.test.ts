import { once } from 'node:events';
import { type AddressInfo, connect } from 'node:net';
import { serve } from '@hono/node-server';
import { describe, expect, it } from 'vitest';
import { expectProblem, json, UUID_RE, VALID } from '../../../test/api/support.ts';
import { waitFor } from '../../../test/fleet/support/media.ts';
import { createTestApp, useTestApp } from '../../../test/helpers/app.ts';
import { API_REFERENCE_CSP } from '../ui/api-reference.ts';
import { VERSION } from '../version.ts';

// One database for the file (SSE included); only the 503 case needs its own, since it closes it.
const t = useTestApp();

describe('operational routes', () => {
  it('GET /health is ok while the database answers', async () => {
    expect(await json(await t.call('GET', '/health'))).toMatchObject({ status: 'ok', db: 'ok' });
  });

  it('GET /health lists what is wrong with the install, without failing on it', async () => {
    expect(await json(await t.call('GET', '/health'))).not.toHaveProperty('warnings');
    // What openDatabase reports for a postgres.js that lacks ffleet's fixes (postgres-driver.test.ts).
    const database = t.ctx.database as { warnings: readonly string[] };
    const kept = database.warnings;
    database.warnings = ['postgres.js lacks ffleet’s fixes'];
    try {
      const res = await t.call('GET', '/health');
      expect(res.status).toBe(200);
      expect(await json(res)).toMatchObject({
        status: 'ok',
        db: 'ok',
        warnings: ['postgres.js lacks ffleet’s fixes'],
      });
    } finally {
      database.warnings = kept;
    }
  });

  it('GET /api/v1/version returns the version', async () => {
    expect(await json(await t.call('GET', '/api/v1/version'))).toEqual({ version: VERSION });
  });

  it('tells browsers never to read a response as another type than it says (task logs are any text)', async () => {
    for (const path of ['/api/v1/version', '/api/v1/openapi.json', '/api/v1/no-such-route']) {
      const res = await t.call('GET', path);
      expect(res.headers.get('x-content-type-options'), path).toBe('nosniff');
    }
  });

  it('GET / redirects to the dashboard (/ui), as FFmate does', async () => {
    const res = await t.call('GET', '/');
    expect(res.status).toBe(302);
    expect(res.headers.get('location')).toBe('/ui');
  });

  it('GET /metrics has HTTP latency by route template (never raw ids) and tasks by status', async () => {
    const task = await json(await t.call('POST', '/api/v1/tasks', VALID.task()), 201);
    await json(await t.call('POST', '/api/v1/tasks', VALID.task()), 201);
    await t.call('PATCH', `/api/v1/tasks/${task.id}/cancel`);
    await t.call('GET', `/api/v1/tasks/${task.id}`);
    await t.call('GET', '/api/v1/tasks/00000000-0000-4000-8000-00000000dead');
    await t.call('GET', `/api/v1/no-such-route/${task.id}`);
    const res = await t.call('GET', '/metrics');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain/);
    const text = await res.text();
    expect(text).toMatch(
      /ffleet_http_request_duration_seconds_count\{method="GET",route="\/api\/v1\/tasks\/:id",status="200"\} 1/,
    );
    expect(text).toMatch(/route="\/api\/v1\/tasks\/:id",status="404"\} 1/);
    expect(text).toMatch(/method="POST",route="\/api\/v1\/tasks",status="201"\} 2/);
    expect(text).toMatch(/method="PATCH",route="\/api\/v1\/tasks\/:id\/cancel",status="200"\} 1/);
    expect(text).toMatch(/route="unmatched",status="404"/);
    for (const line of text.split('\n').filter((l) => l.includes('{'))) {
      expect(line, line).not.toMatch(UUID_RE);
    }
    expect(text).toMatch(/^ffleet_tasks\{status="QUEUED"\} 1$/m);
    expect(text).toMatch(/^ffleet_tasks\{status="DONE_CANCELED"\} 1$/m);
    expect(text).toMatch(/^ffleet_tasks\{status="RUNNING"\} 0$/m);
    expect(text).toMatch(/^ffleet_agents_online 0$/m);
  });

  it('GET /api/v1/openapi.json is an OpenAPI 3.1 document covering every route', async () => {
    const res = await t.call('GET', '/api/v1/openapi.json');
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    const doc = await json(res);
    expect(doc.openapi).toMatch(/^3\.1\./);
    expect(doc.info).toMatchObject({ title: 'ffleet', version: VERSION });
    const documented = new Set<string>();
    for (const [path, ops] of Object.entries(
      doc.paths as Record<string, Record<string, { responses: object }>>,
    )) {
      for (const [method, op] of Object.entries(ops)) {
        documented.add(`${method.toUpperCase()} ${path}`);
        expect(Object.keys(op.responses).length, `${method} ${path}`).toBeGreaterThan(0);
      }
    }
    // Every route the app serves (but the reference UI itself and the dashboard) is documented.
    const served = new Set(
      t.app.routes
        .filter(
          (r) =>
            r.method !== 'ALL' &&
            !r.path.startsWith('/api/v1/docs') &&
            r.path !== '/ui' &&
            !r.path.startsWith('/ui/') &&
            r.path !== '/' &&
            r.path !== '/api/v1/openapi.json',
        )
        .map((r) => `${r.method} ${r.path.replace(/:(\w+)/g, '{$1}').replace(/(.)\/$/, '$1')}`),
    );
    expect([...served].filter((r) => !documented.has(r))).toEqual([]);
    expect([...documented].filter((r) => !served.has(r))).toEqual([]);
    // Every $ref points at a component that exists.
    const refs = JSON.stringify(doc).match(/"#\/components\/schemas\/[^"]+"/g) ?? [];
    expect(refs.length).toBeGreaterThan(20);
    for (const ref of refs) expect(doc.components.schemas[ref.slice(22, -1)], ref).toBeDefined();
    expect(doc.components.schemas.TaskCreate.properties.command).toBeDefined();
    expect(doc.components.securitySchemes.bearer).toMatchObject({ type: 'http', scheme: 'bearer' });
    for (const path of ['/api/v1/tasks', '/api/v1/batches']) {
      const post = doc.paths[path].post;
      expect(post.parameters.map((p: { name: string }) => p.name)).toContain('Idempotency-Key');
      expect(Object.keys(post.responses).sort()).toEqual([
        '201',
        '400',
        '401',
        '403',
        '409',
        '413',
        '415',
        '422',
        '503',
      ]);
    }
    // What is served without a token says so: no bearer requirement, no 401.
    expect(doc.security).toEqual([{ bearer: [] }]);
    expect(doc.paths['/health'].get.security).toEqual([]);
    expect(Object.keys(doc.paths['/health'].get.responses).sort()).toEqual(['200', '503']);
    expect(doc.paths['/api/v1/tasks'].get.security).toBeUndefined();
    expect(doc.paths['/api/v1/tasks'].get.responses['401']).toBeDefined();
  });

  it('documents the preset name filter, the delivery filter and the log level routes', async () => {
    const doc = await json(await t.call('GET', '/api/v1/openapi.json'));
    const param = (path: string, name: string) =>
      doc.paths[path].get.parameters.find((p: { name: string }) => p.name === name);
    expect(param('/api/v1/presets', 'name')).toMatchObject({
      in: 'query',
      schema: { type: 'string', maxLength: 200 },
    });
    expect(param('/api/v1/webhooks/executions', 'deliveryId')).toMatchObject({
      in: 'query',
      schema: { type: 'string', format: 'uuid' },
    });
    const levels = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];
    expect(doc.components.schemas.LogLevel.properties.level.enum).toEqual(levels);
    const { get, put } = doc.paths['/api/v1/system/log-level'];
    expect(get.responses['200'].content['application/json'].schema).toEqual({
      $ref: '#/components/schemas/LogLevel',
    });
    expect(put.requestBody.content['application/json'].schema).toEqual({
      $ref: '#/components/schemas/LogLevel',
    });
    // 403: a change asked by a page of another origin (cors.ts), as on every write.
    expect(Object.keys(put.responses).sort()).toEqual(['200', '400', '401', '403', '413', '415', '422']);
  });

  it('serves the API reference page and its assets locally (no CDN)', async () => {
    const res = await t.call('GET', '/api/v1/docs');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    // Scripts and requests from this server only, and never in a frame (it sends the operator's token).
    expect(res.headers.get('content-security-policy')).toBe(API_REFERENCE_CSP);
    expect(API_REFERENCE_CSP).toContain("script-src 'self';");
    expect(API_REFERENCE_CSP).toContain("frame-ancestors 'none'");
    expect(res.headers.get('x-content-type-options')).toBe('nosniff');
    const html = await res.text();
    expect(html).not.toMatch(/https?:\/\//);
    expect(html).not.toMatch(/src="\/\/|href="\/\//);
    const urls = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]!);
    expect(urls.length).toBeGreaterThanOrEqual(4);
    for (const url of urls) {
      expect(url.startsWith('/api/v1/docs/'), url).toBe(true);
      const asset = await t.call('GET', url);
      expect(asset.status, url).toBe(200);
      expect((await asset.arrayBuffer()).byteLength, url).toBeGreaterThan(0);
    }
    const init = await (await t.call('GET', '/api/v1/docs/init.js')).text();
    expect(init).toContain('/api/v1/openapi.json');
    await expectProblem(await t.call('GET', '/api/v1/docs/assets/..%2F..%2Fpackage.json'), 404);
    await expectProblem(await t.call('GET', '/api/v1/docs/assets/index.html'), 404);
  });
});

describe('GET /health with the database gone', () => {
  it('answers 503 with db unreachable', async () => {
    const gone = await createTestApp();
    try {
      await gone.db.close();
      const res = await gone.call('GET', '/health');
      expect(res.status).toBe(503);
      expect(await res.json()).toMatchObject({ status: 'error', db: 'unreachable' });
    } finally {
      await gone.close();
    }
  });
});

/** Read SSE messages from a stream until `until` returns true for one of them. */
async function readEvents(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  until: (m: { event: string; data: string }) => boolean,
): Promise<{ event: string; data: string; id?: string }[]> {
  const out: { event: string; data: string; id?: string }[] = [];
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`stream ended after ${JSON.stringify(out)}`);
    buf += dec.decode(value, { stream: true });
    let i = buf.indexOf('\n\n');
    while (i >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      i = buf.indexOf('\n\n');
      const m: { event: string; data: string; id?: string } = { event: 'message', data: '' };
      for (const line of block.split('\n')) {
        if (line.startsWith('event: ')) m.event = line.slice(7);
        else if (line.startsWith('data: ')) m.data += line.slice(6);
        else if (line.startsWith('id: ')) m.id = line.slice(4);
      }
      if (block.startsWith(':')) continue;
      out.push(m);
      if (until(m)) return out;
    }
  }
}

describe('GET /api/v1/events (server-sent events)', () => {
  it('streams task.created after a POST, with the webhook payload', async () => {
    const res = await t.call('GET', '/api/v1/events');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const reader = res.body!.getReader();
    try {
      await readEvents(reader, (m) => m.event === 'ready');
      const task = await json(await t.call('POST', '/api/v1/tasks', VALID.task()), 201);
      const [msg] = await readEvents(reader, (m) => m.event === 'task.created');
      const payload = JSON.parse(msg!.data);
      expect(msg!.id).toBe(payload.id);
      expect(payload).toMatchObject({
        event: 'task.created',
        data: {
          taskId: task.id,
          inputFile: '/media/in/clip.mov',
          outputFile: '/media/out/clip.mp4',
          status: 'QUEUED',
          task,
        },
      });
      expect(new Date(payload.timestamp).toISOString()).toBe(payload.timestamp);
    } finally {
      await reader.cancel();
    }
  });

  it('filters by ?events= and rejects unknown event names with 400', async () => {
    const res = await t.call('GET', '/api/v1/events?events=task.deleted,batch.created');
    const reader = res.body!.getReader();
    try {
      await readEvents(reader, (m) => m.event === 'ready');
      const task = await json(await t.call('POST', '/api/v1/tasks', VALID.task()), 201);
      await t.call('DELETE', `/api/v1/tasks/${task.id}`);
      // task.created was emitted first but filtered out: the next message is the deletion.
      const [msg] = await readEvents(reader, () => true);
      expect(msg!.event).toBe('task.deleted');
      expect(JSON.parse(msg!.data).data.taskId).toBe(task.id);
    } finally {
      await reader.cancel();
    }
    await expectProblem(
      await t.call('GET', '/api/v1/events?events=task.created,task.exploded'),
      400,
      'INVALID_QUERY',
    );
  });

  it('disconnects a client that stops reading once its backlog passes the limit', async () => {
    const server = serve({ fetch: t.app.fetch, port: 0, hostname: '127.0.0.1' });
    await once(server, 'listening');
    const connections = () =>
      new Promise<number>((done, fail) => server.getConnections((err, n) => (err ? fail(err) : done(n))));
    const socket = connect((server.address() as AddressInfo).port, '127.0.0.1');
    try {
      socket.write('GET /api/v1/events HTTP/1.1\r\nHost: localhost\r\n\r\n');
      // Not `for await … break`: leaving that loop destroys the socket.
      await new Promise<void>((ready) => {
        let head = '';
        const onData = (chunk: Buffer) => {
          head += String(chunk);
          if (!head.includes('event: ready')) return;
          socket.off('data', onData);
          socket.pause(); // from here on the client reads nothing
          ready();
        };
        socket.on('data', onData);
      });
      expect(await connections()).toBe(1);
      const data = { blob: 'x'.repeat(256 * 1024) };
      // 60 MB: more than the limit plus whatever the kernel's socket buffers take on loopback.
      for (let i = 0; i < 240 && (await connections()) > 0; i++) {
        t.bus.publish({ id: `e${i}`, event: 'task.updated', timestamp: new Date().toISOString(), data });
        await new Promise((r) => setImmediate(r));
      }
      await waitFor(async () => (await connections()) === 0, 10_000, 'the stuck client disconnected');
    } finally {
      socket.destroy();
      await new Promise((r) => server.close(r));
    }
  });
});
