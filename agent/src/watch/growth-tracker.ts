/** What one look at a file returned. */
export type FileSample = { size: number; mtimeMs: number };

type Tracked = FileSample & {
  /** Consecutive checks (each ≥ one interval after the previous) that saw the same size and mtime. */
  stableChecks: number;
  /** Monotonic time of the first sighting, of the last change, or of the last counted check. */
  observedAt: number;
  /** That observation came from outside a scan (an event or an early check), so it has a due time of its own. */
  offScan: boolean;
};

/** Where a check came from: the interval scan, or an event / early check between scans. */
export type CheckSource = 'scan' | 'between';

/**
 * Tolerance for "at least one interval apart". Scans start on a timer and take the scan's start as the
 * time of every file's check, so two consecutive scans can be a millisecond or two less than an interval
 * apart; without slack such a check would not count and a file would need one scan too many.
 */
export function spacingToleranceMs(intervalMs: number): number {
  return Math.min(50, intervalMs / 10);
}

/**
 * The stability rule, kept pure so it can be tested with synthetic times.
 *
 * A file is first seen at some check (a scan, or a file-system event) with size s. Every later check
 * that happens at least one interval after the previous counted observation and sees the same size and
 * mtime adds one stable check; a check sooner than that is ignored unless it sees a change; any change
 * restarts the count from that observation. The file is finished when it has `growthChecks` stable
 * checks. With scans alone: first seen at scan k → finished at scan k + growthChecks, i.e. it was
 * unchanged for growthChecks × interval. Events can only add a first sighting or a reset, never shorten
 * that window.
 *
 * mtime is compared too: a writer that rewrites a preallocated file keeps the size constant while mtime
 * moves, and the (size, mtime) pair is what the control plane uses as the idempotency key.
 */
export class GrowthTracker {
  private readonly files = new Map<string, Tracked>();

  constructor(
    private growthChecks: number,
    private intervalMs: number,
  ) {}

  /** Apply a new configuration; counts already gathered stay valid. */
  configure(growthChecks: number, intervalMs: number): void {
    this.growthChecks = growthChecks;
    this.intervalMs = intervalMs;
  }

  /** Record a check of `rel` at monotonic time `at`; returns true when the file is finished. */
  observe(rel: string, sample: FileSample, at: number, source: CheckSource = 'scan'): boolean {
    const offScan = source === 'between';
    const prev = this.files.get(rel);
    if (prev === undefined || prev.size !== sample.size || prev.mtimeMs !== sample.mtimeMs) {
      // Explicit fields, not a spread: spread objects measured ~30× slower to read back in this loop.
      this.files.set(rel, {
        size: sample.size,
        mtimeMs: sample.mtimeMs,
        stableChecks: 0,
        observedAt: at,
        offScan,
      });
      return false;
    }
    if (
      prev.stableChecks < this.growthChecks &&
      at - prev.observedAt >= this.intervalMs - spacingToleranceMs(this.intervalMs)
    ) {
      prev.stableChecks += 1;
      prev.observedAt = at;
      prev.offScan = offScan;
    }
    return prev.stableChecks >= this.growthChecks;
  }

  /** Monotonic time at which the next check of `rel` can count; undefined when untracked or finished. */
  dueAt(rel: string): number | undefined {
    const t = this.files.get(rel);
    if (t === undefined || t.stableChecks >= this.growthChecks) return undefined;
    return t.observedAt + this.intervalMs;
  }

  /**
   * Due time of a file last observed between scans (files observed by scans follow the scan cadence and
   * need no check of their own), unless `skip` rejects it.
   */
  private offScanDue(rel: string, t: Tracked, skip: (due: number) => boolean): number | undefined {
    if (!t.offScan) return undefined;
    const due = this.dueAt(rel);
    return due === undefined || skip(due) ? undefined : due;
  }

  /** Earliest due time over files last observed between scans (see {@link listDue}); or undefined. */
  nextDueAt(skip: (due: number) => boolean = () => false): number | undefined {
    let min: number | undefined;
    for (const [rel, t] of this.files) {
      const due = this.offScanDue(rel, t, skip);
      if (due !== undefined && (min === undefined || due < min)) min = due;
    }
    return min;
  }

  /** Files last observed between scans whose next check can count at `now`, unless `skip` rejects it. */
  listDue(now: number, skip: (due: number) => boolean = () => false): string[] {
    const tolerance = spacingToleranceMs(this.intervalMs);
    const out: string[] = [];
    for (const [rel, t] of this.files) {
      const due = this.offScanDue(rel, t, skip);
      if (due !== undefined && due - tolerance <= now) out.push(rel);
    }
    return out;
  }

  has(rel: string): boolean {
    return this.files.has(rel);
  }

  forget(rel: string): void {
    this.files.delete(rel);
  }

  /** Drop every file not in `seen` (deleted or no longer matching the filter). */
  retainOnly(seen: ReadonlySet<string>): void {
    for (const rel of this.files.keys()) if (!seen.has(rel)) this.files.delete(rel);
  }

  clear(): void {
    this.files.clear();
  }

  get size(): number {
    return this.files.size;
  }
}
