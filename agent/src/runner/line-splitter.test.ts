import { describe, expect, it } from 'vitest';
import { LineSplitter, MAX_LINE_CHARS } from './line-splitter.ts';

function split(chunks: string[]): string[] {
  const lines: string[] = [];
  const splitter = new LineSplitter((l) => lines.push(l));
  for (const chunk of chunks) splitter.push(chunk);
  splitter.end();
  return lines;
}

describe('LineSplitter', () => {
  it('splits on \\n, \\r\\n and a lone \\r, across chunk boundaries', () => {
    expect(split(['a\nb', 'c\r', '\nd\re', '\n'])).toEqual(['a', 'bc', 'd', 'e']);
  });

  it('keeps empty lines and flushes a last line without a break', () => {
    expect(split(['\n\nx'])).toEqual(['', '', 'x']);
    expect(split(['tail\r'])).toEqual(['tail']);
    expect(split([''])).toEqual([]);
  });

  it('cuts a line that never ends into pieces of the maximum size', () => {
    const lines = split(['x'.repeat(MAX_LINE_CHARS * 2 + 5)]);
    expect(lines.map((l) => l.length)).toEqual([MAX_LINE_CHARS, MAX_LINE_CHARS, 5]);
  });

  it('cuts a long line that ends in the same chunk the same way, whatever the chunks', () => {
    const long = 'b'.repeat(MAX_LINE_CHARS * 2 + 7);
    const text = `a\n${long}\nc\n`;
    const whole = split([text]);
    expect(whole.map((l) => l.length)).toEqual([1, MAX_LINE_CHARS, MAX_LINE_CHARS, 7, 1]);
    const chunks = Array.from({ length: Math.ceil(text.length / 1000) }, (_, i) =>
      text.slice(i * 1000, (i + 1) * 1000),
    );
    expect(split(chunks)).toEqual(whole);
    expect(split([long]).map((l) => l.length)).toEqual([MAX_LINE_CHARS, MAX_LINE_CHARS, 7]);
  });
});
