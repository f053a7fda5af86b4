// npm run bench:api — see README. Numbers, not a test: prints a table, exits 0.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import { openDatabase } from '../../control-plane/src/db/client.ts';
import { openTestDatabase, postgresAvailable } from '../helpers/db.ts';
import {
  envNumber,
  fmt,
  freePort,
  load,
  loadFast,
  ROOT,
  rssMb,
  startFfleet,
  stopChild,
  WRK,
} from './harness.ts';

const SEQ = envNumber('BENCH_SEQ', 1000, { min: 1 });
const CONC_TOTAL = envNumber('BENCH_CONC', 5000, { min: 1 });
const ROWS = envNumber('BENCH_ROWS', 100_000);
const LIST_REQ = envNumber('BENCH_LIST', 300, { min: 1 });
/** Duration of each wrk run (16 clients); node:http runs BENCH_CONC requests instead. */
const SECONDS = envNumber('BENCH_SECONDS', 5, { min: 1, integer: false });

const taskBody = () =>
  JSON.stringify({
    command: '-i ${INPUT_FILE} -c:v libx264 ${OUTPUT_FILE}',
    inputFile: `/media/in/${Math.random().toString(36).slice(2)}.mov`,
    outputFile: '/media/out/${INPUT_FILE_BASENAME}.mp4',
  });

/** Fill the tasks table to ROWS with one INSERT … generate_series (spread over statuses and time). */
async function seed(db: Awaited<ReturnType<typeof openDatabase>>) {
  await db.db.execute(sql`
    INSERT INTO tasks (id, name, command_raw, input_raw, output_raw, status, priority, source, created_at, updated_at)
    SELECT gen_random_uuid(), 'seed-' || g, '-i \${INPUT_FILE} \${OUTPUT_FILE}', '/in/' || g || '.mov', '/out/x.mp4',
      (ARRAY['QUEUED','DONE_SUCCESSFUL','DONE_ERROR','DONE_CANCELED'])[1 + g % 4], g % 7, 'api',
      1700000000000 + g * 10, 1700000000000 + g * 10
    FROM generate_series(1, ${ROWS}) g`);
  await db.db.execute(sql`ANALYZE tasks`);
}

async function benchBackend(kind: 'pglite' | 'postgres') {
  const dataDir = mkdtempSync(join(tmpdir(), 'ffleet-bench-'));
  const pg = kind === 'postgres' ? await openTestDatabase('postgres') : null;
  const dbUrl = pg?.url;
  const env: Record<string, string> = {
    FFLEET_DATA_DIR: dataDir,
    MQTT_PORT: String(await freePort()),
    FFLEET_LOCAL_AGENT: '0',
  };
  if (dbUrl) env.DATABASE_URL = dbUrl;
  const port = await freePort();
  const base = `http://127.0.0.1:${port}/api/v1`;
  let cp = await startFfleet('control-plane', env, port);
  const out: string[] = [];
  // warm-up
  await load(`${base}/tasks`, { method: 'POST', body: taskBody, concurrency: 4, total: 200 });
  const seq = await load(`${base}/tasks`, { method: 'POST', body: taskBody, concurrency: 1, total: SEQ });
  out.push(`POST /tasks sequential      ${fmt(seq)}`);
  const conc = await loadFast(`${base}/tasks`, {
    method: 'POST',
    body: taskBody,
    concurrency: 16,
    total: CONC_TOTAL,
    seconds: SECONDS,
  });
  out.push(`POST /tasks 16 clients      ${fmt(conc)} [${conc.tool}]`);
  await stopChild(cp);

  const db =
    kind === 'postgres'
      ? await openDatabase({ kind: 'postgres', url: dbUrl! })
      : await openDatabase({ kind: 'pglite', dataDir: join(dataDir, 'pglite') });
  await seed(db);
  const [{ n }] = (await db.rows<{ n: number }>(db.db, sql`select count(*)::int as n from tasks`)) as [
    { n: number },
  ];
  await db.close();
  cp = await startFfleet('control-plane', env, port);
  await load(`${base}/tasks?perPage=100`, { concurrency: 2, total: 50 });
  const list = await load(`${base}/tasks?perPage=100`, { concurrency: 1, total: LIST_REQ });
  out.push(`GET /tasks?perPage=100 (${n} rows)   ${fmt(list)}`);
  const queued = await load(`${base}/tasks?status=QUEUED`, { concurrency: 1, total: LIST_REQ });
  out.push(`GET /tasks?status=QUEUED (${n} rows) ${fmt(queued)}`);
  await stopChild(cp);
  rmSync(dataDir, { recursive: true, force: true });
  await pg?.drop();
  return { out, conc };
}

async function bareHono() {
  const port = await freePort();
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/bench/bare-hono.ts'], {
    cwd: ROOT,
    env: { ...process.env, PORT: String(port) },
    stdio: 'ignore',
  });
  try {
    for (let i = 0; i < 100; i++) {
      try {
        await fetch(`http://127.0.0.1:${port}/const`);
        break;
      } catch {
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    await load(`http://127.0.0.1:${port}/const`, {
      method: 'POST',
      body: taskBody,
      concurrency: 4,
      total: 200,
    });
    const r = await loadFast(`http://127.0.0.1:${port}/const`, {
      method: 'POST',
      body: taskBody,
      concurrency: 16,
      total: CONC_TOTAL,
      seconds: SECONDS,
    });
    // The in-process node:http client too, for comparison with the tool used above.
    const node = WRK
      ? await load(`http://127.0.0.1:${port}/const`, {
          method: 'POST',
          body: taskBody,
          concurrency: 16,
          total: CONC_TOTAL,
        })
      : null;
    return { ...r, node };
  } finally {
    await stopChild(child);
  }
}

async function idleMemory() {
  const dataDir = mkdtempSync(join(tmpdir(), 'ffleet-bench-'));
  const port = await freePort();
  const child = await startFfleet(
    'start',
    { FFLEET_DATA_DIR: dataDir, MQTT_PORT: String(await freePort()) },
    port,
  );
  await new Promise((r) => setTimeout(r, 5000));
  const mb = rssMb(child.pid!);
  await stopChild(child);
  rmSync(dataDir, { recursive: true, force: true });
  return mb;
}

const bare = await bareHono();
console.log(`bare Hono POST 16 clients  ${fmt(bare)} [${bare.tool}]`);
if (bare.node) console.log(`bare Hono POST 16 clients  ${fmt(bare.node)} [node:http]`);
const BACKENDS = (process.env.BENCH_BACKENDS ?? 'pglite,postgres').split(',');
for (const kind of ['pglite', 'postgres'] as const) {
  if (!BACKENDS.includes(kind)) continue;
  if (kind === 'postgres' && !(await postgresAvailable())) {
    console.log('postgres: server not reachable, skipped');
    continue;
  }
  console.log(`\n== ${kind} ==`);
  const { out, conc } = await benchBackend(kind);
  for (const l of out) console.log(l);
  console.log(
    `ratio ffleet/bare-hono throughput (16 clients): ${(conc.rps / bare.rps).toFixed(3)}  (bare is ${(bare.rps / conc.rps).toFixed(1)}x faster)`,
  );
}
if (process.env.BENCH_MEM !== '0')
  console.log(`\nall-in-one (PGlite + broker + local agent) idle RSS: ${(await idleMemory()).toFixed(0)} MB`);
process.exit(0);
