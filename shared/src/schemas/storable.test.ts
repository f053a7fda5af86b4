import { describe, expect, it } from 'vitest';
import {
  escapeUnstorable,
  findUnsafeJson,
  MAX_JSON_DEPTH,
  nestedDeeperThan,
  toStorable,
  unstorableText,
} from './storable.ts';

describe('storable text', () => {
  it('names what PostgreSQL cannot store: NUL and unpaired surrogates, not pairs', () => {
    expect(unstorableText('a\u0000b')).toBe('contains a NUL character');
    expect(unstorableText('x\ud800')).toBe('contains an unpaired UTF-16 surrogate');
    expect(unstorableText('\udc00x')).toBe('contains an unpaired UTF-16 surrogate');
    expect(unstorableText('take \ud83c\udfac \uFFFD')).toBeNull();
  });

  it('replaces them with U+FFFD in strings, keys, arrays and nested objects; other values stay', () => {
    expect(toStorable('a\u0000b\ud800c\udc00 \ud83d\ude00')).toBe('a\ufffdb\ufffdc\ufffd \ud83d\ude00');
    expect(
      toStorable({ 'k\udcff': ['v\u0000', 1, true, null, { deep: '\ud800' }], n: 2.5, ok: 'plain' }),
    ).toEqual({ 'k\ufffd': ['v\ufffd', 1, true, null, { deep: '\ufffd' }], n: 2.5, ok: 'plain' });
    const clean = 'x'.repeat(10_000);
    expect(toStorable(clean)).toBe(clean);
  });

  it('escapes them for messages', () => {
    expect(escapeUnstorable('a\u0000b\udcffc\ud83c\udfac')).toBe('a\\u0000b\\udcffc\ud83c\udfac');
  });

  it('finds every unsafe value, key and depth in parsed JSON, with its path', () => {
    let deep: unknown = 'bottom';
    for (let i = 0; i < MAX_JSON_DEPTH + 1; i++) deep = { d: deep };
    const value = JSON.parse(
      `{"a":["ok","\\u0000"],"b\\udcff":1,"__proto__":{},"c":${JSON.stringify(deep)}}`,
    ) as unknown;
    expect(findUnsafeJson(value).map((i) => `${i.path}: ${i.message}`)).toEqual([
      'a.1: contains a NUL character',
      'b\udcff: the key contains an unpaired UTF-16 surrogate',
      '__proto__: "__proto__" is a reserved key',
      `c${'.d'.repeat(MAX_JSON_DEPTH - 1)}: nested deeper than ${MAX_JSON_DEPTH} levels`,
    ]);
    expect(findUnsafeJson({ fine: ['x', { y: 1 }] })).toEqual([]);
  });
});

describe('nestedDeeperThan', () => {
  const nest = (levels: number): unknown => {
    let v: unknown = 'leaf';
    for (let i = 0; i < levels; i++) v = i % 2 ? [v] : { k: v };
    return v;
  };

  it('counts the value itself as level 1, arrays and objects alike; scalars have no depth', () => {
    expect(nestedDeeperThan('x', 0)).toBe(false);
    expect(nestedDeeperThan(null, 0)).toBe(false);
    expect(nestedDeeperThan({}, 1)).toBe(false);
    expect(nestedDeeperThan({}, 0)).toBe(true);
    expect(nestedDeeperThan(nest(64), 64)).toBe(false);
    expect(nestedDeeperThan(nest(65), 64)).toBe(true);
    // The deepest branch counts, wherever it is.
    expect(nestedDeeperThan({ a: 1, b: [2, { c: nest(2) }] }, 5)).toBe(false);
    expect(nestedDeeperThan({ a: 1, b: [2, { c: nest(3) }] }, 5)).toBe(true);
  });

  it('measures any depth without the stack (a recursive walk overflows long before 1,000,000)', () => {
    expect(nestedDeeperThan(nest(1_000_000), 80)).toBe(true);
    expect(nestedDeeperThan(nest(1_000_000), 1_000_000)).toBe(false);
  });
});
