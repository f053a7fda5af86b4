import type { TaskProgress } from './progress.ts';

/**
 * Shortest gap between two progress reports. ffmpeg writes a `-progress` block every 500 ms, so
 * each change reaches the control plane within about half a second (the contract asks for at least
 * once a second) without flooding it.
 */
export const PROGRESS_REPORT_INTERVAL_MS = 500;

/**
 * Passes progress on at most once per interval. A value that arrives too early is not dropped: the
 * newest one is sent when the interval is over, so the last change is always reported. Unchanged
 * values are not sent again.
 */
export class ProgressThrottle {
  private lastSentAt = Number.NEGATIVE_INFINITY;
  private last: TaskProgress | undefined;
  private pending: TaskProgress | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly send: (progress: TaskProgress) => void,
    private readonly intervalMs = PROGRESS_REPORT_INTERVAL_MS,
  ) {}

  /** Offer the latest progress. */
  offer(progress: TaskProgress): void {
    if (this.last && this.last.progress === progress.progress && this.last.remaining === progress.remaining) {
      this.pending = undefined;
      return;
    }
    const wait = this.lastSentAt + this.intervalMs - Date.now();
    if (wait <= 0 && this.timer === undefined) {
      this.emit(progress);
      return;
    }
    this.pending = progress;
    this.timer ??= setTimeout(
      () => {
        this.timer = undefined;
        const next = this.pending;
        this.pending = undefined;
        if (next) this.emit(next);
      },
      Math.max(0, wait),
    );
  }

  /**
   * `progress` reached the control plane by other means (the RUNNING report carries progress 0): it
   * counts as the last report. A transcode shorter than the interval then sends no progress report of
   * its own (its final report says 100), which spares the control plane one report per short task.
   */
  reported(progress: TaskProgress): void {
    this.last = progress;
    this.lastSentAt = Date.now();
  }

  /** Drop anything pending (the step ended; its final state is reported separately). */
  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.pending = undefined;
  }

  private emit(progress: TaskProgress): void {
    this.last = progress;
    this.lastSentAt = Date.now();
    this.send(progress);
  }
}
