/**
 * bench:fleet (c): many simulated agents claiming and completing no-op tasks through the control
 * plane's embedded broker. Reports cycles/s over a window after a warm-up, the control plane's
 * resident memory (peak sampled every 250 ms) and its CPU per cycle.
 */
import { type ControlPlane, percentile, postJson, sleep } from './bench-cluster.ts';
import { cpuMs, rssMb } from './harness.ts';
import { SimFleet } from './sim-agents.ts';

const BATCH = 1000;
const ONLINE_TIMEOUT_MS = 180_000;

/**
 * Warm-up ends when `warmupCycles` cycles completed (every agent has had its first claim answered by
 * then, so the window sees the steady state rather than the first wave) or after `warmupMaxMs`.
 */
export type SimOptions = {
  agents: number;
  tasks: number;
  warmupCycles: number;
  warmupMaxMs: number;
  windowMs: number;
};

export type SimResult = {
  agents: number;
  connectS: number;
  /** go → `warmupCycles` cycles done (the first wave of claims), s */
  warmupS: number;
  cyclesPerS: number;
  cycles: number;
  windowS: number;
  cpRssIdleMb: number;
  cpRssPeakMb: number;
  cpCpuPerCycleMs: number;
  /** CPU of this process (the simulated agents' MQTT clients) per cycle. */
  simCpuPerCycleMs: number;
  claimP50: number;
  claimP95: number;
  ackP50: number;
  ackP95: number;
  emptyClaims: number;
  /** Cancels, refusals and client errors the sims saw: how many, and the first few. */
  errorCount: number;
  errors: string[];
};

async function onlineAgents(cp: ControlPlane): Promise<number> {
  const text = await (await fetch(cp.api.replace(/\/api\/v1$/, '/metrics'))).text();
  const m = /^ffleet_agents_online (\d+)/m.exec(text);
  return m ? Number(m[1]) : 0;
}

async function enqueue(cp: ControlPlane, total: number): Promise<void> {
  for (let done = 0; done < total; done += BATCH) {
    const n = Math.min(BATCH, total - done);
    await postJson(`${cp.api}/batches`, {
      name: `sim-${done}`,
      tasks: Array.from({ length: n }, (_, i) => ({
        name: `noop-${done + i}`,
        command: '-f lavfi -i nullsrc -t 0.01 -f null -',
      })),
    });
  }
}

export async function benchSimAgents(cp: ControlPlane, o: SimOptions): Promise<SimResult> {
  const pid = cp.child.pid!;
  const fleet = new SimFleet(o.agents);
  let peak = 0;
  const sampler = setInterval(() => {
    peak = Math.max(peak, rssMb(pid));
  }, 250);
  try {
    const t0 = performance.now();
    await fleet.start(cp.mqttUrl, cp.agentToken);
    const deadline = Date.now() + ONLINE_TIMEOUT_MS;
    while ((await onlineAgents(cp)) < o.agents) {
      if (Date.now() > deadline)
        throw new Error(`only ${await onlineAgents(cp)} of ${o.agents} simulated agents came online`);
      await sleep(250);
    }
    const connectS = (performance.now() - t0) / 1000;
    await enqueue(cp, o.tasks);
    await sleep(1000);
    const cpRssIdleMb = rssMb(pid);
    peak = cpRssIdleMb;

    fleet.go();
    const tGo = performance.now();
    while (fleet.stats.cycles < o.warmupCycles && performance.now() - tGo < o.warmupMaxMs) await sleep(100);
    const warmupS = (performance.now() - tGo) / 1000;
    const c0 = fleet.stats.cycles;
    const cpu0 = cpuMs(pid);
    const self0 = process.cpuUsage();
    const w0 = performance.now();
    const claimFrom = fleet.stats.claimMs.length;
    const ackFrom = fleet.stats.ackMs.length;
    // Stop early when the queue runs low: an emptying queue is not the steady state being measured.
    while (performance.now() - w0 < o.windowMs && fleet.stats.cycles < o.tasks * 0.95) await sleep(100);
    const cycles = fleet.stats.cycles - c0;
    const windowS = (performance.now() - w0) / 1000;
    const cpu = cpuMs(pid) - cpu0;
    const self = process.cpuUsage(self0);
    fleet.halt();
    const claims = fleet.stats.claimMs.slice(claimFrom);
    const acks = fleet.stats.ackMs.slice(ackFrom);
    await sleep(500);
    return {
      agents: o.agents,
      connectS,
      warmupS,
      cyclesPerS: cycles / windowS,
      cycles,
      windowS,
      cpRssIdleMb,
      cpRssPeakMb: peak,
      cpCpuPerCycleMs: cycles ? cpu / cycles : Number.NaN,
      simCpuPerCycleMs: cycles ? (self.user + self.system) / 1000 / cycles : Number.NaN,
      claimP50: percentile(claims, 50),
      claimP95: percentile(claims, 95),
      ackP50: percentile(acks, 50),
      ackP95: percentile(acks, 95),
      emptyClaims: fleet.stats.emptyClaims,
      errorCount: fleet.stats.errors.length,
      errors: fleet.stats.errors.slice(0, 5),
    };
  } finally {
    clearInterval(sampler);
    await fleet.stop();
  }
}
