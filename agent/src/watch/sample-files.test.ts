import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { statfs } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { hasLockFile, isLocalDirectory, sampleFiles, sampleUnlockedFiles } from './sample-files.ts';
import { makeTempDir, removeDir } from './test-harness.ts';

let root: string;
beforeEach(() => {
  root = makeTempDir();
});
afterEach(() => removeDir(root));

describe('sampleFiles', () => {
  it.each([true, false])(
    'reports size and mtime of regular files, null for missing files, symlinks and directories (local=%s)',
    async (local) => {
      writeFileSync(join(root, 'a.mov'), 'hello');
      symlinkSync(join(root, 'a.mov'), join(root, 'l.mov'));
      mkdirSync(join(root, 'dir.mov'));
      const names = ['a.mov', 'gone.mov', 'l.mov', 'dir.mov'];
      const [a, ...rest] = await sampleFiles(names.map((n) => ({ abs: join(root, n), local })));
      expect(a?.size).toBe(5);
      expect(a?.mtimeMs).toBeGreaterThan(0);
      expect(rest).toEqual([null, null, null]);
    },
  );

  it('samples more files than one synchronous chunk, mixing local and remote entries', async () => {
    const files = Array.from({ length: 600 }, (_, i) => {
      writeFileSync(join(root, `f${i}.mov`), 'x'.repeat(i));
      return { abs: join(root, `f${i}.mov`), local: i % 3 !== 0 };
    });
    const samples = await sampleFiles(files);
    expect(samples.map((s) => s?.size)).toEqual(files.map((_, i) => i));
  });
});

describe('locks and file systems', () => {
  it('sees a lock beside a file, also when sampling outside a scan', async () => {
    writeFileSync(join(root, 'a.mov'), 'x');
    writeFileSync(join(root, 'b.mov'), 'x');
    writeFileSync(join(root, 'b.mov.lock'), '');
    expect(await hasLockFile(join(root, 'a.mov'))).toBe(false);
    expect(await hasLockFile(join(root, 'b.mov'))).toBe(true);
    const [a, b, gone] = await sampleUnlockedFiles(['a.mov', 'b.mov', 'gone.mov'].map((n) => join(root, n)));
    expect(a).toMatchObject({ size: 1 });
    expect(b).toBe('locked');
    expect(gone).toBeNull();
  });

  it('treats only known local file systems as local', async () => {
    // The usual homes of a temp dir (ext4, tmpfs, overlayfs) must count as local on Linux.
    const tmpType = (await statfs(root)).type;
    if (process.platform === 'linux' && [0xef53, 0x01021994, 0x794c7630].includes(tmpType)) {
      expect(await isLocalDirectory(root)).toBe(true);
    }
    expect(await isLocalDirectory('/proc')).toBe(false);
    expect(await isLocalDirectory(join(root, 'missing'))).toBe(false);
  });
});
