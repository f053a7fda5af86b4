export { coalescingReporter, type ReportBody } from './coalescing-reporter.ts';
export { hideProcessMemory, nativeSpawnStatus } from './native-spawn.ts';
export {
  computeTaskProgress,
  ProgressParser,
  type ProgressSample,
  parseDurationLine,
  type TaskProgress,
} from './progress.ts';
export {
  DEFAULT_KILL_GRACE_MS,
  FENCED_OUT,
  type RunProcessOptions,
  type RunProcessResult,
  runProcess,
} from './run-process.ts';
export {
  type FinalStatus,
  HANDED_BACK,
  type RunStep,
  type RunTaskOptions,
  type RunTaskResult,
  runTask,
} from './run-task.ts';
export { TRANSCODER_PREFIX_ARGS } from './run-transcode.ts';
export { buildPostSidecar, buildPreSidecar, validateReimport, writeSidecar } from './sidecar.ts';
export type { LogStep, TaskReporter } from './task-state.ts';
export {
  type ProbeTranscoderResult,
  probeTranscoder,
  type ResolveTranscoderResult,
  resolveTranscoder,
  type TranscoderSource,
} from './transcoder.ts';
