import { spawnSync } from 'node:child_process';
import { closeSync, mkdirSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { expectProblem, VALID } from '../../../test/api/support.ts';
import { startLocalControlPlane } from '../../../test/helpers/control-plane.ts';
import type { RunningControlPlane } from '../control-plane.ts';

/**
 * A full disk, for real: the embedded database's data dir on a tmpfs of its own, where this test can
 * mount one (root with CAP_SYS_ADMIN). The migrated data dir takes ~39 MB, 16 MB of it the WAL segment
 * PostgreSQL allocates whole; 64 MB leaves room to start, then a file takes the rest.
 */
const canMount = (() => {
  if (process.getuid?.() !== 0) return false;
  const probe = mkdtempSync(join(tmpdir(), 'ffleet-health-mount-'));
  const ok = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=4k', 'tmpfs', probe]).status === 0;
  if (ok) spawnSync('umount', [probe]);
  rmSync(probe, { recursive: true, force: true });
  return ok;
})();

/** Write to `file` until the file system has no space left; returns the bytes written. */
function fillDisk(file: string): number {
  const fd = openSync(file, 'w');
  let written = 0;
  try {
    for (const size of [1024 * 1024, 4096]) {
      const chunk = Buffer.alloc(size, 1);
      try {
        for (;;) written += writeSync(fd, chunk);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
      }
    }
  } finally {
    closeSync(fd);
  }
  return written;
}

describe('GET /health with the embedded database out of disk', () => {
  it.runIf(canMount)(
    'answers 503 db failing while the database refuses writes, and 200 once a refused write succeeds again',
    async () => {
      const root = mkdtempSync(join(tmpdir(), 'ffleet-health-full-'));
      const disk = join(root, 'disk');
      const filler = join(disk, 'filler');
      mkdirSync(disk);
      let mounted = false;
      let cp: RunningControlPlane | undefined;
      try {
        expect(spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=64m', 'tmpfs', disk]).status).toBe(0);
        mounted = true;
        cp = await startLocalControlPlane(join(disk, 'data'));
        const base = `http://127.0.0.1:${cp.httpPort}`;
        const health = async () => {
          const res = await fetch(`${base}/health`);
          return { status: res.status, body: (await res.json()) as Record<string, unknown> };
        };
        const postTask = () =>
          fetch(`${base}/api/v1/tasks`, {
            method: 'POST',
            headers: { 'Content-Type': 'application/json' },
            body: JSON.stringify(VALID.task()),
          });

        expect(await health()).toEqual({
          status: 200,
          body: { status: 'ok', db: 'ok', broker: 'ok', agents: { online: 0 } },
        });
        const first = await postTask();
        expect(first.status).toBe(201);
        const { id } = (await first.json()) as { id: string };

        expect(fillDisk(filler)).toBeGreaterThan(0);
        // Once the tasks table's last page is full, extending it fails: the API refuses the write.
        let refused: Response | undefined;
        for (let i = 0; i < 1000 && !refused; i++) {
          const res = await postTask();
          if (res.status === 201) await res.body?.cancel();
          else refused = res;
        }
        expect(refused, 'a task was refused on the full disk').toBeDefined();
        const problem = await expectProblem(refused!, 503, 'DATABASE_UNAVAILABLE');
        expect(problem.detail).toContain('disk full, SQLSTATE 53100');

        const failing = {
          status: 503,
          body: {
            status: 'error',
            db: 'failing',
            dbError: expect.stringMatching(/^disk full, SQLSTATE 53100, refused (at|since) \d{4}-[\dT:.-]+Z/),
            broker: 'ok',
            agents: { online: 0 },
          },
        };
        expect(await health()).toEqual(failing);
        // Reads are still served (and so is the ping /health relied on alone), and a write that fits in
        // a page with room succeeds, while new tasks are refused: none of these says the disk has room.
        expect((await fetch(`${base}/api/v1/tasks`)).status).toBe(200);
        expect((await fetch(`${base}/api/v1/tasks/${id}/cancel`, { method: 'PATCH' })).status).toBe(200);
        expect((await postTask()).status).toBe(503);
        // Nor do the fleet's sweeps (every 3 s), whose UPDATEs succeed, mostly writing no rows.
        await new Promise((resolve) => setTimeout(resolve, 3_500));
        expect(await health()).toEqual(failing);

        // Space back: the first refused write that succeeds makes the node healthy again.
        rmSync(filler);
        expect((await postTask()).status).toBe(201);
        expect(await health()).toEqual({
          status: 200,
          body: { status: 'ok', db: 'ok', broker: 'ok', agents: { online: 0 } },
        });
      } finally {
        // Space back before the stop, whose shutdown checkpoint writes.
        rmSync(filler, { force: true });
        await cp?.stop().catch(() => {});
        if (mounted && spawnSync('umount', [disk]).status !== 0) spawnSync('umount', ['-l', disk]);
        rmSync(root, { recursive: true, force: true });
      }
    },
    120_000,
  );
});
