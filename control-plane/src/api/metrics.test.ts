import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const METRICS = fileURLToPath(new URL('./metrics.ts', import.meta.url));

/** Event-loop turns of a fresh process in `ms` of idle time after createMetrics (the database is never queried). */
function idleLoopTurns(ms: number): Promise<number> {
  const script = `
const { createMetrics } = await import(${JSON.stringify(METRICS)});
const metrics = createMetrics({});
const turns = () => performance.nodeTiming.uvMetricsInfo.loopCount;
setTimeout(() => {
  const start = turns();
  setTimeout(() => { console.log(JSON.stringify({ turns: turns() - start, registered: !!metrics })); process.exit(0); }, ${ms});
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
  });
});
