import type { LogText, TaskPatch } from '@ffleet/shared';
import type { TaskReporter } from './task-state.ts';

/** The body of one report (its task, attempt, lease and seq are the caller's). */
export type ReportBody = { kind: 'update'; patch: TaskPatch; logs?: LogText[] } | ({ kind: 'log' } & LogText);

/**
 * A {@link TaskReporter} that sends output handed over in the same tick as an update along with that
 * update: a run's last lines and its final status become one report (one outbox write, one MQTT
 * message, one acknowledgement, one fenced statement) instead of one per step plus one. Output with no
 * update in its tick goes out on its own as `log` reports, in order, once the tick ends. `send` is
 * skipped while `muted()` is true (a run being handed back reports nothing more of its own).
 */
export function coalescingReporter(send: (body: ReportBody) => void, muted: () => boolean): TaskReporter {
  let logs: LogText[] = [];
  const flush = () => {
    const pending = logs;
    logs = [];
    if (!muted()) for (const l of pending) send({ kind: 'log', ...l });
  };
  return {
    update: (patch) => {
      if (muted()) return;
      const carried = logs;
      logs = [];
      send(carried.length ? { kind: 'update', patch, logs: carried } : { kind: 'update', patch });
    },
    log: (step, text) => {
      if (muted()) return;
      if (logs.length === 0) queueMicrotask(flush);
      logs.push({ step, text });
    },
  };
}
