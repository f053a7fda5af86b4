import { LogBatcher } from './log-batcher.ts';
import type { LogStep, TaskReporter } from './task-state.ts';

/** One log batcher per step of a run. */
export type RunLogs = Record<LogStep, LogBatcher>;

/** Create the batchers of one run, all sending to `reporter.log`. */
export function createRunLogs(reporter: TaskReporter): RunLogs {
  const make = (step: LogStep) => new LogBatcher((text) => reporter.log(step, text));
  return { pre: make('pre'), transcoder: make('transcoder'), post: make('post'), agent: make('agent') };
}

/** Send everything still pending. */
export function flushRunLogs(logs: RunLogs): void {
  for (const batcher of Object.values(logs)) batcher.flush();
}
