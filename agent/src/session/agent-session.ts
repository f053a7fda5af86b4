import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import {
  AGENT_ID_RE,
  type AgentBirth,
  type AgentHeartbeat,
  type AgentHello,
  type AgentRequest,
  agentTopic,
  InboxMessage,
  MQTT_MAX_PAYLOAD_BYTES,
  parseMessage,
  RESYNC_TOPIC,
  type RunningTask,
  type TaskReport,
  WORK_TOPIC,
} from '@ffleet/shared';
import { connect, type ErrorWithReasonCode, ErrorWithSubackPacket, type MqttClient } from 'mqtt';
import type { Logger } from 'pino';
import type { Outbox, PutResult } from '../outbox/outbox.ts';
import { OutboxPublisher } from './outbox-publisher.ts';
import { slimOversizedReport } from './oversized-report.ts';
import { type BackoffOptions, computeBackoffMs, DEFAULT_BACKOFF } from './reconnect-backoff.ts';
import { type AwaitResult, RequestWaiters } from './request-waiters.ts';
import { urlForLogs } from './url-for-logs.ts';

/** What the agent announces about itself; the session adds name, state, bootId and ts. */
export type BirthInfo = Omit<AgentBirth, 'state' | 'bootId' | 'ts' | 'name'>;

export interface AgentSessionOptions {
  url: string;
  /** Agent id: MQTT client id, username and topic level (must match AGENT_ID_RE). */
  name: string;
  token: string;
  birth: () => BirthInfo;
  running: () => RunningTask[];
  freeSlots: () => number;
  heartbeatMs: number;
  outbox: Outbox;
  /** Bound to the agent by the caller; the session adds `component: "session"`. */
  logger: Logger;
  backoff?: BackoffOptions;
  /** Unacked outbox entries are sent again after this long (covers a lost ack); 0 = only on reconnect. */
  resendAfterMs?: number;
  keepaliveSec?: number;
  /** Defaults to a random UUID per session object (i.e. per process boot). */
  bootId?: string;
  /** The boot id of the agent process before this one on this data dir (hello's previousBootId). */
  previousBootId?: string;
}

export type SessionEvents = {
  inbox: [message: InboxMessage];
  work: [];
  connection: [connected: boolean];
  /** The broker answered a connect with "bad user name or password" / "not authorized" (each time). */
  refused: [code: number];
};

export type SendResult = { ok: true } | { ok: false; error: string };

/**
 * Acks normally follow within milliseconds; this only matters when one was lost (control plane
 * crashed before its commit, or it had not resubscribed yet when we replayed after a broker restart).
 */
/** On a resync broadcast, unacknowledged entries older than this are sent again. */
const RESYNC_RESEND_OLDER_THAN_MS = 1_000;
const DEFAULT_RESEND_AFTER_MS = 10_000;
const DEFAULT_KEEPALIVE_SEC = 30;
/** stop() never hangs on a dead broker longer than this. */
const STOP_FLUSH_TIMEOUT_MS = 2_000;

/**
 * The agent's MQTT session: persistent session, retained birth + Last Will, hello and outbox replay on
 * every connect, heartbeats, inbox dispatch, and reconnects with exponential backoff and jitter.
 * Reports and durable requests go to the outbox first and leave it only when the control plane acks
 * them; they are published in call order, after any replay of older entries.
 */
/** A report's key in the outbox, which its `ack` names: one per (task, attempt, seq). */
export const reportKey = (r: { taskId: string; attempt: number; seq: number }): string =>
  `${r.taskId}:${r.attempt}:${r.seq}`;

export class AgentSession extends EventEmitter<SessionEvents> {
  readonly bootId: string;
  /** The broker URL without credentials, for logs. */
  private readonly shownUrl: string;
  private readonly opts: AgentSessionOptions;
  private readonly logger: Logger;
  private readonly waiters = new RequestWaiters();
  private client: MqttClient | null = null;
  /** True once subscriptions, birth, hello and replay of this connection are done. */
  private ready = false;
  private generation = 0;
  private attempt = 0;
  private failureLogged: 'auth' | 'network' | null = null;
  private readonly sender: OutboxPublisher;
  private timers: { heartbeat?: NodeJS.Timeout; resend?: NodeJS.Timeout; reconnect?: NodeJS.Timeout } = {};
  private stopping: Promise<void> | null = null;

  constructor(opts: AgentSessionOptions) {
    super();
    if (!AGENT_ID_RE.test(opts.name)) throw new Error(`invalid agent name ${JSON.stringify(opts.name)}`);
    this.opts = opts;
    this.bootId = opts.bootId ?? randomUUID();
    this.shownUrl = urlForLogs(opts.url);
    this.logger = opts.logger.child({ component: 'session' });
    this.sender = new OutboxPublisher({
      outbox: opts.outbox,
      logger: this.logger,
      publish: (topic, payload, key) =>
        this.client?.publish(topic, payload, { qos: 1 }, (err) => {
          if (err)
            this.logger.debug({ key, err: err.message }, 'publish not acknowledged; stays in the outbox');
        }),
    });
  }

  get connected(): boolean {
    return this.ready;
  }

  /** Begin connecting (and keep reconnecting); `connection` events report the state. */
  start(): void {
    if (this.client || this.stopping) throw new Error('AgentSession already started');
    const { url, name, token } = this.opts;
    const client = connect(url, {
      clientId: name,
      username: name,
      password: token,
      clean: false,
      protocolVersion: 4,
      keepalive: this.opts.keepaliveSec ?? DEFAULT_KEEPALIVE_SEC,
      connectTimeout: 10_000,
      // Reconnects are ours (backoff + jitter); mqtt.js would retry at a fixed period.
      reconnectPeriod: 0,
      resubscribe: false,
      // mqtt-packet's default number cache is 65,536 two-byte Buffers (~6.5 MB of heap, a tenth of
      // the agent's RSS) for packet ids and lengths; encoding them per packet costs nothing measurable.
      writeCache: false,
      will: {
        topic: this.topic('status'),
        payload: Buffer.from(this.birthJson('offline')),
        qos: 1,
        retain: true,
      },
    });
    this.client = client;
    client.on('connect', () => {
      // Small packets must not wait for the previous one's ACK (Nagle + delayed ACK: up to 40 ms).
      (client.stream as { setNoDelay?: (on: boolean) => void }).setNoDelay?.(true);
      this.onConnect(client, ++this.generation).catch((err: unknown) =>
        this.logger.error({ err }, 'handling the connection failed'),
      );
    });
    client.on('close', () => this.onClose());
    client.on('error', (err) => this.onError(err));
    client.on('message', (topic, payload) => this.onMessage(topic, payload));
    this.timers.heartbeat = setInterval(() => this.sendHeartbeat(), this.opts.heartbeatMs);
    const resendMs = this.opts.resendAfterMs ?? DEFAULT_RESEND_AFTER_MS;
    if (resendMs > 0) this.timers.resend = setInterval(() => this.resendStale(resendMs), resendMs);
  }

  /**
   * Store a task report in the outbox and publish it; `ok: false` means it is not on disk (held in memory
   * and resent until acknowledged, see OutboxPublisher.send).
   */
  publishReport(report: TaskReport): Promise<PutResult> {
    let payload = JSON.stringify(report);
    const slim = slimOversizedReport(report, payload);
    if (slim) {
      const { taskId, attempt, seq } = report;
      this.logger.error(
        { taskId, attempt, seq, bytes: Buffer.byteLength(payload), limit: MQTT_MAX_PAYLOAD_BYTES },
        'a task report is larger than the broker takes: sending it without its output and large fields',
      );
      payload = JSON.stringify(slim);
    }
    return this.sender.send(reportKey(report), this.topic('events'), payload);
  }

  /**
   * Send a request. Durable ones (e.g. `watch.file`) survive outages in the outbox until their
   * `request.result`; others (e.g. `claim`, retried on a timer anyway) fail fast while disconnected.
   */
  async request(req: AgentRequest, opts: { durable: boolean }): Promise<SendResult> {
    const payload = JSON.stringify(req);
    if (opts.durable) return this.sender.send(req.requestId, this.topic('requests'), payload);
    if (!this.ready || !this.client) return { ok: false, error: 'not connected to the broker' };
    if (!this.sender.sendTransient(req.requestId, this.topic('requests'), payload))
      return { ok: false, error: 'not connected to the broker' };
    return { ok: true };
  }

  /** Wait for the `request.result` / `claim.result` answering `requestId`. */
  awaitResult(requestId: string, timeoutMs: number): Promise<AwaitResult> {
    return this.waiters.wait(requestId, timeoutMs);
  }

  /** Republish the retained birth (e.g. after the transcoder probe) and refresh the Last Will. */
  updateBirth(): void {
    const client = this.client;
    if (!client) return;
    if (client.options.will) client.options.will.payload = Buffer.from(this.birthJson('offline'));
    if (this.ready) client.publish(this.topic('status'), this.birthJson('online'), { qos: 1, retain: true });
  }

  /**
   * Publish a retained `offline` birth and disconnect. `graceful` waits (bounded) for in-flight
   * publishes; otherwise the socket is dropped at once. `silent`: no `offline` birth (another process
   * holds this agent's name, and its retained status must stay). Idempotent.
   */
  stop(opts: { graceful: boolean; silent?: boolean } = { graceful: true }): Promise<void> {
    if (!this.stopping) this.stopping = this.shutdown(opts.graceful, opts.silent ?? false);
    return this.stopping;
  }

  private async shutdown(graceful: boolean, silent: boolean): Promise<void> {
    for (const t of Object.values(this.timers)) clearTimeout(t);
    this.timers = {};
    this.waiters.close();
    const client = this.client;
    if (!client) return;
    const wasReady = this.ready;
    this.ready = false;
    this.sender.goOffline();
    if (wasReady && !silent) {
      const offline = client.publishAsync(this.topic('status'), this.birthJson('offline'), {
        qos: 1,
        retain: true,
      });
      await withTimeout(offline, STOP_FLUSH_TIMEOUT_MS);
    }
    await withTimeout(client.endAsync(!graceful || !client.connected), STOP_FLUSH_TIMEOUT_MS);
    // A graceful end() still waiting for PUBACKs would hold the socket; a second end() is a no-op
    // while the first is pending, so drop the socket directly.
    if (!client.disconnected) client.stream?.destroy();
    if (wasReady) this.emitSafely('connection', false);
    this.logger.info({ graceful }, 'agent session stopped');
  }

  private async onConnect(client: MqttClient, generation: number): Promise<void> {
    this.attempt = 0;
    if (this.failureLogged) this.logger.info('connected to the broker again');
    this.failureLogged = null;
    try {
      await client.subscribeAsync({
        [this.topic('inbox')]: { qos: 1 },
        [WORK_TOPIC]: { qos: 0 },
        [RESYNC_TOPIC]: { qos: 1 },
      });
    } catch (err) {
      // mqtt.js rejects with an ErrorWithSubackPacket without a packet when the connection closes
      // before the SUBACK: that is no refusal.
      const granted = err instanceof ErrorWithSubackPacket ? err.packet?.granted : undefined;
      if (!granted) {
        this.logger.warn({ err: (err as Error).message }, 'subscribe failed; will retry on reconnect');
        return;
      }
      // Still worth going on: reports and requests flow even if the inbox cannot be received.
      this.logger.error({ granted }, 'broker refused a subscription (check its ACL)');
    }
    if (generation !== this.generation || this.stopping) return;
    // Birth, hello and replay are queued synchronously, so they leave in exactly this order.
    this.announce(client);
    const replayed = this.sender.goOnline();
    this.ready = true;
    this.logger.info({ url: this.shownUrl, replayed }, 'connected to the broker');
    this.emitSafely('connection', true);
  }

  /** Publish the retained `online` birth and a hello listing the running tasks. */
  private announce(client: MqttClient): void {
    client.publish(this.topic('status'), this.birthJson('online'), { qos: 1, retain: true });
    const hello: AgentHello = {
      bootId: this.bootId,
      ...(this.opts.previousBootId ? { previousBootId: this.opts.previousBootId } : {}),
      running: this.safely(this.opts.running, []),
      ts: Date.now(),
    };
    client.publish(this.topic('hello'), JSON.stringify(hello), { qos: 1 });
  }

  private onClose(): void {
    this.sender.goOffline();
    if (this.ready) {
      this.ready = false;
      this.logger.warn('disconnected from the broker');
      this.emitSafely('connection', false);
    }
    if (this.stopping || this.timers.reconnect) return;
    const delay = computeBackoffMs(this.attempt++, this.opts.backoff ?? DEFAULT_BACKOFF);
    this.timers.reconnect = setTimeout(() => {
      this.timers.reconnect = undefined;
      if (this.stopping || !this.client) return;
      if (this.client.options.will) this.client.options.will.payload = Buffer.from(this.birthJson('offline'));
      this.client.connect();
    }, delay);
  }

  /** Log the first failure of a streak clearly, the rest at debug: no spam loop while a broker is down. */
  private onError(err: Error): void {
    if (this.stopping) {
      // Our own teardown, not the broker: e.g. a QoS 1 message that arrived after stop() ended the socket
      // gets its PUBACK written to the ended stream ("write after end"). It is delivered again on the
      // next connect (persistent session), and nothing is retried now.
      this.logger.debug({ err: err.message }, 'connection error while stopping');
      return;
    }
    const code = (err as ErrorWithReasonCode).code;
    const kind = code === 4 || code === 5 ? 'auth' : 'network';
    if (kind === 'auth') this.emitSafely('refused', code as number);
    if (this.failureLogged === kind) {
      this.logger.debug({ err: err.message }, 'broker connection failed again');
      return;
    }
    this.failureLogged = kind;
    if (kind === 'auth') {
      this.logger.error(
        { url: this.shownUrl, code, err: err.message },
        `broker refused this agent: check the agent name and token (a control plane with FFLEET_AGENT_AUTH=per-agent takes only the agent's own token: run \`ffleet agent-token ${this.opts.name}\` where it runs, with \`--generation N\` once the token was replaced through POST /api/v1/agents/${this.opts.name}/token; the control plane's log names the exact command); retrying with backoff`,
      );
    } else {
      this.logger.warn({ url: this.shownUrl, err: err.message }, 'broker unreachable; retrying with backoff');
    }
  }

  private onMessage(topic: string, payload: Buffer): void {
    if (topic === WORK_TOPIC) {
      this.emitSafely('work');
      return;
    }
    if (topic === RESYNC_TOPIC) {
      if (this.ready && this.client) {
        this.logger.info('control plane resubscribed: announcing again');
        this.announce(this.client);
        // Entries published within the last second most likely reached the new subscription already;
        // duplicates would be harmless (seq dedup) but are noise.
        this.resendStale(RESYNC_RESEND_OLDER_THAN_MS, true);
        this.emitSafely('work');
      }
      return;
    }
    if (topic !== this.topic('inbox')) return;
    const msg = parseMessage(InboxMessage, payload);
    if (!msg) {
      this.logger.warn({ topic, bytes: payload.length }, 'dropped malformed inbox message');
      return;
    }
    if (msg.type === 'ack') this.sender.acknowledge(reportKey(msg));
    if (msg.type === 'request.result') this.sender.acknowledge(msg.requestId);
    if (msg.type === 'request.result' || msg.type === 'claim.result') this.waiters.deliver(msg);
    this.emitSafely('inbox', msg);
  }

  private resendStale(olderThanMs: number, all = false): void {
    const n = this.sender.resendStale(olderThanMs, { all });
    if (n) this.logger.info({ entries: n }, 'resent unacknowledged outbox entries');
  }

  private sendHeartbeat(): void {
    if (!this.ready || !this.client) return;
    const hb: AgentHeartbeat = {
      bootId: this.bootId,
      freeSlots: this.safely(this.opts.freeSlots, 0),
      running: this.safely(this.opts.running, []),
      ts: Date.now(),
    };
    this.client.publish(this.topic('heartbeat'), JSON.stringify(hb), { qos: 0 });
  }

  private birthJson(state: AgentBirth['state']): string {
    const info = this.safely<BirthInfo | null>(this.opts.birth, null);
    const birth = { ...info, name: this.opts.name, state, bootId: this.bootId, ts: Date.now() };
    return JSON.stringify(birth);
  }

  private topic(kind: Parameters<typeof agentTopic>[1]): string {
    return agentTopic(this.opts.name, kind);
  }

  /** Call a caller-supplied callback; a throw there must not break the session. */
  private safely<T>(fn: () => T, fallback: T): T {
    try {
      return fn();
    } catch (err) {
      this.logger.error({ err: (err as Error).message }, 'session callback failed');
      return fallback;
    }
  }

  private emitSafely<K extends keyof SessionEvents>(event: K, ...args: SessionEvents[K]): void {
    try {
      (this.emit as (e: K, ...a: SessionEvents[K]) => boolean)(event, ...args);
    } catch (err) {
      this.logger.error({ event, err: (err as Error).message }, 'session listener failed');
    }
  }
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
  });
  return Promise.race([p.catch(() => undefined), timeout]).finally(() => clearTimeout(timer));
}
