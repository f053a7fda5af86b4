import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  assignmentFor,
  makeTempDir,
  removeDir,
  silentLogger,
  sleep,
  UNIT_MS,
  waitFor,
} from './test-harness.ts';
import type { WatchFile, WatchState } from './watch-scanner.ts';
import { WatchSupervisor } from './watch-supervisor.ts';

let tmp: string;
let dirA: string;
let dirB: string;
let submits: WatchFile[];
let states: WatchState[];
let supervisor: WatchSupervisor;

beforeEach(() => {
  tmp = makeTempDir();
  dirA = join(tmp, 'a');
  dirB = join(tmp, 'b');
  mkdirSync(dirA);
  mkdirSync(dirB);
  submits = [];
  states = [];
  supervisor = new WatchSupervisor({
    submit: async (f) => {
      submits.push(f);
      return { ok: true };
    },
    onState: (s) => states.push(s),
    logger: silentLogger,
    scanner: { intervalUnitMs: UNIT_MS, watcher: 'off' },
  });
});
afterEach(async () => {
  await supervisor.stopAll();
  removeDir(tmp);
});

const wfA = assignmentFor('', { id: 'A' });
const wfB = assignmentFor('', { id: 'B' });
const scansOf = (id: string): number => states.filter((s) => s.watchfolderId === id).length;

describe('WatchSupervisor', () => {
  it('runs one scanner per assigned watchfolder, each submitting with its own id', async () => {
    writeFileSync(join(dirA, 'a.mov'), 'x');
    writeFileSync(join(dirB, 'b.mov'), 'x');
    supervisor.apply([
      { ...wfA, path: dirA },
      { ...wfB, path: dirB },
    ]);
    await waitFor(() => submits.length === 2, 'both submits');
    expect(submits.map((s) => [s.watchfolderId, s.relativePath]).sort()).toEqual([
      ['A', 'a.mov'],
      ['B', 'b.mov'],
    ]);
    expect(supervisor.list().sort()).toEqual(['A', 'B']);
  });

  it('leaves a folder inside another watchfolder to that one, and a folder watched twice to the first', async () => {
    const inner = join(dirA, 'special');
    mkdirSync(join(inner, 'deeper'), { recursive: true });
    writeFileSync(join(dirA, 'outer.mov'), 'x');
    writeFileSync(join(inner, 'inner.mov'), 'x');
    writeFileSync(join(inner, 'deeper', 'deep.mov'), 'x');
    writeFileSync(join(dirA, 'special-not-inside.mov'), 'x');
    const wfC = assignmentFor('', { id: 'C' });
    supervisor.apply([
      { ...wfA, path: dirA, createdAt: 2 },
      { ...wfB, path: `${inner}/`, createdAt: 3 },
      // the same folder as B, created first: it takes B's files
      { ...wfC, name: 'first on special', path: inner, createdAt: 1 },
    ]);
    await waitFor(() => submits.length === 4, 'four submits');
    await sleep(3 * UNIT_MS);
    expect(submits.map((f) => [f.watchfolderId, f.relativePath]).sort()).toEqual([
      ['A', 'outer.mov'],
      ['A', 'special-not-inside.mov'],
      ['C', 'deeper/deep.mov'],
      ['C', 'inner.mov'],
    ]);
    const lastOf = (id: string) => states.filter((st) => st.watchfolderId === id).at(-1);
    expect(lastOf('B')?.error).toBe(
      'another watchfolder ("first on special") watches this folder and takes its files; this one submits none',
    );
    expect(lastOf('A')?.error).toBe('');
    // C unassigned (moved to another agent, say): B takes the folder's new files, and its error goes.
    supervisor.apply([
      { ...wfA, path: dirA, createdAt: 2 },
      { ...wfB, path: inner, createdAt: 3 },
    ]);
    writeFileSync(join(inner, 'later.mov'), 'x');
    await waitFor(() => submits.some((f) => f.relativePath === 'later.mov'), 'the later file');
    expect(submits.filter((f) => f.relativePath === 'later.mov').map((f) => f.watchfolderId)).toEqual(['B']);
    expect(lastOf('B')?.error).toBe('');
  });

  it('leaves the files of a watchfolder scanned elsewhere (the config’s yieldTo) to it', async () => {
    const gpu = join(dirA, 'gpu');
    mkdirSync(gpu);
    writeFileSync(join(dirA, 'outer.mov'), 'x');
    writeFileSync(join(gpu, 'for-the-gpu-box.mov'), 'x');
    writeFileSync(join(dirB, 'b.mov'), 'x');
    // `gpu` is pinned to an agent that is offline; B is only listed against A, so it yields nothing.
    const pinnedInner = { id: 'G', name: 'gpu', path: gpu, suspended: false, createdAt: 1, overlaps: ['A'] };
    const onB = { id: 'S', name: 'same as b', path: dirB, suspended: false, createdAt: 0, overlaps: ['A'] };
    supervisor.apply(
      [
        { ...wfA, path: dirA, createdAt: 2 },
        { ...wfB, path: dirB, createdAt: 3 },
      ],
      [pinnedInner, onB],
    );
    await waitFor(() => submits.length === 2, 'two submits');
    await sleep(3 * UNIT_MS);
    expect(submits.map((f) => [f.watchfolderId, f.relativePath]).sort()).toEqual([
      ['A', 'outer.mov'],
      ['B', 'b.mov'],
    ]);
    expect(supervisor.list().sort()).toEqual(['A', 'B']);
    // Its agent back, the folder moves on with it: A stays out of it. Once it is no longer listed, A takes it.
    supervisor.apply([{ ...wfA, path: dirA, createdAt: 2 }]);
    writeFileSync(join(gpu, 'later.mov'), 'x');
    await waitFor(() => submits.some((f) => f.relativePath === 'gpu/later.mov'), 'the later file');
    // A scan takes what it finds in the folder once it is A's: both files, as A's.
    expect(submits.filter((f) => f.relativePath.startsWith('gpu/')).map((f) => f.watchfolderId)).toEqual([
      'A',
      'A',
    ]);
  });

  it('gives a folder watched twice to the other watchfolder while the first one is suspended', async () => {
    writeFileSync(join(dirA, 'one.mov'), 'x');
    const first = { ...wfA, path: dirA, createdAt: 1 };
    const second = { ...wfB, name: 'second', path: dirA, createdAt: 2 };
    supervisor.apply([first, second]);
    await waitFor(() => submits.length === 1, 'the first submit');
    supervisor.apply([{ ...first, suspended: true }, second]);
    writeFileSync(join(dirA, 'two.mov'), 'x');
    await waitFor(() => submits.length === 2, 'the second submit');
    await sleep(3 * UNIT_MS);
    expect(submits.map((f) => [f.watchfolderId, f.relativePath])).toEqual([
      ['A', 'one.mov'],
      ['B', 'two.mov'],
    ]);
    expect(states.filter((st) => st.watchfolderId === 'B').at(-1)?.error).toBe('');
  });

  it('keeps scanners running when the same list arrives again', async () => {
    supervisor.apply([{ ...wfA, path: dirA, interval: 3 }]);
    await waitFor(() => scansOf('A') === 1, 'the first scan');
    for (let i = 0; i < 5; i++) supervisor.apply([{ ...wfA, path: dirA, interval: 3 }]);
    await sleep(UNIT_MS);
    // a restart would scan at once; an unchanged list must not
    expect(scansOf('A')).toBe(1);
  });

  it('updates a scanner whose assignment changed and stops one that is no longer assigned', async () => {
    supervisor.apply([
      { ...wfA, path: dirA },
      { ...wfB, path: dirB },
    ]);
    await waitFor(() => scansOf('A') > 0 && scansOf('B') > 0, 'first scans');
    supervisor.apply([{ ...wfA, path: dirA, suspended: true }]);
    expect(supervisor.list()).toEqual(['A']);
    await sleep(UNIT_MS);
    writeFileSync(join(dirA, 'a.mov'), 'x');
    writeFileSync(join(dirB, 'b.mov'), 'x');
    await sleep(4 * UNIT_MS);
    expect(submits).toHaveLength(0);
    supervisor.apply([{ ...wfA, path: dirA }]);
    await waitFor(() => existsSync(join(dirA, 'a.mov.lock')), 'A to resume');
    expect(submits.map((s) => s.relativePath)).toEqual(['a.mov']);
  });

  it('stops everything on stopAll and ignores later lists', async () => {
    supervisor.apply([{ ...wfA, path: dirA }]);
    await waitFor(() => scansOf('A') > 0, 'a scan');
    await supervisor.stopAll();
    await supervisor.stopAll();
    supervisor.apply([{ ...wfA, path: dirA }]);
    const reported = states.length;
    writeFileSync(join(dirA, 'a.mov'), 'x');
    await sleep(4 * UNIT_MS);
    expect(states.length).toBe(reported);
    expect(submits).toHaveLength(0);
    expect(supervisor.list()).toEqual([]);
  });

  it('takes the last entry when an id appears twice', async () => {
    writeFileSync(join(dirB, 'b.mov'), 'x');
    supervisor.apply([
      { ...wfA, path: dirA },
      { ...wfA, path: dirB },
    ]);
    await waitFor(() => submits.length === 1, 'the submit');
    expect(submits[0]?.absolutePath).toBe(join(dirB, 'b.mov'));
  });
});
