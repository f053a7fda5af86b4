import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { resolve } from 'node:path';

export const ROOT = resolve(import.meta.dirname, '../..');

export async function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      const port = typeof a === 'object' && a ? a.port : 0;
      s.close(() => res(port));
    });
    s.on('error', rej);
  });
}

export type LoadResult = {
  count: number;
  seconds: number;
  rps: number;
  p50: number;
  p95: number;
  p99: number;
  errors: number;
};

export const pct = (sorted: number[], p: number): number =>
  sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]! : Number.NaN;

/** Closed-loop load: `concurrency` clients each sending requests back to back until `total` are done. */
export async function load(
  url: string,
  opts: {
    method?: string;
    body?: () => string;
    concurrency: number;
    total: number;
    headers?: Record<string, string>;
  },
): Promise<LoadResult> {
  const lat: number[] = [];
  let next = 0;
  let errors = 0;
  const started = performance.now();
  const worker = async () => {
    while (next < opts.total) {
      next += 1;
      const t0 = performance.now();
      const r = await fetch(url, {
        method: opts.method ?? 'GET',
        headers: opts.body ? { 'content-type': 'application/json', ...opts.headers } : opts.headers,
        body: opts.body?.(),
      });
      await r.arrayBuffer();
      if (r.status >= 400) errors += 1;
      lat.push(performance.now() - t0);
    }
  };
  await Promise.all(Array.from({ length: opts.concurrency }, worker));
  const seconds = (performance.now() - started) / 1000;
  lat.sort((a, b) => a - b);
  return {
    count: lat.length,
    seconds,
    rps: lat.length / seconds,
    p50: pct(lat, 50),
    p95: pct(lat, 95),
    p99: pct(lat, 99),
    errors,
  };
}

export const fmt = (r: LoadResult) =>
  `${r.rps.toFixed(0)} req/s  p50 ${r.p50.toFixed(2)} ms  p95 ${r.p95.toFixed(2)} ms  p99 ${r.p99.toFixed(2)} ms  (${r.count} requests, ${r.errors} errors)`;

/** Spawn `bin/ffleet.ts <cmd>` and wait until /health answers. */
export async function startFfleet(
  cmd: string,
  env: Record<string, string>,
  port: number,
): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'bin/ffleet.ts', cmd], {
    cwd: ROOT,
    env: { ...process.env, LOG_LEVEL: 'warn', ...env, PORT: String(port) },
    stdio: ['ignore', 'inherit', 'inherit'],
    detached: true,
  });
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    try {
      const r = await fetch(`http://127.0.0.1:${port}/health`);
      if (r.ok) return child;
    } catch {}
    await new Promise((r) => setTimeout(r, 200));
  }
  child.kill('SIGKILL');
  throw new Error(`ffleet ${cmd} did not start`);
}

export async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  const t = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(t);
}

/** Resident set size of a process in MB (from /proc). */
export function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : Number.NaN;
}
