import { spawn, spawnSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { canMountTmpfs, mountSmallTmpfs } from '../../../test/helpers/small-tmpfs.ts';
import { LockedError, takeLockFile } from './lock-file.ts';

describe('lock files', () => {
  let dir = '';
  let lock = '';
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'ffleet-lock-'));
    lock = join(dir, 'x.lock');
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  const take = () => takeLockFile(lock, 'the thing', 'use another');
  const holder = (fields: Record<string, unknown>) =>
    writeFileSync(
      lock,
      JSON.stringify({ host: hostname(), command: 'ffleet start', start: null, boot: null, ...fields }),
    );

  it('is taken, refused while held, and free again once released', () => {
    const release = take();
    expect(JSON.parse(readFileSync(lock, 'utf8')).pid).toBe(process.pid);
    expect(take).toThrow(LockedError);
    expect(take).toThrow('the thing is in use by this process already; use another');
    release();
    expect(existsSync(lock)).toBe(false);
    take()();
  });

  it('is refused while another live process holds it, naming it', async () => {
    const other = spawn('sleep', ['30']);
    try {
      holder({ pid: other.pid });
      expect(take).toThrow(`the thing is in use by process ${other.pid} (ffleet start); use another`);
    } finally {
      other.kill('SIGKILL');
    }
  });

  it('is taken over from a process that is killed but not yet reaped (a zombie)', async () => {
    // The shell's background child exits at once and nobody reaps it: `exec sleep` does not wait.
    const parent = spawn('sh', ['-c', 'sleep 0.2 & echo $!; exec sleep 30'], {
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    try {
      const zombie = Number(
        await new Promise<string>((r) => parent.stdout.once('data', (d) => r(String(d)))),
      );
      for (let i = 0; i < 200 && !/\) Z /.test(readFileSync(`/proc/${zombie}/stat`, 'utf8')); i++)
        await new Promise((r) => setTimeout(r, 10));
      holder({ pid: zombie });
      take()();
    } finally {
      parent.kill('SIGKILL');
    }
  });

  it('is never taken over when it cannot be read, and says why', () => {
    // A directory where the file should be: unreadable as a file, as a lock of another user is.
    mkdirSync(lock);
    expect(take).toThrow(/the thing cannot be checked: .*x\.lock is not readable/);
    expect(statSync(lock).isDirectory()).toBe(true);
  });

  it('is taken over when its text names no process and host (not a lock of ours)', () => {
    writeFileSync(lock, '{"pid":1}');
    const old = new Date(Date.now() - 60_000);
    utimesSync(lock, old, old);
    take()();
  });

  it('is taken over from a process that is gone', () => {
    const gone = spawnSync('true').pid;
    holder({ pid: gone });
    take()();
  });

  it('is taken over from a reused pid (another start time) and after a reboot (another boot id)', () => {
    holder({ pid: process.pid, start: '1' });
    take()();
    holder({ pid: process.pid, boot: '00000000-0000-0000-0000-000000000000' });
    take()();
  });

  it('is refused when held from another host, with the way out', () => {
    holder({ pid: 1, host: 'encode-box-7' });
    expect(take).toThrow(/process 1 on host encode-box-7 .*if that host no longer runs it, remove/);
  });

  it('treats an unreadable file as being written for a few seconds, then as stale', () => {
    writeFileSync(lock, '');
    expect(take).toThrow('in use by another process that is starting');
    const old = new Date(Date.now() - 60_000);
    utimesSync(lock, old, old);
    take()();
  });

  it('leaves a file that is no longer its own when released', () => {
    const release = take();
    holder({ pid: process.pid + 1 });
    release();
    expect(existsSync(lock)).toBe(true);
  });

  // A full disk, for real: a tmpfs of one page, where this test can mount one (root with CAP_SYS_ADMIN).
  it.runIf(canMountTmpfs)(
    'leaves no file behind when it cannot write its own (a full disk), so the next start takes it',
    () => {
      const small = mountSmallTmpfs('4k', join(dir, 'small'));
      try {
        small.fill();
        const onFull = join(small.dir, 'x.lock');
        expect(() => takeLockFile(onFull, 'the thing', 'use another')).toThrow(
          expect.objectContaining({ code: 'ENOSPC' }),
        );
        expect(existsSync(onFull)).toBe(false);
        // Space back: taken at once (before, the empty file read as "another process that is starting").
        small.free();
        takeLockFile(onFull, 'the thing', 'use another')();
      } finally {
        small.remove();
      }
    },
  );

  it.runIf(canMountTmpfs)('says a read-only file system is read-only, not a question of ownership', () => {
    const disk = mountSmallTmpfs('64k', join(dir, 'ro'));
    try {
      expect(spawnSync('mount', ['-o', 'remount,ro', disk.dir]).status).toBe(0);
      const take = () => takeLockFile(join(disk.dir, 'x.lock'), 'the outbox /d', 'use another');
      expect(take).toThrow(LockedError);
      expect(take).toThrow(/the outbox \/d cannot be used: the file system holding .* is read-only/);
      expect(take).not.toThrow(/give the data dir/);
    } finally {
      disk.remove();
    }
  });
});
