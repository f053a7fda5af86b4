/**
 * Child process for bench:watch: CPU time per scan of an existing watchfolder tree, measured with the
 * agent's own scanner (agent/src/watch) in a process of its own so nothing else is counted.
 * `node --import tsx test/bench/watch-scan-cpu.ts <root> <native|chokidar|off> [scans]` prints one JSON line:
 * the first cycle (start-up, the change watcher's set-up) and every later cycle's user+system CPU, which
 * is `process.cpuUsage()` between two consecutive `onState` calls (one scan plus the idle time
 * around it).
 */
import { pino } from 'pino';
import type { WatcherMode } from '../../agent/src/watch/change-watcher.ts';
import { WatchScanner } from '../../agent/src/watch/watch-scanner.ts';

const [root, watcher = 'native', scansArg = '8'] = process.argv.slice(2);
if (!root) throw new Error('usage: watch-scan-cpu.ts <root> <native|chokidar|off> [scans]');
const scans = Number(scansArg);
const cpu: number[] = [];
const errors = new Set<string>();
let lastCheck = -1;
let last = process.cpuUsage();
let done!: () => void;
const finished = new Promise<void>((r) => {
  done = r;
});
const scanner = new WatchScanner({
  // growthChecks 1 like the bench's watchfolder; nothing unlocked is left, so nothing is submitted.
  assignment: {
    id: 'bench',
    name: 'bench',
    path: root,
    interval: 1,
    growthChecks: 1,
    filter: {},
    suspended: false,
  },
  submit: async () => ({ ok: false, error: 'measuring only', retry: false }),
  onState: (state) => {
    if (state.error) errors.add(state.error.slice(0, 200));
    // onState also reports problems between scans; a finished scan is the one with a new lastCheck.
    if (state.lastCheck === lastCheck) return;
    lastCheck = state.lastCheck;
    const now = process.cpuUsage();
    cpu.push((now.user - last.user + now.system - last.system) / 1000);
    last = now;
    if (cpu.length > scans) done();
  },
  logger: pino({ level: 'silent' }),
  watcher: watcher as WatcherMode,
});
const timeout = setTimeout(() => done(), 120_000);
scanner.start();
await finished;
clearTimeout(timeout);
const rssMb = process.memoryUsage().rss / 1048576;
await scanner.stop();
const [first, ...rest] = cpu;
console.log(JSON.stringify({ first, perScan: rest, rssMb, errors: [...errors] }));
process.exit(0);
