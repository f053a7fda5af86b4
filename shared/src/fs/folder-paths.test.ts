import { describe, expect, it } from 'vitest';
import { foldersOverlap, relativeInside } from './folder-paths.ts';

describe('relativeInside and foldersOverlap', () => {
  it('compares whole path components, POSIX and Windows, trailing separators aside', () => {
    expect(relativeInside('/srv/drop', '/srv/drop/')).toBe('');
    expect(relativeInside('/srv/drop/', '/srv//drop/a/b')).toBe('a/b');
    expect(relativeInside('/srv/drop/a', '/srv/drop')).toBeNull();
    expect(relativeInside('/srv/drop', '/srv/dropbox')).toBeNull();
    expect(relativeInside('/', '/srv')).toBe('srv');
    expect(relativeInside('C:\\media', 'C:\\media\\in\\x')).toBe('in/x');
    expect(relativeInside('C:\\media', 'C:\\mediax')).toBeNull();
    expect(foldersOverlap('/srv/drop/a', '/srv/drop')).toBe(true);
    expect(foldersOverlap('/srv/drop', '/srv/dropbox')).toBe(false);
  });
});
