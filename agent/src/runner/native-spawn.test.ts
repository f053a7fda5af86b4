import { spawn, spawnSync } from 'node:child_process';
import {
  chmodSync,
  closeSync,
  existsSync,
  fstatSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  NATIVE_SPAWN_PATH,
  nativeSpawnCount,
  nativeSpawnStatus,
  punchHole,
  spawnNative,
} from './native-spawn.ts';
import { runProcess } from './run-process.ts';

/** What build.mjs needs: Linux, a C compiler and Node's headers beside the node binary. */
const headers = join(dirname(dirname(process.execPath)), 'include', 'node');
const canBuild =
  process.platform === 'linux' &&
  spawnSync(process.env.CC || 'cc', ['--version']).status === 0 &&
  existsSync(join(headers, 'node_api.h')) &&
  existsSync(join(headers, 'uv.h'));

const available = nativeSpawnStatus().available;

let dir = '';
afterEach(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = '';
});

/** Start through spawnNative with stdout and stderr to one file; resolves with the exit and the output. */
function startNative(file: string, args: string[], env: NodeJS.ProcessEnv, cwd?: string) {
  dir ||= mkdtempSync(join(tmpdir(), 'ffleet-native-'));
  const outPath = join(dir, `out-${Math.random().toString(36).slice(2)}`);
  const fd = openSync(outPath, 'w');
  let exited!: (v: { code: number | null; signal: string | null }) => void;
  const exit = new Promise<{ code: number | null; signal: string | null }>((r) => {
    exited = r;
  });
  const pid = spawnNative({ file, args, env, cwd, stdout: fd, stderr: fd }, (code, signal) =>
    exited({ code, signal }),
  );
  return { pid, exit, output: () => readFileSync(outPath, 'utf8') };
}

describe('native spawner', () => {
  it.runIf(canBuild)('is built and usable where a C compiler and Node headers are present', () => {
    expect(existsSync(NATIVE_SPAWN_PATH)).toBe(true);
    expect(nativeSpawnStatus()).toEqual({ available: true });
  });

  describe.runIf(available)('when built', () => {
    it('punches holes into a file: its blocks freed, its size and later bytes kept', () => {
      dir ||= mkdtempSync(join(tmpdir(), 'ffleet-native-'));
      const path = join(dir, 'holes');
      writeFileSync(path, Buffer.alloc(1024 * 1024, 'a'));
      const fd = openSync(path, 'r+');
      try {
        const before = fstatSync(fd);
        expect(punchHole(fd, 0, 768 * 1024)).toBe(true);
        const after = fstatSync(fd);
        expect(after.size).toBe(before.size);
        expect(after.blocks * 512).toBeLessThanOrEqual(before.blocks * 512 - 700 * 1024);
        const content = readFileSync(path);
        expect(content.subarray(0, 768 * 1024).every((b) => b === 0)).toBe(true);
        expect(content.subarray(768 * 1024).every((b) => b === 0x61)).toBe(true);
      } finally {
        closeSync(fd);
      }
      // Not a file descriptor: refused, not thrown.
      expect(punchHole(2 ** 30, 0, 10)).toBe(false);
    });

    it("starts a process exactly as Node's detached spawn does: session, signals, descriptors, env, cwd", async () => {
      // Everything the shell can see of how it was started; its own pid replaced so both runs compare.
      const script = [
        'set -- $(cat /proc/$$/stat | sed "s/.*) //")',
        'echo "pgrp-is-self=$([ "$3" = $$ ] && echo yes) session-is-self=$([ "$4" = $$ ] && echo yes)"',
        // Read by the shell itself: a child (grep) reading the shell's status could catch it in the middle
        // of forking that child, with every signal blocked for the fork (seen under load:
        // `SigBlk: fffffffe7ffbfeff`, from either spawner).
        'while read -r line; do case "$line" in SigBlk:*|SigIgn:*) echo "$line";; esac; done < /proc/$$/status',
        'echo "stdin=$(readlink /proc/$$/fd/0)"',
        'echo "fds=$(ls /proc/$$/fd | tr "\\n" " ")"',
        'pwd',
        'env | sort',
      ].join('\n');
      const env = { PATH: '/usr/bin:/bin', FFLEET_A: 'a b', FFLEET_QUOTE: '"$x"' };
      const run = async (spawner: 'node' | 'native') => {
        const before = nativeSpawnCount();
        const r = await runProcess({ file: '/bin/sh', args: ['-c', script], env, cwd: '/tmp', spawner });
        return { ...r, natively: nativeSpawnCount() - before };
      };
      const viaNode = await run('node');
      const viaNative = await run('native');
      expect(viaNode.natively).toBe(0);
      expect(viaNative.natively).toBe(1);
      expect(viaNative).toMatchObject({ ok: true, code: 0, stderrTail: '' });
      expect(viaNative.stdoutTail).toContain('pgrp-is-self=yes session-is-self=yes');
      expect(viaNative.stdoutTail).toContain('stdin=/dev/null');
      expect(viaNative.stdoutTail).toContain('\n/tmp\n');
      expect(viaNative.stdoutTail).toContain('FFLEET_A=a b\nFFLEET_QUOTE="$x"\n');
      expect(viaNative.stdoutTail).toContain('SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n');
      expect(viaNative.stdoutTail).toBe(viaNode.stdoutTail);
    });

    it('gives the process no ignored or blocked signal, and the same descriptors as Node does', async () => {
      // Node ignores SIGPIPE; none of it may reach the transcoder.
      const status = startNative('/bin/grep', ['-E', '^Sig(Blk|Ign)', '/proc/self/status'], {});
      expect(await status.exit).toEqual({ code: 0, signal: null });
      expect(status.output()).toBe('SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n');
      // ls lists the descriptors it has itself: 0-2, the one it reads the directory with, and any
      // the test runner left inheritable (Node's spawn passes those on as well).
      const ls = (spawner: 'node' | 'native') =>
        runProcess({ file: '/bin/ls', args: ['/proc/self/fd'], spawner }).then((r) => r.stdoutTail);
      const viaNative = await ls('native');
      expect(viaNative).toMatch(/^0\n1\n2\n/);
      expect(viaNative).toBe(await ls('node'));
    });

    it("leaves a bare name to Node's spawn, which finds it on the PATH of the environment given", async () => {
      expect(startNative('sh', ['-c', 'true'], { PATH: '/bin' }).pid).toBeUndefined();
      const before = nativeSpawnCount();
      const r = await runProcess({
        file: 'sh',
        args: ['-c', 'echo found'],
        env: { PATH: '/nonexistent:/bin' },
        spawner: 'native',
      });
      expect(r).toMatchObject({ ok: true, stdoutTail: 'found\n' });
      expect(nativeSpawnCount()).toBe(before);
    });

    it('reports exit codes and signals, and reaps the process', async () => {
      const failed = startNative('/bin/sh', ['-c', 'exit 7'], {});
      const killed = startNative('/bin/sh', ['-c', 'kill -SEGV $$'], {});
      expect(await failed.exit).toEqual({ code: 7, signal: null });
      expect(await killed.exit).toEqual({ code: null, signal: 'SIGSEGV' });
      // Reaped: no zombie is left behind under this process.
      expect(existsSync(`/proc/${failed.pid}`)).toBe(false);
      expect(existsSync(`/proc/${killed.pid}`)).toBe(false);
    });

    it('starts nothing where it cannot, so that Node reports the error or runs it its own way', async () => {
      const before = nativeSpawnCount();
      dir = mkdtempSync(join(tmpdir(), 'ffleet-native-'));
      expect(startNative('/nonexistent/ffmpeg', [], {}).pid).toBeUndefined();
      expect(startNative(dir, [], {}).pid).toBeUndefined();
      expect(startNative('/bin/sh', ['-c', 'true'], {}, '/nonexistent').pid).toBeUndefined();
      expect(startNative('/bin/sh', ['-c', 'true\0'], {}).pid).toBeUndefined();
      expect(startNative('/bin/sh', ['-c', 'true'], { X: 'a\0b' }).pid).toBeUndefined();
      expect(nativeSpawnCount()).toBe(before);

      // A script without "#!": execvp (Node) runs it with /bin/sh, posix_spawn refuses it (ENOEXEC).
      const script = join(dir, 'no-shebang');
      writeFileSync(script, 'echo "ran by $0"\n');
      chmodSync(script, 0o755);
      const r = await runProcess({ file: script, args: [], spawner: 'native' });
      expect(r).toMatchObject({ ok: true, stdoutTail: `ran by ${script}\n` });
      expect(nativeSpawnCount()).toBe(before);
      const missing = await runProcess({ file: '/nonexistent/ffmpeg', args: [], spawner: 'native' });
      expect(missing.error).toBe('spawn /nonexistent/ffmpeg ENOENT');
    });

    it("runs beside Node's own child processes without either reaping the other's", async () => {
      const runs = Array.from({ length: 12 }, (_, i) =>
        runProcess({
          file: '/bin/sh',
          args: ['-c', `sleep 0.${i % 3}; exit ${i}`],
          spawner: i % 2 ? 'native' : 'node',
        }),
      );
      const results = await Promise.all(runs);
      expect(results.map((r) => r.code)).toEqual(Array.from({ length: 12 }, (_, i) => i));
    });

    it('keeps the event loop alive until the process exits, and lets the loop end after it', () => {
      const program = `
        const ns = require(${JSON.stringify(NATIVE_SPAWN_PATH)});
        const pid = ns.spawn('/bin/sleep', ['sleep', '0.3'], [], null, 1, 2, (code, signal) =>
          console.log('exit', code, signal));
        console.log('started', pid > 0);`;
      const started = Date.now();
      const r = spawnSync(process.execPath, ['-e', program], { encoding: 'utf8', timeout: 10_000 });
      expect(r.stdout).toBe('started true\nexit 0 null\n');
      expect(r.status).toBe(0);
      expect(Date.now() - started).toBeGreaterThanOrEqual(300);
    });

    it('takes the process with it when the agent dies, even by SIGKILL', async () => {
      // A parent that starts a long sleep, says its pid and waits to be killed.
      const program = `
        const ns = require(${JSON.stringify(NATIVE_SPAWN_PATH)});
        const pid = ns.spawn('/bin/sleep', ['sleep', '60'], [], null, 1, 2, () => {});
        console.log(pid);
        setInterval(() => {}, 1000);`;
      const parent = spawn(process.execPath, ['-e', program], { stdio: ['ignore', 'pipe', 'inherit'] });
      const childPid = await new Promise<number>((resolve, reject) => {
        parent.stdout.once('data', (d: Buffer) => resolve(Number(d.toString().trim())));
        parent.once('exit', () => reject(new Error('the parent exited before starting its child')));
      });
      const alive = (pid: number) => {
        try {
          // A zombie is dead too: it waits for init to reap it.
          return !/^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, 'utf8'));
        } catch {
          return false;
        }
      };
      try {
        expect(childPid).toBeGreaterThan(0);
        expect(alive(childPid)).toBe(true);
        parent.kill('SIGKILL');
        const deadline = Date.now() + 2_000;
        while (alive(childPid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
        expect(alive(childPid)).toBe(false);
      } finally {
        parent.kill('SIGKILL');
        try {
          process.kill(childPid, 'SIGKILL');
        } catch {
          // Gone, as it should be.
        }
      }
    });
  });
});
