import pino from 'pino';
import { createApp } from '../../control-plane/src/api/app.ts';
import { NotFoundError } from '../../control-plane/src/api/errors.ts';
import { createMetrics } from '../../control-plane/src/api/metrics.ts';
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

export async function createTestApp(
  opts: { kind?: DbKind; apiTokens?: string[]; remote?: string; fleet?: FleetHooks; bodyLimit?: number } = {},
): Promise<TestApp> {
  const db = await openTestDatabase(opts.kind);
  const bus = new EventBus();
  const logger = pino({ level: 'silent' });
  const ctx: ServiceContext = {
    database: db,
    bus,
    logger,
    fleet: opts.fleet ?? noFleet,
    now: () => Date.now(),
  };
  const app = createApp({
    ctx,
    bus,
    metrics: createMetrics(db),
    version: VERSION,
    apiTokens: opts.apiTokens ?? [],
    bodyLimit: opts.bodyLimit ?? 1024 * 1024,
    redeliver: testRedeliver(db),
    remoteAddress: () => opts.remote ?? '127.0.0.1',
  });
  return {
    app,
    ctx,
    db,
    bus,
    call: (method, path, body, headers = {}) =>
      Promise.resolve(
        app.request(path, {
          method,
          headers: body === undefined ? headers : { 'Content-Type': 'application/json', ...headers },
          body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
        }),
      ),
    close: () => db.drop(),
  };
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
  return async (id: string) => {
    const r = await dispatcher.redeliver(id);
    if (!r.ok) throw new NotFoundError('execution', id);
    return r.delivery;
  };
}
