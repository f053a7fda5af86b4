import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import pino from 'pino';
import { beforeAll, describe, expect, it } from 'vitest';
import { appVariant, expectProblem, insertFailedAttempt, json, VALID } from '../../../test/api/support.ts';
import { createTestApp, testRedeliver, useTestApp } from '../../../test/helpers/app.ts';
import { EventBus } from '../events/event-bus.ts';
import { noFleet } from '../services/context.ts';
import { createApp } from './app.ts';
import { healthFacts } from './health-facts.ts';
import { createMetrics } from './metrics.ts';

/**
 * The served OpenAPI document against what the server really does: real requests and responses are
 * checked against it (status listed, content type listed, headers declared, bodies valid), so a client
 * generated from the document, or validating with it, agrees with the server.
 */

type Schema = Record<string, unknown>;
// biome-ignore lint/suspicious/noExplicitAny: the document is walked as plain JSON.
type Doc = Record<string, any>;

/** Keywords that do not constrain a value (annotations). */
const ANNOTATIONS = new Set(['description', 'default', 'examples', 'title', 'format', 'readOnly']);
/** Keywords `validate` checks. */
const CHECKED = new Set([
  'type',
  'properties',
  'required',
  'additionalProperties',
  'propertyNames',
  'items',
  'enum',
  'const',
  'anyOf',
  'oneOf',
  'allOf',
  '$ref',
  'minimum',
  'maximum',
  'exclusiveMinimum',
  'exclusiveMaximum',
  'minLength',
  'maxLength',
  'pattern',
  'minItems',
  'maxItems',
]);

const typeOf = (v: unknown): string =>
  v === null
    ? 'null'
    : Array.isArray(v)
      ? 'array'
      : typeof v === 'number'
        ? Number.isInteger(v)
          ? 'integer'
          : 'number'
        : typeof v;

/**
 * The errors of `value` against `schema` (JSON Schema 2020-12, the keywords z.toJSONSchema and
 * openapi.ts write); `$ref`s are resolved in `doc`. An unknown keyword throws: no rule is skipped unseen.
 */
function validate(doc: Doc, schema: Schema, value: unknown, at = '$'): string[] {
  const errors: string[] = [];
  for (const k of Object.keys(schema)) {
    if (!CHECKED.has(k) && !ANNOTATIONS.has(k)) throw new Error(`validator: unknown keyword ${k} at ${at}`);
  }
  if (typeof schema.$ref === 'string') {
    const target = schema.$ref
      .replace(/^#\//, '')
      .split('/')
      .reduce((node, part) => node?.[part], doc);
    if (!target) throw new Error(`validator: unresolved ${schema.$ref}`);
    errors.push(...validate(doc, target, value, at));
  }
  const actual = typeOf(value);
  if (schema.type !== undefined) {
    const types = (Array.isArray(schema.type) ? schema.type : [schema.type]) as string[];
    const ok = types.some((t) => t === actual || (t === 'number' && actual === 'integer'));
    if (!ok) return [...errors, `${at}: ${JSON.stringify(value)} is not ${types.join('|')}`];
  }
  if ('const' in schema && JSON.stringify(schema.const) !== JSON.stringify(value))
    errors.push(`${at}: ${JSON.stringify(value)} is not ${JSON.stringify(schema.const)}`);
  if (Array.isArray(schema.enum) && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value)))
    errors.push(`${at}: ${JSON.stringify(value)} is not one of ${JSON.stringify(schema.enum)}`);
  if (Array.isArray(schema.anyOf)) {
    const all = (schema.anyOf as Schema[]).map((s) => validate(doc, s, value, at));
    if (all.every((e) => e.length)) errors.push(`${at}: matches no anyOf branch (${all.flat().join('; ')})`);
  }
  if (Array.isArray(schema.oneOf)) {
    const n = (schema.oneOf as Schema[]).filter((s) => validate(doc, s, value, at).length === 0).length;
    if (n !== 1) errors.push(`${at}: matches ${n} oneOf branches`);
  }
  for (const s of (schema.allOf as Schema[] | undefined) ?? []) errors.push(...validate(doc, s, value, at));
  if (actual === 'integer' || actual === 'number') {
    const n = value as number;
    if (typeof schema.minimum === 'number' && n < schema.minimum)
      errors.push(`${at}: ${n} < ${schema.minimum}`);
    if (typeof schema.maximum === 'number' && n > schema.maximum)
      errors.push(`${at}: ${n} > ${schema.maximum}`);
    if (typeof schema.exclusiveMinimum === 'number' && n <= schema.exclusiveMinimum)
      errors.push(`${at}: ${n} <= ${schema.exclusiveMinimum}`);
    if (typeof schema.exclusiveMaximum === 'number' && n >= schema.exclusiveMaximum)
      errors.push(`${at}: ${n} >= ${schema.exclusiveMaximum}`);
  }
  if (actual === 'string') {
    const s = value as string;
    const length = [...s].length; // code points, as JSON Schema counts
    if (typeof schema.minLength === 'number' && length < schema.minLength)
      errors.push(`${at}: shorter than ${schema.minLength}`);
    if (typeof schema.maxLength === 'number' && length > schema.maxLength)
      errors.push(`${at}: longer than ${schema.maxLength}`);
    if (typeof schema.pattern === 'string' && !new RegExp(schema.pattern).test(s))
      errors.push(`${at}: does not match ${schema.pattern}`);
  }
  if (actual === 'array') {
    const items = value as unknown[];
    if (typeof schema.minItems === 'number' && items.length < schema.minItems)
      errors.push(`${at}: fewer than ${schema.minItems} items`);
    if (typeof schema.maxItems === 'number' && items.length > schema.maxItems)
      errors.push(`${at}: more than ${schema.maxItems} items`);
    if (schema.items)
      for (const [i, v] of items.entries())
        errors.push(...validate(doc, schema.items as Schema, v, `${at}[${i}]`));
  }
  if (actual === 'object') {
    const obj = value as Record<string, unknown>;
    const properties = (schema.properties as Record<string, Schema> | undefined) ?? {};
    for (const k of (schema.required as string[] | undefined) ?? [])
      if (!Object.hasOwn(obj, k)) errors.push(`${at}.${k}: required`);
    for (const [k, v] of Object.entries(obj)) {
      if (schema.propertyNames)
        errors.push(...validate(doc, schema.propertyNames as Schema, k, `${at}{${k}}`));
      if (Object.hasOwn(properties, k)) errors.push(...validate(doc, properties[k]!, v, `${at}.${k}`));
      else if (schema.additionalProperties === false) errors.push(`${at}.${k}: not allowed`);
      else if (typeof schema.additionalProperties === 'object')
        errors.push(...validate(doc, schema.additionalProperties as Schema, v, `${at}.${k}`));
    }
  }
  return errors;
}

/** Every keyword the document's schemas use, so the validator is known to cover them all. */
function keywordsIn(node: unknown, out = new Set<string>(), inSchema = false): Set<string> {
  if (node === null || typeof node !== 'object') return out;
  if (Array.isArray(node)) {
    for (const n of node) keywordsIn(n, out, inSchema);
    return out;
  }
  for (const [k, v] of Object.entries(node)) {
    if (inSchema) out.add(k);
    if (k === 'schema' || k === 'items' || k === 'additionalProperties' || k === 'propertyNames') {
      keywordsIn(v, out, true);
    } else if (k === 'schemas' || (inSchema && (k === 'properties' || k === '$defs'))) {
      for (const s of Object.values(v as object)) keywordsIn(s, out, true);
    } else if (inSchema && (k === 'anyOf' || k === 'oneOf' || k === 'allOf')) {
      keywordsIn(v, out, true);
    } else if (!inSchema) keywordsIn(v, out, false);
  }
  return out;
}

/** The media type and its parameters: `text/plain; charset=utf-8` → ['text/plain', {charset: 'utf-8'}]. */
function mediaType(value: string): [string, Record<string, string>] {
  const [type, ...params] = value.split(';').map((s) => s.trim());
  const out: Record<string, string> = {};
  for (const p of params) {
    const i = p.indexOf('=');
    if (i > 0) out[p.slice(0, i).toLowerCase()] = p.slice(i + 1);
  }
  return [type!.toLowerCase(), out];
}

/** Headers that, when the server sends them, the document must declare on that response. */
const CONTRACT_HEADERS = ['location', 'idempotent-replayed', 'www-authenticate', 'retry-after', 'x-total'];

function operation(doc: Doc, method: string, path: string) {
  const op = doc.paths[path]?.[method.toLowerCase()];
  expect(op, `${method} ${path} is documented`).toBeDefined();
  return op;
}

/**
 * `res` (to `method path`, the path as the document writes it) agrees with the document: its status
 * is listed, its content type is listed (a body's) or none is (no body), the headers it declares
 * required are sent, the contract headers sent are declared and valid, the body is valid.
 * Returns the body read.
 */
async function expectDocumented(doc: Doc, method: string, path: string, res: Response): Promise<unknown> {
  const where = `${method} ${path} → ${res.status}`;
  const op = operation(doc, method, path);
  const documented = op.responses[String(res.status)];
  expect(documented, `${where}: status listed (${Object.keys(op.responses)})`).toBeDefined();
  const headers = (documented.headers ?? {}) as Record<string, { required?: boolean; schema: Schema }>;
  const declared = new Map(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]));
  for (const [name, h] of declared) {
    if (h.required) expect(res.headers.get(name), `${where}: required header ${name} sent`).not.toBeNull();
  }
  for (const name of CONTRACT_HEADERS) {
    const value = res.headers.get(name);
    if (value === null) continue;
    const h = declared.get(name);
    expect(h, `${where}: header ${name} (${value}) declared`).toBeDefined();
    expect(validate(doc, h!.schema, asParam(h!.schema, value)), `${where}: header ${name}`).toEqual([]);
  }
  const text = await res.text();
  const sent = res.headers.get('content-type');
  if (sent === null) {
    expect(text, `${where}: a body has a content type`).toBe('');
    expect(documented.content, `${where}: no body, no content documented`).toBeUndefined();
    return undefined;
  }
  const [type, params] = mediaType(sent);
  const content = (documented.content ?? {}) as Record<string, { schema: Schema }>;
  // A documented media type matches when its type and every parameter it names are the ones sent.
  const key = Object.keys(content).find((k) => {
    const [t, p] = mediaType(k);
    return t === type && Object.entries(p).every(([n, v]) => params[n] === v);
  });
  expect(key, `${where}: content type ${sent} listed (${Object.keys(content)})`).toBeDefined();
  const body = /json/.test(type) ? JSON.parse(text) : text;
  expect(validate(doc, content[key!]!.schema, body), `${where}: body valid`).toEqual([]);
  return body;
}

/** The request body's errors against the document's schema for `method path`. */
function requestErrors(doc: Doc, method: string, path: string, body: unknown): string[] {
  const schema = operation(doc, method, path).requestBody?.content?.['application/json']?.schema;
  expect(schema, `${method} ${path} takes a JSON body`).toBeDefined();
  return validate(doc, schema, body);
}

/** A parameter's text as the value its schema describes (query and header values are text). */
function asParam(schema: Schema, value: string): unknown {
  const type = schema.type;
  if ((type === 'integer' || type === 'number') && /^-?[0-9]+(\.[0-9]+)?$/.test(value)) return Number(value);
  return value;
}

/** Whether the document takes `value` for the parameter `name` (`in`: query or header) of `method path`. */
function paramTakes(doc: Doc, method: string, path: string, where: string, name: string, value: string) {
  const param = (
    operation(doc, method, path).parameters as { name: string; in: string; schema: Schema }[]
  ).find((p) => p.in === where && p.name.toLowerCase() === name.toLowerCase());
  expect(param, `${method} ${path}: ${where} parameter ${name} documented`).toBeDefined();
  return validate(doc, param!.schema, asParam(param!.schema, value)).length === 0;
}

const t = useTestApp();
let doc: Doc;

beforeAll(async () => {
  doc = await json(await t.call('GET', '/api/v1/openapi.json'));
});

describe('the test validator', () => {
  it('knows every keyword the document uses, and checks what it claims to', () => {
    const used = keywordsIn(doc);
    expect([...used].filter((k) => !CHECKED.has(k) && !ANNOTATIONS.has(k))).toEqual([]);
    const s = {
      type: 'object',
      properties: { a: { type: ['integer', 'null'], minimum: 1 } },
      required: ['a'],
    };
    expect(validate(doc, s, { a: 1 })).toEqual([]);
    expect(validate(doc, s, { a: null })).toEqual([]);
    expect(validate(doc, s, { a: 0 })).not.toEqual([]);
    expect(validate(doc, s, {})).not.toEqual([]);
    expect(validate(doc, { ...s, additionalProperties: false }, { a: 1, b: 2 })).not.toEqual([]);
    expect(validate(doc, { anyOf: [{ type: 'string' }, { type: 'null' }] }, 3)).not.toEqual([]);
    expect(validate(doc, { $ref: '#/components/schemas/Problem' }, { type: 'x' })).not.toEqual([]);
    expect(validate(doc, { type: 'string', maxLength: 2 }, 'abc')).not.toEqual([]);
    expect(validate(doc, { enum: ['true', 'false'] }, 'yes')).not.toEqual([]);
    expect(validate(doc, { const: 'pending' }, 'done')).not.toEqual([]);
  });
});

describe('headers the document declares', () => {
  it('201 has Location; a replay has Idempotent-Replayed: true', async () => {
    const key = randomUUID();
    const body = VALID.task();
    expect(requestErrors(doc, 'POST', '/api/v1/tasks', body)).toEqual([]);
    const first = await t.call('POST', '/api/v1/tasks', body, { 'Idempotency-Key': key });
    expect(first.status).toBe(201);
    expect(first.headers.get('location')).toMatch(/^\/api\/v1\/tasks\//);
    await expectDocumented(doc, 'POST', '/api/v1/tasks', first);
    const replay = await t.call('POST', '/api/v1/tasks', body, { 'Idempotency-Key': key });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    await expectDocumented(doc, 'POST', '/api/v1/tasks', replay);

    const batch = { tasks: [VALID.task()] };
    expect(requestErrors(doc, 'POST', '/api/v1/batches', batch)).toEqual([]);
    const b1 = await t.call('POST', '/api/v1/batches', batch, { 'Idempotency-Key': key });
    expect(b1.status).toBe(201);
    await expectDocumented(doc, 'POST', '/api/v1/batches', b1);
    const b2 = await t.call('POST', '/api/v1/batches', batch, { 'Idempotency-Key': key });
    expect(b2.headers.get('idempotent-replayed')).toBe('true');
    await expectDocumented(doc, 'POST', '/api/v1/batches', b2);
    for (const [path, body] of [
      ['/api/v1/presets', VALID.preset()],
      ['/api/v1/webhooks', VALID.webhook()],
    ] as const) {
      const res = await t.call('POST', path, body);
      expect(res.status).toBe(201);
      await expectDocumented(doc, 'POST', path, res);
    }
  });

  it('401 carries WWW-Authenticate (API tokens configured)', async () => {
    const api = appVariant(t, { apiTokens: ['s3cret-token'] });
    const res = await api.call('GET', '/api/v1/tasks');
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toBe('Bearer realm="ffleet"');
    await expectDocumented(doc, 'GET', '/api/v1/tasks', res);
    const bad = await api.call('POST', '/api/v1/tasks', VALID.task(), { Authorization: 'Bearer nope' });
    await expectDocumented(doc, 'POST', '/api/v1/tasks', bad);
  });

  it('503 carries Retry-After; /health answers 503 with its JSON body', async () => {
    const gone = await createTestApp({ kind: 'pglite' });
    try {
      await gone.db.close();
      const res = await gone.call('GET', '/api/v1/tasks');
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe('5');
      await expectDocumented(doc, 'GET', '/api/v1/tasks', res);
      await expectDocumented(
        doc,
        'POST',
        '/api/v1/tasks',
        await gone.call('POST', '/api/v1/tasks', VALID.task()),
      );
      const health = await gone.call('GET', '/health');
      expect(health.status).toBe(503);
      expect(await expectDocumented(doc, 'GET', '/health', health)).toEqual({
        status: 'error',
        db: 'unreachable',
      });
    } finally {
      await gone.close().catch(() => {});
    }
  });
});

describe('bodies the document describes', () => {
  it('GET /api/v1/version is JSON {version}', async () => {
    const body = await expectDocumented(
      doc,
      'GET',
      '/api/v1/version',
      await t.call('GET', '/api/v1/version'),
    );
    expect(Object.keys(body as object)).toEqual(['version']);
  });

  it('GET /health is JSON {status, db, broker, agents}, also with the database refusing work or gone', async () => {
    const gone = await createTestApp({ kind: 'pglite' });
    try {
      // As control-plane.ts builds it: with the broker's state and the agents online.
      const app = createApp({
        ctx: {
          database: gone.db,
          bus: new EventBus(),
          logger: pino({ level: 'silent' }),
          fleet: noFleet,
          now: Date.now,
        },
        bus: new EventBus(),
        metrics: createMetrics(gone.db, new EventBus()),
        version: '0.0.0-test',
        apiTokens: [],
        bodyLimit: 1024 * 1024,
        redeliver: testRedeliver(gone.db),
        health: () => healthFacts(gone.db, () => true),
        remoteAddress: () => '127.0.0.1',
      });
      const up = await app.request('/health');
      expect(up.status).toBe(200);
      expect(await expectDocumented(doc, 'GET', '/health', up)).toEqual({
        status: 'ok',
        db: 'ok',
        broker: 'ok',
        agents: { online: 0 },
      });
      // A statement refused for lack of resources (SQLSTATE class 53): a sort whose temporary file
      // exceeds temp_file_limit is one (api/health-disk-full.test.ts fills a disk for 53100).
      const sort = sql`select count(*) from (select g from generate_series(1, 100000) as g order by g desc) as s`;
      await gone.db.db.execute(sql`set work_mem = '64kB'`);
      await gone.db.db.execute(sql`set temp_file_limit = '64kB'`);
      await expect(gone.db.db.execute(sort)).rejects.toMatchObject({ cause: { code: '53400' } });
      const failing = await app.request('/health');
      expect(failing.status).toBe(503);
      expect(await expectDocumented(doc, 'GET', '/health', failing)).toEqual({
        status: 'error',
        db: 'failing',
        dbError: expect.stringMatching(/^insufficient resources, SQLSTATE 53400, refused at /),
        broker: 'ok',
        agents: { online: 0 },
      });
      await gone.db.db.execute(sql`reset temp_file_limit`);
      await gone.db.db.execute(sort);
      expect((await app.request('/health')).status).toBe(200);
      await gone.db.close();
      const down = await app.request('/health');
      expect(down.status).toBe(503);
      expect(await expectDocumented(doc, 'GET', '/health', down)).toEqual({
        status: 'error',
        db: 'unreachable',
        broker: 'ok',
        agents: { online: null },
      });
    } finally {
      await gone.close().catch(() => {});
    }
  });

  it('POST /webhooks/executions/{id}/redeliver answers 202 with the queued delivery', async () => {
    const hook = await json(
      await t.call('POST', '/api/v1/webhooks', { ...VALID.webhook(), event: 'preset.updated' }),
      201,
    );
    for (const webhookId of [hook.id as string, null]) {
      const source = webhookId ? 'global' : 'direct';
      const { executionId } = await insertFailedAttempt(t.db, {
        webhookId,
        url: 'http://127.0.0.1:9/hook',
        secret: null,
      });
      const path = '/api/v1/webhooks/executions/{id}/redeliver';
      const res = await t.call('POST', `/api/v1/webhooks/executions/${executionId}/redeliver`);
      expect(res.status).toBe(202);
      expect(await expectDocumented(doc, 'POST', path, res)).toMatchObject({
        webhook: webhookId,
        source,
        state: 'pending',
      });
      if (webhookId) {
        await t.call('DELETE', `/api/v1/webhooks/${webhookId}`);
        const gone = await t.call('POST', `/api/v1/webhooks/executions/${executionId}/redeliver`);
        expect(gone.status).toBe(409);
        await expectDocumented(doc, 'POST', path, gone);
      }
    }
  });

  it('task logs and /metrics are text/plain (Prometheus 0.0.4); /events is text/event-stream', async () => {
    const task = await json(await t.call('POST', '/api/v1/tasks', VALID.task()), 201);
    const logs = await t.call('GET', `/api/v1/tasks/${task.id}/logs`);
    expect(logs.status).toBe(200);
    expect(typeof (await expectDocumented(doc, 'GET', '/api/v1/tasks/{id}/logs', logs))).toBe('string');
    const metrics = await t.call('GET', '/metrics');
    expect(await expectDocumented(doc, 'GET', '/metrics', metrics)).toMatch(/^ffleet_database_up 1$/m);
    expect(Object.keys(operation(doc, 'GET', '/metrics').responses['200'].content)).toEqual([
      'text/plain; version=0.0.4',
    ]);

    const events = await t.call('GET', '/api/v1/events', undefined, { 'Last-Event-ID': 'x'.repeat(150) });
    try {
      expect(events.status).toBe(200);
      const op = operation(doc, 'GET', '/api/v1/events');
      const [type] = mediaType(events.headers.get('content-type')!);
      expect(Object.keys(op.responses['200'].content)).toContain(type);
      // Any id is taken (an unknown one answered as such): the document must take it too.
      expect(paramTakes(doc, 'GET', '/api/v1/events', 'header', 'Last-Event-ID', 'x'.repeat(150))).toBe(true);
      const reader = events.body!.getReader();
      const { value } = await reader.read();
      expect(new TextDecoder().decode(value)).toContain('"resumed":false');
      await reader.cancel();
    } catch (err) {
      await events.body?.cancel();
      throw err;
    }
  });
});

describe('statuses the document lists', () => {
  it('409 is listed exactly where a route answers it', () => {
    const with409: string[] = [];
    for (const [path, ops] of Object.entries(
      doc.paths as Record<string, Record<string, { responses: object }>>,
    ))
      for (const [method, op] of Object.entries(ops))
        if ('409' in op.responses) with409.push(`${method.toUpperCase()} ${path}`);
    expect(with409.sort()).toEqual(
      [
        'POST /api/v1/tasks',
        'POST /api/v1/batches',
        'PATCH /api/v1/tasks/{id}/cancel',
        'POST /api/v1/tasks/{id}/cancel',
        'PATCH /api/v1/tasks/{id}/restart',
        'POST /api/v1/tasks/{id}/restart',
        'PATCH /api/v1/batches/{id}/cancel',
        'POST /api/v1/batches/{id}/cancel',
        'DELETE /api/v1/presets/{id}',
        'POST /api/v1/watchfolders',
        'PUT /api/v1/watchfolders/{id}',
        'PATCH /api/v1/watchfolders/{id}',
        'POST /api/v1/webhooks/executions/{id}/redeliver',
        'DELETE /api/v1/agents/{id}',
        'POST /api/v1/agents/{id}/token',
      ].sort(),
    );
  });

  it('409s answered are listed: a preset in use, a watchfolder name taken, a finished task', async () => {
    const preset = await json(await t.call('POST', '/api/v1/presets', VALID.preset()), 201);
    const wf = VALID.watchfolder(preset.id);
    await json(await t.call('POST', '/api/v1/watchfolders', wf), 201);
    await expectDocumented(
      doc,
      'POST',
      '/api/v1/watchfolders',
      await t.call('POST', '/api/v1/watchfolders', wf),
    );
    const del = await t.call('DELETE', `/api/v1/presets/${preset.id}`);
    expect(del.status).toBe(409);
    await expectDocumented(doc, 'DELETE', '/api/v1/presets/{id}', del);
    const task = await json(await t.call('POST', '/api/v1/tasks', VALID.task()), 201);
    await json(await t.call('PATCH', `/api/v1/tasks/${task.id}/cancel`));
    const again = await t.call('PATCH', `/api/v1/tasks/${task.id}/cancel`);
    expect(again.status).toBe(409);
    await expectDocumented(doc, 'PATCH', '/api/v1/tasks/{id}/cancel', again);
  });

  it('413 for a too large body is listed also where the route reads no body', async () => {
    const big = JSON.stringify({ pad: 'x'.repeat(2 * 1024 * 1024) });
    for (const [method, path, real] of [
      ['DELETE', '/api/v1/webhooks/{id}', `/api/v1/webhooks/${randomUUID()}`],
      ['PATCH', '/api/v1/tasks/{id}/cancel', `/api/v1/tasks/${randomUUID()}/cancel`],
      [
        'POST',
        '/api/v1/webhooks/executions/{id}/redeliver',
        `/api/v1/webhooks/executions/${randomUUID()}/redeliver`,
      ],
    ] as const) {
      const res = await t.call(method, real, big);
      expect(res.status, `${method} ${real}`).toBe(413);
      await expectDocumented(doc, method, path, res);
    }
  });

  it('403 ORIGIN_NOT_ALLOWED for a change asked by a page of another origin is listed', async () => {
    const preset = await json(await t.call('POST', '/api/v1/presets', VALID.preset()), 201);
    const origin = { Origin: 'https://elsewhere.example' };
    for (const [method, path, real, body] of [
      ['POST', '/api/v1/tasks', '/api/v1/tasks', VALID.task()],
      ['PUT', '/api/v1/presets/{id}', `/api/v1/presets/${preset.id}`, VALID.preset()],
      ['DELETE', '/api/v1/presets/{id}', `/api/v1/presets/${preset.id}`, undefined],
      ['PATCH', '/api/v1/tasks/{id}/cancel', `/api/v1/tasks/${randomUUID()}/cancel`, undefined],
      ['PUT', '/api/v1/system/log-level', '/api/v1/system/log-level', { level: 'info' }],
    ] as const) {
      const res = await t.call(method, real, body, origin);
      const problem = await expectProblem(res.clone(), 403, 'ORIGIN_NOT_ALLOWED');
      expect(problem.detail).toContain('elsewhere.example');
      await expectDocumented(doc, method, path, res);
    }
  });
});

describe('request bodies as the server reads them', () => {
  /** Each optional field of the request schema (not a read-only one) set to null. */
  function nullOptionals(path: string, method: string, body: Record<string, unknown>) {
    const ref = operation(doc, method, path).requestBody.content['application/json'].schema.$ref as string;
    const schema = doc.components.schemas[ref.split('/').pop()!];
    const out = { ...body };
    for (const [k, p] of Object.entries(schema.properties as Record<string, Schema>)) {
      const readOnly = p.type === undefined && p.anyOf === undefined && p.$ref === undefined;
      if (!readOnly && !(schema.required ?? []).includes(k)) out[k] = null;
    }
    return out;
  }

  for (const kind of ['presets', 'watchfolders', 'webhooks'] as const) {
    it(`GET → PUT of ${kind}: the read-only fields and nulls on optional fields are taken`, async () => {
      let body: Record<string, unknown> = VALID.webhook();
      if (kind === 'presets') body = VALID.preset();
      if (kind === 'watchfolders') {
        const preset = await json(await t.call('POST', '/api/v1/presets', VALID.preset()), 201);
        body = VALID.watchfolder(preset.id);
      }
      const made = await json(await t.call('POST', `/api/v1/${kind}`, body), 201);
      const got = await t.call('GET', `/api/v1/${kind}/${made.id}`);
      const read = (await expectDocumented(doc, 'GET', `/api/v1/${kind}/{id}`, got)) as Record<
        string,
        unknown
      >;
      const path = `/api/v1/${kind}/{id}`;
      // The answer as read, sent back.
      expect(requestErrors(doc, 'PUT', path, read)).toEqual([]);
      const put = await t.call('PUT', `/api/v1/${kind}/${made.id}`, read);
      expect(put.status, await put.clone().text()).toBe(200);
      await expectDocumented(doc, 'PUT', path, put);
      // …with every optional field null (FFmate's "not set").
      const nulls = nullOptionals(path, 'PUT', read);
      expect(Object.values(nulls)).toContain(null);
      expect(requestErrors(doc, 'PUT', path, nulls)).toEqual([]);
      const put2 = await t.call('PUT', `/api/v1/${kind}/${made.id}`, nulls);
      expect(put2.status, await put2.clone().text()).toBe(200);
      await expectDocumented(doc, 'PUT', path, put2);
      // A create takes the same.
      const { name: _, ...rest } = nulls;
      const copy = kind === 'webhooks' ? rest : { ...rest, name: `copy-${randomUUID().slice(0, 8)}` };
      expect(requestErrors(doc, 'POST', `/api/v1/${kind}`, copy)).toEqual([]);
      await expectDocumented(doc, 'POST', `/api/v1/${kind}`, await t.call('POST', `/api/v1/${kind}`, copy));
      // But a field the server does not know is still refused by both.
      const unknown = { ...read, colour: 'blue' };
      expect(requestErrors(doc, 'PUT', path, unknown)).not.toEqual([]);
      expect((await t.call('PUT', `/api/v1/${kind}/${made.id}`, unknown)).status).toBe(422);
    });
  }

  it('nested nulls: a task, a batch of tasks, a watchfolder filter', async () => {
    const task = { ...VALID.task(), priority: null, preProcessing: { scriptPath: null }, metadata: null };
    expect(requestErrors(doc, 'POST', '/api/v1/tasks', task)).toEqual([]);
    await expectDocumented(doc, 'POST', '/api/v1/tasks', await t.call('POST', '/api/v1/tasks', task));
    const batch = { name: null, tasks: [task] };
    expect(requestErrors(doc, 'POST', '/api/v1/batches', batch)).toEqual([]);
    await expectDocumented(doc, 'POST', '/api/v1/batches', await t.call('POST', '/api/v1/batches', batch));
    const preset = await json(await t.call('POST', '/api/v1/presets', VALID.preset()), 201);
    const wf = {
      ...VALID.watchfolder(preset.id),
      filter: { extensions: { include: null, exclude: ['tmp'] } },
    };
    expect(requestErrors(doc, 'POST', '/api/v1/watchfolders', wf)).toEqual([]);
    const made = await t.call('POST', '/api/v1/watchfolders', wf);
    expect(made.status, await made.clone().text()).toBe(201);
    await expectDocumented(doc, 'POST', '/api/v1/watchfolders', made);
  });

  it('where null is not read as absent, both refuse it: a required field, a PATCH', async () => {
    const preset = await json(await t.call('POST', '/api/v1/presets', VALID.preset()), 201);
    const noCommand = { ...VALID.preset(), command: null };
    expect(requestErrors(doc, 'POST', '/api/v1/presets', noCommand)).not.toEqual([]);
    await expectProblem(await t.call('POST', '/api/v1/presets', noCommand), 422);
    const wf = await json(await t.call('POST', '/api/v1/watchfolders', VALID.watchfolder(preset.id)), 201);
    // A PATCH takes the read-only fields (a GET's answer) but no null for "unchanged".
    const read = await json(await t.call('GET', `/api/v1/watchfolders/${wf.id}`));
    expect(requestErrors(doc, 'PATCH', '/api/v1/watchfolders/{id}', read)).toEqual([]);
    await expectDocumented(
      doc,
      'PATCH',
      '/api/v1/watchfolders/{id}',
      await t.call('PATCH', `/api/v1/watchfolders/${wf.id}`, read),
    );
    const nullDescription = { description: null };
    expect(requestErrors(doc, 'PATCH', '/api/v1/watchfolders/{id}', nullDescription)).not.toEqual([]);
    await expectProblem(await t.call('PATCH', `/api/v1/watchfolders/${wf.id}`, nullDescription), 422);
  });
});

describe('parameters the document constrains', () => {
  it('takes the values the server takes and refuses those it refuses', async () => {
    const cases: [path: string, name: string, value: string][] = [
      ['/api/v1/tasks', 'page', '0'],
      ['/api/v1/tasks', 'page', '-1'],
      ['/api/v1/tasks', 'page', '1.5'],
      ['/api/v1/tasks', 'perPage', '0'],
      ['/api/v1/tasks', 'perPage', '1'],
      ['/api/v1/tasks', 'perPage', '1000'],
      ['/api/v1/tasks', 'perPage', '1001'],
      ['/api/v1/batches', 'perPage', '1001'],
      ['/api/v1/presets', 'page', '9999999999999999'],
      ['/api/v1/presets', 'page', '999999999999999'],
      ['/api/v1/webhooks/executions', 'success', 'true'],
      ['/api/v1/webhooks/executions', 'success', 'false'],
      ['/api/v1/webhooks/executions', 'success', 'yes'],
      ['/api/v1/webhooks/executions', 'success', '1'],
      ['/api/v1/webhooks/executions', 'deliveryId', randomUUID()],
      ['/api/v1/webhooks/executions', 'event', 'task.exploded'],
      ['/api/v1/tasks', 'source', 'watchfolder'],
      ['/api/v1/tasks', 'source', 'cron'],
      ['/api/v1/tasks', 'q', 'x'.repeat(201)],
    ];
    for (const [path, name, value] of cases) {
      const res = await t.call('GET', `${path}?${name}=${encodeURIComponent(value)}`);
      expect([200, 400], `${path} ${name}=${value}`).toContain(res.status);
      await expectDocumented(doc, 'GET', path, res);
      expect(
        paramTakes(doc, 'GET', path, 'query', name, value),
        `${path} ${name}=${value}: ${res.status}`,
      ).toBe(res.status === 200);
    }
  });

  it('Idempotency-Key: 1 to 255 characters', async () => {
    for (const key of ['', 'k', 'k'.repeat(255), 'k'.repeat(256)]) {
      const res = await t.call('POST', '/api/v1/tasks', VALID.task(), { 'Idempotency-Key': key });
      expect([201, 400], `key of ${key.length}`).toContain(res.status);
      if (res.status === 400) await expectProblem(res.clone(), 400, 'INVALID_IDEMPOTENCY_KEY');
      await expectDocumented(doc, 'POST', '/api/v1/tasks', res);
      expect(
        paramTakes(doc, 'POST', '/api/v1/tasks', 'header', 'Idempotency-Key', key),
        `key of ${key.length}`,
      ).toBe(res.status === 201);
    }
  });
});
