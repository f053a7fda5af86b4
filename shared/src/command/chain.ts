// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${NAME} wildcards are literal text here, not template placeholders.
import { type Token, tokenize } from './tokenize.ts';

/** The operator that chains transcoder calls; only an unquoted token that is exactly this splits. */
export const CHAIN_OPERATOR = '&&';

/**
 * Wildcards a chained segment must start with (spec rule 3). `${FFMPEG}` is ffleet's alias of
 * `${TRANSCODER}`, kept for FFmate users.
 */
export const TRANSCODER_WILDCARDS: readonly string[] = ['${TRANSCODER}', '${FFMPEG}'];

/** True when `word` is one of {@link TRANSCODER_WILDCARDS}. */
export function isTranscoderWildcard(word: string | undefined): boolean {
  return word !== undefined && TRANSCODER_WILDCARDS.includes(word);
}

/**
 * Split tokens into the segments of an `&&` chain. Only an unquoted token that is exactly `&&`
 * separates segments; `"&&"`, `\&&` and `a&&b` stay arguments. Empty segments are kept (as `[]`) so
 * callers can report them.
 */
export function splitChain(tokens: readonly Token[]): string[][] {
  const segments: string[][] = [[]];
  for (const token of tokens) {
    if (!token.quoted && token.value === CHAIN_OPERATOR) {
      segments.push([]);
      continue;
    }
    (segments[segments.length - 1] as string[]).push(token.value);
  }
  return segments;
}

/** Result of {@link parseCommand}: the chain's segments, or why the command is not acceptable. */
export type ParseCommandResult = { ok: true; segments: string[][] } | { ok: false; error: string };

/**
 * Tokenize a task command and split it into its `&&` segments, checking the chain rules: the command
 * is not empty, no segment is empty, and every segment after the first starts with `${TRANSCODER}`
 * or `${FFMPEG}` (the transcoder is placed in front of the first segment automatically).
 */
export function parseCommand(command: string): ParseCommandResult {
  const tokenized = tokenize(command);
  if (!tokenized.ok) return tokenized;
  if (tokenized.tokens.length === 0) return { ok: false, error: 'command is empty' };

  const segments = splitChain(tokenized.tokens);
  for (const [index, segment] of segments.entries()) {
    if (segment.length === 0) {
      return { ok: false, error: `command segment ${index + 1} of ${segments.length} is empty` };
    }
    if (index > 0 && !isTranscoderWildcard(segment[0])) {
      return {
        ok: false,
        error: `command segment ${index + 1} must start with \${TRANSCODER} or \${FFMPEG} (found "${segment[0]}")`,
      };
    }
  }
  return { ok: true, segments };
}

/** Result of {@link checkCommand}. */
export type CheckCommandResult = { ok: true } | { ok: false; error: string };

/**
 * Validate a task command as the API does before accepting it (a failure is a 422): it must
 * tokenize, must not be empty, and every `&&` segment after the first must start with
 * `${TRANSCODER}` or `${FFMPEG}`.
 */
export function checkCommand(command: string): CheckCommandResult {
  const parsed = parseCommand(command);
  return parsed.ok ? { ok: true } : parsed;
}
