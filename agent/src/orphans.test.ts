import { type ChildProcess, spawn } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { killOrphanedRuns, RUN_MARK_VAR, runMark } from './orphans.ts';

const started: ChildProcess[] = [];
afterEach(() => {
  for (const c of started.splice(0)) {
    try {
      process.kill(-c.pid!, 'SIGKILL');
    } catch {}
  }
});

function sleeper(mark: string): ChildProcess {
  const c = spawn('sleep', ['30'], {
    detached: true,
    stdio: 'ignore',
    env: { ...process.env, [RUN_MARK_VAR]: mark },
  });
  started.push(c);
  return c;
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

const exited = (c: ChildProcess) =>
  new Promise<void>((r) => (c.exitCode !== null || c.signalCode ? r() : c.once('exit', () => r())));

describe('killOrphanedRuns', () => {
  it('kills the process groups an earlier boot of the same agent left, and nothing else', async () => {
    const orphan = sleeper('box-1:old-boot');
    const current = sleeper('box-1:this-boot');
    const other = sleeper('box-2:old-boot');
    await new Promise((r) => setTimeout(r, 100));
    const killed = killOrphanedRuns('box-1', 'this-boot');
    expect(killed).toEqual([orphan.pid]);
    await exited(orphan);
    expect(orphan.signalCode).toBe('SIGKILL');
    expect(alive(current.pid!)).toBe(true);
    expect(alive(other.pid!)).toBe(true);
  });

  it('leaves the runs of another live agent process of the same name alone (two agents on one host)', async () => {
    // Marked as this test process's runs: its owner is alive.
    const live = sleeper(runMark('box-3', 'other-boot'));
    // Marked by a process that is gone (a pid that cannot exist, and a stale start time of ours).
    const gone = sleeper(`box-3:dead-boot:${2 ** 22 + 1}:1`);
    const reused = sleeper(`box-3:reused-boot:${process.pid}:1`);
    await new Promise((r) => setTimeout(r, 100));
    const killed = killOrphanedRuns('box-3', 'this-boot');
    expect(killed.sort()).toEqual([gone.pid, reused.pid].sort());
    await exited(gone);
    expect(alive(live.pid!)).toBe(true);
  });
});
