import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { keepBootId, previousBootId } from './boot-id.ts';

const A = '11111111-1111-4111-8111-111111111111';
const B = '22222222-2222-4222-8222-222222222222';
let dir: string;
afterEach(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('boot id of the data dir', () => {
  it('names the process kept last, none on a first start', () => {
    dir = mkdtempSync(join(tmpdir(), 'ffleet-boot-id-'));
    const own = join(dir, 'agent-x');
    expect(previousBootId(own)).toBeUndefined();
    expect(keepBootId(own, A)).toBeUndefined();
    expect(readFileSync(join(own, 'boot-id'), 'utf8')).toBe(`${A}\n`);
    expect(previousBootId(own)).toBe(A);
    // A process that never keeps its id (it died before reaching the control plane) leaves A named.
    expect(previousBootId(own)).toBe(A);
    expect(keepBootId(own, B)).toBeUndefined();
    expect(previousBootId(own)).toBe(B);
  });

  it('claims no previous process from a file that holds no boot id', () => {
    dir = mkdtempSync(join(tmpdir(), 'ffleet-boot-id-'));
    writeFileSync(join(dir, 'boot-id'), 'not a boot id\n');
    expect(previousBootId(dir)).toBeUndefined();
  });

  it('says why when it cannot keep the id', () => {
    dir = mkdtempSync(join(tmpdir(), 'ffleet-boot-id-'));
    // In the way of the file (as root, permissions would not stop the write).
    mkdirSync(join(dir, 'boot-id', 'x'), { recursive: true });
    expect(keepBootId(dir, B)).toMatch(/EISDIR|ENOTEMPTY|EEXIST/);
    expect(previousBootId(dir)).toBeUndefined();
  });
});
