/**
 * How long a path must be quiet before it is reported. chokidar drops a file's change events that
 * follow another within 5 ms (its watch throttle); waiting longer than that after the last delivered
 * event guarantees the lstat that follows sees the effect of any dropped one. It also turns the
 * hundreds of write events of a copy into one check.
 */
export const EVENT_QUIET_MS = 25;

/** Collects changed paths and hands them over in batches once each has had no event for EVENT_QUIET_MS. */
export class QuietBatch {
  private readonly lastEventAt = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(private readonly onReady: (paths: string[]) => void) {}

  mark(path: string): void {
    if (this.stopped) return;
    this.lastEventAt.set(path, performance.now());
    this.schedule();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.lastEventAt.clear();
  }

  private schedule(): void {
    if (this.timer !== undefined) return;
    let oldest = Number.POSITIVE_INFINITY;
    for (const t of this.lastEventAt.values()) oldest = Math.min(oldest, t);
    if (oldest === Number.POSITIVE_INFINITY) return;
    this.timer = setTimeout(() => this.flush(), Math.max(0, oldest + EVENT_QUIET_MS - performance.now()));
  }

  private flush(): void {
    this.timer = undefined;
    const now = performance.now();
    const ready: string[] = [];
    for (const [path, t] of this.lastEventAt) {
      if (now - t >= EVENT_QUIET_MS) {
        ready.push(path);
        this.lastEventAt.delete(path);
      }
    }
    this.schedule();
    if (ready.length > 0) this.onReady(ready);
  }
}
