import { randomUUID } from 'node:crypto';
import type { EventPayload } from '@ffleet/shared';
import { asc, eq } from 'drizzle-orm';
import pino from 'pino';
import type { Database, Db } from '../../control-plane/src/db/client.ts';
import { deliveries, webhookExecutions, webhooks } from '../../control-plane/src/db/schema.ts';
import { type EmitOptions, EmittedEvents } from '../../control-plane/src/events/outbox.ts';
import { VERSION } from '../../control-plane/src/version.ts';
import {
  DeliveryDispatcher,
  type DeliveryDispatcherOptions,
} from '../../control-plane/src/webhooks/delivery-dispatcher.ts';

export { dbKinds } from '../helpers/db-kinds.ts';

export const silent = pino({ level: 'silent' });
export const USER_AGENT = `ffleet/${VERSION}`;

/** A global webhook row, as createWebhook() writes it. */
export async function addWebhook(
  database: Database,
  w: { event: string; url: string; secret?: string | null },
): Promise<string> {
  const id = randomUUID();
  const now = Date.now();
  await database.db
    .insert(webhooks)
    .values({ id, event: w.event, url: w.url, secret: w.secret ?? null, createdAt: now, updatedAt: now });
  return id;
}

/** Emit one event in its own committed transaction (the outbox write the app does). */
export function emit(database: Database, opts: EmitOptions): Promise<EventPayload> {
  return database.db.transaction((tx) => new EmittedEvents(tx as unknown as Db).emit(opts));
}

/** A task.updated event body as the app shapes it (enough for the dispatcher, which never looks inside). */
export const taskData = (taskId: string, status: string, progress = 0) => ({
  taskId,
  inputFile: '/in.mov',
  outputFile: '/out.mp4',
  status,
  progress,
});

export function newDispatcher(database: Database, opts: Partial<DeliveryDispatcherOptions> = {}) {
  return new DeliveryDispatcher({
    database,
    logger: silent,
    timeoutMs: 10_000,
    userAgent: USER_AGENT,
    ...opts,
  });
}

export const listDeliveries = (database: Database) =>
  database.db.select().from(deliveries).orderBy(asc(deliveries.createdAt), asc(deliveries.id));

export const listExecutions = (database: Database, deliveryId?: string) =>
  database.db
    .select()
    .from(webhookExecutions)
    .where(deliveryId ? eq(webhookExecutions.deliveryId, deliveryId) : undefined)
    .orderBy(asc(webhookExecutions.createdAt), asc(webhookExecutions.attempt));

/** Wait until exactly `count` executions are recorded (then return them, oldest first). */
export async function waitForExecutions(database: Database, count: number, timeoutMs = 10_000) {
  return waitUntil(async () => {
    const e = await listExecutions(database);
    return e.length >= count && e;
  }, timeoutMs);
}

/** Poll `check` until it returns a truthy value. */
export async function waitUntil<T>(
  check: () => Promise<T> | T,
  timeoutMs = 10_000,
  stepMs = 20,
): Promise<Exclude<T, false | null | undefined | 0 | ''>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v) return v as Exclude<T, false | null | undefined | 0 | ''>;
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Cleanups that run in reverse order of registration when the test finishes (dispatcher before database). */
export function deferStack(onTestFinished: (fn: () => Promise<void>) => void): (fn: () => unknown) => void {
  const stack: (() => unknown)[] = [];
  onTestFinished(async () => {
    for (const fn of stack.reverse()) await fn();
  });
  return (fn) => {
    stack.push(fn);
  };
}
