// What `ffleet control-plane` says when it is stopped: it runs no tasks without a local agent.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findFreePort, inheritedEnv, REPO_ROOT } from '../fleet/support/processes.ts';
import { seedPgliteDir } from '../helpers/db.ts';

// The same run in both CI passes (it configures nothing external): once is enough.
describe.skipIf(process.env.FFLEET_CI_PASS === 'services')('ffleet control-plane on SIGTERM', () => {
  let dir = '';
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'ffleet-shutdown-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('opens no debugger at SIGUSR1; says it shuts down without mentioning tasks it does not run, and exits 0', async () => {
    const base = inheritedEnv();
    await seedPgliteDir(join(dir, 'data', 'pglite')); // its shutdown is the test, not its first start
    const child = spawn(process.execPath, [join(REPO_ROOT, 'bin/ffleet.js'), 'control-plane'], {
      cwd: REPO_ROOT,
      env: {
        ...base,
        FFLEET_DATA_DIR: join(dir, 'data'),
        PORT: String(await findFreePort()),
        MQTT_PORT: String(await findFreePort()),
        LOG_LEVEL: 'info',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stderr.on('data', (d: Buffer) => {
      err += d;
    });
    let signalled = false;
    child.stdout.on('data', (d: Buffer) => {
      out += d;
      if (signalled || !out.includes('"msg":"ffleet is ready"')) return;
      signalled = true;
      // Any process of its user may send SIGUSR1 (a task's script): Node 20 would open its inspector,
      // unauthenticated, and run what it is sent inside the process that holds the tokens.
      child.kill('SIGUSR1');
      setTimeout(() => child.kill('SIGTERM'), 1_500);
    });
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    expect(err).not.toContain('Debugger listening');
    expect(code).toBe(0);
    const lines = out.split('\n').filter((l) => l.includes('"msg":"shutting down'));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain('"msg":"shutting down (signal again to stop at once)"');
  }, 120_000);
});
