import { EventName } from '@ffleet/shared';
import pino, { type Logger } from 'pino';
import { afterAll, beforeAll } from 'vitest';
import { createApp } from '../../control-plane/src/api/app.ts';
import type { CorsPolicy } from '../../control-plane/src/api/cors.ts';
import { createMetrics } from '../../control-plane/src/api/metrics.ts';
import { redeliverThrough } from '../../control-plane/src/api/webhooks.ts';
import type { Database } from '../../control-plane/src/db/client.ts';
import { EventBus } from '../../control-plane/src/events/event-bus.ts';
import { type FleetHooks, noFleet, type ServiceContext } from '../../control-plane/src/services/context.ts';
import { VERSION } from '../../control-plane/src/version.ts';
import { DeliveryDispatcher } from '../../control-plane/src/webhooks/delivery-dispatcher.ts';
import { type DbKind, openTestDatabase, type TestDatabase } from './db.ts';

export type TestApp = {
  app: ReturnType<typeof createApp>;
  ctx: ServiceContext;
  db: TestDatabase;
  bus: EventBus;
  /** JSON request helper: `call('POST', '/api/v1/tasks', body)`. */
  call(method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<Response>;
  close(): Promise<void>;
};

export type TestAppOptions = {
  kind?: DbKind;
  apiTokens?: string[];
  remote?: string;
  fleet?: FleetHooks;
  bodyLimit?: number;
  /** Cross-origin access (FFLEET_CORS_ORIGINS); none by default. */
  cors?: CorsPolicy;
  /**
   * A global webhook for every event (to a URL nothing serves; the test app runs no dispatcher), so
   * every emitted event is stored with its delivery and tests can read it from the events table. An
   * event no webhook receives is published on the bus only (eventsStatement).
   */
  receiveAllEvents?: boolean;
};

/** The API and its service context (logging off unless `logger`) on a database the caller opened and closes. */
export function testAppOn(
  db: Database,
  opts: Omit<TestAppOptions, 'kind' | 'receiveAllEvents'> & { logger?: Logger } = {},
): Pick<TestApp, 'app' | 'ctx' | 'bus' | 'call'> {
  const bus = new EventBus();
  const ctx: ServiceContext = {
    database: db,
    bus,
    logger: opts.logger ?? pino({ level: 'silent' }),
    fleet: opts.fleet ?? noFleet,
    now: () => Date.now(),
  };
  const { app, call } = buildApp(ctx, bus, db, {
    apiTokens: opts.apiTokens,
    bodyLimit: opts.bodyLimit,
    cors: opts.cors,
    remote: () => opts.remote ?? '127.0.0.1',
  });
  return { app, ctx, bus, call };
}

export async function createTestApp(opts: TestAppOptions = {}): Promise<TestApp> {
  const db = await openTestDatabase(opts.kind);
  const { app, ctx, bus, call } = testAppOn(db, opts);
  if (opts.receiveAllEvents) {
    for (const event of EventName.options) {
      const res = await call('POST', '/api/v1/webhooks', { event, url: `http://events.test/${event}` });
      if (res.status !== 201) throw new Error(`webhook for ${event}: ${res.status} ${await res.text()}`);
    }
  }
  return { app, ctx, db, bus, call, close: () => db.drop() };
}

/**
 * The app of a test file: one fresh database made before its tests (beforeAll) and dropped after them
 * (afterAll). The object stands for that app inside tests and hooks; touching it outside them (at
 * collection time, before beforeAll ran) throws.
 */
export function useTestApp(opts: TestAppOptions = {}): TestApp {
  let current: TestApp | undefined;
  const app = (): TestApp => {
    if (!current) throw new Error('useTestApp: the app exists only inside tests and hooks');
    return current;
  };
  beforeAll(async () => {
    current = await createTestApp(opts);
  });
  afterAll(() => current?.close());
  return {
    get app() {
      return app().app;
    },
    get ctx() {
      return app().ctx;
    },
    get db() {
      return app().db;
    },
    get bus() {
      return app().bus;
    },
    call: (...args) => app().call(...args),
    close: () => app().close(),
  };
}

/**
 * An app over the given services with the JSON `call` helper; `createTestApp` and `appVariant` (more
 * apps over one database) both build theirs here.
 */
export function buildApp(
  ctx: ServiceContext,
  bus: EventBus,
  db: Database,
  opts: { apiTokens?: string[]; remote?: () => string; bodyLimit?: number; cors?: CorsPolicy },
): { app: ReturnType<typeof createApp>; call: TestApp['call'] } {
  const app = createApp({
    ctx,
    bus,
    metrics: createMetrics(db, bus),
    version: VERSION,
    apiTokens: opts.apiTokens ?? [],
    cors: opts.cors,
    bodyLimit: opts.bodyLimit ?? 1024 * 1024,
    redeliver: testRedeliver(db),
    remoteAddress: opts.remote ?? (() => '127.0.0.1'),
  });
  const call: TestApp['call'] = (method, path, body, headers = {}) =>
    Promise.resolve(
      app.request(path, {
        method,
        headers: body === undefined ? headers : { 'Content-Type': 'application/json', ...headers },
        body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
      }),
    );
  return { app, call };
}

/**
 * The real redelivery path of a (not started) dispatcher: it queues a new delivery row, which is what
 * the route promises; HTTP tests need no sending.
 */
export function testRedeliver(database: Database) {
  const dispatcher = new DeliveryDispatcher({
    database,
    logger: pino({ level: 'silent' }),
    timeoutMs: 1000,
    userAgent: `ffleet/${VERSION}`,
  });
  return redeliverThrough(dispatcher);
}
