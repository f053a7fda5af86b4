// npm run bench:webhooks — webhook delivery throughput and latency against the PostgreSQL server.
// Numbers, not a test: prints them; exits 1 only if a delivery was lost or duplicated.

import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { cpus, loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { type SQL, sql } from 'drizzle-orm';
import pino from 'pino';
import { type Database, type Db, openDatabase } from '../../control-plane/src/db/client.ts';
import { webhooks } from '../../control-plane/src/db/schema.ts';
import { EmittedEvents } from '../../control-plane/src/events/outbox.ts';
import { VERSION } from '../../control-plane/src/version.ts';
import {
  DeliveryDispatcher,
  POLL_INTERVAL_MS,
} from '../../control-plane/src/webhooks/delivery-dispatcher.ts';
import { sendWebhook } from '../../control-plane/src/webhooks/send-webhook.ts';
import { openTestDatabase } from '../helpers/db.ts';
import { pct, cpuMs as processCpuMs } from './harness.ts';

/** Benchmark knobs (BENCH_WEBHOOK_*), read here only: they are not build inputs. */
const env = process.env;
const TASKS = Number(env.BENCH_WEBHOOK_TASKS ?? 1_000);
/**
 * Offered load of the live run, events/s (BENCH_WEBHOOK_RATE; 0 = as fast as the writers go). A little
 * above the 1,000/s target, so that a dispatcher that keeps up shows ≥ 1,000 deliveries/s; unpaced
 * writers would either fall short of it on a busy machine or burst far beyond it and measure queueing.
 */
const RATE = Number(env.BENCH_WEBHOOK_RATE ?? 1_250);
/** Concurrent writers (at most), each committing one event per transaction back to back (API/agent reports). */
const WRITERS = 32;
const DEADLINE_MS = 120_000;
/** BENCH_WEBHOOK_CLIENT=fetch: send with Node's fetch instead of the dispatcher's built-in client (A/B). */
const FETCH = env.BENCH_WEBHOOK_CLIENT === 'fetch' ? { fetch: globalThis.fetch } : {};
/** BENCH_WEBHOOK_SLOTS=total,perUrl: the dispatcher's in-flight caps (default: its defaults). */
const [SLOTS, PER_URL] = (env.BENCH_WEBHOOK_SLOTS ?? '').split(',').map(Number);
/** BENCH_WEBHOOK_PREFETCH=n: rows claimed ahead, as a multiple of the caps (1 = none; default: the dispatcher's). */
const PREFETCH = env.BENCH_WEBHOOK_PREFETCH ? { prefetch: Number(env.BENCH_WEBHOOK_PREFETCH) } : {};
const OPTIONS = {
  ...FETCH,
  ...PREFETCH,
  ...(SLOTS && PER_URL ? { concurrency: SLOTS, perUrlConcurrency: PER_URL } : {}),
};

type Run = { label: string; commits: Map<string, number>; firstCommit: number; lastCommit: number };

/**
 * The receiver, in its own process like a real one (it must not compete with the dispatcher for this
 * event loop): answers 204 and records every arrival time by webhook-id.
 */
const RECEIVER = `
const http = require('node:http');
const arrivals = {};
const server = http.createServer((req, res) => {
  const at = Date.now();
  req.resume();
  req.on('end', () => {
    const id = String(req.headers['webhook-id']);
    (arrivals[id] ??= []).push(at);
    res.writeHead(204);
    res.end();
  });
});
server.listen(0, '127.0.0.1', () => process.send({ port: server.address().port }));
process.on('message', (m) => {
  if (m === 'report') process.send({ arrivals, cpu: process.cpuUsage() });
  if (m === 'count') process.send({ count: Object.keys(arrivals).length });
  if (m === 'clear') for (const k of Object.keys(arrivals)) delete arrivals[k];
});
`;

async function startReceiver() {
  const child = spawn(process.execPath, ['-e', RECEIVER], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const ask = <T>(msg?: string) =>
    new Promise<T>((resolve) => {
      child.once('message', (m) => resolve(m as T));
      if (msg) child.send(msg);
    });
  const { port } = await ask<{ port: number }>();
  return {
    url: `http://127.0.0.1:${port}/hook`,
    clear: () => child.send('clear'),
    arrivals: async () =>
      new Map(Object.entries((await ask<{ arrivals: Record<string, number[]> }>('report')).arrivals)),
    cpu: async () => (await ask<{ cpu: NodeJS.CpuUsage }>('report')).cpu,
    /** Distinct event ids received (cheap: polled while waiting). */
    count: async () => (await ask<{ count: number }>('count')).count,
    close: () => {
      child.kill();
    },
  };
}

type Receiver = Awaited<ReturnType<typeof startReceiver>>;

/** CPU ms of a process so far; 0 once it exited (or off Linux). */
function procCpuMs(pid: number): number {
  try {
    return processCpuMs(pid);
  } catch {
    return 0;
  }
}

/** CPU ms of the given PostgreSQL backends (this benchmark's connections; other databases' load excluded). */
function postgresCpuMs(pids: number[]): number {
  return pids.reduce((ms, pid) => ms + procCpuMs(pid), 0);
}

const cpuMs = (u: NodeJS.CpuUsage) => (u.user + u.system) / 1000;

/** Statements the dispatcher ran, by kind, with their total time (the dispatcher's only way to the database is rows()). */
function countStatements(database: Database) {
  const byKind = new Map<string, { n: number; ms: number }>();
  const dialect = (database.db as unknown as { dialect: { sqlToQuery(q: SQL): { sql: string } } }).dialect;
  const counted: Database = {
    ...database,
    rows: async (db, query) => {
      const text = dialect.sqlToQuery(query).sql.replace(/\s+/g, ' ').trim();
      const kind = text.startsWith('WITH superseded')
        ? 'claim'
        : text.startsWith('WITH input')
          ? 'record'
          : text.startsWith('SELECT 1 FROM deliveries')
            ? 'probe'
            : text.slice(0, 30);
      const t0 = performance.now();
      try {
        return await database.rows(db, query);
      } finally {
        const k = byKind.get(kind) ?? { n: 0, ms: 0 };
        k.n++;
        k.ms += performance.now() - t0;
        byKind.set(kind, k);
      }
    },
  };
  return { counted, byKind };
}

/** Cost of one phase: CPU of this process (the dispatcher), the load, the receiver, PostgreSQL; statements. */
async function measure(database: Database, receiver: Receiver, load: Load) {
  const loadMs = () => procCpuMs(load.pid);
  // Every backend serving this benchmark's database (the pools keep their connections open).
  const backends = (
    await database.rows<{ pid: number }>(
      database.db,
      sql`SELECT pid FROM pg_stat_activity WHERE datname = current_database()`,
    )
  ).map((r) => r.pid);
  const [proc, rcv, pg, ld] = [process.cpuUsage(), await receiver.cpu(), postgresCpuMs(backends), loadMs()];
  const t0 = performance.now();
  return async (delivered: number, byKind: Map<string, { n: number; ms: number }>) => {
    const wall = performance.now() - t0;
    const selfUsage = process.cpuUsage(proc);
    const self = cpuMs(selfUsage);
    const r = cpuMs(await receiver.cpu()) - cpuMs(rcv);
    const p = postgresCpuMs(backends) - pg;
    const l = loadMs() - ld;
    const statements = new Map(byKind);
    // Printed after the phase's report.
    return (label = 'CPU per event') => {
      const per = (ms: number) => `${((ms / delivered) * 1000).toFixed(0)} µs`;
      console.log(
        `  ${label}: dispatcher process ${per(self)} (${((self / wall) * 100).toFixed(0)}% of a core, ${((selfUsage.system / 1000 / self) * 100).toFixed(0)}% system), ` +
          `load ${per(l)} (${((l / wall) * 100).toFixed(0)}%), receiver ${per(r)} (${((r / wall) * 100).toFixed(0)}%), PostgreSQL backends ${per(p)} (${((p / wall) * 100).toFixed(0)}%)`,
      );
      const total = [...statements.values()].reduce((a, b) => a + b.n, 0);
      console.log(
        `  dispatcher statements: ${(total / delivered).toFixed(2)} per delivery (${[...statements]
          .map(([k, { n, ms }]) => `${k} ${n} × ${(ms / n).toFixed(1)} ms`)
          .join(', ')})`,
      );
    };
  };
}

/**
 * The load: TASKS task.updated (DONE_SUCCESSFUL) events, each committed on its own by WRITERS concurrent
 * writers, in a process of their own (like the API and agent reports of a busy control plane, but not
 * competing with the dispatcher for its event loop, so the writers cannot be what limits the rate).
 * Reports each commit (event id, commit time) over IPC as it happens.
 */
async function loadProcess(): Promise<void> {
  const database = await openDatabase({ kind: 'postgres', url: env.BENCH_WEBHOOK_DB!, max: WRITERS });
  const send = (m: unknown) => new Promise<void>((r) => process.send!(m, () => r()));
  process.on('message', async (m: { tasks: number; rate: number }) => {
    let next = 0;
    const t0 = performance.now();
    const writer = async () => {
      while (next < m.tasks) {
        const i = next++;
        // Open loop: event i is due at t0 + i/rate (late ones go at once); rate 0 = back to back.
        const wait = m.rate > 0 ? t0 + (i * 1000) / m.rate - performance.now() : 0;
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        const taskId = randomUUID();
        const p = await database.db.transaction((tx) =>
          new EmittedEvents(tx as unknown as Db).emit({
            event: 'task.updated',
            taskId,
            data: {
              taskId,
              inputFile: '/in.mov',
              outputFile: '/out.mp4',
              status: 'DONE_SUCCESSFUL',
              progress: 100,
            },
          }),
        );
        process.send!({ id: p.id, at: Date.now() });
      }
    };
    await Promise.all(Array.from({ length: WRITERS }, writer));
    await send({ done: true });
  });
  await send({ ready: true });
}

async function startLoad(url: string) {
  const child = spawn(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url)], {
    env: { ...process.env, BENCH_WEBHOOK_ROLE: 'load', BENCH_WEBHOOK_DB: url },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  await new Promise((r) => child.once('message', r));
  return {
    pid: child.pid!,
    /** Commit TASKS events at `rate`/s (0: as fast as the writers go); onCommit runs per reported commit (the bus's job). */
    write(label: string, rate: number, onCommit: () => void): Promise<Run> {
      const commits = new Map<string, number>();
      let firstCommit = Number.POSITIVE_INFINITY;
      let lastCommit = 0;
      return new Promise((resolve) => {
        const onMessage = (m: { id?: string; at?: number; done?: boolean }) => {
          if (m.done) {
            child.off('message', onMessage);
            resolve({ label, commits, firstCommit, lastCommit });
            return;
          }
          commits.set(m.id!, m.at!);
          firstCommit = Math.min(firstCommit, m.at!);
          lastCommit = Math.max(lastCommit, m.at!);
          onCommit();
        };
        child.on('message', onMessage);
        child.send({ tasks: TASKS, rate });
      });
    },
    close: () => child.kill(),
  };
}

type Load = Awaited<ReturnType<typeof startLoad>>;

/** Wait until as many distinct event ids as were committed have arrived (or the deadline). */
async function waitAll(receiver: Receiver, run: Run): Promise<void> {
  const deadline = Date.now() + DEADLINE_MS;
  while (Date.now() < deadline && (await receiver.count()) < run.commits.size) {
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The arrivals by event id, after giving duplicates (if any) a chance to show up. */
async function settle(receiver: Receiver): Promise<Map<string, number[]>> {
  await new Promise((r) => setTimeout(r, 1_000));
  return receiver.arrivals();
}

function report(run: Run, arrivals: Map<string, number[]>, startedAt = run.firstCommit) {
  let lost = 0;
  let duplicated = 0;
  let last = 0;
  const latency: number[] = [];
  for (const [id, committed] of run.commits) {
    const got = arrivals.get(id);
    if (!got) {
      lost++;
      continue;
    }
    if (got.length > 1) duplicated++;
    latency.push(got[0]! - committed);
    last = Math.max(last, got[0]!);
  }
  latency.sort((a, b) => a - b);
  const seconds = (last - startedAt) / 1000;
  const writeRate = run.commits.size / ((run.lastCommit - run.firstCommit) / 1000);
  console.log(`\n${run.label}`);
  console.log(
    `  committed ${run.commits.size} events at ${writeRate.toFixed(0)} commits/s (${WRITERS} writers)`,
  );
  console.log(
    `  delivered ${latency.length} in ${seconds.toFixed(2)} s = ${(latency.length / seconds).toFixed(0)} deliveries/s` +
      (startedAt === run.firstCommit ? ' (cannot exceed the commit rate)' : ''),
  );
  console.log(
    `  commit→receiver latency  p50 ${pct(latency, 50)} ms  p95 ${pct(latency, 95)} ms  p99 ${pct(latency, 99)} ms  max ${latency.at(-1)} ms`,
  );
  console.log(`  lost ${lost}  duplicated ${duplicated}  (${arrivals.size} distinct event ids received)`);
  return { lost, duplicated, rate: latency.length / seconds, p95: pct(latency, 95) };
}

/** Where the time went, from the execution log: deliveries written since `since` (one run). */
async function timeline(database: Database, since: number) {
  const [t] = await database.rows<Record<string, string | number>>(
    database.db,
    sql`SELECT count(*) AS executions,
               percentile_disc(0.5) WITHIN GROUP (ORDER BY e.created_at - d.created_at) AS wait50,
               percentile_disc(0.95) WITHIN GROUP (ORDER BY e.created_at - d.created_at) AS wait95,
               percentile_disc(0.5) WITHIN GROUP (ORDER BY e.duration_ms) AS http50,
               percentile_disc(0.95) WITHIN GROUP (ORDER BY e.duration_ms) AS http95
        FROM webhook_executions e JOIN deliveries d ON d.id = e.delivery_id
        WHERE d.created_at >= ${since}`,
  );
  return () =>
    console.log(
      `  ${t?.executions} attempts: event written → attempt started p50 ${t?.wait50} ms p95 ${t?.wait95} ms; ` +
        `HTTP exchange p50 ${t?.http50} ms p95 ${t?.http95} ms`,
    );
}

async function main() {
  const database = await openTestDatabase('postgres');
  const receiver = await startReceiver();
  const load = await startLoad(database.url!);
  const logger = pino({ level: 'warn' });
  const now = Date.now();
  await database.db.insert(webhooks).values({
    id: randomUUID(),
    event: 'task.updated',
    url: receiver.url,
    secret: 'whsec_YmVuY2gtc2VjcmV0LWtleQ==',
    createdAt: now,
    updatedAt: now,
  });
  const { counted, byKind } = countStatements(database);
  const dispatcher = new DeliveryDispatcher({
    database: counted,
    logger,
    timeoutMs: 10_000,
    userAgent: `ffleet/${VERSION}`,
    ...OPTIONS,
  });
  // Warm the HTTP client up (Node loads fetch lazily; the built-in client opens its first connection).
  await sendWebhook({
    url: receiver.url,
    eventId: randomUUID(),
    body: '{}',
    secret: null,
    userAgent: 'warm-up',
    timeoutMs: 10_000,
    now: Date.now,
    ...FETCH,
  });
  receiver.clear();

  console.log(`webhook bench: ${TASKS} tasks, PostgreSQL, one global webhook, poll ${POLL_INTERVAL_MS} ms`);
  // Every number below is round-trip bound: on a busy machine they say more about the machine.
  console.log(
    `machine: ${cpus().length} CPUs, load average ${loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')}`,
  );
  dispatcher.start();
  byKind.clear();
  let since = Date.now();
  let done = await measure(database, receiver, load);
  const live = await load.write(
    `live: events committed at ${RATE || 'max'}/s, delivered as they commit (wake() per commit, as the bus does)`,
    RATE,
    () => dispatcher.wake(),
  );
  await waitAll(receiver, live);
  const liveCost = await done(live.commits.size, byKind);
  const a = report(live, await settle(receiver));
  liveCost();
  (await timeline(database, since))();
  await dispatcher.stop();

  // Backlog: the same number written with no dispatcher running, then drained (pure dispatcher rate).
  receiver.clear();
  byKind.clear();
  since = Date.now();
  done = await measure(database, receiver, load);
  const backlog = await load.write('backlog drain (written first, then one dispatcher started)', 0, () => {});
  const writeCost = await done(backlog.commits.size, byKind);
  const drainer = new DeliveryDispatcher({
    database: counted,
    logger,
    timeoutMs: 10_000,
    userAgent: `ffleet/${VERSION}`,
    ...OPTIONS,
  });
  const started = Date.now();
  byKind.clear();
  done = await measure(database, receiver, load);
  drainer.start();
  await waitAll(receiver, backlog);
  const drainCost = await done(backlog.commits.size, byKind);
  const b = report(backlog, await settle(receiver), started);
  drainCost();
  (await timeline(database, since))();
  writeCost('writing it (the load alone, no dispatcher running), CPU per event');
  await drainer.stop();

  const [counts] = await database.rows<{ delivered: string; executions: string }>(
    database.db,
    sql`SELECT (SELECT count(*) FROM deliveries WHERE state = 'delivered') AS delivered,
               (SELECT count(*) FROM webhook_executions) AS executions`,
  );
  console.log(
    `\ndatabase: ${counts?.delivered} deliveries delivered, ${counts?.executions} executions recorded`,
  );
  console.log(
    `targets (live run): ≥1000 deliveries/s ${a.rate >= 1000 ? 'met' : 'MISSED'}; p95 ≤ 200 ms ${a.p95 <= 200 ? 'met' : 'MISSED'}; 0 lost ${a.lost + b.lost === 0 ? 'met' : 'MISSED'}`,
  );
  receiver.close();
  load.close();
  await database.drop();
  if (a.lost + b.lost + a.duplicated + b.duplicated > 0) process.exitCode = 1;
}

if (env.BENCH_WEBHOOK_ROLE === 'load') await loadProcess();
else await main();
