// npm run bench:fleet — numbers, not a test: prints a table (targets from the issue), exits 0 unless a
// part could not run. BENCH_PARTS=a,b,c,d picks parts; sizes: BENCH_DISPATCH, BENCH_TRANSCODES, BENCH_WARMUP,
// BENCH_ROUNDS, BENCH_SIM_AGENTS, BENCH_SIM_TASKS, BENCH_SIM_WINDOW_MS; BENCH_STAMP=bash for (a)'s old stamp;
// backends of (b)/(d) and (c): BENCH_THROUGHPUT_DB, BENCH_SIM_DB (default pglite,postgres).
import { cpus } from 'node:os';
import { postgresAvailable } from '../helpers/db.ts';
import { type ControlPlane, cleanUpNow, describeLoad, startControlPlane } from './bench-cluster.ts';
import { benchDispatch, type DispatchResult } from './fleet-dispatch.ts';
import { benchSimAgents, type SimResult } from './fleet-sim.ts';
import { benchThroughput, type ThroughputResult } from './fleet-throughput.ts';
import { envNumber } from './harness.ts';

const PARTS = new Set((process.env.BENCH_PARTS ?? 'a,b,c,d').split(','));
const DISPATCH = envNumber('BENCH_DISPATCH', 200, { min: 1 });
const TRANSCODES = envNumber('BENCH_TRANSCODES', 200, { min: 1 });
const SIM_AGENTS = envNumber('BENCH_SIM_AGENTS', 500, { min: 1 });
const SIM_TASKS = envNumber('BENCH_SIM_TASKS', 8000, { min: 1 });
const SIM_WINDOW_MS = envNumber('BENCH_SIM_WINDOW_MS', 20_000, { min: 1 });
type Backend = 'pglite' | 'postgres';
/** Part (c) runs on each of these backends (postgres only when the test server answers). */
const SIM_DBS = (process.env.BENCH_SIM_DB ?? 'pglite,postgres').split(',') as Backend[];
/** The same for parts (b) and (d). */
const THROUGHPUT_DBS = (process.env.BENCH_THROUGHPUT_DB ?? 'pglite,postgres').split(',') as Backend[];
const CPUS = cpus().length;

type Row = { metric: string; value: string; target: string; ok: boolean | null };
const rows: Row[] = [];
const addRow = (metric: string, value: string, target = '', ok: boolean | null = null) =>
  rows.push({ metric, value, target, ok });
const row = addRow;
const ms = (n: number) => `${n.toFixed(1)} ms`;

function dispatchRows(d: DispatchResult): void {
  row(`(a) dispatch p50 (${d.count} tasks)`, ms(d.p50), '≤ 25 ms', d.p50 <= 25);
  row('(a) dispatch p95', ms(d.p95), '≤ 100 ms', d.p95 <= 100);
  row('(a) dispatch max / >1 s', `${ms(d.max)} / ${d.slow}`);
  row('(a) of which POST → 201', ms(d.postP50));
  row('(a) of which POST → claim seen on SSE', ms(d.claimedP50));
  row(`(a) of which wrapper start (${d.stamp} stamp)`, ms(d.wrapperP50));
  row('(a) CPU per task: control plane / agent', `${ms(d.cpCpuMs)} / ${ms(d.agentCpuMs)}`);
}

function throughputRows(t: ThroughputResult, db: string): void {
  const row = (metric: string, value: string, target?: string, ok?: boolean | null) =>
    addRow(metric.replace(/^\((.)\)/, `($1) ${db}:`), value, target, ok);
  const secs = (xs: number[]) => xs.map((x) => `${x.toFixed(2)} s`).join(', ');
  row(`(b) ${t.count} transcodes direct xargs -P 2`, secs(t.directS));
  row('(b) same through ffleet (2 agents × 1)', secs(t.ffleetS));
  row('(b) ratio of each ffleet run / direct around it', t.ratios.map((r) => r.toFixed(3)).join(', '));
  row('(b) ratio ffleet / direct (all runs)', t.ratio.toFixed(3), '≤ 1.10', t.ratio <= 1.1);
  if (t.warmup)
    row(
      `(b) warm-up run first after start: ${t.warmup.count} tasks direct / ffleet, ratio`,
      `${t.warmup.directS.toFixed(2)} s / ${t.warmup.ffleetS.toFixed(2)} s, ${t.warmup.ratio.toFixed(3)}`,
    );
  row('(b) agent idle time per task', ms(t.idlePerTaskMs));
  row('(b) finish → next claim p50 / p95 / >500 ms', `${ms(t.gapP50)} / ${ms(t.gapP95)} / ${t.gapsOver500}`);
  row(
    '(b) CPU per task: control plane / agent',
    `${ms(t.cpCpuMs)} / ${ms(t.agentCpuMs)} (system ${ms(t.cpSysMs)} / ${ms(t.agentSysMs)})`,
  );
  row('(b) CPU per task of the benchmark watching', ms(t.observerCpuMs));
  if (db === 'postgres')
    row('(b) CPU per task of the PostgreSQL server (all its processes)', ms(t.pgServerCpuMs));
  row(
    '(b) ffmpeg CPU per task: direct / through ffleet',
    `${ms(t.ffmpegDirectCpuMs)} / ${ms(t.ffmpegFfleetCpuMs)}`,
  );
  // Both cores stay busy in both paths, so the ratio is about (ffmpeg beside ffleet + everything else's
  // CPU) / ffmpeg direct. ffleet's share of ffmpeg's CPU in the same runs does not move with the
  // machine's drift between the direct and the ffleet runs, which the ratio does.
  const ffleetCpu = t.cpCpuMs + t.agentCpuMs + (db === 'postgres' ? t.pgServerCpuMs : 0);
  const sharePct = (100 * ffleetCpu) / t.ffmpegFfleetCpuMs;
  const predicted = (t.ffmpegFfleetCpuMs + ffleetCpu + t.observerCpuMs) / t.ffmpegDirectCpuMs;
  row(
    "(b) ffleet's CPU per task / ffmpeg's beside it; ratio the CPU predicts",
    `${ms(ffleetCpu)} / ${ms(t.ffmpegFfleetCpuMs)} = ${sharePct.toFixed(1)} %; ${predicted.toFixed(3)}`,
  );
  // The whole machine: what no process row above accounts for (kernel threads, the services beside) is
  // busy minus ffmpeg, ffleet and the observer; idle is time both cores could have encoded and did not.
  const unaccounted = t.machineFfleet.busyMs - t.ffmpegFfleetCpuMs - ffleetCpu - t.observerCpuMs;
  row(
    '(b) machine CPU per task, busy / idle: direct; ffleet (of it in no process above)',
    `${ms(t.machineDirect.busyMs)} / ${ms(t.machineDirect.idleMs)}; ${ms(t.machineFfleet.busyMs)} / ${ms(t.machineFfleet.idleMs)} (${ms(unaccounted)})`,
  );
  const rw = (x: { reads: number; writes: number }) => `${x.reads.toFixed(1)} / ${x.writes.toFixed(1)}`;
  row(
    '(b) read / write syscalls per task: control plane; agents (with the ffmpeg runs they reaped)',
    `${rw(t.cpSyscalls)}; ${rw(t.agentSyscalls)}`,
  );
  row(
    '(d) agent RSS idle (5 s after online)',
    `${t.agentIdleRssMb.toFixed(1)} MB`,
    '≤ 80 MB',
    t.agentIdleRssMb <= 80,
  );
  row(`(d) agent RSS after ${t.count / 2} transcodes each`, `${t.agentRssAfterMb.toFixed(1)} MB`);
}

function simRows(s: SimResult, db: string): void {
  const c = `(c) ${db}:`;
  row(
    `${c} ${s.agents} sim agents, cycles/s`,
    `${s.cyclesPerS.toFixed(1)} (${s.cycles} in ${s.windowS.toFixed(1)} s)`,
    '≥ 300',
    s.cyclesPerS >= 300,
  );
  row(`${c} control plane RSS idle / peak`, `${s.cpRssIdleMb.toFixed(0)} / ${s.cpRssPeakMb.toFixed(0)} MB`);
  row(`${c} CPU per cycle: control plane / sims`, `${ms(s.cpCpuPerCycleMs)} / ${ms(s.simCpuPerCycleMs)}`);
  row(`${c} claim → result p50 / p95`, `${ms(s.claimP50)} / ${ms(s.claimP95)}`);
  row(`${c} DONE → ack p50 / p95`, `${ms(s.ackP50)} / ${ms(s.ackP95)}`);
  row(
    `${c} connect + all online / first ${s.agents} cycles`,
    `${s.connectS.toFixed(1)} s / ${s.warmupS.toFixed(1)} s`,
  );
  if (s.errors.length) {
    row(`${c} errors seen by the sims`, `${s.errorCount} (first: ${s.errors[0]!.slice(0, 90)})`);
  }
}

function printTable(): void {
  const w0 = Math.max(...rows.map((r) => r.metric.length));
  const w1 = Math.max(...rows.map((r) => r.value.length));
  for (const r of rows) {
    const verdict = r.ok === null ? '' : r.ok ? 'ok' : 'MISSED';
    console.log(`${r.metric.padEnd(w0)}  ${r.value.padEnd(w1)}  ${r.target.padEnd(9)} ${verdict}`);
  }
}

/** Run a part on a fresh control plane per backend; postgres only when the test server answers. */
async function onEachBackend(
  part: string,
  dbs: readonly Backend[],
  run: (cp: ControlPlane, db: Backend) => Promise<void>,
): Promise<void> {
  for (const db of dbs) {
    if (db === 'postgres' && !(await postgresAvailable())) {
      row(`${part} on postgres`, 'skipped: test server not reachable');
      continue;
    }
    const cp = await startControlPlane({}, db);
    try {
      await run(cp, db);
    } finally {
      await cp.stop();
    }
  }
}

let failed = false;
try {
  console.log(`bench:fleet on ${CPUS} CPUs, load ${describeLoad(CPUS)}`);
  if (PARTS.has('a')) {
    const cp = await startControlPlane();
    try {
      console.log(`-- (a) dispatch latency, ${DISPATCH} tasks one at a time`);
      dispatchRows(await benchDispatch(cp, DISPATCH));
    } finally {
      await cp.stop();
    }
  }
  if (PARTS.has('b') || PARTS.has('d')) {
    await onEachBackend('(b)', THROUGHPUT_DBS, async (cp, db) => {
      console.log(
        `-- (b)+(d) on ${db}: ${TRANSCODES} transcodes, 2 agents × 1 slot vs xargs -P 2 (load ${describeLoad(CPUS)})`,
      );
      throughputRows(await benchThroughput(cp, TRANSCODES), db);
    });
  }
  if (PARTS.has('c')) {
    await onEachBackend('(c)', SIM_DBS, async (cp, db) => {
      console.log(
        `-- (c) ${SIM_AGENTS} simulated agents on ${db}, ${SIM_TASKS} no-op tasks (load ${describeLoad(CPUS)})`,
      );
      const r = await benchSimAgents(cp, {
        agents: SIM_AGENTS,
        tasks: SIM_TASKS,
        warmupCycles: SIM_AGENTS,
        warmupMaxMs: 120_000,
        windowMs: SIM_WINDOW_MS,
      });
      simRows(r, db);
    });
  }
} catch (err) {
  failed = true;
  console.error('bench:fleet failed:', err);
} finally {
  cleanUpNow();
}
console.log(`\nload average at the end: ${describeLoad(CPUS)}`);
printTable();
process.exit(failed ? 1 : 0);
