import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { compileFilter } from './filter.ts';
import { isLocalDirectory } from './sample-files.ts';
import { useWatchFolder } from './test-harness.ts';
import { walkFolder } from './walk-folder.ts';

const dirs = useWatchFolder({ sub: 'watch' });

const put = (rel: string, content = 'x'): void => {
  mkdirSync(join(dirs.root, rel, '..'), { recursive: true });
  writeFileSync(join(dirs.root, rel), content);
};

describe('walkFolder', () => {
  it('returns files of every depth with /-separated relative paths and tells locked ones apart', async () => {
    put('top.mov');
    put('a/b/deep.mov');
    put('a/done.mov');
    put('a/done.mov.lock', '');
    const w = await walkFolder(dirs.root, compileFilter({}));
    expect(w.ok).toBe(true);
    if (!w.ok) return;
    expect(w.files.map((f) => f.rel).sort()).toEqual(['a/b/deep.mov', 'top.mov']);
    expect(w.files.find((f) => f.rel === 'a/b/deep.mov')).toEqual({
      rel: 'a/b/deep.mov',
      abs: join(dirs.root, 'a/b/deep.mov'),
      local: await isLocalDirectory(dirs.root),
    });
    expect(w.dirs.sort()).toEqual(['', 'a', 'a/b']);
    expect(w.locked).toEqual(['a/done.mov']);
  });

  it('with onLocked tells each locked file by directory and name instead of listing it', async () => {
    put('top.mov');
    put('top.mov.lock', '');
    put('a/done.mov');
    put('a/done.mov.lock', '');
    put('a/open.mov');
    const told: [string, string][] = [];
    const w = await walkFolder(dirs.root, compileFilter({}), (relDir, name) => told.push([relDir, name]));
    expect(w.ok).toBe(true);
    if (!w.ok) return;
    expect(told.sort()).toEqual([
      ['', 'top.mov'],
      ['a', 'done.mov'],
    ]);
    expect(w.locked).toEqual([]);
    expect(w.files.map((f) => f.rel)).toEqual(['a/open.mov']);
  });

  it('skips dot-files, dot-directories, lock files, filtered files and symlinks', async () => {
    const outside = join(dirs.tmp, 'outside');
    mkdirSync(outside);
    writeFileSync(join(outside, 'real.mov'), 'x');
    put('keep.mov');
    put('.hidden.mov');
    put('.cache/inner.mov');
    put('stray.lock', '');
    put('notes.txt');
    symlinkSync(join(outside, 'real.mov'), join(dirs.root, 'link.mov'));
    symlinkSync(outside, join(dirs.root, 'linkdir'));
    const w = await walkFolder(dirs.root, compileFilter({ extensions: { exclude: ['txt'] } }));
    expect(w.ok && w.files.map((f) => f.rel)).toEqual(['keep.mov']);
  });

  it('follows a symlinked root (operators point watchfolders at mount links)', async () => {
    put('a.mov');
    const link = join(dirs.tmp, 'root-link');
    symlinkSync(dirs.root, link);
    const w = await walkFolder(link, compileFilter({}));
    expect(w.ok && w.files.map((f) => [f.rel, f.abs])).toEqual([['a.mov', join(link, 'a.mov')]]);
  });

  it('reports names that are not valid UTF-8 instead of returning paths that do not exist', async () => {
    // Latin-1 names (an old Windows share): byte 0xE9 is "é" there and no UTF-8 at all.
    const raw = (rel: string) => Buffer.concat([Buffer.from(`${dirs.root}/`), Buffer.from(rel, 'latin1')]);
    writeFileSync(raw('caf\u00e9.mov'), 'x');
    mkdirSync(raw('d\u00e9j\u00e0'));
    writeFileSync(Buffer.concat([raw('d\u00e9j\u00e0'), Buffer.from('/inner.mov')]), 'x');
    put('fine.mov');
    put('real-\uFFFD-char.mov'); // U+FFFD itself, as valid UTF-8: an ordinary name.
    const w = await walkFolder(dirs.root, compileFilter({}));
    expect(w.ok).toBe(true);
    if (!w.ok) return;
    expect(w.files.map((f) => f.rel).sort()).toEqual(['fine.mov', 'real-\uFFFD-char.mov']);
    expect(w.undecodable.sort()).toEqual(['caf\uFFFD.mov', 'd\uFFFDj\uFFFD/']);
    expect(w.unreadableDirs).toEqual([]);
  });

  it('explains a missing root and a root that is a file', async () => {
    expect(await walkFolder(join(dirs.tmp, 'nope'), compileFilter({}))).toEqual({
      ok: false,
      error: `watchfolder path does not exist: ${join(dirs.tmp, 'nope')}`,
    });
    put('file.mov');
    expect(await walkFolder(join(dirs.root, 'file.mov'), compileFilter({}))).toEqual({
      ok: false,
      error: `watchfolder path is not a directory: ${join(dirs.root, 'file.mov')}`,
    });
  });
});
