import { describe, expect, it } from 'vitest';
import { escapeUnstorable, findUnsafeJson, MAX_JSON_DEPTH, toStorable, unstorableText } from './storable.ts';

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
