/** Test support for the watch scanner tests: real temp folders, recorded callbacks, polling waits. */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { WatchfolderAssignment } from '@ffleet/shared';
import { pino } from 'pino';
import { afterEach, beforeEach } from 'vitest';
import {
  type SubmitResult,
  type WatchFile,
  WatchScanner,
  type WatchScannerOptions,
  type WatchState,
} from './watch-scanner.ts';

/** Test interval unit: `interval: 1` means 100 ms. */
export const UNIT_MS = 100;

export const silentLogger = pino({ level: 'silent' });

export function makeTempDir(prefix = 'ffleet-watch-'): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

export function removeDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

export function assignmentFor(
  path: string,
  over: Partial<WatchfolderAssignment> = {},
): WatchfolderAssignment {
  return {
    id: 'wf-1',
    name: 'wf',
    path,
    interval: 1,
    growthChecks: 1,
    filter: {},
    suspended: false,
    ...over,
  };
}

/** Poll `pred` every 10 ms until true; throws with `what` after `timeoutMs`. */
export async function waitFor(pred: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!pred()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

type Submitted = WatchFile & { scan: number; at: number };

/** A scanner with recording callbacks. `scan` of a submit = 1-based number of the scan that made it. */
export class ScannerHarness {
  readonly submits: Submitted[] = [];
  readonly states: (WatchState & { at: number })[] = [];
  /** Replace to script the control plane's answers. */
  respond: (file: WatchFile) => Promise<SubmitResult> = async () => ({ ok: true });
  /** Called synchronously after each scan's onState with the 1-based scan number. */
  afterScan: (scan: number) => void = () => {};
  readonly scanner: WatchScanner;

  constructor(
    assignment: WatchfolderAssignment,
    opts: Partial<Omit<WatchScannerOptions, 'assignment' | 'submit' | 'onState' | 'logger'>> = {},
  ) {
    this.scanner = new WatchScanner({
      intervalUnitMs: UNIT_MS,
      watcher: 'off',
      ...opts,
      assignment,
      logger: silentLogger,
      submit: (file) => {
        this.submits.push({ ...file, scan: this.states.length + 1, at: performance.now() });
        return this.respond(file);
      },
      onState: (s) => {
        this.states.push({ ...s, at: performance.now() });
        this.afterScan(this.states.length);
      },
    });
  }

  start(): this {
    this.scanner.start();
    return this;
  }

  /** Wait until `n` more states have been reported than now. */
  async scans(n: number, timeoutMs = 5000): Promise<void> {
    const target = this.states.length + n;
    await waitFor(() => this.states.length >= target, `${n} scans`, timeoutMs);
  }

  lastError(): string | undefined {
    return this.states.at(-1)?.error;
  }

  submitted(): string[] {
    return this.submits.map((s) => s.relativePath).sort();
  }
}

/**
 * The per-test folders of a test file: before each test a fresh temp folder `tmp` and the watched
 * folder `root` in it (`tmp/<sub>`, or `tmp` itself without `sub`); after each test every scanner made
 * with `harness()` is stopped, then the folder is removed.
 */
export function useWatchFolder(opts: { sub?: string } = {}) {
  let tmp = '';
  let root = '';
  let harnesses: ScannerHarness[] = [];
  beforeEach(() => {
    tmp = makeTempDir();
    root = opts.sub === undefined ? tmp : join(tmp, opts.sub);
    if (opts.sub !== undefined) mkdirSync(root);
  });
  afterEach(async () => {
    await Promise.all(harnesses.map((h) => h.scanner.stop()));
    harnesses = [];
    removeDir(tmp);
  });
  return {
    /** The test's temp folder (holds `root`; room for folders outside the watched one). */
    get tmp(): string {
      return tmp;
    },
    /** The watched folder. */
    get root(): string {
      return root;
    },
    /** A scanner harness that is stopped after the test. */
    harness(...args: ConstructorParameters<typeof ScannerHarness>): ScannerHarness {
      const h = new ScannerHarness(...args);
      harnesses.push(h);
      return h;
    },
  };
}
