import { MQTT_MAX_PAYLOAD_BYTES, TaskReport } from '@ffleet/shared';
import { describe, expect, it } from 'vitest';
import { slimOversizedReport } from './oversized-report.ts';

const fence = { taskId: '5f0c8a4e-2b7d-4a55-9d8e-0e6b8f1c2d3a', attempt: 2, leaseToken: 'lease', seq: 7 };
const big = 'x'.repeat(MQTT_MAX_PAYLOAD_BYTES);
const slim = (r: TaskReport) => slimOversizedReport(r, JSON.stringify(r));

describe('slimOversizedReport', () => {
  it('leaves a report the broker takes alone', () => {
    const r: TaskReport = { ...fence, kind: 'update', patch: { status: 'RUNNING', metadata: { a: 'b' } } };
    expect(slim(r)).toBeNull();
    // Longer than a third of the limit, so measured, and still within it.
    const large: TaskReport = {
      ...fence,
      kind: 'log',
      step: 'pre',
      text: 'x'.repeat(MQTT_MAX_PAYLOAD_BYTES / 2),
    };
    expect(slim(large)).toBeNull();
  });

  it("keeps the run's state and says in the task's log what was dropped", () => {
    const r: TaskReport = {
      ...fence,
      kind: 'update',
      patch: {
        status: 'DONE_SUCCESSFUL',
        progress: 100,
        remaining: 0,
        finishedAt: 1_700_000_000_000,
        metadata: { frames: big },
        name: 'n',
      },
      logs: [{ step: 'transcoder', text: 'video:1kB\n' }],
    };
    const s = slim(r)!;
    expect(TaskReport.parse(s)).toEqual(s);
    expect(s).toEqual({
      ...fence,
      kind: 'update',
      patch: { status: 'DONE_SUCCESSFUL', progress: 100, remaining: 0, finishedAt: 1_700_000_000_000 },
      logs: [
        {
          step: 'agent',
          text: `this report was ${JSON.stringify(r).length} bytes as JSON, over the ${MQTT_MAX_PAYLOAD_BYTES} the broker takes: sent without its output, its metadata, its name\n`,
        },
      ],
    });
    expect(Buffer.byteLength(JSON.stringify(s))).toBeLessThan(1024);
  });

  it('cuts a huge error short and replaces a huge log report by a line saying so', () => {
    const failed = slim({ ...fence, kind: 'update', patch: { status: 'DONE_ERROR', error: big } })!;
    expect(failed.kind === 'update' && failed.patch).toEqual({
      status: 'DONE_ERROR',
      error: big.slice(0, 65_536),
    });
    const logReport: TaskReport = { ...fence, kind: 'log', step: 'pre', text: big };
    const log = slim(logReport)!;
    expect(log).toEqual({
      ...fence,
      kind: 'log',
      step: 'agent',
      text: `this report was ${JSON.stringify(logReport).length} bytes as JSON, over the ${MQTT_MAX_PAYLOAD_BYTES} the broker takes: its pre output was dropped\n`,
    });
  });
});
