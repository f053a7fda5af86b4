/**
 * bench:fleet (b) and (d): 200 short transcodes through ffleet with 2 agents × 1 slot against the same
 * ffmpeg commands run directly with `xargs -P 2`, and the agents' resident memory at idle, 5 s after
 * they came online. One run alternates direct and ffleet, starting and ending with direct
 * (BENCH_ROUNDS ffleet runs, default 3): each ffleet run is set against the mean of the direct runs
 * around it, because the machine's speed drifts (on a shared 2-vCPU VM two direct runs a minute apart
 * differed by up to 10 %), and the ratio is the sum of the ffleet times over the sum of those means.
 */
import { spawn, spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Task } from '@ffleet/shared';
import {
  type ControlPlane,
  getJson,
  percentile,
  postJson,
  sleep,
  startAgent,
  stopProcess,
  track,
  waitForAgents,
  wallMs,
} from './bench-cluster.ts';
import {
  childCpuMs,
  cpuSplitMs,
  envNumber,
  machineCpuMs,
  processesCpuMs,
  rssMb,
  syscalls,
} from './harness.ts';
import { SseClient } from './sse-client.ts';

/**
 * BENCH_FFMPEG: the ffmpeg of both paths (default Debian's). Debian's ffmpeg spends most of a 0.5 s
 * clip's CPU loading its ~215 shared libraries, which is slow where page faults are (paravirtualised
 * VMs: 250–330 ms per clip against 73–126 ms on other instances). A statically linked ffmpeg (the
 * `@ffmpeg-installer/ffmpeg` one: 60–80 ms per clip alone there, 77–94 ms in the direct runs of (b))
 * puts ffleet's own cost per task in the proportion the faster instances see.
 */
const FFMPEG = process.env.BENCH_FFMPEG || '/usr/bin/ffmpeg';
/**
 * BENCH_TRANSCODER: the agents' transcoder (default: FFMPEG, as the direct runs). A diagnostic: with
 * test/bench/stand-in-transcoder.sh (it answers the probes through ffmpeg and transcodes nothing, after
 * BENCH_STAND_IN_SLEEP seconds), the CPU rows show what ffleet itself spends per task with no ffmpeg
 * competing for the cores and caches (the ratio then means nothing).
 */
const AGENT_TRANSCODER = process.env.BENCH_TRANSCODER || FFMPEG;
/** Same prefix the agent's runner puts in front of every transcoder call (run-transcode.ts). */
const PREFIX = ['-nostdin', '-progress', 'pipe:1', '-nostats'];
/** The user part of each command: {in} and {out} are the per-file paths. */
const TRANSCODE = ['-y', '-i', '{in}', '-c:v', 'libx264', '-preset', 'ultrafast', '{out}'];
const RUN_TIMEOUT_MS = 300_000;
const IDLE_RSS_AFTER_MS = 5_000;
/**
 * Tasks run through both paths before the measured runs (BENCH_WARMUP, default 4): ffmpeg's files in the
 * page cache. A fresh control plane is also still compiling: V8 optimises its JavaScript and tiers
 * PGlite's WebAssembly up for hundreds of tasks (perf, cpu-clock: 17–24 % of its CPU in V8's optimising
 * compiler during the second to fourth 200 tasks after start), so BENCH_WARMUP=200 measures a control
 * plane that has been up a while. A warm-up of WARMUP_ROW_MIN tasks or more is measured like a round and
 * printed as its own row (its direct run, then its ffleet run, set against the mean of that direct run
 * and the first measured one): cold and warm in one run.
 */
const WARMUP = envNumber('BENCH_WARMUP', 4);
const WARMUP_ROW_MIN = 20;
/** ffleet runs, each between two direct runs (see the file comment). */
const ROUNDS = envNumber('BENCH_ROUNDS', 3, { min: 1 });

export type ThroughputResult = {
  count: number;
  /** Wall seconds of the direct runs, in order (one more than ffleet runs). */
  directS: number[];
  /** Wall seconds of the ffleet runs; run i lies between direct runs i and i + 1. */
  ffleetS: number[];
  /** Each ffleet run over the mean of the direct runs around it. */
  ratios: number[];
  /** All ffleet time over the sum of those means. */
  ratio: number;
  /** The warm-up run (tasks, seconds direct / ffleet, ratio), measured the same way; null without one. */
  warmup: { count: number; directS: number; ffleetS: number; ratio: number } | null;
  /** Per task: agent busy time (claim → finish) summed, vs 2 × wall. */
  idlePerTaskMs: number;
  /** Per agent: a task's finishedAt → that agent's next claim (startedAt); p50 / p95 / count over 500 ms. */
  gapP50: number;
  gapP95: number;
  gapsOver500: number;
  agentIdleRssMb: number;
  agentRssAfterMb: number;
  /** CPU time (user+system) per task during the ffleet run: control plane, and both agents together (ffmpeg not included). */
  cpCpuMs: number;
  agentCpuMs: number;
  /** Of which system time (kernel: sockets, files, fork/exec). */
  cpSysMs: number;
  agentSysMs: number;
  /** CPU of this benchmark process per task (it watches the events stream; it competes for the same cores). */
  observerCpuMs: number;
  /** All PostgreSQL server processes on this machine (the control plane's backends on `postgres`). */
  pgServerCpuMs: number;
  /** CPU of the transcoder processes per task (ffmpeg, user + system): run directly, and under the agents. */
  ffmpegDirectCpuMs: number;
  ffmpegFfleetCpuMs: number;
  /** Read / write system calls per task (files and sockets): control plane, both agents together. */
  cpSyscalls: { reads: number; writes: number };
  agentSyscalls: { reads: number; writes: number };
  /**
   * The whole machine's CPU per task (`/proc/stat`, all cores: every process and kernel thread) during the
   * direct runs and during the ffleet runs: busy, and idle. Busy minus the rows above is what no measured
   * process accounts for (kernel threads: writeback, the journal, interrupts; the services beside).
   */
  machineDirect: { busyMs: number; idleMs: number };
  machineFfleet: { busyMs: number; idleMs: number };
};

function makeClips(dir: string, count: number): void {
  mkdirSync(dir, { recursive: true });
  const first = join(dir, 'clip-0.mp4');
  const r = spawnSync(FFMPEG, [
    '-v',
    'error',
    '-y',
    '-f',
    'lavfi',
    '-i',
    'testsrc=size=320x240:rate=25:duration=0.5',
    '-c:v',
    'libx264',
    '-preset',
    'ultrafast',
    '-pix_fmt',
    'yuv420p',
    first,
  ]);
  if (r.status !== 0) throw new Error(`ffmpeg could not generate the clip: ${r.stderr}`);
  for (let i = 1; i < count; i++) copyFileSync(first, join(dir, `clip-${i}.mp4`));
}

/** Run the commands with `xargs -P 2` (no shell per command); returns wall seconds. */
async function runDirect(inDir: string, outDir: string, ids: number[]): Promise<number> {
  mkdirSync(outDir, { recursive: true });
  const args = TRANSCODE.map((a) =>
    a === '{in}' ? join(inDir, 'clip-{}.mp4') : a === '{out}' ? join(outDir, 'clip-{}.mp4') : a,
  );
  const t0 = performance.now();
  const c = spawn('xargs', ['-P', '2', '-I{}', FFMPEG, ...PREFIX, ...args], {
    stdio: ['pipe', 'ignore', 'ignore'],
    // A group of its own: an interrupted benchmark kills xargs and its ffmpeg processes with it.
    detached: true,
  });
  track(c);
  c.stdin.end(ids.map((i) => `${i}\n`).join(''));
  const timer = setTimeout(() => c.kill('SIGKILL'), RUN_TIMEOUT_MS);
  const code = await new Promise<number | null>((r) => c.once('exit', r));
  clearTimeout(timer);
  if (code !== 0) throw new Error(`xargs ffmpeg exited ${code}`);
  return (performance.now() - t0) / 1000;
}

const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

/** Idle gaps of each agent between finishing one task and being handed the next. */
function agentGaps(tasks: Task[]): number[] {
  const byAgent = new Map<string, Task[]>();
  for (const t of tasks) {
    const name = t.agent?.name ?? '';
    byAgent.set(name, [...(byAgent.get(name) ?? []), t]);
  }
  const gaps: number[] = [];
  for (const list of byAgent.values()) {
    list.sort((a, b) => a.startedAt - b.startedAt);
    for (let i = 1; i < list.length; i++) gaps.push(list[i]!.startedAt - list[i - 1]!.finishedAt);
  }
  return gaps;
}

/**
 * Batches seen finishing on the events stream (`batch.finished` only), and a wait for one of them. The
 * wait is woken by the stream (no polling): this process shares the two cores with ffmpeg and ffleet.
 * It watches the batch, as a REST client waiting for its work does, not every task's updates: following
 * 600 `task.updated` events per 200 tasks cost this process ~0.5 ms of CPU per task (and the control
 * plane the encoding of each for the stream), which is the benchmark's load, not ffleet's.
 */
class FinishedBatches {
  readonly #finished = new Map<string, number>();
  #waiting: { id: string; resolve: () => void } | null = null;

  add(id: string, at: number): void {
    this.#finished.set(id, at);
    if (this.#waiting?.id !== id) return;
    const w = this.#waiting;
    this.#waiting = null;
    w.resolve();
  }

  /** Resolves with the time the batch's `batch.finished` arrived; rejects after `timeoutMs`. */
  async waitFor(id: string, timeoutMs: number): Promise<number> {
    let timer: NodeJS.Timeout | undefined;
    try {
      if (!this.#finished.has(id))
        await new Promise<void>((resolve, reject) => {
          this.#waiting = { id, resolve };
          timer = setTimeout(() => reject(new Error('ffleet run did not finish in time')), timeoutMs);
        });
      return this.#finished.get(id)!;
    } finally {
      clearTimeout(timer);
      this.#waiting = null;
    }
  }
}

/** Enqueue one batch and wait until every task ended; returns wall seconds and the tasks' busy ms. */
async function runFfleet(
  cp: ControlPlane,
  finished: FinishedBatches,
  inDir: string,
  outDir: string,
  ids: number[],
) {
  // ffleet wildcards, not template literals.
  // biome-ignore lint/suspicious/noTemplateCurlyInString: ffleet wildcard
  const [input, output] = ['${INPUT_FILE}', '${OUTPUT_FILE}'];
  const command = TRANSCODE.map((a) => (a === '{in}' ? input : a === '{out}' ? output : a)).join(' ');
  const t0 = wallMs();
  const batch = await postJson<{ id: string; tasks: string[] }>(`${cp.api}/batches`, {
    tasks: ids.map((i) => ({
      command,
      inputFile: join(inDir, `clip-${i}.mp4`),
      outputFile: join(outDir, `clip-${i}.mp4`),
    })),
  });
  if (batch.tasks.length !== ids.length)
    throw new Error(`batch returned ${batch.tasks.length} tasks, expected ${ids.length}`);
  const end = await finished.waitFor(batch.id, RUN_TIMEOUT_MS);
  // Read once the batch is done (not timed): when each task started and finished, and on which agent.
  const tasks = await getJson<Task[]>(`${cp.api}/batches/${batch.id}/tasks?perPage=1000`);
  if (tasks.length !== ids.length)
    throw new Error(`batch lists ${tasks.length} tasks, expected ${ids.length}`);
  const failed = tasks.filter((t) => t.status !== 'DONE_SUCCESSFUL');
  if (failed.length) throw new Error(`${failed.length} ffleet tasks did not succeed`);
  const busy = sum(tasks.map((t) => t.finishedAt - t.startedAt));
  return { seconds: (end - t0) / 1000, busyMs: busy, gaps: agentGaps(tasks) };
}

export async function benchThroughput(cp: ControlPlane, count: number): Promise<ThroughputResult> {
  const inDir = join(cp.dir, 'media', 'in');
  makeClips(inDir, count + WARMUP);
  const names = ['tp-1', 'tp-2'];
  const agents = names.map((n) =>
    startAgent(cp, n, { FFLEET_TRANSCODER: AGENT_TRANSCODER, FFLEET_AGENT_SLOTS: '1' }),
  );
  const finished = new FinishedBatches();
  const sse = new SseClient(`${cp.api}/events?events=batch.finished`, (e) => {
    finished.add((e.data.data as { id: string }).id, e.receivedAt);
  });
  try {
    await waitForAgents(cp, names);
    await sse.start();
    await sleep(IDLE_RSS_AFTER_MS);
    const agentIdleRssMb = Math.max(...agents.map((a) => rssMb(a.pid!)));
    const warm = Array.from({ length: WARMUP }, (_, i) => count + i);
    let warmDirectS = 0;
    let warmFfleetS = 0;
    if (warm.length) {
      warmDirectS = await runDirect(inDir, join(cp.dir, 'media', 'warm-direct'), warm);
      warmFfleetS = (await runFfleet(cp, finished, inDir, join(cp.dir, 'media', 'warm-ffleet'), warm))
        .seconds;
    }
    const ids = Array.from({ length: count }, (_, i) => i);
    const sample = () => {
      const split = agents.map((a) => cpuSplitMs(a.pid!));
      const own = process.cpuUsage();
      return {
        cp: cpuSplitMs(cp.child.pid!),
        agents: { user: sum(split.map((c) => c.user)), sys: sum(split.map((c) => c.sys)) },
        observer: (own.user + own.system) / 1000,
        pgServer: processesCpuMs('postgres'),
        ffmpeg: sum(agents.map((a) => childCpuMs(a.pid!))),
        cpIo: syscalls(cp.child.pid!),
        agentIo: agents.map((a) => syscalls(a.pid!)),
      };
    };
    let ffmpegDirect = childCpuMs(process.pid);
    const machine = { direct: { busy: 0, idle: 0 }, ffleet: { busy: 0, idle: 0 } };
    const measured = async <T>(into: { busy: number; idle: number }, run: () => Promise<T>) => {
      const m0 = machineCpuMs();
      const result = await run();
      const m1 = machineCpuMs();
      into.busy += m1.busy - m0.busy;
      into.idle += m1.idle - m0.idle;
      return result;
    };
    const direct = (dir: string) =>
      measured(machine.direct, () => runDirect(inDir, join(cp.dir, 'media', dir), ids));
    const directS = [await direct('direct-0')];
    let ffmpegFfleet = 0;
    const ffleetS: number[] = [];
    const gaps: number[] = [];
    let busyMs = 0;
    const cpu = { cp: 0, cpSys: 0, agents: 0, agentsSys: 0, observer: 0, pgServer: 0 };
    const io = { cpReads: 0, cpWrites: 0, agentReads: 0, agentWrites: 0 };
    for (let r = 0; r < ROUNDS; r++) {
      const c0 = sample();
      const f = await measured(machine.ffleet, () =>
        runFfleet(cp, finished, inDir, join(cp.dir, 'media', `ffleet-${r}`), ids),
      );
      const c1 = sample();
      ffleetS.push(f.seconds);
      gaps.push(...f.gaps);
      busyMs += f.busyMs;
      cpu.cp += c1.cp.user + c1.cp.sys - c0.cp.user - c0.cp.sys;
      cpu.cpSys += c1.cp.sys - c0.cp.sys;
      cpu.agents += c1.agents.user + c1.agents.sys - c0.agents.user - c0.agents.sys;
      cpu.agentsSys += c1.agents.sys - c0.agents.sys;
      cpu.observer += c1.observer - c0.observer;
      cpu.pgServer += c1.pgServer - c0.pgServer;
      ffmpegFfleet += c1.ffmpeg - c0.ffmpeg;
      io.cpReads += c1.cpIo.reads - c0.cpIo.reads;
      io.cpWrites += c1.cpIo.writes - c0.cpIo.writes;
      io.agentReads += sum(c1.agentIo.map((x, i) => x.reads - c0.agentIo[i]!.reads));
      io.agentWrites += sum(c1.agentIo.map((x, i) => x.writes - c0.agentIo[i]!.writes));
      directS.push(await direct(`direct-${r + 1}`));
    }
    ffmpegDirect = childCpuMs(process.pid) - ffmpegDirect;
    const around = ffleetS.map((_, r) => (directS[r]! + directS[r + 1]!) / 2);
    const tasks = count * ROUNDS;
    return {
      count,
      directS,
      ffleetS,
      ratios: ffleetS.map((f, r) => f / around[r]!),
      ratio: sum(ffleetS) / sum(around),
      // Against the mean of its own direct run and the first measured one (scaled to its size).
      warmup:
        warm.length >= WARMUP_ROW_MIN
          ? {
              count: warm.length,
              directS: warmDirectS,
              ffleetS: warmFfleetS,
              ratio: warmFfleetS / ((warmDirectS + (directS[0]! * warm.length) / count) / 2),
            }
          : null,
      idlePerTaskMs: (2 * sum(ffleetS) * 1000 - busyMs) / tasks,
      gapP50: percentile(gaps, 50),
      gapP95: percentile(gaps, 95),
      gapsOver500: gaps.filter((g) => g > 500).length,
      agentIdleRssMb,
      agentRssAfterMb: Math.max(...agents.map((a) => rssMb(a.pid!))),
      cpCpuMs: cpu.cp / tasks,
      agentCpuMs: cpu.agents / tasks,
      cpSysMs: cpu.cpSys / tasks,
      agentSysMs: cpu.agentsSys / tasks,
      observerCpuMs: cpu.observer / tasks,
      pgServerCpuMs: cpu.pgServer / tasks,
      ffmpegDirectCpuMs: ffmpegDirect / (count * (ROUNDS + 1)),
      ffmpegFfleetCpuMs: ffmpegFfleet / tasks,
      cpSyscalls: { reads: io.cpReads / tasks, writes: io.cpWrites / tasks },
      agentSyscalls: { reads: io.agentReads / tasks, writes: io.agentWrites / tasks },
      machineDirect: {
        busyMs: machine.direct.busy / (count * (ROUNDS + 1)),
        idleMs: machine.direct.idle / (count * (ROUNDS + 1)),
      },
      machineFfleet: { busyMs: machine.ffleet.busy / tasks, idleMs: machine.ffleet.idle / tasks },
    };
  } finally {
    await sse.stop();
    await Promise.all(agents.map((a) => stopProcess(a)));
  }
}
