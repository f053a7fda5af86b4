import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { swapBootId } from './boot-id.ts';

const A = '11111111-1111-4111-8111-111111111111';
const B = '22222222-2222-4222-8222-222222222222';
let dir: string;
afterEach(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('swapBootId', () => {
  it('keeps this process’s boot id and returns the one before it, none on a first start', () => {
    dir = mkdtempSync(join(tmpdir(), 'ffleet-boot-id-'));
    const own = join(dir, 'agent-x');
    expect(swapBootId(own, A)).toEqual({});
    expect(readFileSync(join(own, 'boot-id'), 'utf8')).toBe(`${A}\n`);
    expect(swapBootId(own, B)).toEqual({ previous: A });
    expect(swapBootId(own, A)).toEqual({ previous: B });
  });

  it('claims no previous process from a file that holds no boot id', () => {
    dir = mkdtempSync(join(tmpdir(), 'ffleet-boot-id-'));
    writeFileSync(join(dir, 'boot-id'), 'not a boot id\n');
    expect(swapBootId(dir, A)).toEqual({});
  });

  it('says why when it cannot keep the id, and then claims none', () => {
    dir = mkdtempSync(join(tmpdir(), 'ffleet-boot-id-'));
    // In the way of the file (as root, permissions would not stop the write).
    mkdirSync(join(dir, 'boot-id', 'x'), { recursive: true });
    expect(swapBootId(dir, B)).toEqual({ error: expect.stringMatching(/EISDIR|ENOTEMPTY|EEXIST/) });
  });
});
