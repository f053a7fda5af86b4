import { randomBytes, randomUUID } from 'node:crypto';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { archName, osName } from '@ffleet/shared';
import { sql } from 'drizzle-orm';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { migrate as migratePglite } from 'drizzle-orm/pglite/migrator';
import { drizzle as drizzlePostgres } from 'drizzle-orm/postgres-js';
import { migrate as migratePostgres } from 'drizzle-orm/postgres-js/migrator';
import postgres from 'postgres';
import { afterEach, describe, expect, it } from 'vitest';
import { type DbKind, TEST_PG_URL } from '../../../test/helpers/db.ts';
import { dbKinds } from '../../../test/helpers/db-kinds.ts';
import { EmittedEvents } from '../events/outbox.ts';
import { agentCapabilities } from '../scheduler/capabilities.ts';
import { claimTasksIn } from '../scheduler/claim.ts';
import { type Database, type Db, MIGRATIONS_DIR, openDatabase } from './client.ts';

/** The last migration 0.1.0 shipped: its databases are at this one. */
const RELEASE_0_1_0 = '0005_agent_shutting_down';

/** Every `process.platform` and `process.arch` Node knows (0.1.0's agents offered these). */
const NODE_PLATFORMS = [
  ...['aix', 'android', 'cygwin', 'darwin', 'freebsd', 'haiku', 'linux', 'netbsd', 'openbsd', 'sunos'],
  'win32',
];
const NODE_ARCHES = [
  ...['arm', 'arm64', 'ia32', 'loong64', 'mips', 'mipsel', 'ppc', 'ppc64', 'riscv64', 's390', 's390x'],
  'x64',
];

type Journal = { entries: { tag: string }[] };

/** A migrations folder with this build's migrations up to and including `lastTag`. */
function migrationsThrough(lastTag: string): string {
  const journal = JSON.parse(readFileSync(join(MIGRATIONS_DIR, 'meta/_journal.json'), 'utf8')) as Journal;
  const last = journal.entries.findIndex((e) => e.tag === lastTag);
  if (last < 0) throw new Error(`no migration ${lastTag}`);
  const dir = mkdtempSync(join(tmpdir(), 'ffleet-migrations-'));
  mkdirSync(join(dir, 'meta'));
  const entries = journal.entries.slice(0, last + 1);
  for (const e of entries) copyFileSync(join(MIGRATIONS_DIR, `${e.tag}.sql`), join(dir, `${e.tag}.sql`));
  writeFileSync(join(dir, 'meta/_journal.json'), JSON.stringify({ ...journal, entries }));
  return dir;
}

/** An old database: `seed` runs on it at `lastTag`; `upgrade` opens it as this build does (migrating). */
type OldDatabase = {
  seed(statements: string[]): Promise<void>;
  upgrade(): Promise<Database>;
  drop(): Promise<void>;
};

/** PGlite data dirs migrated up to a tag, dumped once per file: loading one is ~10× faster than initdb. */
const pgliteOld = new Map<string, Promise<Blob>>();

function pgliteAt(lastTag: string): Promise<Blob> {
  let dump = pgliteOld.get(lastTag);
  if (!dump) {
    dump = (async () => {
      const folder = migrationsThrough(lastTag);
      const pg = new PGlite();
      try {
        await migratePglite(drizzlePglite(pg), { migrationsFolder: folder });
        return await pg.dumpDataDir('gzip');
      } finally {
        await pg.close();
        rmSync(folder, { recursive: true, force: true });
      }
    })();
    pgliteOld.set(lastTag, dump);
  }
  return dump;
}

async function openOldDatabase(kind: DbKind, lastTag: string): Promise<OldDatabase> {
  if (kind === 'pglite') {
    const pg = new PGlite({ loadDataDir: await pgliteAt(lastTag) });
    let upgraded: Database | undefined;
    return {
      seed: async (statements) => {
        for (const s of statements) await pg.query(s);
      },
      upgrade: async () => {
        const dump = await pg.dumpDataDir('gzip');
        await pg.close();
        upgraded = await openDatabase({ kind: 'pglite', loadDataDir: dump });
        return upgraded;
      },
      drop: async () => {
        await upgraded?.close();
        if (!pg.closed) await pg.close();
      },
    };
  }
  const folder = migrationsThrough(lastTag);
  try {
    const server = process.env.DATABASE_URL ?? TEST_PG_URL;
    const name = `ffleet_t_${randomBytes(6).toString('hex')}`;
    const admin = postgres(server, { max: 1, onnotice: () => {} });
    await admin.unsafe(`CREATE DATABASE ${name}`);
    await admin.end();
    const url = new URL(server);
    url.pathname = `/${name}`;
    const client = postgres(url.toString(), { max: 1, onnotice: () => {} });
    await migratePostgres(drizzlePostgres(client), { migrationsFolder: folder });
    let upgraded: Database | undefined;
    return {
      seed: async (statements) => {
        for (const s of statements) await client.unsafe(s);
      },
      upgrade: async () => {
        await client.end();
        upgraded = await openDatabase({ kind: 'postgres', url: url.toString(), max: 2 });
        return upgraded;
      },
      drop: async () => {
        await upgraded?.close();
        await client.end();
        const a = postgres(server, { max: 1, onnotice: () => {} });
        await a.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
        await a.end();
      },
    };
  } finally {
    rmSync(folder, { recursive: true, force: true });
  }
}

const textArray = (items: readonly string[]) =>
  `ARRAY[${items.map((i) => `'${i.replace(/'/g, "''")}'`).join(', ')}]::text[]`;

/**
 * 0.2.0 renamed the os/arch capabilities to Go's names (platform-names.ts); migration 0007 rewrites
 * what 0.1.0 stored in `requires`, so those tasks and presets still find their agents.
 */
describe.each(dbKinds)('upgrading a 0.1.0 database on %s', (kind) => {
  let old: OldDatabase | undefined;
  afterEach(async () => {
    await old?.drop();
    old = undefined;
  });

  const insertTask = (id: string, status: string, requires: readonly string[], priority = 0) =>
    `INSERT INTO tasks (id, name, command_raw, status, priority, requires, created_at)
       VALUES ('${id}', '${id}', '-i in out', '${status}', ${priority}, ${textArray(requires)}, 1)`;

  it("rewrites Node's os/arch names in every task's and preset's requires to Go's, and nothing else", async () => {
    old = await openOldDatabase(kind, RELEASE_0_1_0);
    const ids = {
      queued: randomUUID(),
      running: randomUUID(),
      failed: randomUUID(),
      duplicates: randomUUID(),
      untouched: randomUUID(),
      every: randomUUID(),
    };
    const presetId = randomUUID();
    const every = [...NODE_PLATFORMS.map((p) => `os:${p}`), ...NODE_ARCHES.map((a) => `arch:${a}`)];
    const untouched = ['x64', 'win32', 'arch:x64 ', 'ARCH:X64', 'arch:x64:v2', 'encoder:x64', 'gpu', 'gpu'];
    await old.seed([
      `INSERT INTO presets (id, name, command, requires) VALUES
         ('${presetId}', 'win', '-i in out', ${textArray(['arch:x64', 'gpu', 'os:win32'])})`,
      // A watchfolder keeps no requires of its own: its tasks take their preset's.
      `INSERT INTO watchfolders (id, name, interval, growth_checks, preset_id, path)
         VALUES ('${randomUUID()}', 'drop', 5, 3, '${presetId}', '/srv/drop')`,
      insertTask(ids.queued, 'QUEUED', ['arch:x64', 'gpu', 'os:win32']),
      insertTask(ids.running, 'RUNNING', ['arch:x64', 'gpu', 'os:win32']),
      insertTask(ids.failed, 'DONE_ERROR', ['arch:x64', 'gpu', 'os:win32']),
      insertTask(ids.duplicates, 'QUEUED', [
        'arch:amd64',
        'gpu',
        'arch:x64',
        'gpu',
        'os:win32',
        'os:windows',
      ]),
      insertTask(ids.untouched, 'QUEUED', untouched),
      insertTask(ids.every, 'QUEUED', every),
      `INSERT INTO agents (id, name, os, arch) VALUES ('${randomUUID()}', 'box-0.1', 'win32', 'x64')`,
    ]);
    const database = await old.upgrade();
    const requiresOf = async (id: string) =>
      (
        await database.rows<{ requires: string[] }>(
          database.db,
          sql`SELECT requires FROM tasks WHERE id = ${id}`,
        )
      )[0]?.requires;

    // Queued, running (requeued if its agent is lost) and finished (restartable): all rewritten.
    for (const id of [ids.queued, ids.running, ids.failed])
      expect(await requiresOf(id)).toEqual(['arch:amd64', 'gpu', 'os:windows']);
    const [preset] = await database.rows<{ requires: string[] }>(
      database.db,
      sql`SELECT requires FROM presets WHERE id = ${presetId}`,
    );
    expect(preset?.requires).toEqual(['arch:amd64', 'gpu', 'os:windows']);
    // A repeat the rewrite made is dropped (the earlier item stays where it was); the client's own stays.
    expect(await requiresOf(ids.duplicates)).toEqual(['arch:amd64', 'gpu', 'gpu', 'os:windows']);
    // Only exact `os:`/`arch:` items of Node's names.
    expect(await requiresOf(ids.untouched)).toEqual(untouched);
    // The same names the agents now offer, for every platform and architecture Node has.
    expect(await requiresOf(ids.every)).toEqual([
      ...NODE_PLATFORMS.map((p) => `os:${osName(p)}`),
      ...NODE_ARCHES.map((a) => `arch:${archName(a)}`),
    ]);
    // Agents not yet reconnected offer what they will after their next birth.
    const [agent] = await database.rows<{ os: string; arch: string }>(
      database.db,
      sql`SELECT os, arch FROM agents WHERE name = 'box-0.1'`,
    );
    expect(agent).toEqual({ os: 'windows', arch: 'amd64' });
  });

  it('a task queued with arch:x64 by 0.1.0 is claimed by an agent offering arch:amd64', async () => {
    old = await openOldDatabase(kind, RELEASE_0_1_0);
    const [task, windowsOnly] = [randomUUID(), randomUUID()];
    await old.seed([
      insertTask(task, 'QUEUED', ['arch:x64']),
      insertTask(windowsOnly, 'QUEUED', ['arch:x64', 'os:win32'], 10),
    ]);
    const database = await old.upgrade();
    // What a 0.2.0 agent on a Linux x64 box offers (os:linux, arch:amd64).
    const capabilities = agentCapabilities({
      name: 'encode-01',
      labels: [],
      encoders: [],
      hwaccels: [],
      os: osName('linux'),
      arch: archName('x64'),
    });
    expect(capabilities).toContain('arch:amd64');
    const agent = { id: randomUUID(), name: 'encode-01', capabilities };
    const claimed = await database.db.transaction((tx) =>
      claimTasksIn(tx as unknown as Db, new EmittedEvents(tx as unknown as Db), Date.now(), agent, 5, 60_000),
    );
    expect(claimed.map((c) => c.task.id)).toEqual([task]);
  });
});
