/**
 * Simulated agents for bench:fleet (c): protocol clients without ffmpeg. Each one connects like a real
 * agent (username = client id = name, password = agent token, clean: false), publishes a retained
 * birth with a fake transcoder and a hello, and once `go()` is called loops: claim {max: 1} → for the
 * task: report RUNNING (seq 0) and DONE_SUCCESSFUL (seq 1) → on the DONE ack one cycle is counted and
 * it claims again. An empty claim waits for the work hint or a poll timer, as the real agent does.
 */
import { randomUUID } from 'node:crypto';
import {
  type AgentBirth,
  type AgentHeartbeat,
  type AgentHello,
  type AgentRequest,
  agentTopic,
  InboxMessage,
  PROTOCOL_VERSION,
  parseMessage,
  type TaskReport,
  WORK_TOPIC,
} from '@ffleet/shared';
import { connectAsync, type MqttClient } from 'mqtt';

/** An agent whose claim came back empty asks again after this long even without a hint. */
const POLL_MS = 2_000;
/** The real agent's default heartbeat period (the control plane marks an agent silent for 20 s offline). */
const HEARTBEAT_MS = 5_000;

export type SimStats = {
  cycles: number;
  emptyClaims: number;
  /** claim sent → claim.result with a task, ms */
  claimMs: number[];
  /** DONE report sent → its ack, ms */
  ackMs: number[];
  errors: string[];
};

class SimAgent {
  readonly #name: string;
  readonly #stats: SimStats;
  #client: MqttClient | null = null;
  #running = false;
  #claimSentAt = 0;
  #claimId = '';
  #pollTimer: NodeJS.Timeout | null = null;
  #offline = '';
  #bootId = '';
  #heartbeat: NodeJS.Timeout | null = null;
  /** taskId → DONE sent at */
  readonly #done = new Map<string, number>();

  constructor(name: string, stats: SimStats) {
    this.#name = name;
    this.#stats = stats;
  }

  async connect(url: string, token: string): Promise<void> {
    const bootId = randomUUID();
    this.#bootId = bootId;
    const birth = (state: AgentBirth['state']): string =>
      JSON.stringify({
        state,
        bootId,
        name: this.#name,
        version: '0.0.0-sim',
        protocol: PROTOCOL_VERSION,
        hostname: 'sim',
        os: 'linux',
        arch: 'amd64',
        transcoder: { path: '/usr/bin/true', version: 'sim' },
        encoders: [],
        hwaccels: [],
        labels: [],
        slots: 1,
        ts: Date.now(),
      } satisfies AgentBirth);
    this.#offline = birth('offline');
    const c = await connectAsync(url, {
      clientId: this.#name,
      username: this.#name,
      password: token,
      clean: false,
      protocolVersion: 4,
      reconnectPeriod: 0,
      connectTimeout: 30_000,
      will: {
        topic: agentTopic(this.#name, 'status'),
        payload: Buffer.from(this.#offline),
        qos: 1,
        retain: true,
      },
    });
    this.#client = c;
    c.on('message', (topic, payload) => this.#onMessage(topic, payload));
    c.on('error', (err) => this.#stats.errors.push(`${this.#name}: ${err.message}`));
    await c.subscribeAsync({ [agentTopic(this.#name, 'inbox')]: { qos: 1 }, [WORK_TOPIC]: { qos: 0 } });
    await c.publishAsync(agentTopic(this.#name, 'status'), birth('online'), { qos: 1, retain: true });
    const hello: AgentHello = { bootId, running: [], ts: Date.now() };
    await c.publishAsync(agentTopic(this.#name, 'hello'), JSON.stringify(hello), { qos: 1 });
    // Spread over the period so 500 agents do not beat in step.
    this.#heartbeat = setTimeout(() => {
      this.#beat();
      this.#heartbeat = setInterval(() => this.#beat(), HEARTBEAT_MS);
    }, Math.random() * HEARTBEAT_MS);
  }

  #beat(): void {
    if (!this.#client) return;
    // No-op tasks finish in the tick they are claimed: nothing is ever running at a heartbeat.
    const hb: AgentHeartbeat = { bootId: this.#bootId, freeSlots: 1, running: [], ts: Date.now() };
    this.#client.publish(agentTopic(this.#name, 'heartbeat'), JSON.stringify(hb), { qos: 0 });
  }

  go(): void {
    this.#running = true;
    this.#claim();
  }

  halt(): void {
    this.#running = false;
    if (this.#pollTimer) clearTimeout(this.#pollTimer);
  }

  async close(): Promise<void> {
    this.halt();
    clearTimeout(this.#heartbeat ?? undefined); // clears an interval too
    this.#heartbeat = null;
    const c = this.#client;
    this.#client = null;
    if (!c) return;
    // Leave cleanly: no Last Will, and the retained birth says offline.
    await c
      .publishAsync(agentTopic(this.#name, 'status'), this.#offline, { qos: 1, retain: true })
      .catch(() => {});
    await c.endAsync(true).catch(() => {});
  }

  #claim(): void {
    if (!this.#running || !this.#client || this.#claimId) return;
    this.#claimId = randomUUID();
    this.#claimSentAt = performance.now();
    const req: AgentRequest = { type: 'claim', requestId: this.#claimId, max: 1 };
    this.#client.publish(agentTopic(this.#name, 'requests'), JSON.stringify(req), { qos: 1 });
  }

  #report(r: TaskReport): void {
    this.#client?.publish(agentTopic(this.#name, 'events'), JSON.stringify(r), { qos: 1 });
  }

  #onMessage(topic: string, payload: Buffer): void {
    if (topic === WORK_TOPIC) {
      this.#claim();
      return;
    }
    const m = parseMessage(InboxMessage, payload);
    if (!m) {
      this.#stats.errors.push(`${this.#name}: malformed inbox message`);
      return;
    }
    if (m.type === 'claim.result' && m.requestId === this.#claimId) {
      this.#claimId = '';
      const claimed = m.tasks[0];
      if (!claimed) {
        this.#stats.emptyClaims += 1;
        if (this.#pollTimer) clearTimeout(this.#pollTimer);
        this.#pollTimer = setTimeout(() => this.#claim(), POLL_MS);
        return;
      }
      this.#stats.claimMs.push(performance.now() - this.#claimSentAt);
      const base = {
        kind: 'update' as const,
        taskId: claimed.task.id,
        attempt: claimed.attempt,
        leaseToken: claimed.leaseToken,
      };
      const now = Date.now();
      this.#report({ ...base, seq: 0, patch: { status: 'RUNNING', startedAt: now } });
      this.#report({
        ...base,
        seq: 1,
        patch: { status: 'DONE_SUCCESSFUL', progress: 100, remaining: 0, finishedAt: now },
      });
      this.#done.set(claimed.task.id, performance.now());
      // Like the real agent: ask for the next task as soon as the last report is out.
      this.#claim();
    } else if (m.type === 'ack' && m.seq === 1) {
      const sent = this.#done.get(m.taskId);
      if (sent === undefined) return;
      this.#done.delete(m.taskId);
      this.#stats.ackMs.push(performance.now() - sent);
      this.#stats.cycles += 1;
    } else if (m.type === 'task.cancel' || m.type === 'refused') {
      this.#stats.errors.push(`${this.#name}: ${m.type} ${m.reason}`);
    }
  }
}

/** `count` simulated agents named `<prefix>-<i>`. */
export class SimFleet {
  readonly stats: SimStats = { cycles: 0, emptyClaims: 0, claimMs: [], ackMs: [], errors: [] };
  readonly names: string[];
  readonly #agents: SimAgent[];

  constructor(count: number, prefix = 'sim') {
    this.names = Array.from({ length: count }, (_, i) => `${prefix}-${i}`);
    this.#agents = this.names.map((n) => new SimAgent(n, this.stats));
  }

  /** Connect every agent, `parallel` at a time (a connection storm is not what is measured). */
  async start(url: string, token: string, parallel = 25): Promise<void> {
    for (let i = 0; i < this.#agents.length; i += parallel) {
      await Promise.all(this.#agents.slice(i, i + parallel).map((a) => a.connect(url, token)));
    }
  }

  go(): void {
    for (const a of this.#agents) a.go();
  }

  halt(): void {
    for (const a of this.#agents) a.halt();
  }

  /** Disconnect everyone; idempotent. */
  async stop(): Promise<void> {
    await Promise.all(this.#agents.map((a) => a.close()));
  }
}
