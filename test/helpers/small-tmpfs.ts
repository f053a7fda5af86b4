/**
 * A full disk, for real: a tmpfs of a chosen size mounted on a fresh directory, where the tests can
 * mount one (root with CAP_SYS_ADMIN, as on this project's machines and CI). Tests that need it run
 * with `it.runIf(canMountTmpfs)` and skip elsewhere.
 */
import { spawnSync } from 'node:child_process';
import {
  closeSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  rmSync,
  statSync,
  truncateSync,
  writeSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const canMountTmpfs: boolean = (() => {
  if (process.getuid?.() !== 0) return false;
  const probe = mkdtempSync(join(tmpdir(), 'ffleet-mount-probe-'));
  const ok = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=4k', 'tmpfs', probe]).status === 0;
  if (ok) spawnSync('umount', [probe]);
  rmSync(probe, { recursive: true, force: true });
  return ok;
})();

export interface SmallTmpfs {
  /** The mount point. */
  dir: string;
  /** Fill what is left of it with one file (writes until ENOSPC), then give back `leaveBytes` of it. */
  fill(leaveBytes?: number): void;
  /** Remove the filler: the space is back. */
  free(): void;
  /** Unmount and remove the mount point (idempotent). */
  remove(): void;
}

/** Mount a tmpfs of `size` (mount(8) syntax: `64k`, `8m`) on `dir` (created), or on a new temp dir. */
export function mountSmallTmpfs(size: string, dir?: string): SmallTmpfs {
  const at = dir ?? mkdtempSync(join(tmpdir(), 'ffleet-small-tmpfs-'));
  mkdirSync(at, { recursive: true });
  const r = spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', at], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`mount tmpfs on ${at} failed: ${r.stderr}`);
  const filler = join(at, 'filler');
  let mounted = true;
  return {
    dir: at,
    fill(leaveBytes = 0) {
      // Page by page until the tmpfs refuses one: then nothing is left for anyone.
      const fd = openSync(filler, 'a');
      const page = Buffer.alloc(4096, 1);
      try {
        for (;;) writeSync(fd, page);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
      } finally {
        closeSync(fd);
      }
      if (leaveBytes > 0) truncateSync(filler, Math.max(0, statSync(filler).size - leaveBytes));
    },
    free() {
      rmSync(filler, { force: true });
    },
    remove() {
      if (!mounted) return;
      mounted = false;
      // Lazily when something still holds it busy (a process the test could not stop): it goes with it.
      if (spawnSync('umount', [at]).status !== 0) spawnSync('umount', ['-l', at]);
      rmSync(at, { recursive: true, force: true });
    },
  };
}
