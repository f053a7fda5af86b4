// npm run bench:watch — numbers, not a test: prints a table (targets from the issue), exits 0 unless
// the bench could not run. A control plane (PGlite, embedded broker) and one real agent child with
// FFLEET_AGENT_SLOTS=0 (tasks are created, never run); a watchfolder (interval 1, growthChecks 1)
// over 10,000 files that were already processed (each has its .lock), then 1,000 new files.
// Sizes: BENCH_WATCH_FILES, BENCH_WATCH_ARRIVING, BENCH_WATCH_RATE (arrivals per second).
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { appendFile, writeFile } from 'node:fs/promises';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import {
  type ControlPlane,
  cleanUpNow,
  describeLoad,
  getJson,
  percentile,
  postJson,
  sleep,
  startAgent,
  startControlPlane,
  stopProcess,
  waitForAgents,
  wallMs,
} from './bench-cluster.ts';
import { cpuMs, envNumber, ROOT, rssMb } from './harness.ts';
import { SseClient } from './sse-client.ts';

const FILES = envNumber('BENCH_WATCH_FILES', 10_000);
const ARRIVING = envNumber('BENCH_WATCH_ARRIVING', 1_000, { min: 1 });
const DIRS = 100;
const INTERVAL_S = 1;
/** Arrival rate in files/s (default as agent/src/watch/scan-bench.ts): bursts of RATE/10 every 100 ms. */
const RATE = envNumber('BENCH_WATCH_RATE', 200, { min: 1, integer: false });
const ARRIVAL_BURST = Math.max(1, Math.round(RATE / 10));
const IDLE_WINDOW_MS = 10_000;
const ARRIVAL_TIMEOUT_MS = 120_000;
const CPUS = cpus().length;
/** BENCH_WATCH_DB=postgres runs the control plane on a fresh database of the test server instead of PGlite. */
const DB = (process.env.BENCH_WATCH_DB ?? 'pglite') as 'pglite' | 'postgres';

const dirOf = (i: number) => `show-${Math.floor((i % DIRS) / 10)}/reel-${i % 10}`;

/** The files already there and already processed: each has its `.lock`. */
function createTree(root: string): void {
  for (let d = 0; d < DIRS; d++) mkdirSync(join(root, dirOf(d)), { recursive: true });
  for (let i = 0; i < FILES; i++) {
    const file = join(root, dirOf(i), `clip-${i}.mov`);
    writeFileSync(file, 'x'.repeat(i % 100));
    writeFileSync(`${file}.lock`, '');
  }
}

type Created = { receivedAt: number; createdAt: number };

/**
 * The agent's own view of its memory: a preload (node --import, so nothing in the agent's code) appends
 * `process.memoryUsage()` plus the V8 heap spaces (used/size) every 250 ms to a JSONL file. Costs the
 * agent a few hundred kB of RSS; BENCH_WATCH_MEM=0 leaves it out.
 */
const MEM_PRELOAD = `import { appendFileSync } from 'node:fs';
import { getHeapSpaceStatistics } from 'node:v8';
const out = process.env.BENCH_WATCH_MEM_OUT;
setInterval(() => {
  const m = process.memoryUsage();
  const spaces = {};
  for (const s of getHeapSpaceStatistics()) spaces[s.space_name] = [s.space_used_size, s.space_size];
  appendFileSync(out, JSON.stringify({ t: Date.now(), ...m, spaces }) + '\\n');
}, 250).unref();
`;
type MemSample = {
  t: number;
  rss: number;
  heapTotal: number;
  heapUsed: number;
  external: number;
  arrayBuffers: number;
  spaces: Record<string, [number, number]>;
};

function readMem(file: string): MemSample[] {
  try {
    return readFileSync(file, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as MemSample);
  } catch {
    return [];
  }
}

const mb = (n: number) => (n / 1048576).toFixed(1);
/** "rss 78.1 | heap 9.8/12.3 | ext 2.1 (ab 0.4) | old 6.1/7.0 new 0.5/2.0 code 1.9/2.1 ..." in MB. */
function describeMem(s: MemSample | undefined): string {
  if (s === undefined) return 'n/a';
  const short: Record<string, string> = {
    old_space: 'old',
    new_space: 'new',
    code_space: 'code',
    large_object_space: 'lo',
    map_space: 'map',
    shared_space: 'shared',
    trusted_space: 'trusted',
  };
  const spaces = Object.entries(s.spaces)
    .filter(([, [, size]]) => size > 0)
    .map(([n, [used, size]]) => `${short[n] ?? n} ${mb(used)}/${mb(size)}`)
    .join(' ');
  return `rss ${mb(s.rss)} | heap ${mb(s.heapUsed)}/${mb(s.heapTotal)} | ext ${mb(s.external)} (ab ${mb(s.arrayBuffers)}) | ${spaces}`;
}

async function waitForFirstScan(cp: ControlPlane, wfId: string): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    const wf = await getJson<{ lastCheck: number; error: string }>(`${cp.api}/watchfolders/${wfId}`);
    if (wf.error) throw new Error(`watchfolder error: ${wf.error}`);
    if (wf.lastCheck > 0) return;
    await sleep(200);
  }
  throw new Error('the agent did not report a first scan within 60 s');
}

/** Scanner CPU per scan in a child process (the agent's scanner code, with its default watcher or none). */
async function scanCpu(root: string, watcher: 'native' | 'off') {
  const c = spawn(process.execPath, ['--import', 'tsx', 'test/bench/watch-scan-cpu.ts', root, watcher, '8'], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  c.stdout.on('data', (b: Buffer) => {
    out += b.toString();
  });
  const code = await new Promise<number | null>((r) => c.once('exit', r));
  if (code !== 0) throw new Error(`watch-scan-cpu exited ${code}`);
  return JSON.parse(out.trim().split('\n').at(-1)!) as {
    first: number;
    perScan: number[];
    rssMb: number;
    errors: string[];
  };
}

type Row = [string, string, string, boolean | null];

async function bench(): Promise<Row[]> {
  const cp = await startControlPlane({}, DB);
  const root = join(cp.dir, 'watch');
  createTree(root);
  const created = new Map<string, Created>();
  const sse = new SseClient(`${cp.api}/events?events=task.created`, (e) => {
    const task = (e.data.data as { task: { createdAt: number; metadata: Record<string, unknown> } }).task;
    const wf = (task.metadata.ffleet as { watchfolder?: { relativePath: string } } | undefined)?.watchfolder;
    if (wf) created.set(wf.relativePath, { receivedAt: e.receivedAt, createdAt: task.createdAt });
  });
  const memOut = join(cp.dir, 'agent-mem.jsonl');
  const agentEnv: Record<string, string> = { FFLEET_AGENT_SLOTS: '0' };
  if (process.env.BENCH_WATCH_MEM !== '0') {
    const preload = join(cp.dir, 'mem-preload.mjs');
    writeFileSync(preload, MEM_PRELOAD);
    const own = process.env.BENCH_AGENT_NODE_ARGS ?? '';
    process.env.BENCH_AGENT_NODE_ARGS = `--import=${pathToFileURL(preload).href} ${own}`;
    agentEnv.BENCH_WATCH_MEM_OUT = memOut;
  }
  // BENCH_WATCH_SNAPSHOTS=<dir>: heap snapshots of the agent at idle and mid-arrival (they pause it:
  // latencies of such a run mean nothing).
  const snapDir = process.env.BENCH_WATCH_SNAPSHOTS;
  if (snapDir) {
    const own = process.env.BENCH_AGENT_NODE_ARGS ?? '';
    process.env.BENCH_AGENT_NODE_ARGS = `--heapsnapshot-signal=SIGUSR2 --diagnostic-dir=${snapDir} ${own}`;
  }
  const agent = startAgent(cp, 'watcher', agentEnv);
  try {
    await waitForAgents(cp, ['watcher']);
    await sse.start();
    const preset = await postJson<{ id: string }>(`${cp.api}/presets`, {
      name: 'bench-noop',
      command: '-f lavfi -i nullsrc -t 0.01 -f null -',
    });
    const wf = await postJson<{ id: string }>(`${cp.api}/watchfolders`, {
      name: 'bench',
      interval: INTERVAL_S,
      growthChecks: 1,
      preset: preset.id,
      path: root,
      agent: 'watcher',
    });
    await waitForFirstScan(cp, wf.id);
    await sleep(3000); // let the change watcher finish setting up
    if (created.size) throw new Error(`${created.size} tasks for files that were already locked`);

    const pid = agent.pid!;
    const cpu0 = cpuMs(pid);
    await sleep(IDLE_WINDOW_MS);
    const idleCpuPerScan = (cpuMs(pid) - cpu0) / (IDLE_WINDOW_MS / 1000 / INTERVAL_S);
    const idleRss = rssMb(pid);
    const idleMem = readMem(memOut).at(-1);
    if (snapDir) {
      writeFileSync(join(snapDir, 'idle.smaps'), readFileSync(`/proc/${pid}/smaps`));
      process.kill(pid, 'SIGUSR2');
      await sleep(3000);
    }

    const stableAt = new Map<string, number>();
    let peakRss = idleRss;
    const sampler = setInterval(() => {
      peakRss = Math.max(peakRss, rssMb(pid));
    }, 250);
    const cpuBefore = { cp: cpuMs(cp.child.pid!), agent: cpuMs(pid) };
    const t0 = wallMs();
    for (let i = 0; i < ARRIVING; i++) {
      const rel = `${dirOf(i)}/new-${i}.mxf`;
      const abs = join(root, rel);
      await writeFile(abs, Buffer.alloc(32 * 1024));
      await appendFile(abs, Buffer.alloc(32 * 1024));
      stableAt.set(rel, wallMs());
      if (snapDir && i === Math.floor(ARRIVING * 0.8)) process.kill(pid, 'SIGUSR2');
      // Paced against the clock, so slow writes do not lower the rate below RATE.
      if (i % ARRIVAL_BURST === ARRIVAL_BURST - 1)
        await sleep(Math.max(0, t0 + ((i + 1) / RATE) * 1000 - wallMs()));
    }
    const writeS = (wallMs() - t0) / 1000;
    const deadline = Date.now() + ARRIVAL_TIMEOUT_MS;
    while ([...stableAt.keys()].some((k) => !created.has(k)) && Date.now() < deadline) await sleep(50);
    clearInterval(sampler);
    const tEnd = wallMs();
    if (snapDir) writeFileSync(join(snapDir, 'end.smaps'), readFileSync(`/proc/${pid}/smaps`));
    const cpuPerFile = {
      cp: (cpuMs(cp.child.pid!) - cpuBefore.cp) / ARRIVING,
      agent: (cpuMs(pid) - cpuBefore.agent) / ARRIVING,
    };
    const lastCreated = Math.max(...[...created.values()].map((c) => c.receivedAt));
    const toSse: number[] = [];
    const toCreatedAt: number[] = [];
    for (const [rel, t] of stableAt) {
      const c = created.get(rel);
      if (!c) continue;
      toSse.push(c.receivedAt - t);
      toCreatedAt.push(c.createdAt - t);
    }
    const arrived = toSse.length;
    // The agent writes each lock after the control plane's answer; wait for them (bounded) so the
    // scan measurement below sees a steady-state tree.
    const lockDeadline = Date.now() + 60_000;
    const unlocked = () =>
      [...stableAt.keys()].filter((rel) => !existsSync(join(root, `${rel}.lock`))).length;
    while (unlocked() > 0 && Date.now() < lockDeadline) await sleep(250);
    const missingLocks = unlocked();
    const rssAfter = rssMb(pid);
    // wallMs is wall-clock time, like the samples' Date.now().
    const arrivalMem = readMem(memOut).filter((m) => m.t >= t0 && m.t <= tEnd);
    const peakMem = arrivalMem.reduce<MemSample | undefined>(
      (a, m) => (a && a.rss >= m.rss ? a : m),
      undefined,
    );
    const peakHeap = Math.max(...arrivalMem.map((m) => m.heapUsed));
    await sse.stop();
    await stopProcess(agent);
    const on = await scanCpu(root, 'native');
    const off = await scanCpu(root, 'off');
    const p95 = percentile(toSse, 95);
    const fmt = (xs: number[]) =>
      `p50 ${percentile(xs, 50).toFixed(0)} / p95 ${percentile(xs, 95).toFixed(0)} / max ${Math.max(...xs).toFixed(0)} ms`;
    const med = (xs: number[]) => percentile(xs, 50);
    const target = INTERVAL_S * 1000 + 500;
    return [
      [
        `files already present (locked) / arriving`,
        `${FILES} / ${ARRIVING} at ${RATE}/s (written in ${writeS.toFixed(1)} s)`,
        '',
        null,
      ],
      ['tasks created for arrivals', `${arrived} / ${ARRIVING}`, `${ARRIVING}`, arrived === ARRIVING],
      ['arrivals without a .lock 60 s after the last task', String(missingLocks), '0', missingLocks === 0],
      ['stable → task.created on SSE', fmt(toSse), `p95 ≤ ${target} ms`, p95 <= target],
      ['stable → task createdAt (CP clock)', fmt(toCreatedAt), '', null],
      [
        'tasks created per second (first write → last task)',
        ((arrived / (lastCreated - t0)) * 1000).toFixed(1),
        '',
        null,
      ],
      [
        'CPU per arriving file: control plane / agent',
        `${cpuPerFile.cp.toFixed(1)} / ${cpuPerFile.agent.toFixed(1)} ms`,
        '',
        null,
      ],
      [
        `CPU per scan, ${FILES + ARRIVING} locked files (watcher native, as the agent)`,
        `median ${med(on.perScan).toFixed(1)} / max ${Math.max(...on.perScan).toFixed(1)} ms (first ${on.first.toFixed(0)} ms)`,
        '≤ 100 ms',
        med(on.perScan) <= 100,
      ],
      [
        'CPU per scan, watcher off',
        `median ${med(off.perScan).toFixed(1)} / max ${Math.max(...off.perScan).toFixed(1)} ms (first ${off.first.toFixed(0)} ms)`,
        '',
        null,
      ],
      ['real agent CPU per 1 s interval at idle', `${idleCpuPerScan.toFixed(1)} ms`, '', null],
      [
        'agent RSS idle / peak / after',
        `${idleRss.toFixed(1)} / ${peakRss.toFixed(1)} / ${rssAfter.toFixed(1)} MB`,
        '≤ 80 MB',
        peakRss <= 80,
      ],
      ['agent memory at idle (MB)', describeMem(idleMem), '', null],
      ['agent memory at peak RSS sample (MB)', describeMem(peakMem), '', null],
      [
        'agent heap used: max while arriving',
        arrivalMem.length > 0 ? `${mb(peakHeap)} MB (${arrivalMem.length} samples)` : 'n/a',
        '',
        null,
      ],
      ['scanner child RSS (watcher native)', `${on.rssMb.toFixed(1)} MB`, '', null],
      ...[...on.errors, ...off.errors].map((e): Row => ['scanner reported', e, '', null]),
    ];
  } finally {
    await sse.stop();
    await stopProcess(agent);
    await cp.stop();
  }
}

let failed = false;
let rows: Row[] = [];
try {
  console.log(`bench:watch on ${CPUS} CPUs (control plane on ${DB}), load ${describeLoad(CPUS)}`);
  rows = await bench();
} catch (err) {
  failed = true;
  console.error('bench:watch failed:', err);
} finally {
  cleanUpNow();
}
console.log(`\nload average at the end: ${describeLoad(CPUS)}`);
const w0 = Math.max(0, ...rows.map((r) => r[0].length));
const w1 = Math.max(0, ...rows.map((r) => r[1].length));
for (const [m, v, t, ok] of rows)
  console.log(`${m.padEnd(w0)}  ${v.padEnd(w1)}  ${t.padEnd(16)} ${ok === null ? '' : ok ? 'ok' : 'MISSED'}`);
process.exit(failed ? 1 : 0);
