import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

export const ROOT = resolve(import.meta.dirname, '../..');

/**
 * A numeric benchmark knob from the environment: `fallback` when unset or empty; a clear error when it
 * is not a number, not whole (`integer`) or below `min` (a typo would otherwise run as NaN rounds or
 * tasks and print nonsense).
 */
export function envNumber(
  name: string,
  fallback: number,
  opts: { min?: number; integer?: boolean } = {},
): number {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const n = Number(raw);
  const min = opts.min ?? 0;
  const integer = opts.integer ?? true;
  if (!Number.isFinite(n) || n < min || (integer && !Number.isInteger(n)))
    throw new Error(
      `${name}=${JSON.stringify(raw)}: expected ${integer ? 'a whole number' : 'a number'} ≥ ${min}`,
    );
  return n;
}

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

export type LoadOptions = {
  method?: string;
  /** Request bodies; called `total` times BEFORE the clock starts (bodies are pre-built). */
  body?: () => string;
  concurrency: number;
  total: number;
  headers?: Record<string, string>;
};

/**
 * Closed-loop load: `concurrency` clients each sending requests back to back until `total` are done.
 * node:http with a keep-alive Agent (one socket per client) and pre-built request buffers, so the
 * client costs little CPU next to the server (fetch/undici capped at ~880 req/s on 2 cores).
 */
export async function load(url: string, opts: LoadOptions): Promise<LoadResult> {
  const u = new URL(url);
  const method = opts.method ?? 'GET';
  const headers: Record<string, string> = { ...opts.headers };
  const bodies = opts.body ? Array.from({ length: opts.total }, () => Buffer.from(opts.body!())) : null;
  if (bodies) headers['content-type'] ??= 'application/json';
  const agent = new http.Agent({ keepAlive: true, maxSockets: opts.concurrency });
  const lat: number[] = [];
  let next = 0;
  let errors = 0;
  const one = (i: number) =>
    new Promise<number>((resolve, reject) => {
      const body = bodies?.[i];
      const req = http.request(
        {
          agent,
          host: u.hostname,
          port: u.port,
          path: u.pathname + u.search,
          method,
          headers: body ? { ...headers, 'content-length': String(body.length) } : headers,
        },
        (res) => {
          res.on('data', () => {});
          res.on('end', () => resolve(res.statusCode ?? 0));
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  const worker = async () => {
    while (next < opts.total) {
      const i = next++;
      const t0 = performance.now();
      try {
        if ((await one(i)) >= 400) errors += 1;
      } catch {
        errors += 1;
      }
      lat.push(performance.now() - t0);
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: opts.concurrency }, worker));
  const seconds = (performance.now() - started) / 1000;
  agent.destroy();
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

/** `wrk` on PATH (C load generator, runs outside this process), or null. */
export const WRK: string | null = (() => {
  if (process.env.BENCH_NO_WRK === '1') return null;
  for (const dir of (process.env.PATH ?? '').split(':')) {
    if (dir && existsSync(join(dir, 'wrk'))) return join(dir, 'wrk');
  }
  return null;
})();

/**
 * Load with `wrk` for `seconds` (one connection per client, 1 thread per core). Bodies come from
 * `body()`: up to 2,000 are pre-built into a Lua table and sent round-robin. Falls back to `load`
 * (node:http) for `fallbackTotal` requests when wrk is not installed.
 */
export async function loadFast(
  url: string,
  opts: LoadOptions & { seconds: number },
): Promise<LoadResult & { tool: string }> {
  if (!WRK) return { ...(await load(url, opts)), tool: 'node:http' };
  const dir = mkdtempSync(join(tmpdir(), 'ffleet-wrk-'));
  const script = join(dir, 'load.lua');
  const n = opts.body ? Math.min(opts.total, 2000) : 0;
  const bodies = opts.body ? Array.from({ length: n }, () => opts.body!()) : [];
  const hdrs = { ...opts.headers, ...(opts.body ? { 'content-type': 'application/json' } : {}) };
  // Lua long strings cannot hold "]==]"; JSON bodies here never do.
  writeFileSync(
    script,
    `local bodies = {${bodies.map((b) => `[==[${b}]==]`).join(',\n')}}
local i = 0
wrk.method = ${JSON.stringify(opts.method ?? 'GET')}
${Object.entries(hdrs)
  .map(([k, v]) => `wrk.headers[${JSON.stringify(k)}] = ${JSON.stringify(v)}`)
  .join('\n')}
request = function()
  if #bodies == 0 then return wrk.format(nil) end
  i = i % #bodies + 1
  return wrk.format(nil, nil, nil, bodies[i])
end
done = function(summary, latency, requests)
  local errs = summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.status + summary.errors.timeout
  io.write(string.format("FFLEET %d %f %f %f %f %d\\n", summary.requests, summary.duration / 1e6,
    latency:percentile(50) / 1e3, latency:percentile(95) / 1e3, latency:percentile(99) / 1e3, errs))
end
`,
  );
  const threads = Math.max(1, Math.min(2, opts.concurrency));
  const out = await new Promise<string>((resolve, reject) => {
    const child = spawn(
      WRK,
      ['-t', String(threads), '-c', String(opts.concurrency), '-d', `${opts.seconds}s`, '-s', script, url],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let text = '';
    child.stdout.on('data', (d) => {
      text += d;
    });
    child.on('error', reject);
    child.on('exit', (code) =>
      code === 0 ? resolve(text) : reject(new Error(`wrk exited ${code}: ${text}`)),
    );
  });
  rmSync(dir, { recursive: true, force: true });
  const m = /FFLEET (\d+) ([\d.]+) ([\d.]+) ([\d.]+) ([\d.]+) (\d+)/.exec(out);
  if (!m) throw new Error(`unexpected wrk output: ${out}`);
  const count = Number(m[1]);
  const seconds = Number(m[2]);
  return {
    count,
    seconds,
    rps: count / seconds,
    p50: Number(m[3]),
    p95: Number(m[4]),
    p99: Number(m[5]),
    errors: Number(m[6]),
    tool: 'wrk',
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
  const child = spawn(process.execPath, ['bin/ffleet.js', cmd], {
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

/** `/proc/<pid>/stat`: the command name, and the fields after it (field 3, the state, is index 0). */
function readStat(pid: number | string): { comm: string; fields: string[] } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const end = stat.lastIndexOf(')');
  return { comm: stat.slice(stat.indexOf('(') + 1, end), fields: stat.slice(end + 2).split(' ') };
}

/** utime and stime of stat fields in ms (clock ticks are 100 Hz on Linux). */
const splitOf = (f: string[]) => ({ user: Number(f[11]) * 10, sys: Number(f[12]) * 10 });

/** A process's user and system CPU time so far (ms, 10 ms ticks). */
export function cpuSplitMs(pid: number): { user: number; sys: number } {
  return splitOf(readStat(pid).fields);
}

/** User + system CPU time of a process in ms (from /proc/<pid>/stat). */
export function cpuMs(pid: number): number {
  const { user, sys } = cpuSplitMs(pid);
  return user + sys;
}

/** CPU ms (user + system) of a process's children that it has waited for (cutime + cstime). */
export function childCpuMs(pid: number): number {
  const f = readStat(pid).fields;
  return (Number(f[13]) + Number(f[14])) * 10;
}

/**
 * CPU ms (user + system) of every live process whose command name is `comm` (e.g. all of a PostgreSQL
 * server's processes: the control plane's backends, the WAL writer, the checkpointer).
 */
export function processesCpuMs(comm: string): number {
  let ms = 0;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const { comm: name, fields } = readStat(entry);
      if (name !== comm) continue;
      const { user, sys } = splitOf(fields);
      ms += user + sys;
    } catch {
      // The process ended between readdir and read.
    }
  }
  return ms;
}

/**
 * The whole machine's CPU time so far, all cores (ms, from the first line of `/proc/stat`): busy (user, nice,
 * system, irq, softirq: every process and kernel thread, the ones no /proc/<pid> row accounts for included) and
 * idle (idle + iowait). Steal (the hypervisor's) is in neither.
 */
export function machineCpuMs(): { busy: number; idle: number } {
  const f = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!.trim().split(/\s+/).slice(1).map(Number);
  const [user, nice, system, idle, iowait, irq, softirq] = f as [
    number,
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  return { busy: (user + nice + system + irq + softirq) * 10, idle: (idle + iowait) * 10 };
}

/**
 * Read and write system calls a process made so far (`/proc/<pid>/io`: syscr, syscw; sockets included).
 * The kernel adds a child's counts to its parent's when the parent reaps it, so an agent's include those
 * of the transcoders it ran.
 */
export function syscalls(pid: number): { reads: number; writes: number } {
  const io = readFileSync(`/proc/${pid}/io`, 'utf8');
  const field = (name: string) => Number(io.match(new RegExp(`^${name}: (\\d+)$`, 'm'))?.[1] ?? Number.NaN);
  return { reads: field('syscr'), writes: field('syscw') };
}
