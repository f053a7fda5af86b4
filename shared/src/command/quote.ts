/** Words that need no quoting: letters, digits and punctuation no shell treats specially. */
const SAFE_WORD = /^[A-Za-z0-9_\-+=.,/:@%^]+$/;

/**
 * Quote one argument so that {@link tokenize} (and a POSIX shell) reads it back as exactly one word
 * with the same value. Used to show resolved command lines; nothing ever passes them to a shell.
 */
export function quoteArgument(value: string): string {
  if (SAFE_WORD.test(value)) return value;
  return `'${value.replaceAll("'", `'\\''`)}'`;
}

/**
 * Format argument vectors as one command line: each argument quoted as needed, segments joined by
 * ` && `. `tokenize` + `splitChain` of the result give back the same segments.
 */
export function formatCommandLine(segments: readonly (readonly string[])[]): string {
  return segments.map((segment) => segment.map(quoteArgument).join(' ')).join(' && ');
}
