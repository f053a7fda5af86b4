/**
 * Shell-words tokenizer for task commands and script paths. It splits text the way a POSIX shell
 * splits words, but it never interprets anything: `$VAR`, `$(…)`, backticks, `;`, `|`, `<`, `>` and
 * globs are ordinary characters. No shell ever runs a task, so a value can never become an operator.
 */

/** One word of a command line. */
export interface Token {
  /** The word with quotes and escapes removed. */
  value: string;
  /**
   * True when any part of the word was quoted or backslash-escaped. A quoted word is always an
   * argument: `"&&"` or `\&&` never splits a chain.
   */
  quoted: boolean;
}

/** Result of {@link tokenize}: the words, or why the text cannot be split. */
export type TokenizeResult = { ok: true; tokens: Token[] } | { ok: false; error: string };

const WHITESPACE = new Set([' ', '\t', '\n', '\r', '\v', '\f']);

/** Characters a backslash escapes inside double quotes (POSIX); any other backslash stays literal. */
const DOUBLE_QUOTE_ESCAPABLE = new Set(['"', '\\', '$', '`']);

/**
 * Split `input` into words, shell-words style:
 * - unquoted whitespace separates words;
 * - `'…'` is literal up to the next single quote;
 * - `"…"` is literal except that a backslash escapes `"`, `\`, `$` and `` ` `` (and a backslash-newline
 *   is removed), as in POSIX;
 * - outside quotes a backslash makes the next character literal (backslash-newline is removed);
 * - `''` and `""` make an empty word.
 *
 * An unterminated quote or a trailing backslash is an error, returned as a value.
 */
export function tokenize(input: string): TokenizeResult {
  const tokens: Token[] = [];
  let value = '';
  let quoted = false;
  // A word exists once any character or quote of it has been read; `''` is an (empty) word.
  let inWord = false;
  let i = 0;

  const endWord = (): void => {
    if (inWord) tokens.push({ value, quoted });
    value = '';
    quoted = false;
    inWord = false;
  };

  while (i < input.length) {
    const ch = input[i] as string;

    if (WHITESPACE.has(ch)) {
      endWord();
      i += 1;
      continue;
    }

    if (ch === '\\') {
      const next = input[i + 1];
      if (next === undefined) return { ok: false, error: `trailing backslash at position ${i}` };
      i += 2;
      // Backslash-newline is a line continuation: it joins lines and adds nothing.
      if (next === '\n') continue;
      value += next;
      quoted = true;
      inWord = true;
      continue;
    }

    if (ch === "'") {
      const close = input.indexOf("'", i + 1);
      if (close === -1) return { ok: false, error: `unterminated single quote at position ${i}` };
      value += input.slice(i + 1, close);
      quoted = true;
      inWord = true;
      i = close + 1;
      continue;
    }

    if (ch === '"') {
      const start = i;
      i += 1;
      let closed = false;
      while (i < input.length) {
        const c = input[i] as string;
        if (c === '"') {
          closed = true;
          i += 1;
          break;
        }
        if (c === '\\') {
          const next = input[i + 1];
          if (next !== undefined && DOUBLE_QUOTE_ESCAPABLE.has(next)) {
            value += next;
            i += 2;
            continue;
          }
          if (next === '\n') {
            i += 2;
            continue;
          }
        }
        value += c;
        i += 1;
      }
      if (!closed) return { ok: false, error: `unterminated double quote at position ${start}` };
      quoted = true;
      inWord = true;
      continue;
    }

    value += ch;
    inWord = true;
    i += 1;
  }

  endWord();
  return { ok: true, tokens };
}
