import { type ChildProcess, spawn } from 'node:child_process';
import { processStartTime, procStatFields } from '@ffleet/shared';
import { afterEach, describe, expect, it } from 'vitest';
import { findMarkedProcesses, killOrphanedRuns, RUN_MARK_VAR, runMark, STEP_MARK_VAR } from './orphans.ts';

const started: ChildProcess[] = [];
afterEach(() => {
  for (const c of started.splice(0)) {
    try {
      process.kill(-c.pid!, 'SIGKILL');
    } catch {}
  }
});

function sleeper(mark: string, more: Record<string, string> = {}): ChildProcess {
  const c = spawn('sleep', ['30'], {
    detached: true,
    stdio: 'ignore',
    env: { ...process.env, [RUN_MARK_VAR]: mark, ...more },
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

  it('kills the runs of an agent that is a zombie (SIGKILLed, restarted before its parent reaped it)', async () => {
    // `sleep 0.05` ends and stays a zombie: its parent (sh exec'd into `sleep 30`) never waits for it.
    const parent = spawn('sh', ['-c', 'sleep 0.05 & echo $!; exec sleep 30'], {
      detached: true,
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    started.push(parent);
    const zombie = await new Promise<number>((resolve) =>
      parent.stdout!.once('data', (d) => resolve(Number(d))),
    );
    let state = '';
    for (let i = 0; i < 100 && state !== 'Z'; i++) {
      await new Promise((r) => setTimeout(r, 20));
      state = procStatFields(zombie)?.[0] ?? '';
    }
    expect(state).toBe('Z');
    const start = processStartTime(zombie);
    expect(start).not.toBeNull();
    const orphan = sleeper(`box-5:dead-boot:${zombie}:${start}`);
    await new Promise((r) => setTimeout(r, 100));
    expect(killOrphanedRuns('box-5', 'this-boot')).toEqual([orphan.pid]);
    await exited(orphan);
    expect(orphan.signalCode).toBe('SIGKILL');
  });
});

describe('findMarkedProcesses', () => {
  it('finds exactly the processes carrying both the run mark and the step id, with their group', () => {
    // Not ASCII: /proc holds the UTF-8 bytes of the marks.
    const mark = runMark('bøx-4', 'böot');
    const step = `stép-${process.pid}`;
    const both = sleeper(mark, { [STEP_MARK_VAR]: step });
    // A descendant in a group of its own carries the marks it inherited.
    const inGroup = spawn('sh', ['-c', 'sleep 30 & echo $!; wait'], {
      detached: true,
      stdio: ['ignore', 'pipe', 'ignore'],
      env: { ...process.env, [RUN_MARK_VAR]: mark, [STEP_MARK_VAR]: step },
    });
    started.push(inGroup);
    const near = [
      sleeper(mark), // the agent's mark alone (a process another way started, or an older agent's)
      sleeper(mark, { [STEP_MARK_VAR]: 'another-step' }),
      sleeper(mark, { [STEP_MARK_VAR]: `${step}0` }),
      sleeper(`${mark}0`, { [STEP_MARK_VAR]: step }),
      sleeper('bøx-4:other-boot', { [STEP_MARK_VAR]: step }),
    ];
    const env: NodeJS.ProcessEnv = { ...process.env, [STEP_MARK_VAR]: step };
    delete env[RUN_MARK_VAR];
    const noMark = spawn('sleep', ['30'], { detached: true, stdio: 'ignore', env });
    started.push(noMark);
    return new Promise<void>((done, fail) => {
      inGroup.stdout!.once('data', (d: Buffer) => {
        try {
          const grandchild = Number(d.toString().trim());
          const found = findMarkedProcesses(mark, step).sort((a, b) => a.pid - b.pid);
          const expected = [
            { pid: both.pid!, pgrp: both.pid! },
            { pid: inGroup.pid!, pgrp: inGroup.pid! },
            { pid: grandchild, pgrp: inGroup.pid! },
          ]
            .map((p) => ({ ...p, start: processStartTime(p.pid) }))
            .sort((a, b) => a.pid - b.pid);
          expect(found).toEqual(expected);
          expect(near.every((c) => found.every((f) => f.pid !== c.pid))).toBe(true);
          expect(found.some((f) => f.pid === noMark.pid)).toBe(false);
          done();
        } catch (err) {
          fail(err);
        }
      });
    });
  });

  it('finds nothing without /proc, or with an empty mark', () => {
    const mark = runMark('box-5', 'boot');
    // Would match an empty step id if one were looked for.
    sleeper(mark, { [STEP_MARK_VAR]: '' });
    expect(findMarkedProcesses(mark, 'step', '/nonexistent/proc')).toEqual([]);
    expect(findMarkedProcesses(mark, '')).toEqual([]);
    expect(findMarkedProcesses('', 'step')).toEqual([]);
  });
});
