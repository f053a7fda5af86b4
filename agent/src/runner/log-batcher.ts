import { formatBytes } from '@ffleet/shared';

/** How long captured lines wait before they are sent: few reports for chatty processes, still live. */
export const LOG_FLUSH_MS = 250;

/** A batch is sent at once when it reaches this size, so one report stays small. */
export const LOG_MAX_BATCH_BYTES = 32 * 1024;

/**
 * Output of one step of a run that is sent as it comes. `GET /tasks/{id}/logs` shows the last 256 KiB
 * of a task's logs, and every line sent is stored: a script printing 40 MB had the agent send, and the
 * control plane store, all 40 MB (its memory rose by 300 MB meanwhile).
 */
export const LOG_STEP_BUDGET_BYTES = 1024 * 1024;

/** Past the budget, the last this many bytes are kept and sent, after a line saying what was left out. */
export const LOG_OMITTED_TAIL_BYTES = 64 * 1024;

/**
 * Collects output lines of one step and hands them on in batches: after {@link LOG_FLUSH_MS}, or at
 * once when the batch reaches {@link LOG_MAX_BATCH_BYTES}. Each line ends with `\n` in the text.
 *
 * The first `budgetBytes` of output go out this way. After that, lines are only counted and the last
 * `tailBytes` of them kept; a flush on demand ({@link flush}: the step's end, or another step's output
 * coming next) sends a line saying how much was left out, then those last lines. The timer does not
 * send them, so a step that prints without end costs one such batch per flush on demand.
 */
export class LogBatcher {
  private lines: string[] = [];
  private bytes = 0;
  private timer: NodeJS.Timeout | undefined;
  /** Bytes sent so far, or handed to the tail once over budget. */
  private total = 0;
  private omittedLines = 0;
  private omittedBytes = 0;

  constructor(
    private readonly send: (text: string) => void,
    private readonly flushMs = LOG_FLUSH_MS,
    private readonly maxBytes = LOG_MAX_BATCH_BYTES,
    /** Called when a line is added to an empty batch, before it is kept (see createRunLogs). */
    private readonly onFirstLine?: () => void,
    private readonly budgetBytes = LOG_STEP_BUDGET_BYTES,
    private readonly tailBytes = LOG_OMITTED_TAIL_BYTES,
  ) {}

  /** Add one line (without its line break). */
  add(line: string): void {
    if (this.lines.length === 0) this.onFirstLine?.();
    const size = Buffer.byteLength(line) + 1;
    const withinBudget = this.total <= this.budgetBytes;
    this.total += size;
    if (this.total > this.budgetBytes) {
      // The output within the budget goes out as it would have; from here on only a tail is kept.
      if (withinBudget) this.flush();
      this.lines.push(line);
      this.bytes += size;
      // Over budget: keep the last tailBytes (at least the newest line), count what drops out.
      while (this.bytes > this.tailBytes && this.lines.length > 1) {
        const dropped = this.lines.shift()!;
        const droppedSize = Buffer.byteLength(dropped) + 1;
        this.bytes -= droppedSize;
        this.omittedLines += 1;
        this.omittedBytes += droppedSize;
      }
      return;
    }
    this.lines.push(line);
    this.bytes += size;
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
    const omitted =
      this.omittedLines > 0
        ? `[ffleet: ${this.omittedLines} ${this.omittedLines === 1 ? 'line' : 'lines'} (${formatBytes(this.omittedBytes)}) of output left out]\n`
        : '';
    const text = `${omitted}${this.lines.join('\n')}\n`;
    this.lines = [];
    this.bytes = 0;
    this.omittedLines = 0;
    this.omittedBytes = 0;
    this.send(text);
  }
}
