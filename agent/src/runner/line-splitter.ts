/**
 * Longest line kept whole. A process that prints megabytes without a newline must not grow memory
 * without bound; such output is cut into lines of this size.
 */
export const MAX_LINE_CHARS = 64 * 1024;

/**
 * Splits a text stream into lines. `\n`, `\r\n` and a lone `\r` all end a line (ffmpeg redraws its
 * stats line with `\r`). Feed decoded text with {@link push}; call {@link end} once at the end.
 */
export class LineSplitter {
  private buffer = '';

  constructor(private readonly onLine: (line: string) => void) {}

  /** Add decoded text; complete lines are passed to the callback at once. */
  push(text: string): void {
    this.buffer += text;
    let start = 0;
    for (let i = 0; i < this.buffer.length; i += 1) {
      const ch = this.buffer.charCodeAt(i);
      if (ch !== 10 && ch !== 13) continue;
      // A `\r` at the very end may be the first half of `\r\n`: wait for the next chunk.
      if (ch === 13 && i === this.buffer.length - 1) break;
      this.#emit(this.buffer.slice(start, i));
      if (ch === 13 && this.buffer.charCodeAt(i + 1) === 10) i += 1;
      start = i + 1;
    }
    this.buffer = this.buffer.slice(start);
    while (this.buffer.length > MAX_LINE_CHARS) {
      this.onLine(this.buffer.slice(0, MAX_LINE_CHARS));
      this.buffer = this.buffer.slice(MAX_LINE_CHARS);
    }
  }

  /** A complete line, cut into pieces of MAX_LINE_CHARS when longer (as if it had arrived bit by bit). */
  #emit(line: string): void {
    let rest = line;
    while (rest.length > MAX_LINE_CHARS) {
      this.onLine(rest.slice(0, MAX_LINE_CHARS));
      rest = rest.slice(MAX_LINE_CHARS);
    }
    this.onLine(rest);
  }

  /** Flush a last line that has no line break. */
  end(): void {
    const rest = this.buffer.endsWith('\r') ? this.buffer.slice(0, -1) : this.buffer;
    this.buffer = '';
    if (rest !== '') this.#emit(rest);
  }
}
