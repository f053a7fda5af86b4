/**
 * Watchfolder scanner benchmark: `npx tsx agent/src/watch/scan-bench.ts`.
 *
 * Each scenario runs in its own child process so RSS numbers are not polluted by the previous one.
 * - scan-locked / scan-tracked: 10,000 files in 100 nested directories; CPU (user+system, all threads)
 *   per scan cycle = process.cpuUsage() between two consecutive onState calls (one scan plus idle time).
 *   "locked": every file already has its .lock (steady state); "tracked": no locks, growthChecks so high
 *   that every scan must lstat all 10,000 files.
 * - arrive: interval=1, growthChecks=1, the 10,000 locked files present; 1,000 new files written in two
 *   chunks over ~5 s; latency = submit called − the file's last write finished. Prints p50/p95/max.
 * Every scenario runs with each watcher mode: off (interval scans only), native (fs.watch per
 * directory) and chokidar. Pass one scenario (e.g. `arrive:native`) to run only that one.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import type { WatcherMode } from './change-watcher.ts';
import { type SubmitResult, WatchScanner, type WatchState } from './watch-scanner.ts';

const FILES = 10_000;
const DIRS = 100; // 10 top-level × 10 nested, 100 files each
const ARRIVING = 1_000;
const SCANS_MEASURED = 5;

function createTree(root: string, locked: boolean): void {
  for (let d = 0; d < DIRS; d++) {
    const dir = join(root, `show-${Math.floor(d / 10)}`, `reel-${d % 10}`);
    mkdirSync(dir, { recursive: true });
    for (let f = 0; f < FILES / DIRS; f++) {
      const file = join(dir, `clip-${f}.mov`);
      writeFileSync(file, 'x'.repeat(f));
      if (locked) writeFileSync(`${file}.lock`, '');
    }
  }
}

const percentile = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] ?? Number.NaN;
};
const mb = (bytes: number): string => `${(bytes / 1024 / 1024).toFixed(1)} MB`;

/** The watchfolder both benches scan: every second, no filter. */
const benchAssignment = (root: string, growthChecks: number) => ({
  id: 'b',
  name: 'b',
  path: root,
  interval: 1,
  growthChecks,
  filter: {},
  suspended: false,
});

async function benchScan(root: string, watcher: WatcherMode, locked: boolean): Promise<string> {
  createTree(root, locked);
  const rssBefore = process.memoryUsage().rss;
  const cpu: number[] = [];
  let last = process.cpuUsage();
  let scans = 0;
  let done!: () => void;
  const finished = new Promise<void>((r) => {
    done = r;
  });
  const scanner = new WatchScanner({
    assignment: benchAssignment(root, 1000),
    submit: async () => ({ ok: true }),
    onState: (_s: WatchState) => {
      const now = process.cpuUsage();
      // The first cycle includes start-up (chokidar's initial walk); report it separately.
      cpu.push((now.user - last.user + now.system - last.system) / 1000);
      last = now;
      if (++scans > SCANS_MEASURED) done();
    },
    logger: pino({ level: 'silent' }),
    watcher,
  });
  scanner.start();
  await finished;
  const rss = process.memoryUsage().rss;
  await scanner.stop();
  const [first, ...rest] = cpu;
  return (
    `scan ${locked ? 'locked ' : 'tracked'} watcher=${watcher.padEnd(8)}: ` +
    `first cycle ${first?.toFixed(1)} ms CPU, then per scan median ${percentile(rest, 50).toFixed(1)} ms ` +
    `max ${Math.max(...rest).toFixed(1)} ms CPU; RSS +${mb(rss - rssBefore)} (total ${mb(rss)})`
  );
}

/**
 * Writes ARRIVING files into `dir` from a separate process, as a real transfer would (writing from the
 * scanner's own process would compete for its libuv thread pool and distort the numbers). Prints one
 * JSON line `[relativePath, Date.now() after the last write]` per file.
 */
const WRITER = `
const fs = require('node:fs');
const [dir, count] = [process.argv[1], Number(process.argv[2])];
const sleep = (ms) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
for (let i = 0; i < count; i++) {
  const abs = dir + '/new-' + i + '.mxf';
  fs.writeFileSync(abs, Buffer.alloc(32 * 1024));
  fs.appendFileSync(abs, Buffer.alloc(32 * 1024));
  process.stdout.write(JSON.stringify(['incoming/new-' + i + '.mxf', Date.now()]) + '\\n');
  if (i % 20 === 19) sleep(100); // ~200 files/s
}`;

async function benchArrive(root: string, watcher: WatcherMode): Promise<string> {
  createTree(root, true);
  const incoming = join(root, 'incoming');
  mkdirSync(incoming);
  const stableAt = new Map<string, number>();
  const submittedAt = new Map<string, number>();
  let ready!: () => void;
  const firstScan = new Promise<void>((r) => {
    ready = r;
  });
  const scanner = new WatchScanner({
    assignment: benchAssignment(root, 1),
    submit: async (f): Promise<SubmitResult> => {
      submittedAt.set(f.relativePath, Date.now());
      return { ok: true };
    },
    onState: () => ready(),
    logger: pino({ level: 'silent' }),
    watcher,
  });
  scanner.start();
  await firstScan;
  // Give chokidar time to finish its initial walk so arrivals are not competing with start-up.
  await new Promise((r) => setTimeout(r, 3000));
  const writer = spawn(process.execPath, ['-e', WRITER, incoming, String(ARRIVING)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  for await (const line of createInterface({ input: writer.stdout })) {
    const [rel, at] = JSON.parse(line) as [string, number];
    stableAt.set(rel, at);
  }
  const deadline = Date.now() + 20_000;
  while (submittedAt.size < ARRIVING && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  await scanner.stop();
  const latency = [...submittedAt].map(([rel, at]) => at - (stableAt.get(rel) ?? Number.NaN));
  return (
    `arrive         watcher=${watcher.padEnd(8)}: ${submittedAt.size}/${ARRIVING} submitted; stable→submit ` +
    `p50 ${percentile(latency, 50).toFixed(0)} ms, p95 ${percentile(latency, 95).toFixed(0)} ms, ` +
    `max ${Math.max(...latency).toFixed(0)} ms (target p95 ≤ 1500 ms)`
  );
}

async function runScenario(name: string): Promise<void> {
  const root = mkdtempSync(join(tmpdir(), 'ffleet-scan-bench-'));
  try {
    const [kind, mode] = name.split(':') as [string, WatcherMode];
    const line =
      kind === 'arrive' ? await benchArrive(root, mode) : await benchScan(root, mode, kind === 'locked');
    console.log(line);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

const scenario = process.argv[2];
if (scenario !== undefined) {
  await runScenario(scenario);
} else {
  const self = fileURLToPath(import.meta.url);
  const modes: WatcherMode[] = ['off', 'native', 'chokidar'];
  for (const s of ['locked', 'tracked', 'arrive'].flatMap((k) => modes.map((m) => `${k}:${m}`))) {
    const r = spawnSync(process.execPath, [...process.execArgv, self, s], { stdio: 'inherit' });
    if (r.status !== 0) process.exitCode = 1;
  }
}
