import type { LogText, TaskPatch } from '@ffleet/shared';
import type { TaskReporter } from './task-state.ts';

/** The body of one report (its task, attempt, lease and seq are the caller's). */
export type ReportBody = { kind: 'update'; patch: TaskPatch; logs?: LogText[] } | ({ kind: 'log' } & LogText);

/**
 * Longest time a deferrable update waits for a later one to ride on. Progress reports start half a
 * second into a transcode (ProgressThrottle), so a long run's first report still leaves within that
 * half second; this bound is for runs that print no progress (a stalled input, a script).
 */
export const DEFER_MAX_MS = 1_000;

/** Held output above this many characters sends the held update at once (one report stays small). */
export const DEFER_MAX_LOG_CHARS = 32 * 1024;

/**
 * A {@link TaskReporter} that turns a run's changes into as few reports as the contract allows:
 *
 * - Output handed over in the same tick as an update goes with that update: a run's last lines and its
 *   final status are one report (one outbox write, one MQTT message, one acknowledgement, one fenced
 *   statement) instead of one per step plus one. Output with no update in its tick goes out on its own
 *   as `log` reports, in order, once the tick ends.
 * - A deferrable update (`{ defer: true }`: one that changes no status the control plane shows, such as
 *   the resolved command of a task the claim already made RUNNING) is held for at most
 *   {@link DEFER_MAX_MS}, and output arriving meanwhile is held with it. The next update (progress, the
 *   next step, the result) carries it; so does the timer. A transcode that ends within that time is
 *   then reported once, by its result, instead of by a RUNNING details report, a log report and the
 *   result: for short tasks that is most of what agent and control plane spend per task.
 *
 * `send` is skipped while `muted()` is true (a run being handed back reports nothing more of its own).
 * Its output is kept instead, the last {@link DEFER_MAX_LOG_CHARS} characters of it, with what was held
 * unsent: `takeUnsent()` returns it for the hand-back report, so the attempt's logs say what happened
 * to it (a transcoder that could not start, a forced stop's last lines).
 */
export type CoalescingReporter = TaskReporter & {
  /** Output not sent (held, or muted), oldest first; the reporter forgets it. */
  takeUnsent(): LogText[];
};

export function coalescingReporter(
  send: (body: ReportBody) => void,
  muted: () => boolean,
  opts: { deferMaxMs?: number } = {},
): CoalescingReporter {
  const deferMaxMs = opts.deferMaxMs ?? DEFER_MAX_MS;
  /** Output of the current tick, not yet sent. */
  let logs: LogText[] = [];
  /** A held deferrable update, the output held with it, and the timer that sends it. */
  let held: TaskPatch | null = null;
  let heldLogs: LogText[] = [];
  let heldChars = 0;
  let timer: NodeJS.Timeout | undefined;
  /**
   * Output while muted, and what was held when it came: its newest DEFER_MAX_LOG_CHARS characters, cut at
   * a line start (one batch alone may be larger: a step's output past its budget is flushed at once).
   */
  let unsent: LogText[] = [];
  let unsentChars = 0;
  let droppedChars = 0;
  const keepUnsent = (more: LogText[]) => {
    for (const l of more) {
      unsent.push(l);
      unsentChars += l.text.length;
    }
    while (unsentChars > DEFER_MAX_LOG_CHARS) {
      const first = unsent[0]!;
      const excess = unsentChars - DEFER_MAX_LOG_CHARS;
      // The oldest entry goes whole, or keeps from the first line start past the excess (a line longer
      // than what is kept keeps its end).
      let keep = '';
      if (excess < first.text.length) {
        const nl = first.text.indexOf('\n', excess - 1);
        keep = first.text.slice(nl === -1 || nl + 1 >= first.text.length ? excess : nl + 1);
      }
      const dropped = first.text.length - keep.length;
      droppedChars += dropped;
      unsentChars -= dropped;
      if (keep === '') unsent.shift();
      else unsent[0] = { step: first.step, text: keep };
    }
  };

  const takeHeld = (): { patch: TaskPatch; logs: LogText[] } => {
    clearTimeout(timer);
    timer = undefined;
    const out = { patch: held ?? {}, logs: heldLogs };
    held = null;
    heldLogs = [];
    heldChars = 0;
    return out;
  };
  const sendUpdate = (patch: TaskPatch, carried: LogText[]) => {
    if (muted()) {
      keepUnsent(carried);
      return;
    }
    send(carried.length ? { kind: 'update', patch, logs: carried } : { kind: 'update', patch });
  };
  const sendHeld = () => {
    if (held === null) return;
    const h = takeHeld();
    sendUpdate(h.patch, h.logs);
  };
  const flushTick = () => {
    const pending = logs;
    logs = [];
    if (pending.length === 0) return;
    if (muted()) {
      keepUnsent([...takeHeld().logs, ...pending]);
      return;
    }
    if (held !== null) {
      holdLogs(pending);
      return;
    }
    for (const l of pending) send({ kind: 'log', ...l });
  };
  /** Everything not sent yet (held, and this tick's) goes to what a muted run keeps. */
  const keepPending = () => {
    if (held !== null) keepUnsent(takeHeld().logs);
    keepUnsent(logs);
    logs = [];
  };
  const holdLogs = (more: LogText[]) => {
    for (const l of more) {
      heldLogs.push(l);
      heldChars += l.text.length;
    }
    if (heldChars >= DEFER_MAX_LOG_CHARS) sendHeld();
  };

  return {
    update: (patch, updateOpts) => {
      if (muted()) {
        keepPending();
        return;
      }
      const carried = logs;
      logs = [];
      if (updateOpts?.defer) {
        held = { ...(held ?? {}), ...patch };
        holdLogs(carried);
        if (held !== null && timer === undefined) timer = setTimeout(sendHeld, deferMaxMs);
        return;
      }
      if (held !== null) {
        const h = takeHeld();
        sendUpdate({ ...h.patch, ...patch }, [...h.logs, ...carried]);
        return;
      }
      sendUpdate(patch, carried);
    },
    log: (step, text) => {
      if (logs.length === 0) queueMicrotask(flushTick);
      logs.push({ step, text });
    },
    takeUnsent: () => {
      keepPending();
      const out = droppedChars
        ? [
            { step: 'agent' as const, text: `[ffleet: ${droppedChars} characters of output left out]\n` },
            ...unsent,
          ]
        : unsent;
      unsent = [];
      unsentChars = 0;
      droppedChars = 0;
      return out;
    },
  };
}
