import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const METRICS = fileURLToPath(new URL('./metrics.ts', import.meta.url));
const DB = fileURLToPath(new URL('../db/client.ts', import.meta.url));

/**
 * Event-loop turns in `ms` of idle time of a fresh process that opened an in-memory embedded database,
 * created the metrics on it and answered one scrape (so the registry, default metrics included, is live).
 */
function idleLoopTurns(ms: number): Promise<number> {
  const script = `
const { createMetrics } = await import(${JSON.stringify(METRICS)});
const { openDatabase } = await import(${JSON.stringify(DB)});
const database = await openDatabase({ kind: 'pglite' });
const metrics = createMetrics(database);
const text = await metrics.registry.metrics();
if (!text.includes('ffleet_nodejs_eventloop_lag_p50_seconds')) throw new Error('no event-loop metrics');
const turns = () => performance.nodeTiming.uvMetricsInfo.loopCount;
setTimeout(() => {
  const start = turns();
  setTimeout(async () => {
    const idle = turns() - start;
    await database.close();
    console.log(JSON.stringify({ turns: idle }));
    process.exit(0);
  }, ${ms});
}, 200);`;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    child.on('error', reject);
    child.on('exit', (code) => {
      if (code !== 0) return reject(new Error(`child exited ${code}: ${out}`));
      resolve((JSON.parse(out) as { turns: number }).turns);
    });
  });
}

describe('metrics', () => {
  it('leaves an idle process asleep: the event-loop delay histogram samples every 100 ms, not every 10', async () => {
    // prom-client's default (10 ms) woke the loop ~100 times a second; at 100 ms it is ~10 in one second.
    const turns = await idleLoopTurns(1_000);
    expect(turns).toBeGreaterThan(0);
    expect(turns).toBeLessThan(40);
    // The child starts an embedded database (migrations included): give it room on a loaded machine.
  }, 60_000);
});
