// npm run bench:webhooks — webhook delivery throughput and latency against the PostgreSQL server.
// Numbers, not a test: prints them; exits 1 only if a delivery was lost or duplicated.

import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { cpus, loadavg } from 'node:os';
import { sql } from 'drizzle-orm';
import pino from 'pino';
import type { Database, Db } from '../../control-plane/src/db/client.ts';
import { webhooks } from '../../control-plane/src/db/schema.ts';
import { writeEvent } from '../../control-plane/src/events/outbox.ts';
import { VERSION } from '../../control-plane/src/version.ts';
import {
  DeliveryDispatcher,
  POLL_INTERVAL_MS,
} from '../../control-plane/src/webhooks/delivery-dispatcher.ts';
import { openTestDatabase } from '../helpers/db.ts';
import { pct } from './harness.ts';

const TASKS = 1_000;
/** Concurrent writers, each committing one event per transaction back to back (API/agent reports). */
const WRITERS = 8;
const DEADLINE_MS = 120_000;

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
  if (m === 'report') process.send({ arrivals });
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
    close: () => {
      child.kill();
    },
  };
}

type Receiver = Awaited<ReturnType<typeof startReceiver>>;

/** TASKS task.updated (DONE_SUCCESSFUL) events, each committed on its own; the commit time per event id. */
async function writeEvents(database: Database, label: string, onCommit: () => void): Promise<Run> {
  const commits = new Map<string, number>();
  let next = 0;
  let firstCommit = Number.POSITIVE_INFINITY;
  let lastCommit = 0;
  const writer = async () => {
    while (next < TASKS) {
      next++;
      const taskId = randomUUID();
      const p = await database.db.transaction((tx) =>
        writeEvent(tx as unknown as Db, {
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
      const at = Date.now();
      commits.set(p.id, at);
      firstCommit = Math.min(firstCommit, at);
      lastCommit = Math.max(lastCommit, at);
      onCommit();
    }
  };
  await Promise.all(Array.from({ length: WRITERS }, writer));
  return { label, commits, firstCommit, lastCommit };
}

/** Wait until every committed event has arrived (or the deadline), then the arrivals by event id. */
async function waitAll(receiver: Receiver, run: Run): Promise<Map<string, number[]>> {
  const deadline = Date.now() + DEADLINE_MS;
  for (;;) {
    const arrivals = await receiver.arrivals();
    if (Date.now() > deadline || [...run.commits.keys()].every((id) => arrivals.has(id))) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  // Give duplicates (if any) a chance to show up.
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

async function main() {
  const database = await openTestDatabase('postgres');
  const receiver = await startReceiver();
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
  const dispatcher = new DeliveryDispatcher({
    database,
    logger,
    timeoutMs: 10_000,
    userAgent: `ffleet/${VERSION}`,
  });
  // Node loads fetch lazily; keep that one-off cost out of the numbers.
  await (await fetch(receiver.url, { method: 'POST', body: '{}' })).arrayBuffer();
  receiver.clear();

  console.log(`webhook bench: ${TASKS} tasks, PostgreSQL, one global webhook, poll ${POLL_INTERVAL_MS} ms`);
  // Every number below is round-trip bound: on a busy machine they say more about the machine.
  console.log(
    `machine: ${cpus().length} CPUs, load average ${loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')}`,
  );
  dispatcher.start();
  const live = await writeEvents(database, 'live (deliver while committing; wake() after each commit)', () =>
    dispatcher.wake(),
  );
  const a = report(live, await waitAll(receiver, live));
  await dispatcher.stop();

  // Backlog: the same number written with no dispatcher running, then drained (pure dispatcher rate).
  receiver.clear();
  const backlog = await writeEvents(
    database,
    'backlog drain (written first, then one dispatcher started)',
    () => {},
  );
  const drainer = new DeliveryDispatcher({
    database,
    logger,
    timeoutMs: 10_000,
    userAgent: `ffleet/${VERSION}`,
  });
  const started = Date.now();
  drainer.start();
  const b = report(backlog, await waitAll(receiver, backlog), started);
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
    `targets: ≥1000 deliveries/s ${a.rate >= 1000 ? 'met' : 'MISSED'}; p95 ≤ 200 ms ${a.p95 <= 200 ? 'met' : 'MISSED'}; 0 lost ${a.lost + b.lost === 0 ? 'met' : 'MISSED'}`,
  );
  receiver.close();
  await database.drop();
  if (a.lost + b.lost + a.duplicated + b.duplicated > 0) process.exitCode = 1;
}

await main();
