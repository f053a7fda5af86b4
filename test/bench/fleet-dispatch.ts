/**
 * bench:fleet (a): dispatch latency, `POST /tasks` → transcoder process started on an idle agent.
 *
 * The agent's FFLEET_TRANSCODER is a wrapper that appends `<wall-clock seconds> <args>` to a file and
 * then `exec`s /usr/bin/ffmpeg, so the timestamp is taken inside the new transcoder process before
 * ffmpeg itself loads. The wrapper is a small static C program when a C compiler is at hand (it stamps
 * within a fraction of a millisecond of its exec), else a bash script (BENCH_STAMP=bash forces it): bash
 * loads for 8-12 ms on a 2-vCPU VM before its first command, time that belongs to neither ffleet nor
 * ffmpeg but that the bash stamp counts as dispatch. Either way the wrapper's own start, measured from a
 * spawn in this process, is printed. Tasks run one at a time; after each one finished the bench waits
 * IDLE_GAP_MS so the agent's post-task claim has been answered and it is really idle when the next POST
 * arrives.
 */
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  type ControlPlane,
  percentile,
  postJson,
  sleep,
  startAgent,
  stopProcess,
  waitForAgents,
  wallMs,
} from './bench-cluster.ts';
import { cpuMs } from './harness.ts';
import { SseClient } from './sse-client.ts';

/** Settle time after a task finished (the agent's follow-up claim takes a few ms). */
const IDLE_GAP_MS = 250;
/** One task may not take longer than this end to end. */
const TASK_TIMEOUT_MS = 15_000;
const WARMUP = 10;

export type DispatchResult = {
  count: number;
  p50: number;
  p95: number;
  max: number;
  /** POST → HTTP response (task committed). */
  postP50: number;
  /** POST → the claim's task.updated (RUNNING) arrived over SSE. */
  claimedP50: number;
  /** Spawn → timestamp line of the wrapper itself (its start-up), included in the numbers above. */
  wrapperP50: number;
  /** What took the timestamp: 'static C' or 'bash'. */
  stamp: string;
  /** CPU time (user+system) per task of the control plane and of the agent (ffmpeg not included). */
  cpCpuMs: number;
  agentCpuMs: number;
  /** Tasks whose transcoder started more than 1 s after the POST (a missed wake-up). */
  slow: number;
};

/** The C wrapper: stamp, then exec ffmpeg with the same arguments. */
const STAMP_C = (stampFile: string) => `#include <stdio.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  FILE *f = fopen(${JSON.stringify(stampFile)}, "a");
  if (f) {
    fprintf(f, "%ld.%06ld", (long)t.tv_sec, t.tv_nsec / 1000);
    for (int i = 1; i < argc; i++) fprintf(f, " %s", argv[i]);
    fputc('\\n', f);
    fclose(f);
  }
  argv[0] = "/usr/bin/ffmpeg";
  execv("/usr/bin/ffmpeg", argv);
  return 127;
}
`;

/** Write the timestamping wrapper (static C when `cc` builds it, else bash); returns its path and kind. */
export function writeWrapper(dir: string, stampFile: string): { path: string; stamp: string } {
  if (process.env.BENCH_STAMP !== 'bash') {
    const source = join(dir, 'ffmpeg-stamp.c');
    const binary = join(dir, 'ffmpeg-stamp');
    writeFileSync(source, STAMP_C(stampFile));
    const cc = spawnSync('cc', ['-O2', '-static', '-o', binary, source], { stdio: 'ignore' });
    if (cc.status === 0) return { path: binary, stamp: 'static C' };
  }
  const path = join(dir, 'ffmpeg-stamp.sh');
  writeFileSync(
    path,
    `#!/bin/bash\nprintf '%s %s\\n' "$EPOCHREALTIME" "$*" >> '${stampFile}'\nexec /usr/bin/ffmpeg "$@"\n`,
  );
  chmodSync(path, 0o755);
  return { path, stamp: 'bash' };
}

/** Wall-clock ms of the stamp line whose arguments contain `tag`, or undefined. */
function stampOf(stampFile: string, tag: string): number | undefined {
  let text: string;
  try {
    text = readFileSync(stampFile, 'utf8');
  } catch {
    return undefined;
  }
  const line = text.split('\n').find((l) => l.includes(tag));
  return line === undefined ? undefined : Number(line.slice(0, line.indexOf(' '))) * 1000;
}

/** Median spawn → first line of the wrapper, run directly (the wrapper's own cost in the numbers). */
async function measureWrapper(wrapper: string, stampFile: string, runs = 15): Promise<number> {
  const lat: number[] = [];
  for (let i = 0; i < runs; i++) {
    const tag = `calib-${i}-${process.pid}`;
    const t0 = wallMs();
    const c = spawn(
      wrapper,
      ['-hide_banner', '-loglevel', 'error', '-metadata', `comment=${tag}`, '-version'],
      { stdio: 'ignore' },
    );
    await new Promise((r) => c.once('exit', r));
    const at = stampOf(stampFile, tag);
    if (at !== undefined) lat.push(at - t0);
  }
  return percentile(lat, 50);
}

export async function benchDispatch(cp: ControlPlane, tasks: number): Promise<DispatchResult> {
  const stampFile = join(cp.dir, 'stamps.log');
  const { path: wrapper, stamp } = writeWrapper(cp.dir, stampFile);
  const agent = startAgent(cp, 'dispatch-1', { FFLEET_TRANSCODER: wrapper, FFLEET_AGENT_SLOTS: '1' });
  const finished = new Map<string, string>();
  const claimedAt = new Map<string, number>();
  let wake: (() => void) | null = null;
  const sse = new SseClient(`${cp.api}/events?events=task.updated`, (e) => {
    const d = e.data.data as { taskId: string; status: string };
    if (d.status === 'RUNNING' && !claimedAt.has(d.taskId)) claimedAt.set(d.taskId, e.receivedAt);
    if (d.status.startsWith('DONE_')) {
      finished.set(d.taskId, d.status);
      wake?.();
    }
  });
  try {
    await waitForAgents(cp, ['dispatch-1']);
    await sse.start();
    const wrapperP50 = await measureWrapper(wrapper, stampFile);
    const lat: number[] = [];
    const post: number[] = [];
    const claimed: number[] = [];
    let cpu0 = { cp: 0, agent: 0 };
    for (let i = 0; i < WARMUP + tasks; i++) {
      await sleep(IDLE_GAP_MS);
      if (i === WARMUP) cpu0 = { cp: cpuMs(cp.child.pid!), agent: cpuMs(agent.pid!) };
      const tag = `dispatch-${i}-${process.pid}`;
      const t0 = wallMs();
      const task = await postJson<{ id: string }>(`${cp.api}/tasks`, {
        name: tag,
        command: `-hide_banner -loglevel error -f lavfi -i nullsrc=s=16x16:d=0.1 -metadata comment=${tag} -f null -`,
      });
      const tPost = wallMs();
      const deadline = Date.now() + TASK_TIMEOUT_MS;
      while (!finished.has(task.id)) {
        if (Date.now() > deadline)
          throw new Error(`dispatch task ${i} did not finish in ${TASK_TIMEOUT_MS} ms`);
        await new Promise<void>((r) => {
          wake = r;
          setTimeout(r, 100);
        });
      }
      if (finished.get(task.id) !== 'DONE_SUCCESSFUL')
        throw new Error(`dispatch task ${i} ended ${finished.get(task.id)}`);
      const started = stampOf(stampFile, tag);
      if (started === undefined)
        throw new Error(`dispatch task ${i}: the transcoder wrapper left no timestamp`);
      if (i < WARMUP) continue;
      lat.push(started - t0);
      post.push(tPost - t0);
      claimed.push((claimedAt.get(task.id) ?? Number.NaN) - t0);
    }
    return {
      count: lat.length,
      p50: percentile(lat, 50),
      p95: percentile(lat, 95),
      max: Math.max(...lat),
      postP50: percentile(post, 50),
      claimedP50: percentile(claimed, 50),
      wrapperP50,
      stamp,
      cpCpuMs: (cpuMs(cp.child.pid!) - cpu0.cp) / lat.length,
      agentCpuMs: (cpuMs(agent.pid!) - cpu0.agent) / lat.length,
      slow: lat.filter((l) => l > 1000).length,
    };
  } finally {
    await sse.stop();
    await stopProcess(agent);
  }
}
