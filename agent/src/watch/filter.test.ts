import { describe, expect, it } from 'vitest';
import {
  compileFilter,
  extensionOf,
  isCandidateName,
  isIgnoredRelativePath,
  isSameFilter,
  matchesFilter,
} from './filter.ts';

const names = ['a.mov', 'b.MOV', 'c.mxf', 'd.txt', 'noext', 'f.Mp4', 'g.tar.gz'];
const kept = (include?: string[], exclude?: string[]): string[] => {
  const f = compileFilter({ extensions: { include, exclude } });
  return names.filter((n) => matchesFilter(n, f));
};

describe('extension filter', () => {
  it('keeps everything when neither list is set', () => {
    expect(kept()).toEqual(names);
    expect(names.filter((n) => matchesFilter(n, compileFilter(undefined)))).toEqual(names);
  });

  it('keeps only included extensions, ignoring case on both sides', () => {
    expect(kept(['mov', 'MP4'])).toEqual(['a.mov', 'b.MOV', 'f.Mp4']);
  });

  it('skips excluded extensions and keeps the rest, files without extension included', () => {
    expect(kept(undefined, ['TXT', 'gz'])).toEqual(['a.mov', 'b.MOV', 'c.mxf', 'noext', 'f.Mp4']);
  });

  it('checks exclude first: a file in both lists is skipped', () => {
    expect(kept(['mov', 'mxf'], ['MOV'])).toEqual(['c.mxf']);
  });

  it('treats an empty include list as "everything"', () => {
    expect(kept([], ['txt'])).toEqual(['a.mov', 'b.MOV', 'c.mxf', 'noext', 'f.Mp4', 'g.tar.gz']);
  });

  it('uses the text after the last dot as the extension and tolerates a leading dot in the list', () => {
    expect(extensionOf('g.tar.gz')).toBe('gz');
    expect(extensionOf('noext')).toBe('');
    expect(kept(['.GZ'])).toEqual(['g.tar.gz']);
  });

  it('compares filters by the files they keep', () => {
    const a = compileFilter({ extensions: { include: ['MOV', 'mxf'] } });
    const b = compileFilter({ extensions: { include: ['mxf', 'mov'], exclude: [] } });
    expect(isSameFilter(a, b)).toBe(true);
    expect(isSameFilter(a, compileFilter({}))).toBe(false);
    expect(isSameFilter(a, compileFilter({ extensions: { include: ['mov', 'mxf'], exclude: ['x'] } }))).toBe(
      false,
    );
  });
});

describe('name rules', () => {
  const all = compileFilter({});

  it('never takes dot-files or lock files as candidates', () => {
    expect(isCandidateName('.hidden.mov', all)).toBe(false);
    expect(isCandidateName('a.mov.lock', all)).toBe(false);
    expect(isCandidateName('A.MOV.LOCK', all)).toBe(false);
    expect(isCandidateName('a.mov', all)).toBe(true);
  });

  it('ignores paths inside hidden directories but not the watchfolder root itself', () => {
    expect(isIgnoredRelativePath('')).toBe(false);
    expect(isIgnoredRelativePath('sub/a.mov')).toBe(false);
    expect(isIgnoredRelativePath('.cache/a.mov')).toBe(true);
    expect(isIgnoredRelativePath('sub/.git')).toBe(true);
    expect(isIgnoredRelativePath('sub/a.mov.lock')).toBe(true);
  });
});
