import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readdirSync, readlinkSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { listGroupMembers, listLiveProcesses, waitFor } from './fixtures/live-processes.ts';
import { nativeSpawnStatus } from './native-spawn.ts';
import {
  CAPTURE_POLL_MS,
  defaultCaptureDir,
  isWritableTmpfs,
  type RunProcessOptions,
  runProcess as runWith,
  STDIO_DRAIN_MS,
} from './run-process.ts';

const FIXTURES = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures');
const fixture = (name: string) => path.join(FIXTURES, name);

/** This process's open capture files (unlinked, so only /proc/self/fd shows them): fd path → target. */
function openCaptureFiles(): { fd: string; target: string }[] {
  return readdirSync('/proc/self/fd').flatMap((n) => {
    const fd = `/proc/self/fd/${n}`;
    try {
      const target = readlinkSync(fd);
      return target.includes('.ffleet-capture-') ? [{ fd, target }] : [];
    } catch {
      return [];
    }
  });
}

/** The file system type of `dir` as coreutils' stat(1) names it (`tmpfs`, `ext2/ext3`, …). */
const fsType = (dir: string) =>
  spawnSync('stat', ['-f', '-c', '%T', dir], { encoding: 'utf8' }).stdout.trim();

const strays: number[] = [];

beforeAll(() => {
  // Git may drop the executable bit; the fixtures must be runnable.
  for (const name of readdirSync(FIXTURES)) if (name.endsWith('.sh')) chmodSync(fixture(name), 0o755);
});

afterEach(() => {
  for (const pid of strays.splice(0)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
});

/**
 * Every case runs through both ways of starting a process: Node's spawn, and the native spawner where
 * it is built (it is wherever `npm install` found a C compiler, as on CI: native-spawn.test.ts checks).
 */
const spawners = nativeSpawnStatus().available ? (['node', 'native'] as const) : (['node'] as const);

describe.each(spawners)('runProcess (%s spawner)', (spawner) => {
  const runProcess = (o: RunProcessOptions) => runWith({ spawner, ...o });

  it('runs an executable without a shell and reports success with line-split output', async () => {
    const out: string[] = [];
    const err: string[] = [];
    const result = await runProcess({
      file: fixture('ok.sh'),
      args: ['a b', '$(echo injected)', '`id`', 'x;y', ''],
      onStdoutLine: (l) => out.push(l),
      onStderrLine: (l) => err.push(l),
    });
    expect(result).toMatchObject({ ok: true, code: 0, signal: null, canceled: false });
    expect(result.error).toBeUndefined();
    expect(out).toEqual(['a b', '$(echo injected)', '`id`', 'x;y', '']);
    expect(err).toEqual(['ok on stderr']);
    expect(result.stderrTail).toBe('ok on stderr\n');
  });

  it('reports a non-zero exit code with the stderr tail', async () => {
    const result = await runProcess({ file: fixture('fail.sh'), args: ['3'] });
    expect(result).toMatchObject({ ok: false, code: 3, signal: null, canceled: false });
    expect(result.stderrTail).toContain('fatal: the fixture failed on purpose');
    expect(result.stdoutTail).toBe('about to fail\n');
  });

  it('keeps only the last tailBytes of output', async () => {
    const result = await runProcess({ file: fixture('ok.sh'), args: ['0123456789'], tailBytes: 4 });
    expect(result.stdoutTail).toBe('789\n');
  });

  it('reports death by a signal', async () => {
    const result = await runProcess({ file: fixture('crash.sh'), args: [] });
    expect(result).toMatchObject({ ok: false, code: null, signal: 'SIGSEGV', canceled: false });
    expect(result.stderrTail).toContain('crashing');
  });

  it('returns a spawn failure as a value', async () => {
    const missing = await runProcess({ file: '/nonexistent/ffleet-transcoder', args: [] });
    expect(missing).toMatchObject({ ok: false, code: null, signal: null, canceled: false });
    expect(missing.error).toContain('ENOENT');
    const notExecutable = await runProcess({ file: FIXTURES, args: [] });
    expect(notExecutable.error).toContain('EACCES');
  });

  it('passes the given environment and working directory', async () => {
    const out: string[] = [];
    const result = await runProcess({
      file: '/bin/sh',
      args: ['-c', 'echo "$FFLEET_TEST_VALUE"; pwd'],
      env: { PATH: process.env.PATH, FFLEET_TEST_VALUE: 'v 1' },
      cwd: '/tmp',
      onStdoutLine: (l) => out.push(l),
    });
    expect(result.ok).toBe(true);
    expect(out).toEqual(['v 1', '/tmp']);
  });

  it('streams progress lines as they are printed', async () => {
    const lines: string[] = [];
    const result = await runProcess({
      file: fixture('progress.sh'),
      args: [],
      onStdoutLine: (l) => lines.push(l),
    });
    expect(result.ok).toBe(true);
    expect(lines.filter((l) => l.startsWith('progress='))).toEqual([
      'progress=continue',
      'progress=continue',
      'progress=continue',
      'progress=end',
    ]);
  });

  it('does not start a process when already canceled', async () => {
    let printed = false;
    const result = await runProcess({
      file: fixture('ok.sh'),
      args: ['x'],
      signal: AbortSignal.abort(),
      onStdoutLine: () => {
        printed = true;
      },
    });
    expect(result).toMatchObject({ ok: false, canceled: true, code: null, signal: null });
    expect(printed).toBe(false);
  });

  it('stops a process that exits on SIGTERM without waiting for the grace period', async () => {
    const controller = new AbortController();
    const started = Date.now();
    const lines: string[] = [];
    const done = runProcess({
      file: fixture('graceful.sh'),
      args: [],
      signal: controller.signal,
      graceMs: 10_000,
      onStdoutLine: (l) => {
        lines.push(l);
        if (l === 'ready') controller.abort();
      },
    });
    const result = await done;
    expect(result).toMatchObject({ ok: false, canceled: true, code: 143 });
    expect(lines).toContain('terminating');
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it('kills a group that ignores SIGTERM with SIGKILL after the grace period, leaving no process', async () => {
    const controller = new AbortController();
    let pgid = 0;
    let childPid = 0;
    const graceMs = 300;
    let abortedAt = 0;
    const result = await runProcess({
      file: fixture('hang.sh'),
      args: [],
      signal: controller.signal,
      graceMs,
      onStdoutLine: (l) => {
        if (l.startsWith('child ')) childPid = Number(l.slice(6));
        if (l.startsWith('pid ')) pgid = Number(l.slice(4));
        if (l === 'ready') {
          abortedAt = Date.now();
          controller.abort();
        }
      },
    });
    strays.push(childPid);
    expect(result).toMatchObject({ ok: false, canceled: true, code: null, signal: 'SIGKILL' });
    expect(Date.now() - abortedAt).toBeGreaterThanOrEqual(graceMs - 20);
    expect(pgid).toBeGreaterThan(0);
    expect(childPid).toBeGreaterThan(0);
    // The backgrounded child was in the same group and ignored SIGTERM too: it must be gone as well.
    expect(await waitFor(() => listGroupMembers(pgid).length === 0)).toBe(true);
  });

  it('cuts the grace short when killNow is aborted after the cancel', async () => {
    const controller = new AbortController();
    const killNow = new AbortController();
    let childPid = 0;
    let abortedAt = 0;
    const result = await runProcess({
      file: fixture('hang.sh'),
      args: [],
      signal: controller.signal,
      killNow: killNow.signal,
      graceMs: 30_000,
      onStdoutLine: (l) => {
        if (l.startsWith('child ')) childPid = Number(l.slice(6));
        if (l === 'ready') {
          abortedAt = Date.now();
          controller.abort();
          setTimeout(() => killNow.abort(), 100);
        }
      },
    });
    strays.push(childPid);
    expect(result).toMatchObject({ ok: false, canceled: true, signal: 'SIGKILL' });
    expect(Date.now() - abortedAt).toBeLessThan(5_000);
  });

  it('settles soon after exit even when a background child keeps the pipes open, and kills that child', async () => {
    let childPid = 0;
    const started = Date.now();
    const result = await runProcess({
      file: fixture('background.sh'),
      args: [],
      onStdoutLine: (l) => {
        if (l.startsWith('child ')) childPid = Number(l.slice(6));
      },
    });
    strays.push(childPid);
    expect(result).toMatchObject({ ok: true, code: 0, canceled: false, leftovers: true });
    expect(Date.now() - started).toBeLessThan(STDIO_DRAIN_MS + 2000);
    // The step's group does not outlive it: the `sleep 30 &` it left behind is killed when it ends.
    expect(childPid).toBeGreaterThan(0);
    expect(await waitFor(() => !listLiveProcesses().some((p) => p.pid === childPid))).toBe(true);
  });

  it('says nothing about leftovers when the process left none', async () => {
    const result = await runProcess({ file: fixture('ok.sh'), args: ['a'] });
    expect(result.ok).toBe(true);
    expect(result).not.toHaveProperty('leftovers');
  });

  describe('output capture', () => {
    let dir = '';
    afterEach(() => {
      if (dir) rmSync(dir, { recursive: true, force: true });
      dir = '';
    });

    it('captures through files that exist only as open descriptors, and hands lines over while it runs', async () => {
      dir = mkdtempSync(path.join(tmpdir(), 'ffleet-capture-'));
      const seen: { line: string; at: number }[] = [];
      let leftBehind = -1;
      const started = Date.now();
      const running = runProcess({
        file: '/bin/sh',
        args: ['-c', 'echo first; echo err >&2; sleep 1; echo second'],
        captureDir: dir,
        onStdoutLine: (line) => {
          seen.push({ line, at: Date.now() - started });
          if (line === 'first') leftBehind = readdirSync(dir).length;
        },
      });
      const result = await running;
      expect(result).toMatchObject({ ok: true, stdoutTail: 'first\nsecond\n', stderrTail: 'err\n' });
      expect(seen.map((s) => s.line)).toEqual(['first', 'second']);
      // Read within a poll of being written, i.e. long before the process ended a second later.
      expect(seen[0]!.at).toBeLessThan(700 + CAPTURE_POLL_MS);
      expect(leftBehind).toBe(0);
      expect(readdirSync(dir)).toEqual([]);
    });

    it('tells a writable tmpfs from a disk directory, a missing one and /proc', () => {
      dir = mkdtempSync(path.join(tmpdir(), 'ffleet-capture-'));
      expect(isWritableTmpfs(dir)).toBe(fsType(dir) === 'tmpfs');
      expect(isWritableTmpfs('/nonexistent/ffleet-capture')).toBe(false);
      expect(isWritableTmpfs('/proc')).toBe(false);
      expect(isWritableTmpfs('/dev/shm')).toBe(fsType('/dev/shm') === 'tmpfs');
    });

    it('captures by default on a tmpfs when there is one', async () => {
      const onTmpfs = fsType(tmpdir()) === 'tmpfs' || fsType('/dev/shm') === 'tmpfs';
      expect(fsType(defaultCaptureDir()) === 'tmpfs').toBe(onTmpfs);
      let seen: string[] = [];
      const result = await runProcess({
        file: '/bin/sh',
        args: ['-c', 'echo started; sleep 0.5; echo done'],
        onStdoutLine: (line) => {
          if (line === 'started') seen = openCaptureFiles().map((f) => f.target);
        },
      });
      expect(result).toMatchObject({ ok: true, stdoutTail: 'started\ndone\n' });
      expect(seen).toHaveLength(2);
      for (const target of seen) {
        expect(path.dirname(target)).toBe(defaultCaptureDir());
        expect(target).toMatch(/ \(deleted\)$/);
      }
    });

    it('falls back to pipes when no capture file can be made', async () => {
      const out: string[] = [];
      const result = await runProcess({
        file: fixture('ok.sh'),
        args: ['via pipe'],
        captureDir: '/nonexistent/ffleet-capture',
        onStdoutLine: (l) => out.push(l),
      });
      expect(result).toMatchObject({ ok: true, stderrTail: 'ok on stderr\n' });
      expect(out).toEqual(['via pipe']);
    });

    it.each([
      ['punches out', false],
      ['truncates', true],
    ])(
      '%s what it has read of a capture file once it is large, and keeps capturing after it',
      async (_, truncateOnly) => {
        dir = mkdtempSync(path.join(tmpdir(), 'ffleet-capture-'));
        const out: string[] = [];
        let largest = 0;
        // What the file holds on disk (or in a tmpfs's memory): punched-out blocks are not counted.
        const captureFileBytes = () =>
          Math.max(
            0,
            ...openCaptureFiles().map((f) => Math.min(statSync(f.fd).size, statSync(f.fd).blocks * 512)),
          );
        // ~120 kB in 2,000 lines over about a second, against a 16 kB limit: emptied several times.
        const result = await runProcess({
          file: '/bin/sh',
          args: [
            '-c',
            'i=0; while [ $i -lt 2000 ]; do printf "line %d %050d\\n" $i 0; i=$((i+1)); [ $((i % 400)) -eq 0 ] && sleep 0.3; done; true',
          ],
          captureDir: dir,
          captureTruncateBytes: 16 * 1024,
          captureTruncateOnly: truncateOnly,
          onStdoutLine: (l) => {
            out.push(l);
            if (out.length % 100 === 0) largest = Math.max(largest, captureFileBytes());
          },
        });
        expect(result.ok).toBe(true);
        // Bounded by the limit plus what arrives between two reads (≤ 400 lines, ~25 kB), far below the
        // ~120 kB written.
        expect(largest).toBeGreaterThan(0);
        expect(largest).toBeLessThan(64 * 1024);
        expect(out).toHaveLength(2000);
        expect(out[0]).toMatch(/^line 0 0+$/);
        expect(out[1999]).toMatch(/^line 1999 0+$/);
        expect(out.every((l) => !l.includes('\u0000'))).toBe(true);
      },
    );

    it("hands over a line printed on stderr after stdout's lines after them, also when a read falls in between", async () => {
      dir = mkdtempSync(path.join(tmpdir(), 'ffleet-capture-'));
      const order: string[] = [];
      // The read that hands over `first` is held up (the callback runs inside it) while the process prints
      // `second` and then `marker` on stderr: a read that took stdout up to its size of the moment and
      // stderr after it handed `marker` over before `second`.
      const result = await runProcess({
        file: '/bin/sh',
        args: ['-c', 'echo first; sleep 0.4; echo second; echo marker >&2; sleep 0.3'],
        captureDir: dir,
        onStdoutLine: (l) => {
          order.push(l);
          if (l === 'first') {
            const until = Date.now() + 400;
            while (Date.now() < until) {
              // Busy: the read is in progress.
            }
          }
        },
        onStderrLine: (l) => order.push(l),
      });
      expect(result.ok).toBe(true);
      expect(order).toEqual(['first', 'second', 'marker']);
    });

    it('loses no line of a process that prints without a pause while what was read is freed', async () => {
      dir = mkdtempSync(path.join(tmpdir(), 'ffleet-capture-'));
      const out: string[] = [];
      // One write per line, without a pause, for about a second (several reads), against a 16 kB limit:
      // freed again and again while it writes.
      const result = await runProcess({
        file: '/bin/sh',
        args: ['-c', 'i=1; while [ $i -le 400000 ]; do echo $i; i=$((i+1)); done'],
        captureDir: dir,
        captureTruncateBytes: 16 * 1024,
        onStdoutLine: (l) => out.push(l),
      });
      expect(result.ok).toBe(true);
      expect(out).toHaveLength(400_000);
      expect(out.every((l, i) => l === String(i + 1))).toBe(true);
    });
  });
});
