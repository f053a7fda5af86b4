import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { expectProblem, VALID } from '../../../test/api/support.ts';
import { startLocalControlPlane } from '../../../test/helpers/control-plane.ts';
import { canMountTmpfs, mountSmallTmpfs, type SmallTmpfs } from '../../../test/helpers/small-tmpfs.ts';
import type { RunningControlPlane } from '../control-plane.ts';

// A full disk, for real: the embedded database's data dir on a tmpfs of its own. The migrated data dir
// takes ~39 MB, 16 MB of it the WAL segment PostgreSQL allocates whole; 64 MB leaves room to start,
// then a file takes the rest.

describe('GET /health with the embedded database out of disk', () => {
  it.runIf(canMountTmpfs)(
    'answers 503 db failing while the database refuses writes, and 200 once a refused write succeeds again',
    async () => {
      let disk: SmallTmpfs | undefined;
      let cp: RunningControlPlane | undefined;
      try {
        disk = mountSmallTmpfs('64m');
        cp = await startLocalControlPlane(join(disk.dir, 'data'));
        const base = `http://127.0.0.1:${cp.httpPort}`;
        const health = async () => {
          const res = await fetch(`${base}/health`);
          return { status: res.status, body: (await res.json()) as Record<string, unknown> };
        };
        const metrics = async () => (await fetch(`${base}/metrics`)).text();
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

        disk.fill();
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
        // Monitoring says the same as /health: the database does not serve the control plane.
        expect(await metrics()).toMatch(/^ffleet_database_up 0$/m);
        // Reads are still served (and so is the ping /health relied on alone), and a write that fits in
        // a page with room succeeds, while new tasks are refused: none of these says the disk has room.
        expect((await fetch(`${base}/api/v1/tasks`)).status).toBe(200);
        expect((await fetch(`${base}/api/v1/tasks/${id}/cancel`, { method: 'PATCH' })).status).toBe(200);
        expect((await postTask()).status).toBe(503);
        // Nor do the fleet's sweeps (every 3 s), whose UPDATEs succeed, mostly writing no rows.
        await new Promise((resolve) => setTimeout(resolve, 3_500));
        expect(await health()).toEqual(failing);

        // Space back: the first refused write that succeeds makes the node healthy again.
        disk.free();
        expect((await postTask()).status).toBe(201);
        expect(await health()).toEqual({
          status: 200,
          body: { status: 'ok', db: 'ok', broker: 'ok', agents: { online: 0 } },
        });
        expect(await metrics()).toMatch(/^ffleet_database_up 1$/m);
      } finally {
        // Space back before the stop, whose shutdown checkpoint writes.
        disk?.free();
        await cp?.stop().catch(() => {});
        disk?.remove();
      }
    },
    120_000,
  );

  it.runIf(canMountTmpfs)(
    'says why a restart on the full disk fails: the free space it found',
    async () => {
      let disk: SmallTmpfs | undefined;
      try {
        disk = mountSmallTmpfs('64m');
        const dataDir = join(disk.dir, 'data');
        await (await startLocalControlPlane(dataDir)).stop();
        disk.fill();
        // PGlite's own words were "Aborted()" or an ENOSPC without a file.
        await expect(startLocalControlPlane(dataDir)).rejects.toThrow(
          /^cannot start the embedded database in .*: its file system has \d+ bytes free \(.*\); free some space and start again$/,
        );
        disk.free();
        await (await startLocalControlPlane(dataDir)).stop();
      } finally {
        disk?.free();
        disk?.remove();
      }
    },
    120_000,
  );
});
