import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { connect } from 'node:net';

export interface MosquittoProcessOptions {
  confPath: string;
  port: number;
  host?: string;
  /** Path of the mosquitto binary. */
  bin?: string;
  startTimeoutMs?: number;
}

export type MosquittoStartResult = { ok: true } | { ok: false; error: string };

/** SIGTERM first; Mosquitto exits at once on it, so this is only for a wedged process. */
const KILL_GRACE_MS = 2_000;
const POLL_MS = 20;

/** True when a runnable Mosquitto binary exists. */
export function isMosquittoAvailable(bin = 'mosquitto'): boolean {
  const r = spawnSync(bin, ['-h'], { stdio: 'ignore' });
  return !r.error;
}

/**
 * A Mosquitto broker run as a child process (tests, and local development against a real external
 * broker). start() resolves once the listener accepts TCP connections.
 */
export class MosquittoProcess {
  private readonly opts: MosquittoProcessOptions;
  private child: ChildProcess | null = null;
  private stderr = '';

  constructor(opts: MosquittoProcessOptions) {
    this.opts = opts;
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  async start(): Promise<MosquittoStartResult> {
    if (this.child) return { ok: false, error: 'already started' };
    this.stderr = '';
    const child = spawn(this.opts.bin ?? 'mosquitto', ['-c', this.opts.confPath], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    this.child = child;
    child.stderr?.on('data', (d: Buffer) => {
      // Keep the tail only: it is for the error message when start fails.
      this.stderr = (this.stderr + d.toString()).slice(-4000);
    });
    let exited = false;
    child.once('exit', () => {
      exited = true;
    });
    child.once('error', () => {
      exited = true;
    });
    const deadline = Date.now() + (this.opts.startTimeoutMs ?? 5_000);
    while (Date.now() < deadline) {
      if (exited) {
        this.child = null;
        return { ok: false, error: `mosquitto exited during start: ${this.stderr.trim()}` };
      }
      if (await canConnect(this.opts.host ?? '127.0.0.1', this.opts.port)) return { ok: true };
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
    await this.stop();
    return { ok: false, error: `mosquitto did not listen on port ${this.opts.port}: ${this.stderr.trim()}` };
  }

  /** Terminate the broker and wait for it to exit. Idempotent. */
  async stop(): Promise<void> {
    const child = this.child;
    this.child = null;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), KILL_GRACE_MS);
    await exited;
    clearTimeout(timer);
  }
}

function canConnect(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => {
      socket.destroy();
      resolve(false);
    });
  });
}
