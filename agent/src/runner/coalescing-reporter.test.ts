import { describe, expect, it } from 'vitest';
import { coalescingReporter, type ReportBody } from './coalescing-reporter.ts';

const tick = () => new Promise<void>((r) => setImmediate(r));

function recorder() {
  const sent: ReportBody[] = [];
  let muted = false;
  const reporter = coalescingReporter(
    (b) => sent.push(b),
    () => muted,
  );
  return { sent, reporter, mute: () => (muted = true) };
}

describe('coalescingReporter', () => {
  it("sends a run's last lines with the update that follows them in the same tick", async () => {
    const { sent, reporter } = recorder();
    reporter.log('transcoder', 'frame=1\n');
    reporter.log('agent', 'exit 0\n');
    reporter.update({ status: 'DONE_SUCCESSFUL', progress: 100 });
    expect(sent).toEqual([
      {
        kind: 'update',
        patch: { status: 'DONE_SUCCESSFUL', progress: 100 },
        logs: [
          { step: 'transcoder', text: 'frame=1\n' },
          { step: 'agent', text: 'exit 0\n' },
        ],
      },
    ]);
    await tick();
    expect(sent).toHaveLength(1);
  });

  it('sends lines without an update of their own tick as log reports, in order, once the tick ends', async () => {
    const { sent, reporter } = recorder();
    reporter.update({ status: 'RUNNING' });
    reporter.log('transcoder', 'a\n');
    reporter.log('pre', 'b\n');
    expect(sent).toEqual([{ kind: 'update', patch: { status: 'RUNNING' } }]);
    await tick();
    expect(sent.slice(1)).toEqual([
      { kind: 'log', step: 'transcoder', text: 'a\n' },
      { kind: 'log', step: 'pre', text: 'b\n' },
    ]);
    // Lines after an update that took earlier ones start a new batch.
    reporter.log('transcoder', 'c\n');
    reporter.update({ progress: 50 });
    reporter.log('transcoder', 'd\n');
    await tick();
    expect(sent.slice(3)).toEqual([
      { kind: 'update', patch: { progress: 50 }, logs: [{ step: 'transcoder', text: 'c\n' }] },
      { kind: 'log', step: 'transcoder', text: 'd\n' },
    ]);
  });

  it('sends nothing once muted, including lines already waiting', async () => {
    const { sent, reporter, mute } = recorder();
    reporter.log('transcoder', 'before\n');
    mute();
    reporter.update({ status: 'DONE_CANCELED' });
    reporter.log('agent', 'after\n');
    await tick();
    expect(sent).toEqual([]);
  });
});
