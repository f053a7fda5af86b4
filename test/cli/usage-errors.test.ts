// Mistakes in how `ffleet` is started: one line on stderr and exit code 2, before anything starts.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import { afterAll, describe, expect, it } from 'vitest';
import { AGENT_ENV_VARS } from '../../agent/src/config.ts';
import { CONTROL_PLANE_ENV_VARS } from '../../control-plane/src/config/config.ts';
import { openDatabase } from '../../control-plane/src/db/client.ts';
import { findFreePort, inheritedEnv, REPO_ROOT } from '../fleet/support/processes.ts';
import { postgresAvailable, seedPgliteDir, TEST_PG_URL } from '../helpers/db.ts';

const dir = mkdtempSync(join(tmpdir(), 'ffleet-usage-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function ffleet(args: string[], env: Record<string, string> = {}) {
  const base = inheritedEnv();
  const r = spawnSync(process.execPath, [join(REPO_ROOT, 'bin/ffleet.js'), ...args], {
    cwd: REPO_ROOT,
    env: { ...base, FFLEET_DATA_DIR: join(dir, 'data'), ...env },
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { code: r.status, stderr: r.stderr.trim(), stdout: r.stdout.trim() };
}

describe('ffleet usage and configuration errors', () => {
  it('a missing or unknown command, a stray argument or option: one line, exit code 2', () => {
    for (const [args, line] of [
      [[], 'ffleet: missing command: start | control-plane | agent | agent-token (ffleet --help lists them)'],
      [['frobnicate'], "ffleet: unknown command 'frobnicate'"],
      [['start', 'extra'], "ffleet: too many arguments for 'start'. Expected 0 arguments but got 1."],
      [['agent', '--bogus'], "ffleet: unknown option '--bogus'"],
    ] as const) {
      expect(ffleet([...args]), args.join(' ')).toMatchObject({ code: 2, stderr: line });
    }
    expect(ffleet(['--version'])).toMatchObject({ code: 0 });
  }, 120_000);

  it('--help of the program and of each command names every variable the control plane and agents read', () => {
    for (const args of [['--help'], ['agent', '--help'], ['start', '--help']]) {
      const r = ffleet(args);
      expect(r.code, args.join(' ')).toBe(0);
      for (const name of [...CONTROL_PLANE_ENV_VARS, ...AGENT_ENV_VARS])
        expect(r.stdout, `${args.join(' ')}: ${name}`).toMatch(new RegExp(`\\b${name}\\b`));
    }
  }, 120_000);

  it('a database a newer ffleet migrated: one line naming it, exit code 2 (systemd does not restart)', async () => {
    const dataDir = join(dir, 'newer');
    await seedPgliteDir(join(dataDir, 'pglite'));
    const database = await openDatabase({ kind: 'pglite', dataDir: join(dataDir, 'pglite') });
    await database.db.execute(
      sql`INSERT INTO drizzle.__drizzle_migrations (hash, created_at) VALUES ('from-the-future', 4102444800000)`,
    );
    await database.close();
    const r = ffleet(['control-plane'], { FFLEET_DATA_DIR: dataDir, PORT: '0', MQTT_PORT: '0' });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(
      /^ffleet: this database was migrated by a newer ffleet \(migration at 2100-01-01T00:00:00\.000Z is unknown to /,
    );
  }, 120_000);

  it('a PostgreSQL that cannot be opened: one line saying why, without the URL or its password', async () => {
    const closed = await findFreePort();
    const r = ffleet(['control-plane'], {
      DATABASE_URL: `postgres://postgres:hunter2@127.0.0.1:${closed}/nope`,
      PORT: String(await findFreePort()),
      MQTT_PORT: String(await findFreePort()),
    });
    expect(r.code).toBe(1);
    // Before: "ffleet: Failed query: SELECT to_regclass('drizzle.__drizzle_migrations') …" for every cause.
    expect(r.stderr).toMatch(
      new RegExp(
        `^ffleet: cannot open the database of DATABASE_URL: .*ECONNREFUSED.*127\\.0\\.0\\.1:${closed}$`,
      ),
    );
    expect(r.stderr).not.toContain('hunter2');
    if (await postgresAvailable()) {
      const url = new URL(TEST_PG_URL);
      url.pathname = '/ffleet_no_such_database';
      const missing = ffleet(['control-plane'], {
        DATABASE_URL: url.toString(),
        PORT: String(await findFreePort()),
        MQTT_PORT: String(await findFreePort()),
      });
      expect(missing).toMatchObject({
        code: 1,
        stderr:
          'ffleet: cannot open the database of DATABASE_URL: 3D000 database "ffleet_no_such_database" does not exist',
      });
    }
  }, 120_000);

  it("`ffleet start` names every invalid variable, the local agent's too, before starting anything", () => {
    const r = ffleet(['start'], { LOG_LEVEL: 'loud', FFLEET_AGENT_SLOTS: 'abc', PORT: '99999' });
    expect(r.code).toBe(2);
    expect(r.stderr.split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/^ffleet: invalid configuration: /);
    for (const v of ['LOG_LEVEL', 'PORT', 'FFLEET_AGENT_SLOTS']) expect(r.stderr).toContain(`${v}: `);
    // Nothing started: no database, no agent token.
    expect(existsSync(join(dir, 'data'))).toBe(false);
    // Only the agent's variable wrong: the same, before the control plane is up.
    const agentOnly = ffleet(['start'], { FFLEET_AGENT_SLOTS: 'abc' });
    expect(agentOnly).toMatchObject({
      code: 2,
      stderr: 'ffleet: invalid configuration: FFLEET_AGENT_SLOTS: must be a number, got "abc"',
      stdout: '',
    });
    expect(existsSync(join(dir, 'data'))).toBe(false);
  }, 120_000);
});
