import path from 'node:path';
import type { ClaimedTask, TaskPatch } from '@ffleet/shared';
import {
  archName,
  createWildcardContext,
  makeDirectory,
  osName,
  resolveWildcards,
  type WildcardContext,
} from '@ffleet/shared';
import type { Logger } from 'pino';
import { withoutCredentials } from './child-env.ts';
import { ProgressThrottle } from './progress-throttle.ts';
import { protectedDirOf, protectedPathError } from './protected-paths.ts';
import { createRunLogs, flushRunLogs, type RunLogs } from './run-logs.ts';
import { DEFAULT_KILL_GRACE_MS } from './run-process.ts';
import { isStepDefined, runScriptStep, type ScriptStepInput } from './run-script-step.ts';
import { resolveChain, runTranscode } from './run-transcode.ts';
import type { StepOutcome } from './step-outcome.ts';
import { type TaskReporter, TaskState } from './task-state.ts';

export interface RunTaskOptions {
  claimed: ClaimedTask;
  /** Absolute path of the transcoder (`resolveTranscoder`). */
  transcoderPath: string;
  reporter: TaskReporter;
  /** Aborting it cancels the run: the current step's process group is killed. */
  signal: AbortSignal;
  /**
   * Asked before each step starts: a promise means "not yet", and the step starts once it resolves,
   * unless `signal` was aborted meanwhile (the run then ends canceled, the step not started; an abort
   * ends the wait at once). The agent holds a step here after a spell out of touch, until the control
   * plane says the attempt is still its own. Default: every step starts at once.
   */
  beforeStep?: (step: RunStep) => Promise<void> | undefined;
  /** Bound to the agent by the caller; the run adds `component: "runner"`, its task and attempt. */
  logger: Logger;
  /** SIGTERM → SIGKILL grace for canceled processes; default {@link DEFAULT_KILL_GRACE_MS}. */
  graceMs?: number;
  /**
   * Asked when a canceled transcode has stopped: why it must keep its partial output, if it must (the
   * control plane may have given the path to other work; the caller knows). Default: it never must.
   */
  outputKeptBecause?: () => string | undefined;
  /** Aborting it once `signal` is aborted cuts the transcoder's grace short: SIGKILL now. */
  killNow?: AbortSignal;
  /** Clock for timestamps and wildcards; default the system clock. */
  now?: () => Date;
  /**
   * The agent environment scripts and the transcoder inherit (without ffleet's credentials, see
   * child-env.ts); default `process.env`.
   */
  env?: NodeJS.ProcessEnv;
  /** Directories pre/post-processing scripts must live in; default (empty): any. */
  scriptDirs?: readonly string[];
  /** Directories no output or sidecar may be written into (see protected-paths.ts); default none. */
  protectedDirs?: readonly string[];
  /**
   * The transcoder could not be started because its binary is gone or no longer executable (an unmounted
   * share, a removed package): called before the run's failure is reported, so the caller can hand the
   * task back instead of failing it (runTranscode).
   */
  onTranscoderLost?: (error: string) => void;
}

/**
 * Abort reason for a run handed back on a forced shutdown: stopped like a cancel (the process group is
 * killed, a partial output removed), but the task is not canceled: the agent drops the run's final
 * report and tells the control plane the task is QUEUED again.
 */
export const HANDED_BACK = 'handed-back';

/** The steps of a run, in order (each one only if the task has it, the transcoder always). */
export type RunStep = 'pre' | 'transcoder' | 'post';

export type FinalStatus = 'DONE_SUCCESSFUL' | 'DONE_ERROR' | 'DONE_CANCELED';
export interface RunTaskResult {
  status: FinalStatus;
  /** `""` unless the task failed. */
  error: string;
}

/** A stage ended the run early. */
type Stop = { kind: 'failed'; error: string } | { kind: 'canceled' };

/**
 * Run one claimed task through the spec's transitions: pre-processing (status `PRE_PROCESSING`:
 * sidecar, script, re-import) → resolution of input, output and command → transcoder (status
 * `RUNNING`, progress) → post-processing (still `RUNNING`) → `DONE_SUCCESSFUL`. A failing step ends
 * the task `DONE_ERROR` and skips every later step; an aborted `signal` kills the current step,
 * removes a partial output and ends it `DONE_CANCELED`. Each step starts only once `beforeStep` lets
 * it. Never rejects: every outcome is reported through `reporter` and returned.
 */
export async function runTask(options: RunTaskOptions): Promise<RunTaskResult> {
  const now = options.now ?? (() => new Date());
  const { task, attempt } = options.claimed;
  const logger = options.logger.child({ component: 'runner', taskId: task.id, attempt });
  const state = new TaskState(task, options.reporter, now);
  const logs = createRunLogs(options.reporter);
  const throttle = new ProgressThrottle((p) => state.apply(p));
  logger.info('task run started');

  let result: RunTaskResult;
  try {
    const stop = await runStages({ ...options, now }, state, logs, throttle);
    result = stop ? toResult(stop) : { status: 'DONE_SUCCESSFUL', error: '' };
  } catch (err) {
    // Only a bug gets here; the task must still reach a terminal state.
    logger.error({ err }, 'task run failed unexpectedly');
    result = { status: 'DONE_ERROR', error: `agent error: ${(err as Error).message}` };
  } finally {
    throttle.stop();
  }

  if (result.error) logs.agent.add(result.error);
  flushRunLogs(logs);
  const final: TaskPatch = {
    status: result.status,
    error: result.error,
    finishedAt: now().getTime(),
    remaining: 0,
  };
  if (result.status === 'DONE_SUCCESSFUL') final.progress = 100;
  state.apply(final);
  if (options.signal.aborted && options.signal.reason === HANDED_BACK)
    logger.info({ status: 'QUEUED' }, 'task handed back: its run was stopped and it goes back to the queue');
  else logger.info({ status: result.status }, 'task finished');
  return result;
}

async function runStages(
  options: RunTaskOptions & { now: () => Date },
  state: TaskState,
  logs: RunLogs,
  throttle: ProgressThrottle,
): Promise<Stop | null> {
  const { claimed, transcoderPath, signal, now } = options;
  const env = withoutCredentials(options.env ?? process.env);
  const graceMs = options.graceMs ?? DEFAULT_KILL_GRACE_MS;
  if (signal.aborted) return { kind: 'canceled' };

  const instant = readInstant(now);
  const startedAt = instant.now.getTime();
  const makeContext = (uuid?: string): WildcardContext =>
    createWildcardContext({
      task: state.task,
      transcoderPath,
      os: osName(),
      arch: archName(),
      uuid,
      ...instant,
    });
  let ctx = makeContext();

  const stepInput = (
    phase: 'pre' | 'post',
    paths: ScriptStepInput['paths'],
    startPatch: TaskPatch,
  ): ScriptStepInput => ({
    phase,
    state,
    ctx,
    paths,
    startPatch,
    transcoderPath,
    attempt: claimed.attempt,
    env,
    signal,
    graceMs,
    now,
    logs,
    scriptDirs: options.scriptDirs ?? [],
    protectedDirs: options.protectedDirs ?? [],
  });

  /** The step gate's wait, if it holds the step (RunTaskOptions.beforeStep). */
  const gate = (step: RunStep): Promise<void> | undefined => {
    const held = options.beforeStep?.(step);
    return held && untilAborted(held, signal);
  };

  if (isStepDefined(state.task.preProcessing)) {
    const held = gate('pre');
    if (held) await held;
    if (signal.aborted) return { kind: 'canceled' };
    // The pre-processing script sees input and output as they resolve now; the sidecar shows them
    // unresolved (spec), and both are resolved again afterwards because a re-import may change them.
    const outcome = await runScriptStep(
      stepInput('pre', resolvePaths(ctx, state), { status: 'PRE_PROCESSING', startedAt }),
    );
    if (outcome.kind !== 'ok') return outcome;
    // Same instant and ${UUID}, current metadata.
    ctx = makeContext(ctx.uuid);
  }
  // Before anything of the transcoder's step (its output directory, its RUNNING report).
  const held = gate('transcoder');
  if (held) await held;
  if (signal.aborted) return { kind: 'canceled' };

  const paths = resolvePaths(ctx, state);
  const chain = resolveChain(state.task.command.raw, ctx, paths, transcoderPath);
  if (!chain.ok) return { kind: 'failed', error: chain.error };
  const resolved = {
    command: { raw: state.task.command.raw, resolved: chain.display },
    inputFile: { raw: state.task.inputFile.raw, resolved: paths.inputFile },
    outputFile: { raw: state.task.outputFile.raw, resolved: paths.outputFile },
  };
  // A check that stops the run before the transcoder still shows what the command and paths resolved
  // to: the error is about them. (They ride on the failed result.)
  const refuse = (error: string): Stop => {
    state.apply(resolved, { defer: true });
    return { kind: 'failed', error };
  };
  for (const [what, file] of [
    ['input file', paths.inputFile],
    ['output file', paths.outputFile],
  ] as const) {
    // Each value stays one argument, but ffmpeg reads one that starts with '-' as an option (an output
    // of "-version" ran `ffmpeg … -version` and "succeeded" without writing anything).
    if (file.startsWith('-'))
      return refuse(
        `${what} "${file}" starts with '-', which the transcoder would read as an option; name it ./${file} for a file in the working directory`,
      );
  }
  const guarded = protectedDirOf(paths.outputFile, options.protectedDirs ?? []);
  if (guarded) return refuse(protectedPathError('output file', paths.outputFile, guarded));
  if (paths.outputFile !== '') {
    const dir = path.dirname(paths.outputFile);
    try {
      await makeDirectory(dir);
    } catch (err) {
      return refuse(`failed to create output directory ${dir}: ${(err as Error).message}`);
    }
  }

  // A task claimed straight into RUNNING (no pre-processing) is shown RUNNING at progress 0 already:
  // its resolved values may ride on the next report (progress, or the result of a short transcode).
  // After pre-processing this update is the move to RUNNING, which goes out at once.
  const deferDetails = state.task.status === 'RUNNING';
  state.apply(
    {
      status: 'RUNNING',
      startedAt,
      ...resolved,
      progress: 0,
      remaining: -1,
    },
    { defer: deferDetails },
  );
  throttle.reported({ progress: 0, remaining: -1 });
  const transcode = await runTranscode({
    segments: chain.segments,
    transcoderPath,
    outputFile: paths.outputFile,
    env,
    signal,
    outputKeptBecause: options.outputKeptBecause ?? (() => undefined),
    ...(options.killNow ? { killNow: options.killNow } : {}),
    graceMs,
    logs,
    onProgress: (p) => throttle.offer(p),
    ...(options.onTranscoderLost ? { onTranscoderLost: options.onTranscoderLost } : {}),
  });
  throttle.stop();
  if (transcode.kind !== 'ok') return transcode;

  if (isStepDefined(state.task.postProcessing)) {
    const held = gate('post');
    if (held) await held;
    if (signal.aborted) return { kind: 'canceled' };
    const outcome: StepOutcome = await runScriptStep(
      stepInput('post', paths, { status: 'RUNNING', progress: 100, remaining: 0 }),
    );
    if (outcome.kind !== 'ok') return outcome;
  }
  return null;
}

/** `held`, or less: the wait ends when `signal` is aborted first. A rejection is the run's error. */
function untilAborted(held: Promise<void>, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const stop = () => {
      signal.removeEventListener('abort', stop);
      resolve();
    };
    signal.addEventListener('abort', stop, { once: true });
    held.then(stop, (err: unknown) => {
      signal.removeEventListener('abort', stop);
      reject(err);
    });
  });
}

/** Input first, then output (which may use input-derived wildcards). */
function resolvePaths(ctx: WildcardContext, state: TaskState): { inputFile: string; outputFile: string } {
  // A watchfolder task's input is the path of a file someone dropped, literal whatever its name holds:
  // `clip ${DATE_YEAR}.mov` was read as a wildcard (the task failed on a file that does not exist).
  const inputFile =
    state.task.source === 'watchfolder'
      ? state.task.inputFile.raw
      : resolveWildcards(state.task.inputFile.raw.trim(), ctx);
  const outputFile = resolveWildcards(state.task.outputFile.raw.trim(), ctx, { inputFile });
  return { inputFile, outputFile };
}

/**
 * The run's single instant. Wall-clock milliseconds come from the (injected or system) clock; the
 * sub-millisecond part of the µs/ns timestamps is taken from the monotonic clock
 * (`process.hrtime`), because `Date` has no finer precision and the monotonic clock alone drifts
 * from wall time over a long-running agent. The µs/ns values are therefore the instant's
 * milliseconds plus a fine-grained, non-repeating fraction, not a synchronised sub-ms reading.
 */
function readInstant(now: () => Date): { now: Date; subMillisecondNanos: number } {
  return { now: now(), subMillisecondNanos: Number(process.hrtime.bigint() % 1_000_000n) };
}

function toResult(stop: Stop): RunTaskResult {
  return stop.kind === 'canceled'
    ? { status: 'DONE_CANCELED', error: '' }
    : { status: 'DONE_ERROR', error: stop.error };
}
