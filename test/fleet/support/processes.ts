import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { resolve } from 'node:path';

/** Repository root: the `ffleet` bin and the tsx loader are resolved from there. */
export const REPO_ROOT = resolve(import.meta.dirname, '../../..');
const BIN = resolve(REPO_ROOT, 'bin/ffleet.js');
/** Output kept per child process (the tail is what a failing test needs). */
const OUTPUT_LIMIT = 256 * 1024;
/** How long a SIGTERMed child may take before it is SIGKILLed. */
const TERM_GRACE_MS = 15_000;

/** Variables a child must not inherit from the test environment: the cluster sets its own. */
export const OWN_VARS = /^(DATABASE_URL|MQTT_URL|MQTT_PORT|PORT|HOST|LOG_LEVEL|NODE_OPTIONS|FFLEET_.*)$/;

/** This process's environment without OWN_VARS: what a child ffleet process starts from. */
export const inheritedEnv = (): NodeJS.ProcessEnv =>
  Object.fromEntries(Object.entries(process.env).filter(([k]) => !OWN_VARS.test(k)));

/** A TCP port that was free a moment ago (bound on all interfaces, as the embedded broker does). */
export function findFreePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once('error', fail);
    s.listen(0, () => {
      const a = s.address();
      const port = typeof a === 'object' && a ? a.port : 0;
      s.close(() => ok(port));
    });
  });
}

/** Pids of every live descendant of `pid` (children in their own process groups included). */
export function descendantPids(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      // Field 4 (ppid) follows the command name, which may itself contain spaces and parentheses.
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      const list = children.get(ppid) ?? [];
      list.push(Number(entry));
      children.set(ppid, list);
    } catch {
      // The process exited while we looked.
    }
  }
  const out: number[] = [];
  const queue = [pid];
  while (queue.length) {
    for (const c of children.get(queue.shift()!) ?? []) {
      out.push(c);
      queue.push(c);
    }
  }
  return out;
}

/** Pids of processes whose command line contains `text` (e.g. a unique output path). */
export function processesMatching(text: string): number[] {
  try {
    return execFileSync('pgrep', ['-f', '--', text], { encoding: 'utf8' })
      .split('\n')
      .filter(Boolean)
      .map(Number)
      .filter((p) => p !== process.pid);
  } catch {
    return []; // pgrep exits 1 when nothing matches.
  }
}

function signalPid(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // ESRCH: already gone.
  }
}

/** SIGCONT + SIGKILL every process whose command line mentions `text` (a cluster's temp dir). */
export async function killLeftovers(text: string): Promise<number[]> {
  const pids = processesMatching(text);
  for (const p of pids) {
    signalPid(p, 'SIGCONT');
    signalPid(p, 'SIGKILL');
  }
  return pids;
}

/** Children still running: killed if this test worker exits without stopping them (they are detached). */
const live = new Set<ChildProcessHandle>();
process.once('exit', () => {
  for (const h of live) {
    signalPid(-h.pid, 'SIGCONT');
    signalPid(-h.pid, 'SIGKILL');
  }
});

/** One `ffleet` child process: output capture, readiness polling, signals, tree freeze, termination. */
export class ChildProcessHandle {
  readonly proc: ChildProcess;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  #out = '';
  #exit: { code: number | null; signal: NodeJS.Signals | null } | null = null;

  constructor(
    readonly label: string,
    proc: ChildProcess,
  ) {
    this.proc = proc;
    const keep = (b: Buffer) => {
      this.#out += b.toString('utf8');
      if (this.#out.length > OUTPUT_LIMIT) this.#out = this.#out.slice(-OUTPUT_LIMIT);
    };
    proc.stdout?.on('data', keep);
    proc.stderr?.on('data', keep);
    live.add(this);
    this.exited = new Promise((ok) =>
      proc.once('exit', (code, signal) => {
        this.#exit = { code, signal };
        live.delete(this);
        ok(this.#exit);
      }),
    );
  }

  get pid(): number {
    return this.proc.pid!;
  }

  get running(): boolean {
    return this.#exit === null;
  }

  output(): string {
    return this.#out;
  }

  /** Poll `check` until true; fails at once (with the output) if the process exits meanwhile. */
  async waitUntil(check: () => Promise<boolean> | boolean, timeoutMs: number, what: string): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (await Promise.resolve(check()).catch(() => false)) return;
      if (this.#exit) {
        throw new Error(
          `${this.label} exited (${JSON.stringify(this.#exit)}) while waiting for ${what}:\n${this.#out.slice(-4000)}`,
        );
      }
      if (Date.now() > deadline) {
        throw new Error(
          `timed out after ${timeoutMs} ms waiting for ${what}; ${this.label} output:\n${this.#out.slice(-4000)}`,
        );
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Resolve when the output matches `re`. */
  waitForOutput(re: RegExp, timeoutMs: number): Promise<void> {
    return this.waitUntil(() => re.test(this.#out), timeoutMs, `output ${re}`);
  }

  /** Send a signal to the process itself (the CLI's own handlers: SIGTERM once = drain, twice = hand back). */
  signal(sig: NodeJS.Signals): void {
    signalPid(this.pid, sig);
  }

  /**
   * Freeze the process and everything it started (a paused VM or a hung host): the transcoder runs in
   * a process group of its own, so stopping the agent alone would leave it encoding.
   */
  freeze(): number[] {
    const tree = [this.pid, ...descendantPids(this.pid)];
    for (const p of tree) signalPid(p, 'SIGSTOP');
    return tree;
  }

  /** Resume a frozen tree (pids from freeze(), so children are not missed). */
  thaw(tree: number[]): void {
    for (const p of tree) signalPid(p, 'SIGCONT');
  }

  /** End the process (and its descendants): `signal`, then SIGKILL after a grace period. Idempotent. */
  async terminate(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    if (!this.#exit) {
      const tree = signal === 'SIGKILL' ? descendantPids(this.pid) : [];
      signalPid(-this.pid, 'SIGCONT');
      signalPid(this.pid, signal);
      for (const p of tree) signalPid(p, 'SIGKILL');
      const timer = setTimeout(
        () => signalPid(-this.pid, 'SIGKILL'),
        signal === 'SIGKILL' ? 0 : TERM_GRACE_MS,
      );
      await this.exited;
      clearTimeout(timer);
    }
  }
}

/**
 * Spawn `node bin/ffleet.js <command>` (the installed `ffleet` command, run from its bundle) in its own
 * process group with `env` on top.
 *
 * A control plane on the embedded database is started with V8's default, dynamic tiering of
 * WebAssembly (a flag given to node wins over bin/v8-flags.js): its eager tier-up optimises all of
 * PGlite once at load, which pays off over thousands of tasks, not in a test (1.96 → 1.19 s of CPU for
 * its first 8 s on a 2-vCPU VM). test/cli/v8-flags.test.ts covers the flags themselves.
 */
export function spawnFfleet(command: string, env: Record<string, string>, label: string): ChildProcessHandle {
  const runsControlPlane = command === 'start' || command === 'control-plane';
  const nodeArgs = runsControlPlane ? ['--wasm-dynamic-tiering'] : [];
  const proc = spawn(process.execPath, [...nodeArgs, BIN, command], {
    cwd: REPO_ROOT,
    env: { ...inheritedEnv(), ...env },
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return new ChildProcessHandle(label, proc);
}
