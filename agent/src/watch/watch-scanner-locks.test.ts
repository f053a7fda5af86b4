import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type LockWriter, writeLockFile } from './lock-file.ts';
import { assignmentFor, sleep, UNIT_MS, useWatchFolder, waitFor } from './test-harness.ts';
import type { SubmitResult } from './watch-scanner.ts';

const dirs = useWatchFolder();
const { harness } = dirs;

const put = (rel: string, content = 'x'): void => writeFileSync(join(dirs.root, rel), content);
const lockOf = (rel: string): string => join(dirs.root, `${rel}.lock`);

describe('WatchScanner locks', () => {
  it('writes an empty lock once the submit returned ok, and submits only once', async () => {
    put('a.mov');
    let release!: (r: SubmitResult) => void;
    const h = harness(assignmentFor(dirs.root));
    h.respond = () => new Promise((r) => (release = r));
    h.start();
    await waitFor(() => h.submits.length === 1, 'the submit');
    // While the control plane has not answered: no lock, and several scans do not submit again.
    await h.scans(3);
    expect(existsSync(lockOf('a.mov'))).toBe(false);
    expect(h.submits).toHaveLength(1);
    release({ ok: true });
    await waitFor(() => existsSync(lockOf('a.mov')), 'the lock');
    expect(readFileSync(lockOf('a.mov'), 'utf8')).toBe('');
    await h.scans(3);
    expect(h.submits).toHaveLength(1);
  });

  it('confirms the lock to the submitter only once it is on disk', async () => {
    put('c.mov');
    let confirmedWithLock: boolean | null = null;
    const h = harness(assignmentFor(dirs.root));
    h.respond = async () => ({
      ok: true,
      confirmLock: () => (confirmedWithLock = existsSync(lockOf('c.mov'))),
    });
    h.start();
    await waitFor(() => confirmedWithLock !== null, 'the confirmation');
    expect(confirmedWithLock).toBe(true);
  });

  it('processes a file again after its lock is removed, tracked from scratch', async () => {
    put('a.mov');
    const h = harness(assignmentFor(dirs.root, { growthChecks: 2 })).start();
    await waitFor(() => existsSync(lockOf('a.mov')), 'the first lock');
    let removedAfter = 0;
    h.afterScan = (scan) => {
      if (removedAfter === 0 && existsSync(lockOf('a.mov'))) {
        rmSync(lockOf('a.mov'));
        removedAfter = scan;
      }
    };
    await waitFor(() => h.submits.length === 2, 'the second submit');
    // first seen again at scan removedAfter + 1, finished two checks later
    expect(h.submits[1]?.scan).toBe(removedAfter + 3);
    await waitFor(() => existsSync(lockOf('a.mov')), 'the second lock');
  });

  it('does not resubmit locked files after a restart (a new scanner instance)', async () => {
    put('a.mov');
    put('b.mov');
    const first = harness(assignmentFor(dirs.root)).start();
    await waitFor(() => existsSync(lockOf('a.mov')) && existsSync(lockOf('b.mov')), 'both locks');
    await first.scanner.stop();
    put('c.mov');
    const second = harness(assignmentFor(dirs.root)).start();
    await waitFor(() => second.submits.length === 1, 'the new file');
    await second.scans(3);
    expect(second.submitted()).toEqual(['c.mov']);
  });

  it('never submits a file twice when its lock cannot be written, and says why', async () => {
    // A real write failure even for root: a 255-byte file name leaves no room for ".lock" (NAME_MAX).
    const name = `${'n'.repeat(251)}.mov`;
    put(name);
    const h = harness(assignmentFor(dirs.root)).start();
    await waitFor(() => h.submits.length === 1, 'the submit');
    await h.scans(5);
    expect(h.submits).toHaveLength(1);
    expect(existsSync(lockOf(name))).toBe(false);
    expect(h.lastError()).toContain(`${name}: ENAMETOOLONG`);
    expect(h.lastError()).toContain('will not submit them again');
  });

  it('treats a changed file as new even if its previous version could not be locked', async () => {
    const name = `${'n'.repeat(251)}.mov`;
    put(name);
    const h = harness(assignmentFor(dirs.root)).start();
    await waitFor(() => h.submits.length === 1, 'the submit');
    put(name, 'a new version');
    await waitFor(() => h.submits.length === 2, 'the second submit');
    expect(h.submits[1]?.size).toBe('a new version'.length);
  });

  it('writes the lock later when the folder becomes writable again, clearing the error', async () => {
    put('a.mov');
    let failing = true;
    // Fails for real while `failing`: /proc does not let anyone create files.
    const writer: LockWriter = (p) => writeLockFile(failing ? '/proc/ffleet-no-such-dir/x.lock' : p);
    const h = harness(assignmentFor(dirs.root), { writeLock: writer }).start();
    await waitFor(() => h.lastError()?.includes('cannot write the lock file') === true, 'the lock error');
    failing = false;
    await waitFor(() => existsSync(lockOf('a.mov')), 'the healed lock');
    await waitFor(() => h.lastError() === '', 'the error to clear');
    expect(h.submits).toHaveLength(1);
  });
});

describe('WatchScanner submit failures', () => {
  it('retries a retryable failure at the next scan, never two submits at once', async () => {
    put('a.mov');
    const h = harness(assignmentFor(dirs.root));
    let inFlight = 0;
    let maxInFlight = 0;
    h.respond = async () => {
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      await sleep(UNIT_MS * 1.5); // longer than an interval
      inFlight--;
      return h.submits.length < 3 ? { ok: false, error: 'broker away', retry: true } : { ok: true };
    };
    h.start();
    await waitFor(() => existsSync(lockOf('a.mov')), 'the lock after the third attempt');
    expect(h.submits).toHaveLength(3);
    expect(maxInFlight).toBe(1);
    const scans = h.submits.map((s) => s.scan);
    expect(scans[1]! - scans[0]!).toBeGreaterThanOrEqual(1);
  });

  it('does not resubmit a file the control plane refused until it changes, and reports it', async () => {
    put('a.mov');
    const h = harness(assignmentFor(dirs.root));
    h.respond = async () =>
      h.submits.length === 1 ? { ok: false, error: 'preset gone', retry: false } : { ok: true };
    h.start();
    await waitFor(() => h.lastError()?.includes('a.mov: preset gone') === true, 'the refusal');
    await h.scans(3);
    expect(h.submits).toHaveLength(1);
    put('a.mov', 'changed');
    await waitFor(() => existsSync(lockOf('a.mov')), 'the lock for the new version');
    expect(h.submits).toHaveLength(2);
  });

  it('gives refused files another chance after the assignment changes', async () => {
    put('a.mov');
    const h = harness(assignmentFor(dirs.root));
    h.respond = async () =>
      h.submits.length === 1 ? { ok: false, error: 'no', retry: false } : { ok: true };
    h.start();
    await waitFor(() => h.lastError() !== '' && h.lastError() !== undefined, 'the refusal');
    h.scanner.update(assignmentFor(dirs.root, { growthChecks: 2 }));
    await waitFor(() => h.submits.length === 2, 'the second submit');
  });

  it('treats a throwing submit callback as retryable', async () => {
    put('a.mov');
    const h = harness(assignmentFor(dirs.root));
    h.respond = async () => {
      if (h.submits.length === 1) throw new Error('bug');
      return { ok: true };
    };
    h.start();
    await waitFor(() => existsSync(lockOf('a.mov')), 'the lock');
    expect(h.submits).toHaveLength(2);
  });
});

describe('WatchScanner lock detection', () => {
  it('skips a file whose lock is a directory or was created by someone else', async () => {
    put('a.mov');
    put('b.mov');
    mkdirSync(lockOf('a.mov'));
    put('b.mov.lock', '');
    put('c.mov');
    const h = harness(assignmentFor(dirs.root)).start();
    await h.scans(3);
    expect(h.submitted()).toEqual(['c.mov']);
  });
});
