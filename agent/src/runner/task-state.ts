import type { LogText, Task, TaskPatch } from '@ffleet/shared';

/** Which part of a run produced a log text. */
export type LogStep = LogText['step'];

/**
 * Where a run reports to. The agent's session turns these calls into acknowledged MQTT reports;
 * the runner neither waits for nor depends on their delivery.
 */
export interface TaskReporter {
  /**
   * A change of the task's fields (status, progress, resolved values, step details, result).
   * `defer`: the change moves no status the control plane shows, so it may ride on a later report
   * (see coalescingReporter); the runner's own view of the task changes at once either way.
   */
  update(patch: TaskPatch, opts?: { defer?: boolean }): void;
  /** Captured output of a step, whole lines each ending with `\n`. */
  log(step: LogStep, text: string): void;
}

/**
 * The runner's copy of the task: every change goes through {@link apply}, which updates the copy
 * (so sidecars show the current state, `updatedAt` included) and reports the same patch.
 */
export class TaskState {
  readonly task: Task;

  constructor(
    task: Task,
    private readonly reporter: TaskReporter,
    private readonly now: () => Date = () => new Date(),
  ) {
    this.task = structuredClone(task);
  }

  /** Apply a patch to the copy and report it (`defer`: see {@link TaskReporter.update}). */
  apply(patch: TaskPatch, opts?: { defer?: boolean }): void {
    Object.assign(this.task, structuredClone(patch) as Partial<Task>);
    // The control plane stamps its own updatedAt when it applies the report; this one is the copy's.
    this.task.updatedAt = Math.max(this.task.updatedAt, this.now().getTime());
    this.reporter.update(patch, opts);
  }
}
