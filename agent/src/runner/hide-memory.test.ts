// The agent's process is not dumpable: another process of its user (a task's ffmpeg or script) cannot
// read its environment, where its token is, through /proc. Checked with the kernel itself: two
// processes of an unprivileged user (nobody), as root can read any process's /proc anyway.
import { spawnSync } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { hideProcessMemory, NATIVE_SPAWN_PATH, nativeSpawnStatus } from './native-spawn.ts';

const NOBODY = 65534;
/** nobody must be able to load the module (every directory on its path searchable by others). */
const loadableByOthers = (() => {
  try {
    accessSync(NATIVE_SPAWN_PATH, constants.R_OK);
    return spawnSync('test', ['-r', NATIVE_SPAWN_PATH], { uid: NOBODY, gid: NOBODY }).status === 0;
  } catch {
    return false;
  }
})();
const canRun = process.getuid?.() === 0 && nativeSpawnStatus().available && loadableByOthers;

/**
 * A Node process of nobody holding SECRET in its environment, made not dumpable or not, in which a
 * second process of nobody (started by it, as a task's ffmpeg would be) reads /proc/<its pid>/environ.
 */
function readOwnEnvironFromChild(hide: boolean): { read: boolean; leaked: boolean; ownerUid: number } {
  const script = `
    const { spawnSync } = require('node:child_process');
    const { statSync } = require('node:fs');
    const addon = require(${JSON.stringify(NATIVE_SPAWN_PATH)});
    if (${hide} && addon.hideMemory() !== 0) throw new Error('hideMemory failed');
    const cat = spawnSync('cat', ['/proc/' + process.pid + '/environ'], { encoding: 'utf8' });
    process.stdout.write(JSON.stringify({
      read: cat.status === 0,
      leaked: cat.stdout.includes('SECRET=s3cr3t'),
      ownerUid: statSync('/proc/' + process.pid + '/environ').uid,
    }));`;
  const r = spawnSync(process.execPath, ['-e', script], {
    uid: NOBODY,
    gid: NOBODY,
    cwd: '/',
    env: { PATH: process.env.PATH, SECRET: 's3cr3t' },
    encoding: 'utf8',
  });
  if (r.status !== 0) throw new Error(`probe failed (${r.status}): ${r.stderr}`);
  return JSON.parse(r.stdout);
}

describe.runIf(canRun)('hideMemory (native module)', () => {
  it('keeps the environment of a process that called it from a child of the same user; without it the child reads it', () => {
    expect(readOwnEnvironFromChild(false)).toEqual({ read: true, leaked: true, ownerUid: NOBODY });
    expect(readOwnEnvironFromChild(true)).toEqual({ read: false, leaked: false, ownerUid: 0 });
  });
});

describe('hideProcessMemory', () => {
  it('says whether it hid this process, and why not', () => {
    const r = hideProcessMemory();
    if (nativeSpawnStatus().available) expect(r).toEqual({ hidden: true });
    else expect(r).toEqual({ hidden: false, reason: expect.stringContaining('native module') });
  });
});
