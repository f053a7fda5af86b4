const MS_PER_DAY = 86_400_000;

/** Largest sub-millisecond part in nanoseconds. */
export const MAX_SUB_MILLISECOND_NANOS = 999_999;

const pad2 = (n: number): string => String(n).padStart(2, '0');

/**
 * ISO 8601 week number (1–53) of the calendar date `year-month-day`. Weeks start on Monday and week 1
 * is the week holding the year's first Thursday, so 1 January may belong to week 52/53 of the
 * previous year and 29–31 December to week 1 of the next.
 */
export function isoWeekOf(year: number, month: number, day: number): number {
  // Work in UTC on the local calendar date so no DST shift can move the day.
  const date = Date.UTC(year, month - 1, day);
  const mondayBasedDay = (new Date(date).getUTCDay() + 6) % 7;
  const thursday = date + (3 - mondayBasedDay) * MS_PER_DAY;
  const thursdayYear = new Date(thursday).getUTCFullYear();
  return 1 + Math.floor((thursday - Date.UTC(thursdayYear, 0, 1)) / (7 * MS_PER_DAY));
}

/**
 * The date, time and timestamp wildcards of one instant. Calendar values use the process's local
 * time zone (the agent's). `Date` has millisecond precision, so the microsecond and nanosecond
 * timestamps are the millisecond instant scaled up plus `subMillisecondNanos`, the sub-millisecond
 * part the caller takes from a finer clock (0 when it has none). All four timestamps therefore
 * describe the same instant and agree with each other.
 */
export function computeDateValues(now: Date, subMillisecondNanos = 0): Record<string, string> {
  if (
    !Number.isInteger(subMillisecondNanos) ||
    subMillisecondNanos < 0 ||
    subMillisecondNanos > MAX_SUB_MILLISECOND_NANOS
  ) {
    throw new RangeError(`subMillisecondNanos must be an integer 0..${MAX_SUB_MILLISECOND_NANOS}`);
  }
  const ms = now.getTime();
  if (Number.isNaN(ms)) throw new RangeError('now is an invalid Date');

  const year = now.getFullYear();
  const month = now.getMonth() + 1;
  const day = now.getDate();
  const msBig = BigInt(ms);
  const subNanos = BigInt(subMillisecondNanos);

  return {
    DATE_YEAR: String(year).padStart(4, '0'),
    DATE_SHORTYEAR: pad2(((year % 100) + 100) % 100),
    DATE_MONTH: pad2(month),
    DATE_DAY: pad2(day),
    DATE_WEEK: pad2(isoWeekOf(year, month, day)),
    TIME_HOUR: pad2(now.getHours()),
    TIME_MINUTE: pad2(now.getMinutes()),
    TIME_SECOND: pad2(now.getSeconds()),
    TIMESTAMP_SECONDS: String(Math.floor(ms / 1000)),
    TIMESTAMP_MILLISECONDS: String(msBig),
    TIMESTAMP_MICROSECONDS: String(msBig * 1000n + subNanos / 1000n),
    TIMESTAMP_NANOSECONDS: String(msBig * 1_000_000n + subNanos),
  };
}
