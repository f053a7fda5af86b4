import { appendFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type ChangeWatcher, createChangeWatcher } from './change-watcher.ts';
import { compileFilter } from './filter.ts';
import { makeTempDir, removeDir, sleep, waitFor } from './test-harness.ts';
import { walkFolder } from './walk-folder.ts';

/** Open fs.watch handles of this process (both implementations use fs.watch underneath). */
const watchHandles = (): number => process.getActiveResourcesInfo().filter((r) => r === 'FSEventWrap').length;

let root: string;
let watcher: ChangeWatcher | undefined;
beforeEach(() => {
  root = makeTempDir();
});
afterEach(async () => {
  await watcher?.stop();
  watcher = undefined;
  removeDir(root);
});

describe.each(['native', 'chokidar'] as const)('%s change watcher', (mode) => {
  /** Start watching like the scanner does: after a scan, with that scan's directories and locks. */
  async function startWatcher(): Promise<string[]> {
    const filter = compileFilter({ extensions: { exclude: ['txt'] } });
    const walk = await walkFolder(root, filter);
    if (!walk.ok) throw new Error(walk.error);
    const seen: string[] = [];
    watcher = createChangeWatcher(mode, {
      root,
      filter,
      isLocked: (rel) => walk.locked.includes(rel),
      onFiles: (rels) => seen.push(...rels),
      onError: (err) => {
        throw err;
      },
    });
    watcher?.start();
    watcher?.syncDirectories(walk.dirs);
    await sleep(300); // chokidar's initial walk
    return seen;
  }

  it('reports added and changed candidate files by relative path once they are quiet', async () => {
    mkdirSync(join(root, 'sub'));
    writeFileSync(join(root, 'old.mov'), 'x');
    const seen = await startWatcher();
    writeFileSync(join(root, 'sub', 'new.mov'), 'x');
    await waitFor(() => seen.includes('sub/new.mov'), 'the add event');
    appendFileSync(join(root, 'old.mov'), 'more');
    await waitFor(() => seen.includes('old.mov'), 'the change event');
  });

  it('ignores hidden paths, lock files and filtered files (chokidar: locked files too)', async () => {
    writeFileSync(join(root, 'locked.mov'), 'x');
    writeFileSync(join(root, 'locked.mov.lock'), '');
    mkdirSync(join(root, '.cache'));
    const seen = await startWatcher();
    writeFileSync(join(root, '.hidden.mov'), 'x');
    writeFileSync(join(root, '.cache', 'in.mov'), 'x');
    writeFileSync(join(root, 'a.mov.lock'), '');
    writeFileSync(join(root, 'notes.txt'), 'x');
    appendFileSync(join(root, 'locked.mov'), 'y');
    writeFileSync(join(root, 'marker.mov'), 'x');
    await waitFor(() => seen.includes('marker.mov'), 'the marker');
    await sleep(200);
    // The native watcher reports a write to a locked file; the scanner's lock check drops it.
    expect(seen.sort()).toEqual(mode === 'chokidar' ? ['marker.mov'] : ['locked.mov', 'marker.mov']);
  });

  it('closes every watch on stop and reports nothing afterwards', async () => {
    // Closed handles are released a moment after close(); start from none.
    await waitFor(() => watchHandles() === 0, 'earlier watches to be released');
    writeFileSync(join(root, 'a.mov'), 'x');
    const seen = await startWatcher();
    expect(watchHandles()).toBeGreaterThan(0);
    await watcher?.stop();
    await watcher?.stop();
    await waitFor(() => watchHandles() === 0, 'every watch to be released');
    writeFileSync(join(root, 'b.mov'), 'x');
    await sleep(200);
    expect(seen).toEqual([]);
  });
});

describe('native change watcher', () => {
  it('follows the directories of the latest scan', async () => {
    const seen: string[] = [];
    watcher = createChangeWatcher('native', {
      root,
      filter: compileFilter({}),
      isLocked: () => false,
      onFiles: (rels) => seen.push(...rels),
      onError: (err) => {
        throw err;
      },
    });
    mkdirSync(join(root, 'a'));
    mkdirSync(join(root, 'b'));
    watcher?.syncDirectories(['', 'a']);
    writeFileSync(join(root, 'b', 'unwatched.mov'), 'x');
    writeFileSync(join(root, 'a', 'watched.mov'), 'x');
    await waitFor(() => seen.includes('a/watched.mov'), 'the event in a');
    watcher?.syncDirectories(['', 'b']);
    writeFileSync(join(root, 'a', 'dropped.mov'), 'x');
    writeFileSync(join(root, 'b', 'now.mov'), 'x');
    await waitFor(() => seen.includes('b/now.mov'), 'the event in b');
    await sleep(100);
    expect(seen.sort()).toEqual(['a/watched.mov', 'b/now.mov']);
  });
});
