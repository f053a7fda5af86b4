// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${NAME} wildcards are literal request text.
import {
  AgentPatch,
  BatchCreate,
  PresetCreate,
  TaskCreate,
  WatchfolderCreate,
  WebhookCreate,
} from '@ffleet/shared';
import { beforeAll, describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { withoutNullOptionals } from '../../control-plane/src/api/null-as-absent.ts';
import { useTestApp } from '../helpers/app.ts';
import { createRandom, mutate, namesMutation } from './schema-mutator.ts';
import { countRows, errorPaths, expectProblem, insertAgent, json, UNKNOWN_ID, VALID } from './support.ts';

const MiB = 1024 * 1024;
/** Requests the generator sends; FFLEET_FUZZ_RUNS / FFLEET_FUZZ_SEED replay or widen a run. */
const RUNS = Number(process.env.FFLEET_FUZZ_RUNS ?? 5000);
const SEED = Number(process.env.FFLEET_FUZZ_SEED ?? 20240611);

/**
 * Input decisions these tests pin down:
 * - Unknown fields are a 422 that names the field (the create schemas are strict): a typo such as
 *   `inputfile` must not be dropped silently.
 * - On PUT, response-only fields a client echoes back from a GET (`id`, `uuid`, `createdAt`,
 *   `updatedAt`, and `hasSecret` / `assignedAgent`, `lastCheck`, `error` where the resource has them)
 *   are ignored, so read-modify-write clients work.
 * - Strings PostgreSQL cannot store (NUL, unpaired surrogates), `__proto__` keys and JSON nested
 *   deeper than 64 levels are a 422 too, never a 500 or a silent change.
 */
describe('hostile input', () => {
  let presetId = '';
  let watchfolderId = '';
  let webhookId = '';
  let agentId = '';

  const t = useTestApp();
  beforeAll(async () => {
    presetId = (await json(await t.call('POST', '/api/v1/presets', VALID.preset()), 201)).id;
    watchfolderId = (
      await json(await t.call('POST', '/api/v1/watchfolders', VALID.watchfolder(presetId)), 201)
    ).id;
    webhookId = (await json(await t.call('POST', '/api/v1/webhooks', VALID.webhook()), 201)).id;
    agentId = (await insertAgent(t.db, { name: 'fuzz-agent' })).id;
  }, 120_000);

  /** Maximal valid bodies: every optional field present, so every field can be mutated. */
  const seeds = () => {
    const task = {
      name: 'n',
      command: '-i ${INPUT_FILE} ${OUTPUT_FILE}',
      inputFile: '/in/a.mov',
      outputFile: '/out/a.mp4',
      priority: 1,
      metadata: { a: { b: [1] } },
      preProcessing: { scriptPath: '/bin/pre', sidecarPath: '/tmp/s.json', importSidecar: true },
      postProcessing: { scriptPath: '/bin/post', sidecarPath: '/tmp/p.json' },
      preset: presetId,
      webhooks: [{ event: 'task.updated', url: 'http://h.test/x' }],
      requires: ['gpu'],
    };
    const preset = {
      name: 'p',
      description: 'd',
      command: '-i a b',
      outputFile: '/out/x',
      priority: 2,
      preProcessing: { scriptPath: '/bin/pre', sidecarPath: '/tmp/s.json', importSidecar: false },
      postProcessing: { scriptPath: '/bin/post', sidecarPath: '/tmp/p.json' },
      webhooks: [{ event: 'preset.updated', url: 'https://h.test/p' }],
      requires: ['cpu'],
    };
    const watchfolder = {
      name: 'wf-seed',
      description: 'd',
      interval: 10,
      growthChecks: 2,
      preset: presetId,
      path: '/srv/in',
      suspended: false,
      filter: { extensions: { include: ['mov'], exclude: ['tmp'] } },
      agent: 'node-1',
    };
    const webhook = { event: 'task.created', url: 'http://h.test/w', secret: 's' };
    const agentPatch = { paused: true, labels: ['gpu'], slots: 3 };
    return { task, batch: { name: 'b', tasks: [task] }, preset, watchfolder, webhook, agentPatch };
  };

  type Target = { method: string; path: () => string; schema: z.ZodType; seed: () => unknown };
  const targets = (): Target[] => {
    const s = seeds();
    return [
      { method: 'POST', path: () => '/api/v1/tasks', schema: TaskCreate, seed: () => s.task },
      { method: 'POST', path: () => '/api/v1/batches', schema: BatchCreate, seed: () => s.batch },
      { method: 'POST', path: () => '/api/v1/presets', schema: PresetCreate, seed: () => s.preset },
      {
        method: 'PUT',
        path: () => `/api/v1/presets/${presetId}`,
        schema: PresetCreate,
        seed: () => s.preset,
      },
      {
        method: 'POST',
        path: () => '/api/v1/watchfolders',
        schema: WatchfolderCreate,
        seed: () => s.watchfolder,
      },
      {
        method: 'PUT',
        path: () => `/api/v1/watchfolders/${watchfolderId}`,
        schema: WatchfolderCreate,
        seed: () => s.watchfolder,
      },
      { method: 'POST', path: () => '/api/v1/webhooks', schema: WebhookCreate, seed: () => s.webhook },
      {
        method: 'PUT',
        path: () => `/api/v1/webhooks/${webhookId}`,
        schema: WebhookCreate,
        seed: () => s.webhook,
      },
      {
        method: 'PATCH',
        path: () => `/api/v1/agents/${agentId}`,
        schema: AgentPatch,
        seed: () => s.agentPatch,
      },
    ];
  };

  it('the seed bodies are valid, so every rejection below comes from a mutation', async () => {
    for (const target of targets()) {
      expect(target.schema.safeParse(target.seed()).success).toBe(true);
      const res = await t.call(target.method, target.path(), target.seed());
      const body = await json(res, target.method === 'POST' ? 201 : 200);
      // Watchfolder names are unique: remove the created one so the PUT seed (same name) fits too.
      if (target.method === 'POST' && target.path() === '/api/v1/watchfolders') {
        expect((await t.call('DELETE', `/api/v1/watchfolders/${body.id}`)).status).toBe(204);
      }
    }
  });

  it(`answers ${RUNS} schema-mutated bodies with a 4xx problem naming the field, writing nothing`, async () => {
    const rnd = createRandom(SEED);
    const all = targets();
    const before = await countRows(t.db);
    const statuses = new Map<number, number>();
    for (let i = 0; i < RUNS; i++) {
      const target = all[i % all.length]!;
      // Creates and replaces read a null on an optional field as the field left out; PATCH does not.
      const accepted = (body: unknown) =>
        target.method === 'PATCH' ? body : withoutNullOptionals(target.schema, body);
      let m = mutate(target.schema, target.seed(), rnd, accepted);
      while (!m) m = mutate(target.schema, target.seed(), rnd, accepted);
      const raw = JSON.stringify(m.body);
      const res = await t.call(target.method, target.path(), raw);
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      const where = `run ${i} (seed ${SEED}) ${target.method} ${target.path()} mutated ${m.mutated.join(', ')}: ${raw.slice(0, 500)}`;
      if (res.status !== 422 || !res.headers.get('content-type')?.startsWith('application/problem+json')) {
        // Oversized mutants (e.g. 1001 batch items) may cross the body limit instead.
        const tooBig = raw.length > MiB && res.status === 413;
        if (!tooBig) expect.fail(`${where} -> ${res.status} ${await res.text()}`);
        continue;
      }
      const problem = (await res.json()) as { code: string; errors?: { path: string }[] };
      expect(problem.code, where).toBe('VALIDATION_FAILED');
      const paths = (problem.errors ?? []).map((e) => e.path);
      expect(
        paths.some((p) => namesMutation(p, m.mutated)),
        `${where} -> errors at ${paths.join(', ')}`,
      ).toBe(true);
    }
    expect(await countRows(t.db)).toEqual(before);
    expect([...statuses.keys()].every((s) => s >= 400 && s < 500)).toBe(true);
  }, 300_000);

  it('rejects malformed and non-object JSON, wrong content types and empty bodies', async () => {
    const before = await countRows(t.db);
    const valid = JSON.stringify(VALID.task());
    for (let cut = 1; cut < valid.length; cut += 7) {
      await expectProblem(await t.call('POST', '/api/v1/tasks', valid.slice(0, cut)), 400, 'MALFORMED_JSON');
    }
    for (const body of ['{"a":1}{"b":2}', '{"command":"x"', 'NaN', '{"priority":01}', '\u0000']) {
      await expectProblem(await t.call('POST', '/api/v1/presets', body), 400, 'MALFORMED_JSON');
    }
    for (const body of ['[]', '[{"command":"x"}]', '"x"', '1', 'null', 'false']) {
      await expectProblem(await t.call('POST', '/api/v1/batches', body), 422, 'VALIDATION_FAILED');
    }
    await expectProblem(
      await t.app.request('/api/v1/webhooks', {
        method: 'POST',
        headers: { 'Content-Type': 'text/json' },
        body: valid,
      }),
      415,
    );
    expect(await countRows(t.db)).toEqual(before);
  });

  it('names unknown fields (422) and ignores echoed response-only fields on PUT', async () => {
    const cases: [string, string, object, string][] = [
      ['POST', '/api/v1/tasks', { command: '-i a b', inputfile: '/a' }, 'inputfile'],
      ['POST', '/api/v1/tasks', { command: '-i a b', id: UNKNOWN_ID }, 'id'],
      ['POST', '/api/v1/tasks', { command: '-i a b', status: 'DONE_SUCCESSFUL' }, 'status'],
      [
        'POST',
        '/api/v1/tasks',
        { command: '-i a b', preProcessing: { script: '/x' } },
        'preProcessing.script',
      ],
      ['POST', '/api/v1/batches', { tasks: [{ command: '-i a b', colour: 1 }] }, 'tasks.0.colour'],
      ['PUT', `/api/v1/presets/${presetId}`, { ...VALID.preset(), extra: true }, 'extra'],
      [
        'POST',
        '/api/v1/watchfolders',
        { ...VALID.watchfolder(presetId), filter: { include: ['mov'] } },
        'filter.include',
      ],
      ['POST', '/api/v1/webhooks', { ...VALID.webhook(), events: ['task.created'] }, 'events'],
      ['PATCH', `/api/v1/agents/${agentId}`, { paused: true, online: true }, 'online'],
    ];
    const before = await countRows(t.db);
    for (const [method, path, body, field] of cases) {
      const p = await expectProblem(await t.call(method, path, body), 422, 'VALIDATION_FAILED');
      expect(errorPaths(p), `${method} ${path}`).toContain(field);
    }
    expect(await countRows(t.db)).toEqual(before);
    const echoed = { id: UNKNOWN_ID, uuid: UNKNOWN_ID, createdAt: 1, updatedAt: 2 };
    const preset = await json(
      await t.call('PUT', `/api/v1/presets/${presetId}`, { ...VALID.preset(), ...echoed }),
    );
    expect(preset.id).toBe(presetId);
    expect(preset.createdAt).not.toBe(1);
    // The seed gave this webhook a secret; an echoed `hasSecret: false` neither removes it nor fails.
    const hook = await json(
      await t.call('PUT', `/api/v1/webhooks/${webhookId}`, {
        ...VALID.webhook(),
        ...echoed,
        hasSecret: false,
      }),
    );
    expect(hook).toMatchObject({ id: webhookId, hasSecret: true });
  });

  it('refuses text the database cannot store, __proto__ keys and deep nesting with 422', async () => {
    const before = await countRows(t.db);
    const nested = (n: number) => `{"command":"-i a b","metadata":{"a":${'['.repeat(n)}${']'.repeat(n)}}}`;
    const cases: [string, string, string, string][] = [
      ['POST', '/api/v1/tasks', JSON.stringify({ command: '-i a\u0000 b' }), 'command'],
      ['POST', '/api/v1/tasks', JSON.stringify({ command: '-i a b', name: 'x\ud800' }), 'name'],
      [
        'POST',
        '/api/v1/tasks',
        JSON.stringify({ command: '-i a b', metadata: { k: ['\udc00'] } }),
        'metadata.k.0',
      ],
      [
        'POST',
        '/api/v1/tasks',
        JSON.stringify({ command: '-i a b', metadata: { 'k\u0000': 1 } }),
        'metadata.k\u0000',
      ],
      [
        'POST',
        '/api/v1/tasks',
        '{"command":"-i a b","metadata":{"__proto__":{"polluted":1}}}',
        'metadata.__proto__',
      ],
      ['POST', '/api/v1/tasks', '{"command":"-i a b","__proto__":{"polluted":1}}', '__proto__'],
      ['POST', '/api/v1/presets', JSON.stringify({ name: 'a\u0000', command: '-i a b' }), 'name'],
      [
        'POST',
        '/api/v1/batches',
        JSON.stringify({ tasks: [{ command: '-i a b', inputFile: '/a\u0000' }] }),
        'tasks.0.inputFile',
      ],
      [
        'PUT',
        `/api/v1/watchfolders/${watchfolderId}`,
        JSON.stringify({ ...VALID.watchfolder(presetId), name: '\u0000' }),
        'name',
      ],
      ['PATCH', `/api/v1/agents/${agentId}`, JSON.stringify({ labels: ['a\u0000'] }), 'labels.0'],
    ];
    for (const [method, path, body, field] of cases) {
      const p = await expectProblem(await t.call(method, path, body), 422, 'VALIDATION_FAILED');
      expect(errorPaths(p), body).toContain(field);
    }
    await expectProblem(await t.call('POST', '/api/v1/tasks', nested(5000)), 422, 'VALIDATION_FAILED');
    await expectProblem(await t.call('POST', '/api/v1/tasks', nested(63)), 422, 'VALIDATION_FAILED');
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(await countRows(t.db)).toEqual(before);
    // 64 levels in all (body, metadata, then 62 arrays) is still accepted, and so is any emoji.
    await json(await t.call('POST', '/api/v1/tasks', nested(62)), 201);
    await json(await t.call('POST', '/api/v1/tasks', { command: '-i a b', name: '🎬 clip' }), 201);
  });

  it('answers hostile ids, queries and paths with 400/404, never a 500', async () => {
    const before = await countRows(t.db);
    const ids = [
      '%00',
      'a%00b',
      '%ED%A0%80',
      "'%20OR%201=1--",
      '..%2F..%2Fetc%2Fpasswd',
      'x'.repeat(2000),
      UNKNOWN_ID.toUpperCase(),
    ];
    for (const id of ids) {
      for (const base of [
        'tasks',
        'batches',
        'presets',
        'watchfolders',
        'webhooks',
        'webhooks/executions',
        'agents',
      ]) {
        const res = await t.call('GET', `/api/v1/${base}/${id}`);
        expect([404], `${base}/${id}`).toContain(res.status);
        await expectProblem(res, 404);
      }
      await expectProblem(await t.call('DELETE', `/api/v1/agents/${id}`), 404);
      await expectProblem(await t.call('PATCH', `/api/v1/agents/${id}`, { paused: true }), 404);
    }
    const queries = [
      'q=%00',
      'agent=%00',
      'status=%00',
      'batch=%00',
      'a%00=1',
      'q=%25%5F%5C',
      'page=1e400',
      'page=-0.5',
      'perPage=%20',
      'q=' + 'x'.repeat(201),
      'status=' + 'QUEUED,'.repeat(1000),
    ];
    for (const qs of queries) {
      const res = await t.call('GET', `/api/v1/tasks?${qs}`);
      expect(res.status, qs).toBeLessThan(500);
      if (res.status !== 200) await expectProblem(res, 400, 'INVALID_QUERY');
    }
    for (const qs of ['event=%00', 'webhook=%00', 'success=%00', 'task=%00']) {
      await expectProblem(await t.call('GET', `/api/v1/webhooks/executions?${qs}`), 400, 'INVALID_QUERY');
    }
    expect(await countRows(t.db)).toEqual(before);
  });

  it('rejects 1 MiB+ bodies with 413 on every write route and writes nothing', async () => {
    const before = await countRows(t.db);
    const big = JSON.stringify({ blob: 'x'.repeat(MiB) });
    const routes: [string, string][] = [
      ['POST', '/api/v1/tasks'],
      ['POST', '/api/v1/batches'],
      ['POST', '/api/v1/presets'],
      ['PUT', `/api/v1/presets/${presetId}`],
      ['POST', '/api/v1/watchfolders'],
      ['PUT', `/api/v1/watchfolders/${watchfolderId}`],
      ['POST', '/api/v1/webhooks'],
      ['PUT', `/api/v1/webhooks/${webhookId}`],
      ['PATCH', `/api/v1/agents/${agentId}`],
    ];
    for (const [method, path] of routes)
      await expectProblem(await t.call(method, path, big), 413, 'PAYLOAD_TOO_LARGE');
    expect(await countRows(t.db)).toEqual(before);
  });

  it('rejects relative paths and unknown preset ids without writing', async () => {
    const before = await countRows(t.db);
    for (const path of ['in', './in', '../in', '~/in', 'C:relative', '\\\\share\\in']) {
      const p = await expectProblem(
        await t.call('POST', '/api/v1/watchfolders', { ...VALID.watchfolder(presetId), path }),
        422,
      );
      expect(errorPaths(p), path).toEqual(['path']);
    }
    for (const preset of [UNKNOWN_ID, 'abc', '', ' ']) {
      await expectProblem(
        await t.call('POST', '/api/v1/watchfolders', { ...VALID.watchfolder(presetId), preset }),
        422,
      );
      await expectProblem(await t.call('POST', '/api/v1/tasks', { preset }), 422);
      await expectProblem(await t.call('POST', '/api/v1/batches', { tasks: [{ preset }] }), 422);
    }
    expect(await countRows(t.db)).toEqual(before);
  });
});
