/**
 * Bench support beside harness.ts (freePort, rssMb): a control-plane child on a temp data dir, real `ffleet agent`
 * children, a small JSON API client and /proc readings. Everything binds or connects to 127.0.0.1,
 * and every child and temp dir is registered so a crash or Ctrl-C still cleans up.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { openTestDatabase, type TestDatabase } from '../helpers/db.ts';
import { freePort, ROOT } from './harness.ts';

/** Variables a child must not inherit from the caller's shell: the bench sets its own. */
const OWN_VARS = /^(DATABASE_URL|MQTT_URL|MQTT_PORT|PORT|HOST|LOG_LEVEL|NODE_OPTIONS|FFLEET_.*)$/;
/**
 * harness.startFfleet gives up after 60 s; on a 2-CPU box at load 15 a cold control plane (tsx
 * transpile + PGlite init + migrations, ~17 s of CPU) took 59 s, so benches wait longer here.
 */
const START_TIMEOUT_MS = 180_000;
/** A SIGTERMed child gets this long to drain before its process group is SIGKILLed. */
const STOP_GRACE_MS = 10_000;

const children = new Set<ChildProcess>();
const dirs = new Set<string>();

/** SIGKILL every child's process group and remove every temp dir (synchronous: runs from 'exit'). */
export function cleanUpNow(): void {
  for (const c of children) killGroup(c, 'SIGKILL');
  children.clear();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
  dirs.clear();
}
process.once('exit', cleanUpNow);
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.once(sig, () => {
    cleanUpNow();
    process.exit(130);
  });
}

/**
 * Signal a child's process group. Once the child has exited only with `afterExit`: right after its
 * exit, to reach members it left behind (the group, and so its id, lives on while they run).
 */
function killGroup(c: ChildProcess, sig: NodeJS.Signals, afterExit = false): void {
  if (c.pid === undefined || (!afterExit && (c.exitCode !== null || c.signalCode !== null))) return;
  try {
    process.kill(-c.pid, sig); // children are spawned detached: their pid is their process group
  } catch {
    // ESRCH: already gone.
  }
}

/**
 * Have a child (spawned `detached`, so its pid is its process group) killed with its whole group if
 * the benchmark exits or is interrupted before the child ends.
 */
export function track(c: ChildProcess): void {
  children.add(c);
  c.once('exit', () => children.delete(c));
}

/** A temp dir removed at exit (or earlier by `removeTempDir`). */
export function makeTempDir(prefix: string): string {
  const d = mkdtempSync(join(tmpdir(), prefix));
  dirs.add(d);
  return d;
}

export function removeTempDir(d: string): void {
  rmSync(d, { recursive: true, force: true });
  dirs.delete(d);
}

/** SIGTERM, then SIGKILL the whole process group after the grace period; resolves on exit. */
export async function stopProcess(c: ChildProcess): Promise<void> {
  if (c.exitCode !== null || c.signalCode !== null) return;
  const exited = new Promise((r) => c.once('exit', r));
  c.kill('SIGTERM');
  const t = setTimeout(() => killGroup(c, 'SIGKILL'), STOP_GRACE_MS);
  await exited;
  clearTimeout(t);
  killGroup(c, 'SIGKILL', true); // leftovers of the group (a transcoder the agent did not reap)
}

function childEnv(env: Record<string, string>): Record<string, string> {
  const base = Object.fromEntries(
    Object.entries(process.env).filter(
      (e): e is [string, string] => e[1] !== undefined && !OWN_VARS.test(e[0]),
    ),
  );
  return { ...base, LOG_LEVEL: 'warn', ...env };
}

export type ControlPlane = {
  child: ChildProcess;
  /** `http://127.0.0.1:<port>/api/v1` */
  api: string;
  mqttUrl: string;
  agentToken: string;
  dir: string;
  /** 'pglite' (embedded, the default install) or 'postgres' (a fresh database on the test server). */
  db: 'pglite' | 'postgres';
  stop: () => Promise<void>;
};

/**
 * `ffleet control-plane` (embedded broker, no local agent) on free loopback ports, with embedded
 * PGlite or, for `db: 'postgres'`, a fresh database on the test server (test/helpers/db.ts).
 */
export async function startControlPlane(
  env: Record<string, string> = {},
  db: 'pglite' | 'postgres' = 'pglite',
): Promise<ControlPlane> {
  const dir = makeTempDir('ffleet-bench-');
  let pg: TestDatabase | null = null;
  if (db === 'postgres') {
    pg = await openTestDatabase('postgres');
    // The control plane opens its own pool; keep the helper's only for drop().
    env = { ...env, DATABASE_URL: pg.url! };
  }
  const port = await freePort();
  const mqttPort = await freePort();
  // BENCH_CP_NODE_ARGS: extra node flags for the control plane, e.g. "--cpu-prof --cpu-prof-dir=/tmp/p".
  const nodeArgs = (process.env.BENCH_CP_NODE_ARGS ?? '').split(' ').filter(Boolean);
  const child = spawn(process.execPath, [...nodeArgs, 'bin/ffleet.js', 'control-plane'], {
    cwd: ROOT,
    env: childEnv({
      FFLEET_DATA_DIR: join(dir, 'cp'),
      PORT: String(port),
      MQTT_PORT: String(mqttPort),
      FFLEET_LOCAL_AGENT: '0',
      ...env,
    }),
    stdio: ['ignore', 'inherit', 'inherit'],
    detached: true,
  });
  track(child);
  let stopping = false;
  // A control plane that dies mid-bench would otherwise only show up as ECONNREFUSED.
  child.once('exit', (code, signal) => {
    if (!stopping)
      console.error(`bench: the control plane exited unexpectedly (code ${code}, signal ${signal})`);
  });
  try {
    await waitForHealth(child, port);
  } catch (err) {
    removeTempDir(dir);
    await pg?.drop();
    throw err;
  }
  const agentToken = readFileSync(join(dir, 'cp', 'agent-token'), 'utf8').trim();
  return {
    child,
    api: `http://127.0.0.1:${port}/api/v1`,
    mqttUrl: `mqtt://127.0.0.1:${mqttPort}`,
    agentToken,
    dir,
    db,
    stop: async () => {
      stopping = true;
      await stopProcess(child);
      removeTempDir(dir);
      await pg?.drop();
    },
  };
}

async function waitForHealth(child: ChildProcess, port: number): Promise<void> {
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (Date.now() < deadline && child.exitCode === null) {
    try {
      if ((await fetch(`http://127.0.0.1:${port}/health`)).ok) return;
    } catch {
      // not listening yet
    }
    await sleep(200);
  }
  const exited = child.exitCode;
  await stopProcess(child);
  throw new Error(
    exited !== null
      ? `ffleet control-plane exited with code ${exited} before answering /health`
      : `ffleet control-plane did not answer /health within ${START_TIMEOUT_MS} ms`,
  );
}

/** Start `ffleet agent` as a child (own process group). It has no HTTP port: use `waitForAgents`. */
export function startAgent(cp: ControlPlane, name: string, env: Record<string, string> = {}): ChildProcess {
  const dataDir = join(cp.dir, `agent-${name}`);
  mkdirSync(dataDir, { recursive: true });
  // BENCH_AGENT_ROOT: run agents from another checkout (A/B-test an agent change against this one).
  // As deployed (deploy/systemd): the bundled agent with a small young generation and no background
  // recompilation thread (its buffers cost ~7 MB of RSS).
  // BENCH_AGENT_NODE_ARGS: extra node flags for the agents, e.g. "--cpu-prof --cpu-prof-dir=/tmp/p".
  const nodeArgs = (process.env.BENCH_AGENT_NODE_ARGS ?? '').split(' ').filter(Boolean);
  const child = spawn(
    process.execPath,
    ['--max-semi-space-size=1', '--no-concurrent-recompilation', ...nodeArgs, 'bin/ffleet.js', 'agent'],
    {
      cwd: process.env.BENCH_AGENT_ROOT || ROOT,
      env: childEnv({
        MQTT_URL: cp.mqttUrl,
        FFLEET_AGENT_TOKEN: cp.agentToken,
        FFLEET_AGENT_NAME: name,
        FFLEET_DATA_DIR: dataDir,
        ...env,
      }),
      stdio: ['ignore', 'inherit', 'inherit'],
      detached: true,
    },
  );
  track(child);
  return child;
}

export type ApiAgent = { id: string; name: string; status: string; transcoder: unknown };

/** Wait until every named agent is online with a transcoder (bounded). */
export async function waitForAgents(cp: ControlPlane, names: string[], timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const list = await getJson<ApiAgent[]>(`${cp.api}/agents?perPage=1000`);
    const ready = new Set(list.filter((a) => a.status === 'online' && a.transcoder).map((a) => a.name));
    if (names.every((n) => ready.has(n))) return;
    await sleep(100);
  }
  throw new Error(`agents ${names.join(', ')} did not come online within ${timeoutMs} ms`);
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** POST JSON; throws with the problem body when the status is not 2xx (a bench cannot go on then). */
export async function postJson<T>(url: string, body: unknown): Promise<T> {
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  if (!r.ok) throw new Error(`POST ${url} → ${r.status}: ${text}`);
  return JSON.parse(text) as T;
}

export async function getJson<T>(url: string): Promise<T> {
  const r = await fetch(url);
  const text = await r.text();
  if (!r.ok) throw new Error(`GET ${url} → ${r.status}: ${text}`);
  return JSON.parse(text) as T;
}

/** "1.23 / 4.56 / 7.89 (N cpus)" */
export function describeLoad(cpus: number): string {
  return `${loadavg()
    .map((l) => l.toFixed(2))
    .join(' / ')} (1/5/15 min, ${cpus} CPUs)`;
}

/** Wall clock in ms with sub-ms precision (comparable with `date +%s.%N` and bash $EPOCHREALTIME). */
export const wallMs = (): number => performance.timeOrigin + performance.now();

export const percentile = (xs: readonly number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))] ?? Number.NaN;
};
