import { chownSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { claimEmbeddedDatabase } from './control-plane.ts';

describe('claiming the embedded database before it is opened', () => {
  let dir = '';
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'ffleet-claim-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('is one process at a time, and free again once released', async () => {
    const release = await claimEmbeddedDatabase(join(dir, 'data'));
    await expect(claimEmbeddedDatabase(join(dir, 'data'))).rejects.toThrow(
      /the embedded database in .*\/data\/pglite is in use by this process already/,
    );
    await release();
    await (await claimEmbeddedDatabase(join(dir, 'data')))();
  });

  // Files left by a one-off `sudo ffleet start`: PGlite would only say "failed to initialize properly".
  it.runIf(process.getuid?.() === 0)(
    'names files that belong to another user, and keeps no lock',
    async () => {
      const pglite = join(dir, 'data', 'pglite');
      mkdirSync(join(pglite, 'global'), { recursive: true });
      writeFileSync(join(pglite, 'PG_VERSION'), '17\n');
      chownSync(join(pglite, 'PG_VERSION'), 65534, 65534);
      await expect(claimEmbeddedDatabase(join(dir, 'data'))).rejects.toThrow(
        /PG_VERSION belongs to user id 65534, not to the user running ffleet \(0\): give the data dir to this user/,
      );
      chownSync(join(pglite, 'PG_VERSION'), 0, 0);
      await (await claimEmbeddedDatabase(join(dir, 'data')))();
    },
  );
});
