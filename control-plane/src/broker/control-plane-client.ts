import { EventEmitter } from 'node:events';
import {
  AGENT_ID_RE,
  AGENTS_WILDCARD,
  AgentBirth,
  AgentHeartbeat,
  AgentHello,
  AgentRequest,
  type AgentTopicKind,
  agentPayloadLimit,
  agentTopic,
  type InboxMessage,
  parseAgentTopic,
  parseMessage,
  RESYNC_TOPIC,
  TaskReport,
  toStorable,
  WORK_TOPIC,
} from '@ffleet/shared';
import { connect, type ErrorWithReasonCode, type IClientOptions, type MqttClient } from 'mqtt';
import type { Logger } from 'pino';
import type { z } from 'zod';
import { databaseUnavailableReason } from '../db/errors.ts';
import type { LocalBrokerLink } from './embedded-broker.ts';

export interface ControlPlaneClientOptions {
  url: string;
  username: string;
  password: string;
  logger: Logger;
  /**
   * Defaults to `username`. Stable on purpose: the session is persistent, so reports agents publish
   * while the control plane restarts wait for it in the broker.
   */
  clientId?: string;
  /** How long start() waits for the first connection before giving up. */
  startTimeoutMs?: number;
  /**
   * The embedded broker of this process: use its local link (aedes' in-process subscriptions and
   * publishes) instead of an MQTT client connection; `url` then only names the broker in logs, and
   * `username` and `password` are not used (the control plane passes an empty password). See
   * EmbeddedBroker.localLink.
   */
  local?: LocalBrokerLink;
}

export type SendResult = { ok: true } | { ok: false; error: string };
export type StartResult = { ok: true } | { ok: false; error: string };

type Handler<A extends unknown[]> = (...args: A) => void | Promise<void>;
interface Handlers {
  birth: Handler<[agentId: string, birth: AgentBirth, retained: boolean]>[];
  hello: Handler<[agentId: string, hello: AgentHello]>[];
  heartbeat: Handler<[agentId: string, heartbeat: AgentHeartbeat]>[];
  request: Handler<[agentId: string, request: AgentRequest]>[];
  report: Handler<[agentId: string, report: TaskReport]>[];
}

const DEFAULT_START_TIMEOUT_MS = 15_000;
/** stop() never hangs on a dead broker longer than this. */
const STOP_TIMEOUT_MS = 2_000;
/**
 * One client, usually next to the broker: retry fast so that after a broker restart it is subscribed
 * again before most agents come back (their first backoff step is 125–250 ms) and replay into it.
 */
const RECONNECT_PERIOD_MS = 250;

/**
 * What the control plane subscribes to: each kind agents publish, but not their inboxes. The single
 * `agents/+/+` wildcard also matched the inbox topics, so every claim result and ack the control
 * plane sent (QoS 1) came straight back to it, to be acknowledged, parsed and dropped.
 */
const AGENT_SUBSCRIPTIONS = Object.fromEntries(
  (['status', 'hello', 'heartbeat', 'requests', 'events'] as const).map((kind) => [
    agentTopic('+', kind),
    { qos: 1 as const },
  ]),
);

/**
 * The control plane's MQTT client. Receives everything agents publish (parsed with the shared
 * schemas; what does not parse is logged and dropped) and sends inbox messages and work hints.
 * Emits `connection` (true/false) so the caller can reconcile after a broker restart.
 */
export class ControlPlaneClient extends EventEmitter<{ connection: [connected: boolean] }> {
  private readonly opts: ControlPlaneClientOptions;
  private readonly logger: Logger;
  private client: MqttClient | null = null;
  /** With a local link: ends its subscriptions. */
  private unsubscribeLocal: (() => Promise<void>) | null = null;
  private stopping: Promise<void> | null = null;
  private readonly handlers: Handlers = { birth: [], hello: [], heartbeat: [], request: [], report: [] };
  private isConnected = false;
  /** Only the first error of a streak is a warning: a down broker must not flood the log. */
  private errorLogged = false;

  constructor(opts: ControlPlaneClientOptions) {
    super();
    this.opts = opts;
    this.logger = opts.logger.child({ component: 'mqtt-cp' });
  }

  /** Retained births arrive with `retained = true` when (re)subscribing. */
  onBirth(h: Handlers['birth'][number]): void {
    this.handlers.birth.push(h);
  }
  onHello(h: Handlers['hello'][number]): void {
    this.handlers.hello.push(h);
  }
  onHeartbeat(h: Handlers['heartbeat'][number]): void {
    this.handlers.heartbeat.push(h);
  }
  onRequest(h: Handlers['request'][number]): void {
    this.handlers.request.push(h);
  }
  onReport(h: Handlers['report'][number]): void {
    this.handlers.report.push(h);
  }

  get connected(): boolean {
    return this.isConnected;
  }

  /**
   * Connect and subscribe to every agent topic. Resolves on the first successful connection, or with
   * an error (and the client closed) on refused credentials or when the broker stays unreachable.
   */
  async start(): Promise<StartResult> {
    if (this.client || this.unsubscribeLocal || this.stopping)
      throw new Error('ControlPlaneClient already started or stopped');
    if (this.opts.local) return this.startLocal(this.opts.local);
    const { url, username, password } = this.opts;
    const options: IClientOptions = {
      username,
      password,
      clientId: this.opts.clientId ?? username,
      clean: false,
      protocolVersion: 4,
      reconnectPeriod: RECONNECT_PERIOD_MS,
      // Keep retrying after a refusal once running (start() gives up on its own refusal).
      reconnectOnConnackError: true,
      connectTimeout: 10_000,
      // Subscriptions are renewed in the connect handler, which also covers a broker that lost them.
      resubscribe: false,
    };
    const client = connect(url, options);
    this.client = client;
    client.on('message', (topic, payload, packet) => this.dispatch(topic, payload, packet.retain));
    client.on('connect', () => {
      // Small packets must not wait for the previous one's ACK (Nagle + delayed ACK: up to 40 ms).
      (client.stream as { setNoDelay?: (on: boolean) => void }).setNoDelay?.(true);
      void this.onConnect(client);
    });
    client.on('close', () => this.setConnected(false));
    client.on('error', (err) => this.logError(err));

    const first = await new Promise<StartResult>((resolve) => {
      const timer = setTimeout(
        () =>
          resolve({
            ok: false,
            error: `MQTT broker at ${url} not reachable within ${this.startTimeoutMs()} ms`,
          }),
        this.startTimeoutMs(),
      );
      const onError = (err: Error) => {
        const code = (err as ErrorWithReasonCode).code;
        if (code === 4 || code === 5) {
          clearTimeout(timer);
          resolve({ ok: false, error: `MQTT broker at ${url} refused user "${username}": ${err.message}` });
        }
      };
      client.on('error', onError);
      this.once('connection', () => {
        clearTimeout(timer);
        client.off('error', onError);
        resolve({ ok: true });
      });
    });
    if (!first.ok) await this.stop();
    return first;
  }

  /** Subscribe on the embedded broker's local link; it cannot fail to connect. */
  private async startLocal(local: LocalBrokerLink): Promise<StartResult> {
    const topics = Object.keys(AGENT_SUBSCRIPTIONS);
    this.unsubscribeLocal = await local.subscribe(topics, (topic, payload, retained) =>
      this.dispatch(topic, payload, retained),
    );
    // Agents that connected before we subscribed announced themselves to nobody: ask them again.
    await local.publish(RESYNC_TOPIC, '{}', 1);
    void local.closed.then(() => {
      // The broker is gone, and its subscriptions with it.
      this.unsubscribeLocal = async () => {};
      this.setConnected(false);
    });
    this.logger.info({ url: this.opts.url }, 'attached to the embedded MQTT broker');
    this.setConnected(true);
    return { ok: true };
  }

  /**
   * Send one inbox message (QoS 1, never retained). Refused at once while disconnected; resolves on
   * PUBACK, which after a connection drop mid-send means after the reconnect re-sends it.
   */
  async sendInbox(agentId: string, message: InboxMessage): Promise<SendResult> {
    if (!AGENT_ID_RE.test(agentId))
      return { ok: false, error: `invalid agent id ${JSON.stringify(agentId)}` };
    return this.publish(agentTopic(agentId, 'inbox'), JSON.stringify(message), 1);
  }

  /** Tell every agent that claimable work exists (QoS 0; agents also poll, so a lost hint is cheap). */
  async broadcastWork(): Promise<SendResult> {
    return this.publish(WORK_TOPIC, '{}', 0);
  }

  /** Disconnect. Idempotent. */
  stop(): Promise<void> {
    if (!this.stopping) {
      const { client, unsubscribeLocal } = this;
      this.stopping = client ? closeClient(client) : (unsubscribeLocal?.() ?? Promise.resolve());
      this.stopping.then(() => this.setConnected(false));
    }
    return this.stopping;
  }

  private async publish(topic: string, payload: string, qos: 0 | 1): Promise<SendResult> {
    const { client, opts } = this;
    // Over MQTT, sendable as soon as the broker accepted the connection: what a persistent session
    // queued for us arrives before our SUBACK, and its answers (a claim's result) must not be dropped
    // for want of the subscription, which only concerns what we receive.
    const up = client ? client.connected : Boolean(opts.local) && this.isConnected;
    if (!up || this.stopping) return { ok: false, error: 'not connected to the broker' };
    try {
      if (client) await client.publishAsync(topic, payload, { qos, retain: false });
      else await opts.local!.publish(topic, payload, qos);
      return { ok: true };
    } catch (err) {
      return { ok: false, error: (err as Error).message };
    }
  }

  private async onConnect(client: MqttClient): Promise<void> {
    try {
      await client.subscribeAsync(AGENT_SUBSCRIPTIONS);
    } catch (err) {
      this.logger.error({ err: (err as Error).message }, 'subscribe to agent topics failed');
      return;
    }
    // A persistent session from an older version may still hold the wildcard (and deliver twice).
    client.unsubscribe(AGENTS_WILDCARD, () => {});
    this.errorLogged = false;
    // Agents that reconnected while we were away announced themselves to nobody: ask them again.
    client.publish(RESYNC_TOPIC, '{}', { qos: 1 });
    this.logger.info({ url: this.opts.url }, 'connected to MQTT broker');
    this.setConnected(true);
  }

  private logError(err: Error): void {
    const level = this.errorLogged ? 'debug' : 'warn';
    this.errorLogged = true;
    this.logger[level]({ url: this.opts.url, err: err.message }, 'MQTT connection error; retrying');
  }

  private setConnected(connected: boolean): void {
    if (this.isConnected === connected) return;
    this.isConnected = connected;
    if (!connected && !this.stopping) this.logger.warn('disconnected from MQTT broker');
    this.emit('connection', connected);
  }

  private dispatch(topic: string, payload: Buffer, retained: boolean): void {
    const parsed = parseAgentTopic(topic);
    // Our own inbox messages come back through the wildcard; they are not for us.
    if (parsed?.kind === 'inbox') return;
    if (!parsed || !AGENT_ID_RE.test(parsed.agentId)) {
      this.logger.warn({ topic }, 'dropped message on unexpected topic');
      return;
    }
    const { agentId, kind } = parsed;
    // An empty retained payload only clears a stale birth; there is nothing to hand on.
    if (kind === 'status' && payload.length === 0) return;
    // Before parsing it (an external broker has no limit per topic): only reports are large.
    if (payload.length > agentPayloadLimit(kind)) {
      this.logger.warn(
        { topic, agent: agentId, kind, bytes: payload.length, limit: agentPayloadLimit(kind) },
        'dropped agent message: payload too large for its topic',
      );
      return;
    }
    if (!this.deliver(agentId, kind, payload, retained)) {
      this.logger.warn(
        { topic, agent: agentId, kind, bytes: payload.length },
        'dropped malformed agent message',
      );
    }
  }

  /**
   * Parse by topic kind and hand to the handlers; false when the payload does not fit its schema.
   * Every string of an agent's message (keys too) reaches the handlers storable (toStorable): a NUL a
   * transcoder printed, or an unpaired surrogate in a sidecar's metadata, is U+FFFD from here on, so
   * no report, birth or request can fail its transaction for ever on text PostgreSQL refuses. JSON can
   * only carry those as `\u` escapes (a raw NUL is not JSON, and bytes that are not UTF-8 decode to
   * U+FFFD), so a payload without a `\u` is storable as it is and is not copied.
   */
  private deliver(agentId: string, kind: AgentTopicKind, payload: Buffer, retained: boolean): boolean {
    const escaped = payload.includes('\\u');
    const parse = <T>(schema: z.ZodType<T>): T | null => {
      const message = parseMessage(schema, payload);
      return message !== null && escaped ? toStorable(message) : message;
    };
    switch (kind) {
      case 'status': {
        const birth = parse(AgentBirth);
        if (birth) this.call(this.handlers.birth, agentId, [agentId, birth, retained]);
        return birth !== null;
      }
      case 'hello': {
        const hello = parse(AgentHello);
        if (hello) this.call(this.handlers.hello, agentId, [agentId, hello]);
        return hello !== null;
      }
      case 'heartbeat': {
        const hb = parse(AgentHeartbeat);
        if (hb) this.call(this.handlers.heartbeat, agentId, [agentId, hb]);
        return hb !== null;
      }
      case 'requests': {
        const req = parse(AgentRequest);
        if (req) this.call(this.handlers.request, agentId, [agentId, req]);
        return req !== null;
      }
      case 'events': {
        const report = parse(TaskReport);
        if (report) this.call(this.handlers.report, agentId, [agentId, report]);
        return report !== null;
      }
      case 'inbox':
        return true;
    }
  }

  /** Run handlers so that neither a throw nor a rejection can take the client down. */
  private call<A extends unknown[]>(handlers: Handler<A>[], agentId: string, args: A): void {
    for (const h of handlers) {
      try {
        const r = h(...args);
        if (r instanceof Promise) r.catch((err: unknown) => this.logHandlerError(agentId, err));
      } catch (err) {
        this.logHandlerError(agentId, err);
      }
    }
  }

  private logHandlerError(agentId: string, err: unknown): void {
    // The fleet logs a database outage once; each message it fails meanwhile is not news.
    const unavailable = databaseUnavailableReason(err);
    if (unavailable) {
      this.logger.debug(
        { agent: agentId, reason: unavailable },
        'handler failed: the database is unavailable',
      );
      return;
    }
    this.logger.error(
      { agent: agentId, err: err instanceof Error ? err.message : String(err) },
      'handler failed',
    );
  }

  private startTimeoutMs(): number {
    return this.opts.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS;
  }
}

/** mqtt.js' graceful end waits for unacked publishes forever when the broker is gone; bound it. */
async function closeClient(client: MqttClient): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const graceful = client.endAsync(!client.connected).then(
    () => true,
    () => true,
  );
  const timedOut = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), STOP_TIMEOUT_MS);
  });
  const done = await Promise.race([graceful, timedOut]);
  clearTimeout(timer);
  // A second end() is a no-op while the first is pending, so drop the socket directly.
  if (!done) client.stream?.destroy();
}
