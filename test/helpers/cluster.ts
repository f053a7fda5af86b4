/**
 * A real ffleet cluster for cross-process tests: a control plane (in this process, or a child process
 * that can be killed and restarted on the same ports) on a temp data dir, and agents as child processes
 * (`ffleet agent`, so they can be SIGKILLed, frozen and signalled) or in-process FleetAgents.
 *
 * External services: when DATABASE_URL is set, each cluster gets a fresh database on that server; when
 * MQTT_URL is set, the control plane uses that broker instead of the embedded one. ffleet's topic root
 * is fixed and every control plane subscribes to all agents, so two clusters on one broker would
 * answer each other's agents (and cancel their tasks as unknown). Clusters on an external broker
 * therefore hold a machine-wide lock for their lifetime (test files serialise in that mode).
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { connectAsync } from 'mqtt';
import pino, { type Logger } from 'pino';
import { afterAll, afterEach } from 'vitest';
import { parseAgentConfig } from '../../agent/src/config.ts';
import { FleetAgent } from '../../agent/src/fleet-agent.ts';
import { parseConfig } from '../../control-plane/src/config/config.ts';
import { type RunningControlPlane, startControlPlane } from '../../control-plane/src/control-plane.ts';
import { VERSION } from '../../control-plane/src/version.ts';
import { ApiClient } from '../fleet/support/api-client.ts';
import { acquireExternalBrokerLock } from '../fleet/support/broker-lock.ts';
import { waitFor } from '../fleet/support/media.ts';
import {
  type ChildProcessHandle,
  findFreePort,
  killLeftovers,
  spawnFfleet,
} from '../fleet/support/processes.ts';
import { openTestDatabase, seedPgliteDir, type TestDatabase } from './db.ts';

// The pieces live in test/fleet/support (one responsibility each); this module is the entry point.
export { ApiClient, type ApiResponse } from '../fleet/support/api-client.ts';
export { makeTestVideo, probeDurationSeconds, waitFor, writeScript } from '../fleet/support/media.ts';
export { ChildProcessHandle, descendantPids, processesMatching } from '../fleet/support/processes.ts';

/** Lease TTL for fault tests: short enough to requeue within seconds, long enough for a loaded CI box. */
export const TEST_LEASE_TTL_MS = 3_000;
/** Agent heartbeat for tests: several per lease. */
export const TEST_HEARTBEAT_MS = 500;
/** Control-plane start under load (PGlite open, tsx transpile) can take a while on 2 cores. */
const CP_START_TIMEOUT_MS = 90_000;

export const externalMqttUrl = (): string | undefined => process.env.MQTT_URL || undefined;
export const externalDatabaseUrl = (): string | undefined => process.env.DATABASE_URL || undefined;

/**
 * Timeout for a `beforeAll` that starts a cluster: on an external broker it may first wait for the
 * cluster of another test file to finish (see the lock above).
 */
export const CLUSTER_START_TIMEOUT_MS = externalMqttUrl() ? 900_000 : 180_000;

export type ClusterOptions = {
  /** `child` runs `ffleet control-plane` as a process (restartable); default `in-process`. */
  controlPlane?: 'in-process' | 'child';
  leaseTtlMs?: number;
  /** Log level of the control plane and child agents (their output is kept for assertions). */
  logLevel?: string;
};

export type AgentOptions = {
  /** Suffix of the agent name; the cluster id is prepended so names are unique per test run. */
  name: string;
  slots?: number;
  labels?: string[];
  token?: string;
  heartbeatMs?: number;
  env?: Record<string, string>;
};

/** A pino logger whose JSON records land in an array (in-process control plane / agents). */
function captureLogger(level: string, sink: string[]): Logger {
  const stream = new Writable({
    write(chunk, _enc, cb) {
      sink.push(String(chunk).trimEnd());
      cb();
    },
  });
  return pino({ level }, stream);
}

export class TestCluster {
  readonly id = randomBytes(4).toString('hex');
  readonly dir = mkdtempSync(join(tmpdir(), 'ffleet-cluster-'));
  readonly agentToken = randomBytes(18).toString('base64url');
  readonly external = { mqtt: externalMqttUrl(), db: externalDatabaseUrl() };
  readonly leaseTtlMs: number;
  readonly mode: 'in-process' | 'child';
  api!: ApiClient;
  /** The URL agents connect to. */
  mqttUrl = '';
  /** Log lines (JSON) of the in-process control plane and in-process agents. */
  readonly cpLines: string[] = [];
  #logLevel: string;
  #httpPort = 0;
  #mqttPort = 0;
  #db: TestDatabase | null = null;
  #cp: RunningControlPlane | null = null;
  #cpChild: ChildProcessHandle | null = null;
  #agents: ChildProcessHandle[] = [];
  #local: FleetAgent[] = [];
  #names = new Set<string>();
  #releaseLock: (() => void) | null = null;

  private constructor(opts: ClusterOptions) {
    this.mode = opts.controlPlane ?? 'in-process';
    this.leaseTtlMs = opts.leaseTtlMs ?? TEST_LEASE_TTL_MS;
    this.#logLevel = opts.logLevel ?? 'warn';
  }

  /** Start a control plane; everything it starts later is undone by stop(). */
  static async start(opts: ClusterOptions = {}): Promise<TestCluster> {
    const c = new TestCluster(opts);
    try {
      if (c.external.mqtt) c.#releaseLock = await acquireExternalBrokerLock();
      c.#httpPort = await findFreePort();
      c.#mqttPort = c.external.mqtt ? 0 : await findFreePort();
      c.mqttUrl = c.external.mqtt ?? `mqtt://127.0.0.1:${c.#mqttPort}`;
      c.api = new ApiClient(`http://127.0.0.1:${c.#httpPort}`);
      if (c.external.db) {
        // A fresh database on the server; the control plane migrates nothing new, we drop it at stop.
        c.#db = await openTestDatabase('postgres');
      } else {
        await seedPgliteDir(join(c.dir, 'pglite'));
      }
      await c.startControlPlane();
      return c;
    } catch (err) {
      await c.stop().catch(() => {}); // The start failure is the error worth reporting.
      throw err;
    }
  }

  /** Environment of `ffleet control-plane` for this cluster (stable across restarts). */
  controlPlaneEnv(): Record<string, string> {
    const env: Record<string, string> = {
      PORT: String(this.#httpPort),
      HOST: '127.0.0.1',
      FFLEET_DATA_DIR: this.dir,
      FFLEET_AGENT_TOKEN: this.agentToken,
      FFLEET_LEASE_TTL_MS: String(this.leaseTtlMs),
      FFLEET_LOCAL_AGENT: '0',
      LOG_LEVEL: this.#logLevel,
    };
    if (this.#db) env.DATABASE_URL = (this.#db as TestDatabase & { url: string }).url;
    if (this.external.mqtt) {
      // A client id of its own: the persistent session must survive restarts but not collide with others.
      const u = new URL(this.external.mqtt);
      u.username = `ffleet-cp-${this.id}`;
      env.MQTT_URL = u.toString();
    } else env.MQTT_PORT = String(this.#mqttPort);
    return env;
  }

  async startControlPlane(): Promise<void> {
    if (this.#cp || this.#cpChild) throw new Error('control plane already running');
    const env = this.controlPlaneEnv();
    if (this.mode === 'in-process') {
      this.#cp = await startControlPlane(parseConfig(env), captureLogger(this.#logLevel, this.cpLines));
      return;
    }
    const child = spawnFfleet('control-plane', env, 'control-plane');
    this.#cpChild = child;
    await child.waitUntil(
      async () => (await this.api.health()) !== null,
      CP_START_TIMEOUT_MS,
      'control plane up',
    );
  }

  /** Stop the control plane: `SIGTERM` (graceful) or `SIGKILL` for a child, stop() in-process. */
  async stopControlPlane(signal: 'SIGTERM' | 'SIGKILL' = 'SIGTERM'): Promise<void> {
    if (this.#cp) {
      const cp = this.#cp;
      this.#cp = null;
      await cp.stop();
    }
    if (this.#cpChild) {
      const child = this.#cpChild;
      this.#cpChild = null;
      await child.terminate(signal);
    }
  }

  /** The cluster's own database on the PostgreSQL server (services pass), null on PGlite. */
  get serverDatabase(): TestDatabase | null {
    return this.#db;
  }

  /** Output of the child control plane (or JSON log lines of the in-process one). */
  controlPlaneLog(): string {
    return this.#cpChild ? this.#cpChild.output() : this.cpLines.join('\n');
  }

  /** The tail of every child agent's output, for a failing test's report. */
  agentOutputs(tail = 4000): string {
    return this.#agents
      .map((a) => `--- ${a.label} (pid ${a.pid}) ---\n${a.output().slice(-tail)}`)
      .join('\n');
  }

  /** The in-process control plane (database access for assertions); null in child mode. */
  get inProcess(): RunningControlPlane | null {
    return this.#cp;
  }

  agentName(suffix: string): string {
    return `t-${this.id}-${suffix}`;
  }

  /** Start `ffleet agent` as a child process; resolves once the control plane lists it online. */
  async startAgent(opts: AgentOptions & { waitOnline?: boolean }): Promise<ChildProcessHandle> {
    const name = this.agentName(opts.name);
    this.#names.add(name);
    const env: Record<string, string> = {
      MQTT_URL: this.mqttUrl,
      FFLEET_AGENT_TOKEN: opts.token ?? this.agentToken,
      FFLEET_AGENT_NAME: name,
      FFLEET_AGENT_SLOTS: String(opts.slots ?? 1),
      FFLEET_AGENT_LABELS: (opts.labels ?? []).join(','),
      FFLEET_DATA_DIR: join(this.dir, 'agents'),
      FFLEET_HEARTBEAT_MS: String(opts.heartbeatMs ?? TEST_HEARTBEAT_MS),
      LOG_LEVEL: this.#logLevel,
      ...opts.env,
    };
    const child = spawnFfleet('agent', env, name);
    this.#agents.push(child);
    if (opts.waitOnline !== false) await this.waitAgentOnline(name, child);
    return child;
  }

  /** Start an in-process FleetAgent (cheap; cannot be killed or frozen). */
  async startLocalAgent(opts: AgentOptions): Promise<FleetAgent> {
    const name = this.agentName(opts.name);
    this.#names.add(name);
    const config = parseAgentConfig({
      ...process.env,
      MQTT_URL: this.mqttUrl,
      FFLEET_AGENT_TOKEN: opts.token ?? this.agentToken,
      FFLEET_AGENT_NAME: name,
      FFLEET_AGENT_SLOTS: String(opts.slots ?? 1),
      FFLEET_AGENT_LABELS: (opts.labels ?? []).join(','),
      FFLEET_DATA_DIR: join(this.dir, 'agents'),
      FFLEET_HEARTBEAT_MS: String(opts.heartbeatMs ?? TEST_HEARTBEAT_MS),
      ...opts.env,
    });
    const logger = captureLogger(this.#logLevel, this.cpLines);
    const agent = new FleetAgent({ config, logger, version: VERSION });
    this.#local.push(agent);
    await agent.start();
    await this.waitAgentOnline(name, null);
    return agent;
  }

  async waitAgentOnline(name: string, child: ChildProcessHandle | null, timeoutMs = 60_000): Promise<void> {
    const check = async () => {
      const r = await this.api.get(`/api/v1/agents/${name}`);
      const a = r.body as { status?: string; transcoder?: unknown } | null;
      return r.status === 200 && a?.status === 'online' && a.transcoder !== null;
    };
    if (child) await child.waitUntil(check, timeoutMs, `agent ${name} online`);
    else await waitFor(check, timeoutMs, `agent ${name} online`);
  }

  /** Kill every agent started so far (and what they left running), e.g. between tests. */
  async stopAgents(): Promise<void> {
    await Promise.allSettled(this.#local.map((a) => a.stop({ flushMs: 0 })));
    this.#local = [];
    await Promise.allSettled(this.#agents.map((a) => a.terminate('SIGKILL')));
    this.#agents = [];
    await killLeftovers(this.dir);
  }

  /** Stop every agent, the control plane, leftover processes; drop the database; remove the dir. */
  async stop(): Promise<void> {
    // Every step runs even if an earlier one fails; the failures are reported together at the end.
    const errors: unknown[] = [];
    const attempt = async (step: () => unknown) => {
      try {
        await step();
      } catch (err) {
        errors.push(err);
      }
    };
    await attempt(() => this.stopAgents());
    await attempt(() => this.stopControlPlane('SIGTERM'));
    // Orphans: a SIGKILLed agent's transcoder lives in its own process group and outlives it.
    await attempt(() => killLeftovers(this.dir));
    if (this.external.mqtt) await attempt(() => this.#clearBrokerState());
    await attempt(() => this.#db?.drop());
    this.#db = null;
    await attempt(() => rmSync(this.dir, { recursive: true, force: true }));
    this.#releaseLock?.();
    this.#releaseLock = null;
    if (errors.length) throw new AggregateError(errors, `cluster ${this.id}: teardown failed`);
  }

  /** Remove what the shared broker keeps for our client ids (persistent sessions, retained births). */
  async #clearBrokerState(): Promise<void> {
    const url = this.external.mqtt!;
    const ids = [...this.#names, `ffleet-cp-${this.id}`];
    for (const id of ids) {
      const client = await connectAsync(url, { clientId: id, username: id, clean: true, reconnectPeriod: 0 });
      if (id.startsWith('t-')) {
        await client.publishAsync(`ffleet/v1/agents/${id}/status`, '', { qos: 1, retain: true });
      }
      await client.endAsync();
    }
  }
}

/**
 * The hooks every cross-process test file repeats: print the control plane's log tail (and the child
 * agents' output) when a test failed, optionally stop the agents after each test, and stop the
 * cluster after the file. `get` reads the file's cluster (assigned in its beforeAll).
 */
export function clusterHooks(get: () => TestCluster | undefined, opts: { stopAgents?: boolean } = {}): void {
  afterEach(async (ctx) => {
    const c = get();
    if (ctx.task.result?.state === 'fail')
      console.error(c?.controlPlaneLog().slice(-8000), c?.agentOutputs());
    if (opts.stopAgents) await c?.stopAgents();
  }, 30_000);
  afterAll(async () => {
    await get()?.stop();
  }, 60_000);
}
