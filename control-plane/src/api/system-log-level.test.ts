import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pino, { type Logger } from 'pino';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { errorPaths, expectProblem, json } from '../../../test/api/support.ts';
import { type TestApp, testAppOn } from '../../../test/helpers/app.ts';
import { openTestDatabase, type TestDatabase } from '../../../test/helpers/db.ts';
import { parseConfig } from '../config/config.ts';
import { type RunningControlPlane, startControlPlane } from '../control-plane.ts';

type LogRecord = { level: number; msg: string; [field: string]: unknown };

/** A root logger (as `makeLogger` builds it, at `level`) whose records land in an array. */
function captureLogger(level: string, onChild?: (child: Logger) => void) {
  const records: LogRecord[] = [];
  const stream = new Writable({
    write(chunk, _enc, cb) {
      records.push(JSON.parse(String(chunk)) as LogRecord);
      cb();
    },
  });
  return { logger: pino({ level, ...(onChild ? { onChild } : {}) }, stream), records };
}

const TOKEN = 'log-level-test-token-0123456789abcdef';
const AUTH = { Authorization: `Bearer ${TOKEN}` };
const CHANGED = 'log level changed through the API';
const PATH = '/api/v1/system/log-level';

describe('runtime log level (GET/PUT /api/v1/system/log-level)', () => {
  let db: TestDatabase;
  let logger: Logger;
  let records: LogRecord[];
  let call: TestApp['call'];
  const changes = () => records.filter((r) => r.msg === CHANGED);

  beforeAll(async () => {
    db = await openTestDatabase();
    ({ logger, records } = captureLogger('info'));
    ({ call } = testAppOn(db, { logger, apiTokens: [TOKEN], remote: '203.0.113.7' }));
  });
  afterAll(() => db?.drop());
  beforeEach(() => {
    logger.level = 'info'; // what LOG_LEVEL set at start
    records.length = 0;
  });

  it('GET answers the level the control plane runs at', async () => {
    expect(await json(await call('GET', PATH, undefined, AUTH))).toEqual({ level: 'info' });
    logger.level = 'trace';
    expect(await json(await call('GET', PATH, undefined, AUTH))).toEqual({ level: 'trace' });
  });

  it('PUT changes it at once for every logger derived from the root (before and after) and says so at warn', async () => {
    const component = logger.child({ component: 'fleet' });
    const perTask = component.child({ taskId: 't1', attempt: 1 });
    component.debug('not yet');
    const res = await call('PUT', PATH, { level: 'debug' }, { ...AUTH, 'User-Agent': 'ops-script/1.0' });
    expect(await json(res)).toEqual({ level: 'debug' });
    expect(await json(await call('GET', PATH, undefined, AUTH))).toEqual({ level: 'debug' });

    component.debug('component');
    perTask.debug('per task');
    perTask.trace('too fine');
    logger.child({ component: 'made-later' }).debug('made later');
    expect(records.filter((r) => r.level === 20).map((r) => r.msg)).toEqual([
      'component',
      'per task',
      'made later',
    ]);

    // One line: who (request, client address, user agent) and from → to; never the token.
    expect(changes()).toEqual([
      expect.objectContaining({
        level: 40,
        from: 'info',
        to: 'debug',
        requestId: res.headers.get('x-request-id'),
        remote: '203.0.113.7',
        userAgent: 'ops-script/1.0',
      }),
    ]);
    expect(JSON.stringify(records)).not.toContain(TOKEN);
  });

  it('a change to a level that drops warnings is still logged (before it), one back from it too (after it)', async () => {
    const component = logger.child({ component: 'broker' });
    expect(await json(await call('PUT', PATH, { level: 'silent' }, AUTH))).toEqual({ level: 'silent' });
    component.error('dropped');
    logger.fatal('dropped too');
    expect(await json(await call('PUT', PATH, { level: 'error' }, AUTH))).toEqual({ level: 'error' });
    expect(await json(await call('PUT', PATH, { level: 'warn' }, AUTH))).toEqual({ level: 'warn' });
    component.info('dropped as well');
    component.warn('kept');
    expect(changes().map((r) => [r.from, r.to])).toEqual([
      ['info', 'silent'],
      ['error', 'warn'],
    ]);
    expect(records.map((r) => r.msg)).toEqual([CHANGED, CHANGED, 'kept']);
  });

  it('a level pino does not have is 422 naming the field and the allowed levels; the level stays', async () => {
    const allowed = 'must be one of: fatal, error, warn, info, debug, trace, silent';
    for (const level of ['verbose', 'DEBUG', '', 10, null]) {
      const p = await expectProblem(await call('PUT', PATH, { level }, AUTH), 422, 'VALIDATION_FAILED');
      expect(p.errors, JSON.stringify(level)).toEqual([{ path: 'level', message: allowed }]);
    }
    const missing = await expectProblem(await call('PUT', PATH, {}, AUTH), 422, 'VALIDATION_FAILED');
    expect(missing.errors).toEqual([{ path: 'level', message: allowed }]);
    const extra = await expectProblem(
      await call('PUT', PATH, { level: 'debug', namespace: 'ffmate:*' }, AUTH),
      422,
      'VALIDATION_FAILED',
    );
    expect(errorPaths(extra)).toEqual(['namespace']);
    await expectProblem(await call('PUT', PATH, '{"level":', AUTH), 400, 'MALFORMED_JSON');
    await expectProblem(
      await call('PUT', PATH, undefined, { ...AUTH, 'Content-Type': 'text/plain' }),
      415,
      'UNSUPPORTED_MEDIA_TYPE',
    );
    expect(logger.level).toBe('info');
    expect(await json(await call('GET', PATH, undefined, AUTH))).toEqual({ level: 'info' });
    expect(changes()).toEqual([]);
  });

  it('needs an API token like every other route', async () => {
    await expectProblem(await call('GET', PATH), 401, 'UNAUTHORIZED');
    await expectProblem(await call('PUT', PATH, { level: 'trace' }), 401, 'UNAUTHORIZED');
    await expectProblem(
      await call('PUT', PATH, { level: 'trace' }, { Authorization: 'Bearer not-the-token' }),
      401,
      'UNAUTHORIZED',
    );
    expect(logger.level).toBe('info');
    expect(changes()).toEqual([]);
    expect(await json(await call('GET', PATH, undefined, AUTH))).toEqual({ level: 'info' });
  });
});

describe('runtime log level in a running control plane', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'ffleet-log-level-'));
  const derived: Logger[] = [];
  let cp: RunningControlPlane | undefined;

  beforeAll(async () => {
    // Every logger derived from the root, at any depth (a child inherits the root's onChild).
    const { logger } = captureLogger('info', (child) => derived.push(child));
    const env = {
      FFLEET_DATA_DIR: dataDir,
      HOST: '127.0.0.1',
      PORT: '0',
      MQTT_PORT: '0',
      FFLEET_API_TOKENS: TOKEN,
      LOG_LEVEL: 'info',
    };
    cp = await startControlPlane(parseConfig(env), logger);
  }, 120_000);
  afterAll(async () => {
    await cp?.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it("every component's logger follows a PUT over HTTP", async () => {
    const components = derived.map((l) => l.bindings().component);
    for (const c of ['fleet', 'broker', 'mqtt-cp', 'webhook-dispatcher', 'pglite-checkpointer'])
      expect(components).toContain(c);
    expect(derived.filter((l) => l.isLevelEnabled('debug')).map((l) => l.bindings())).toEqual([]);
    const url = `http://127.0.0.1:${cp!.httpPort}${PATH}`;
    const res = await fetch(url, {
      method: 'PUT',
      headers: { ...AUTH, 'Content-Type': 'application/json' },
      body: JSON.stringify({ level: 'debug' }),
    });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ level: 'debug' });
    const off = derived.filter((l) => l.level !== 'debug' || !l.isLevelEnabled('debug'));
    expect(off.map((l) => l.bindings())).toEqual([]);
    expect(cp!.ctx.logger.level).toBe('debug');
  });
});
