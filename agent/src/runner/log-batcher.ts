/** How long captured lines wait before they are sent: few reports for chatty processes, still live. */
export const LOG_FLUSH_MS = 250;

/** A batch is sent at once when it reaches this size, so one report stays small. */
export const LOG_MAX_BATCH_BYTES = 32 * 1024;

/**
 * Collects output lines of one step and hands them on in batches: after {@link LOG_FLUSH_MS}, or at
 * once when the batch reaches {@link LOG_MAX_BATCH_BYTES}. Each line ends with `\n` in the text.
 */
export class LogBatcher {
  private lines: string[] = [];
  private bytes = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly send: (text: string) => void,
    private readonly flushMs = LOG_FLUSH_MS,
    private readonly maxBytes = LOG_MAX_BATCH_BYTES,
    /** Called when a line is added to an empty batch, before it is kept (see createRunLogs). */
    private readonly onFirstLine?: () => void,
  ) {}

  /** Add one line (without its line break). */
  add(line: string): void {
    if (this.lines.length === 0) this.onFirstLine?.();
    this.lines.push(line);
    this.bytes += Buffer.byteLength(line) + 1;
    if (this.bytes >= this.maxBytes) {
      this.flush();
      return;
    }
    this.timer ??= setTimeout(() => this.flush(), this.flushMs);
  }

  /** Send what is pending now. */
  flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.lines.length === 0) return;
    const text = `${this.lines.join('\n')}\n`;
    this.lines = [];
    this.bytes = 0;
    this.send(text);
  }
}
