import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { LOG_FLUSH_MS } from './log-batcher.ts';
import { createRunLogs, flushRunLogs } from './run-logs.ts';
import type { LogStep } from './task-state.ts';

describe('createRunLogs', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  const recorder = () => {
    const sent: [LogStep, string][] = [];
    const logs = createRunLogs({ update: () => {}, log: (step, text) => sent.push([step, text]) });
    return { sent, logs };
  };

  it('sends the lines of different steps in the order they came', () => {
    const { sent, logs } = recorder();
    logs.agent.add('pre-processing: $ pre.sh');
    logs.pre.add('pre says hello');
    logs.pre.add('pre warns');
    logs.agent.add('transcoder: $ ffmpeg');
    logs.transcoder.add('Duration: 00:00:01.00');
    flushRunLogs(logs);
    expect(sent).toEqual([
      ['agent', 'pre-processing: $ pre.sh\n'],
      ['pre', 'pre says hello\npre warns\n'],
      ['agent', 'transcoder: $ ffmpeg\n'],
      ['transcoder', 'Duration: 00:00:01.00\n'],
    ]);
  });

  it('keeps a step that prints alone in one batch per flush period', () => {
    const { sent, logs } = recorder();
    logs.agent.add('transcoder: $ ffmpeg');
    logs.agent.flush();
    for (let i = 0; i < 40; i++) logs.transcoder.add(`line ${i}`);
    expect(sent).toHaveLength(1);
    vi.advanceTimersByTime(LOG_FLUSH_MS);
    expect(sent).toHaveLength(2);
    expect(sent[1]![1].split('\n')).toHaveLength(41);
  });
});
