// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${NAME} wildcards are literal text here, not template placeholders.
import { describe, expect, it } from 'vitest';
import { tokenize } from './tokenize.ts';

function words(input: string): string[] {
  const result = tokenize(input);
  if (!result.ok) throw new Error(result.error);
  return result.tokens.map((t) => t.value);
}

describe('tokenize', () => {
  it('splits on runs of spaces, tabs and newlines', () => {
    expect(words('  -i  in.mp4\t-c:v\nlibx264  ')).toEqual(['-i', 'in.mp4', '-c:v', 'libx264']);
  });

  it('returns no tokens for empty or blank input', () => {
    expect(words('')).toEqual([]);
    expect(words(' \t\n')).toEqual([]);
  });

  it('keeps single-quoted text literal, including backslashes and $', () => {
    expect(words(`-vf 'drawtext=text=a b\\n $HOME'`)).toEqual(['-vf', 'drawtext=text=a b\\n $HOME']);
  });

  it('honours backslash escapes for " \\ $ and ` inside double quotes and keeps other backslashes', () => {
    expect(words('"a \\"b\\" \\\\ \\$x \\` \\n"')).toEqual(['a "b" \\ $x ` \\n']);
  });

  it('makes the next character literal after a backslash outside quotes', () => {
    expect(words('my\\ file.mp4 \\"x\\" \\\\')).toEqual(['my file.mp4', '"x"', '\\']);
  });

  it('treats backslash-newline as a line continuation', () => {
    expect(words('-i a.mp4 \\\n-y')).toEqual(['-i', 'a.mp4', '-y']);
    expect(words('"ab\\\ncd"')).toEqual(['abcd']);
  });

  it('joins adjacent quoted and unquoted parts into one word', () => {
    expect(words(`title='My "Movie"'"'s"end`)).toEqual([`title=My "Movie"'send`]);
  });

  it('produces empty words for empty quotes', () => {
    expect(words(`a '' "" b`)).toEqual(['a', '', '', 'b']);
  });

  it('keeps shell syntax as ordinary characters (no shell ever runs)', () => {
    expect(words('a;b | c > d $(rm -rf /) `id` $HOME *.mp4 &')).toEqual([
      'a;b',
      '|',
      'c',
      '>',
      'd',
      '$(rm',
      '-rf',
      '/)',
      '`id`',
      '$HOME',
      '*.mp4',
      '&',
    ]);
  });

  it('marks quoted and escaped words so an operator can be told from an argument', () => {
    const result = tokenize(`&& "&&" '&&' \\&& a`);
    expect(result).toEqual({
      ok: true,
      tokens: [
        { value: '&&', quoted: false },
        { value: '&&', quoted: true },
        { value: '&&', quoted: true },
        { value: '&&', quoted: true },
        { value: 'a', quoted: false },
      ],
    });
  });

  it('reports an unterminated single quote', () => {
    expect(tokenize(`-i 'in.mp4`)).toEqual({ ok: false, error: 'unterminated single quote at position 3' });
  });

  it('reports an unterminated double quote, also after an escaped quote', () => {
    expect(tokenize('-i "in.mp4')).toEqual({ ok: false, error: 'unterminated double quote at position 3' });
    expect(tokenize('"a\\"')).toMatchObject({ ok: false });
  });

  it('reports a trailing backslash', () => {
    expect(tokenize('a \\')).toEqual({ ok: false, error: 'trailing backslash at position 2' });
  });

  it('leaves wildcards untouched so they are substituted inside each word later', () => {
    expect(words(`-i \${INPUT_FILE} '\${OUTPUT_FILE}' "\${METADATA_a.b}"`)).toEqual([
      '-i',
      '${INPUT_FILE}',
      '${OUTPUT_FILE}',
      '${METADATA_a.b}',
    ]);
  });
});
