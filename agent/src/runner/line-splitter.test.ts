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
});
