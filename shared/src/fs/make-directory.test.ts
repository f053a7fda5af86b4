import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { canMountTmpfs, mountSmallTmpfs } from '../../../test/helpers/small-tmpfs.ts';
import { makeDirectory } from './make-directory.ts';

describe('makeDirectory', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'ffleet-mkdir-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('creates the missing levels, and is a no-op for an existing directory', async () => {
    const deep = join(dir, 'a', 'b c', 'd');
    await makeDirectory(deep);
    expect(statSync(deep).isDirectory()).toBe(true);
    await makeDirectory(deep);
    await makeDirectory(join(dir, 'a', '..', 'a', 'b c'));
  });

  it('creates one tree from many concurrent calls', async () => {
    const paths = Array.from({ length: 12 }, (_, i) => join(dir, 'x', 'y', i % 2 ? 'odd' : 'even', 'z'));
    await Promise.all(paths.map((p) => makeDirectory(p)));
    for (const p of paths) expect(statSync(p).isDirectory()).toBe(true);
  });

  it('fails with ENOTDIR where a file is in the way, at the end or above it', async () => {
    writeFileSync(join(dir, 'file'), 'x');
    await expect(makeDirectory(join(dir, 'file'))).rejects.toMatchObject({ code: 'ENOTDIR' });
    await expect(makeDirectory(join(dir, 'file', 'sub'))).rejects.toMatchObject({
      code: 'ENOTDIR',
      message: `ENOTDIR: not a directory, mkdir '${join(dir, 'file', 'sub')}'`,
    });
  });

  it.skipIf(process.platform !== 'linux')(
    'fails under /proc instead of retrying forever as recursive mkdir does',
    async () => {
      await expect(makeDirectory('/proc/ffleet-no-such/sub')).rejects.toMatchObject({
        code: 'ENOENT',
        path: '/proc/ffleet-no-such',
      });
    },
    5_000,
  );

  it.runIf(canMountTmpfs)('says what EROFS means for a read-only file system', async () => {
    const disk = mountSmallTmpfs('64k', join(dir, 'ro'));
    try {
      expect(spawnSync('mount', ['-o', 'remount,ro', disk.dir]).status).toBe(0);
      await expect(makeDirectory(join(disk.dir, 'agents', 'box-1'))).rejects.toMatchObject({
        code: 'EROFS',
        message: expect.stringContaining(
          'the file system holding it is read-only (mounted read-only, or switched',
        ),
      });
    } finally {
      disk.remove();
    }
  });
});
