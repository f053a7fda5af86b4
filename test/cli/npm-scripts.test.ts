/**
 * The package's run scripts as a supervisor uses them (docker's `CMD npm start`, pm2, supervisord,
 * `timeout npm start`): SIGTERM goes to npm, which passes it to its child only. That child must be ffleet
 * itself (`exec`), not a `sh -c` that dies and leaves ffleet running with the ports and the data-dir lock.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../fleet/support/media.ts';
import { descendantPids, findFreePort, inheritedEnv, REPO_ROOT } from '../fleet/support/processes.ts';

/** Alive and not a zombie. */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !['Z', 'X'].includes(stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3));
  } catch {
    return false;
  }
}

// The same run in both CI passes (it configures nothing external): once is enough.
describe.skipIf(process.env.FFLEET_CI_PASS === 'services')('npm run scripts', () => {
  // Made here, not at load: a skipped describe runs no hooks, and the directory stayed behind.
  let dir = '';
  const groups: number[] = [];
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'ffleet-npm-scripts-'));
  });
  afterAll(() => {
    for (const pgid of groups) {
      try {
        process.kill(-pgid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    rmSync(dir, { recursive: true, force: true });
  });

  it('npm start hands SIGTERM to ffleet, which stops and leaves nothing running', async () => {
    const port = await findFreePort();
    const base = inheritedEnv();
    const npm = spawn('npm', ['start', '--silent'], {
      cwd: REPO_ROOT,
      env: {
        ...base,
        FFLEET_DATA_DIR: join(dir, 'data'),
        PORT: String(port),
        MQTT_PORT: String(await findFreePort()),
        HOST: '127.0.0.1',
        LOG_LEVEL: 'warn',
      },
      // Its own group, so that the test can clean up whatever is left, whatever happens.
      detached: true,
      stdio: 'ignore',
    });
    groups.push(npm.pid!);
    await waitFor(
      async () => (await fetch(`http://127.0.0.1:${port}/health`).catch(() => null))?.ok,
      120_000,
      'npm start serving /health',
    );
    const tree = descendantPids(npm.pid!);
    expect(tree.length).toBeGreaterThan(0);
    process.kill(npm.pid!, 'SIGTERM');
    // ffleet drains (nothing runs), closes its database and broker and exits; before, only npm and its
    // shell did, and ffleet ran on with the ports and the data-dir lock.
    await waitFor(() => !tree.some(alive), 60_000, 'every process npm start ran gone');
    expect(await fetch(`http://127.0.0.1:${port}/health`).catch(() => 'closed')).toBe('closed');
  }, 200_000);
});
