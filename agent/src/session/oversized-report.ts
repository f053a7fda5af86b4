import { MQTT_MAX_PAYLOAD_BYTES, type TaskPatch, type TaskReport } from '@ffleet/shared';

/** The patch fields a slimmed report keeps: the run's state, never what can be large. */
const STATE_KEYS = ['status', 'progress', 'remaining', 'startedAt', 'finishedAt', 'deliberate'] as const;
/** An error text kept in a slimmed report is cut to this many characters. */
const MAX_ERROR_CHARS = 64 * 1024;

/**
 * A report no broker would take (over `MQTT_MAX_PAYLOAD_BYTES` as JSON) would be refused at every
 * send, and as an outbox entry it would be resent at every reconnect, cutting the agent off each time.
 * This gives the report to send instead: the same task, attempt and seq with the run's state (status,
 * progress, times, the error cut short), its output and large fields dropped and a line in the task's
 * agent log saying so. Null when the report fits.
 */
export function slimOversizedReport(report: TaskReport, json: string): TaskReport | null {
  // Every report passes here: a text of at most a third of the limit in UTF-16 units cannot exceed it
  // in UTF-8 (3 bytes per unit at most), so only a large one is measured.
  if (json.length <= MQTT_MAX_PAYLOAD_BYTES / 3) return null;
  const bytes = Buffer.byteLength(json);
  if (bytes <= MQTT_MAX_PAYLOAD_BYTES) return null;
  const base = {
    taskId: report.taskId,
    attempt: report.attempt,
    leaseToken: report.leaseToken,
    seq: report.seq,
  };
  const said = `this report was ${bytes} bytes as JSON, over the ${MQTT_MAX_PAYLOAD_BYTES} the broker takes`;
  if (report.kind === 'log')
    return { ...base, kind: 'log', step: 'agent', text: `${said}: its ${report.step} output was dropped\n` };
  const patch: TaskPatch = {};
  for (const key of STATE_KEYS)
    if (report.patch[key] !== undefined) Object.assign(patch, { [key]: report.patch[key] });
  if (report.patch.error !== undefined) patch.error = report.patch.error.slice(0, MAX_ERROR_CHARS);
  const what = [
    ...(report.logs?.length ? ['its output'] : []),
    ...Object.keys(report.patch)
      .filter((k) => !(k in patch))
      .map((k) => `its ${k}`),
  ];
  return {
    ...base,
    kind: 'update',
    patch,
    logs: [{ step: 'agent', text: `${said}: sent without ${what.join(', ') || 'its large fields'}\n` }],
  };
}
