// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${NAME} wildcards are literal text here, not template placeholders.
import { describe, expect, it } from 'vitest';
import { checkCommand, parseCommand, splitChain } from './chain.ts';
import { formatCommandLine, quoteArgument } from './quote.ts';
import { tokenize } from './tokenize.ts';

function tokens(input: string) {
  const result = tokenize(input);
  if (!result.ok) throw new Error(result.error);
  return result.tokens;
}

describe('splitChain', () => {
  it('splits on an unquoted && token', () => {
    expect(splitChain(tokens('-i a -f null - && ${TRANSCODER} -i a b'))).toEqual([
      ['-i', 'a', '-f', 'null', '-'],
      ['${TRANSCODER}', '-i', 'a', 'b'],
    ]);
  });

  it('keeps a quoted or escaped && and && inside a word as arguments', () => {
    expect(splitChain(tokens(`-vf "drawtext=text='&&'" "&&" \\&& a&&b`))).toEqual([
      ['-vf', "drawtext=text='&&'", '&&', '&&', 'a&&b'],
    ]);
  });

  it('keeps empty segments so callers can report them', () => {
    expect(splitChain(tokens('&& a &&'))).toEqual([[], ['a'], []]);
    expect(splitChain([])).toEqual([[]]);
  });
});

describe('checkCommand', () => {
  it('accepts a single segment', () => {
    expect(checkCommand('-i ${INPUT_FILE} -c:v libx264 ${OUTPUT_FILE}')).toEqual({ ok: true });
  });

  it('accepts later segments that start with ${TRANSCODER} or ${FFMPEG}', () => {
    expect(checkCommand('-i a -pass 1 -f null - && ${TRANSCODER} -i a -pass 2 b')).toEqual({ ok: true });
    expect(checkCommand('-i a -f null - && "${FFMPEG}" -i a b && ${TRANSCODER} -i b c')).toEqual({
      ok: true,
    });
  });

  it('rejects a later segment that starts with anything else', () => {
    const result = checkCommand('-i a b && rm -rf /');
    expect(result).toEqual({
      ok: false,
      error: 'command segment 2 must start with ${TRANSCODER} or ${FFMPEG} (found "rm")',
    });
  });

  it('rejects an empty command and empty segments', () => {
    expect(checkCommand('')).toEqual({ ok: false, error: 'command is empty' });
    expect(checkCommand('   ')).toEqual({ ok: false, error: 'command is empty' });
    expect(checkCommand('&& ${TRANSCODER} -i a b')).toEqual({
      ok: false,
      error: 'command segment 1 of 2 is empty',
    });
    expect(checkCommand('-i a b &&')).toEqual({ ok: false, error: 'command segment 2 of 2 is empty' });
    expect(checkCommand('-i a b && && ${TRANSCODER}')).toMatchObject({ ok: false });
  });

  it('rejects a command that does not tokenize', () => {
    expect(checkCommand(`-vf 'scale=1:1`)).toEqual({
      ok: false,
      error: 'unterminated single quote at position 4',
    });
  });

  it('returns the segments from parseCommand', () => {
    expect(parseCommand('-i a && ${FFMPEG} -i b')).toEqual({
      ok: true,
      segments: [
        ['-i', 'a'],
        ['${FFMPEG}', '-i', 'b'],
      ],
    });
  });
});

describe('quoteArgument and formatCommandLine', () => {
  it('leaves plain words alone and quotes everything else', () => {
    expect(quoteArgument('/tmp/out-1.mp4')).toBe('/tmp/out-1.mp4');
    expect(quoteArgument('')).toBe("''");
    expect(quoteArgument('a b')).toBe("'a b'");
    expect(quoteArgument("it's")).toBe(`'it'\\''s'`);
    expect(quoteArgument('&&')).toBe("'&&'");
  });

  it('formats segments that tokenize back to the same words', () => {
    const segments = [
      ['-i', 'my file.mp4', '-metadata', `title=a "b" 'c' $(x) \`y\` ; \\`, '&&'],
      ['/usr/bin/ffmpeg', '-i', ''],
    ];
    const line = formatCommandLine(segments);
    expect(splitChain(tokens(line))).toEqual(segments);
  });
});
