/** Test support: an MQTT client stand-in through which a test plays the agents' side of a Fleet. */
import { EventEmitter } from 'node:events';
import type {
  AgentBirth,
  AgentHeartbeat,
  AgentHello,
  AgentRequest,
  InboxMessage,
  TaskReport,
} from '@ffleet/shared';
import { afterEach } from 'vitest';
import { openTestDatabase } from '../../../test/helpers/db.ts';
import type { ControlPlaneClient, SendResult } from '../broker/control-plane-client.ts';
import { captureLogger } from '../broker/test-brokers.ts';
import type { Database } from '../db/client.ts';
import { EventBus } from '../events/event-bus.ts';
import { noFleet, type ServiceContext } from '../services/context.ts';
import { Fleet, type FleetOptions } from './fleet.ts';

type Handler<A extends unknown[]> = (...args: A) => void | Promise<void>;

/** Stands for the MQTT client: the test delivers agent messages and sees what the fleet sends. */
export class FakeMqtt extends EventEmitter<{ connection: [connected: boolean] }> {
  readonly connected = true;
  readonly sent: Array<{ agent: string; message: InboxMessage }> = [];
  readonly #births: Handler<[string, AgentBirth, boolean]>[] = [];
  readonly #hellos: Handler<[string, AgentHello]>[] = [];
  readonly #heartbeats: Handler<[string, AgentHeartbeat]>[] = [];
  readonly #requests: Handler<[string, AgentRequest]>[] = [];
  readonly #reports: Handler<[string, TaskReport]>[] = [];

  onBirth(h: Handler<[string, AgentBirth, boolean]>): void {
    this.#births.push(h);
  }
  onHello(h: Handler<[string, AgentHello]>): void {
    this.#hellos.push(h);
  }
  onHeartbeat(h: Handler<[string, AgentHeartbeat]>): void {
    this.#heartbeats.push(h);
  }
  onRequest(h: Handler<[string, AgentRequest]>): void {
    this.#requests.push(h);
  }
  onReport(h: Handler<[string, TaskReport]>): void {
    this.#reports.push(h);
  }
  async sendInbox(agent: string, message: InboxMessage): Promise<SendResult> {
    this.sent.push({ agent, message });
    return { ok: true };
  }
  async broadcastWork(): Promise<SendResult> {
    return { ok: true };
  }

  // Deliveries resolve when the fleet's handlers did, and reject when one failed (which the real
  // client logs at error level as "handler failed", or at debug when the database is unavailable).
  birth(agent: string, birth: AgentBirth): Promise<void> {
    return all(this.#births.map((h) => h(agent, birth, false)));
  }
  hello(agent: string, hello: AgentHello): Promise<void> {
    return all(this.#hellos.map((h) => h(agent, hello)));
  }
  heartbeat(agent: string, hb: AgentHeartbeat): Promise<void> {
    return all(this.#heartbeats.map((h) => h(agent, hb)));
  }
  request(agent: string, req: AgentRequest): Promise<void> {
    return all(this.#requests.map((h) => h(agent, req)));
  }
  report(agent: string, report: TaskReport): Promise<void> {
    return all(this.#reports.map((h) => h(agent, report)));
  }
}

const all = (results: Array<void | Promise<void>>) => Promise.all(results).then(() => undefined);

/** A started Fleet on `database`, hearing the agents a test plays through `mqtt`; stop it when done. */
export async function startTestFleet(
  database: Database,
  opts: Partial<
    Pick<FleetOptions, 'leaseTtlMs' | 'stopWaitMs' | 'silentAfterMs' | 'helloGraceMs' | 'unheardAfterMs'>
  > = {},
) {
  const { logger, records } = captureLogger();
  const mqtt = new FakeMqtt();
  const ctx: ServiceContext = {
    database,
    bus: new EventBus(),
    logger,
    fleet: noFleet,
    now: () => Date.now(),
  };
  const fleet = new Fleet({
    ctx,
    mqtt: mqtt as unknown as ControlPlaneClient,
    logger,
    leaseTtlMs: 30_000,
    ...opts,
  });
  ctx.fleet = fleet;
  await fleet.start();
  return { fleet, mqtt, ctx, records };
}

/**
 * For a describe block: `start()` opens a test database and a Fleet on it, connected (it hears the
 * agents); both are stopped and dropped after each test.
 */
export function useTestFleets() {
  const cleanups: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });
  return async (opts: Parameters<typeof startTestFleet>[1] = {}) => {
    const database = await openTestDatabase();
    cleanups.push(() => database.drop());
    const t = await startTestFleet(database, opts);
    cleanups.push(() => t.fleet.stop());
    t.mqtt.emit('connection', true);
    return { ...t, database };
  };
}
