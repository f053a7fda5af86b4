import { LOG_FLUSH_MS, LOG_MAX_BATCH_BYTES, LogBatcher } from './log-batcher.ts';
import type { LogStep, TaskReporter } from './task-state.ts';

/** One log batcher per step of a run. */
export type RunLogs = Record<LogStep, LogBatcher>;

/**
 * Create the batchers of one run, all sending to `reporter.log`, in the order the lines came: when a
 * step's batcher gets its first pending line, the others send what they hold first (those lines are
 * older). Without it, lines of different steps within one flush period went out step by step, and a
 * task's logs showed e.g. the agent's `transcoder: $ …` line before the pre-processing script's output.
 * A step that prints alone (a transcode) still goes out in one batch per flush period.
 */
export function createRunLogs(reporter: TaskReporter): RunLogs {
  const all: LogBatcher[] = [];
  const make = (step: LogStep) => {
    const batcher: LogBatcher = new LogBatcher(
      (text) => reporter.log(step, text),
      LOG_FLUSH_MS,
      LOG_MAX_BATCH_BYTES,
      () => {
        for (const other of all) if (other !== batcher) other.flush();
      },
    );
    all.push(batcher);
    return batcher;
  };
  return { pre: make('pre'), transcoder: make('transcoder'), post: make('post'), agent: make('agent') };
}

/** Send everything still pending. */
export function flushRunLogs(logs: RunLogs): void {
  for (const batcher of Object.values(logs)) batcher.flush();
}
