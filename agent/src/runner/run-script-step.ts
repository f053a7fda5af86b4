import { constants } from 'node:fs';
import { type FileHandle, open } from 'node:fs/promises';
import type { ProcessingStep, Task, TaskPatch } from '@ffleet/shared';
import { formatCommandLine, resolveWildcards, tokenize, type WildcardContext } from '@ffleet/shared';
import { protectedDirOf, protectedPathError } from './protected-paths.ts';
import type { RunLogs } from './run-logs.ts';
import { runProcess } from './run-process.ts';
import { allowScript } from './script-allow-list.ts';
import {
  buildPostSidecar,
  buildPreSidecar,
  MAX_SIDECAR_BYTES,
  validateReimport,
  writeSidecar,
} from './sidecar.ts';
import { type StepOutcome, toStepOutcome } from './step-outcome.ts';
import type { TaskState } from './task-state.ts';

export type Phase = 'pre' | 'post';

export interface ScriptStepInput {
  phase: Phase;
  state: TaskState;
  ctx: WildcardContext;
  /** Input and output paths as resolved at this point of the run. */
  paths: { inputFile: string; outputFile: string };
  /** Fields reported together with the step's start (e.g. the PRE_PROCESSING status). */
  startPatch: TaskPatch;
  transcoderPath: string;
  attempt: number;
  env: NodeJS.ProcessEnv;
  signal: AbortSignal;
  graceMs: number;
  now: () => Date;
  logs: RunLogs;
  /** Directories scripts must live in (FFLEET_AGENT_SCRIPT_DIRS); empty: any script may run. */
  scriptDirs: readonly string[];
  /** No sidecar may be written into these (see protected-paths.ts). */
  protectedDirs: readonly string[];
}

const LABEL: Record<Phase, string> = { pre: 'pre-processing', post: 'post-processing' };
const FIELD = { pre: 'preProcessing', post: 'postProcessing' } as const;

/** True when a step has something to do: a script or a sidecar to write. */
export function isStepDefined(step: ProcessingStep | null): step is ProcessingStep {
  return step !== null && (step.scriptPath.raw.trim() !== '' || step.sidecarPath.raw.trim() !== '');
}

/**
 * Run one processing step: resolve its sidecar and script paths, report its start, write the
 * sidecar, run the script without a shell, and for pre-processing with `importSidecar` validate
 * and apply the re-imported sidecar. The step's `finishedAt` and `error` are reported at the end.
 */
export async function runScriptStep(input: ScriptStepInput): Promise<StepOutcome> {
  const { phase, state, ctx, paths } = input;
  const label = LABEL[phase];
  const field = FIELD[phase];
  const step = state.task[field];
  if (!step) return { kind: 'ok' };

  const sidecarFile = resolveWildcards(step.sidecarPath.raw.trim(), ctx, paths);
  const tokens = tokenize(step.scriptPath.raw);
  const argv = tokens.ok
    ? tokens.tokens.map((t) => resolveWildcards(t.value, ctx, { ...paths, sidecarFile }))
    : [];
  const started: ProcessingStep = {
    ...step,
    scriptPath: { raw: step.scriptPath.raw, resolved: tokens.ok ? formatCommandLine([argv]) : '' },
    sidecarPath: { raw: step.sidecarPath.raw, resolved: sidecarFile },
    startedAt: input.now().getTime(),
    finishedAt: 0,
    error: '',
  };
  state.apply({ ...input.startPatch, [field]: started });

  const finish = (outcome: StepOutcome, extra: TaskPatch = {}): StepOutcome => {
    const error = outcome.kind === 'failed' ? outcome.error : '';
    // The error reaches the agent log once, with the task's result (runTask).
    state.apply({ ...extra, [field]: { ...started, finishedAt: input.now().getTime(), error } });
    return outcome;
  };

  if (!tokens.ok) return finish({ kind: 'failed', error: `${label} script path: ${tokens.error}` });
  if (phase === 'pre' && step.importSidecar && sidecarFile === '') {
    return finish({ kind: 'failed', error: `${label}: importSidecar needs a sidecarPath` });
  }
  if (input.signal.aborted) return finish({ kind: 'canceled' });

  let written: Task | undefined;
  const guarded = protectedDirOf(sidecarFile, input.protectedDirs);
  if (guarded)
    return finish({
      kind: 'failed',
      error: `${label}: ${protectedPathError('sidecar', sidecarFile, guarded)}`,
    });
  if (sidecarFile !== '') {
    written = phase === 'pre' ? buildPreSidecar(state.task) : buildPostSidecar(state.task);
    const result = await writeSidecar(sidecarFile, written);
    if (!result.ok) return finish({ kind: 'failed', error: `${label}: ${result.error}` });
    input.logs.agent.add(`${label}: wrote sidecar ${sidecarFile}`);
  }

  const [file, ...args] = argv;
  if (file !== undefined) {
    const allowed = await allowScript(file, input.scriptDirs, input.env);
    if (!allowed.ok) return finish({ kind: 'failed', error: `${label}: ${allowed.error}` });
    input.logs.agent.add(`${label}: $ ${formatCommandLine([argv])}`);
    const result = await runProcess({
      file: allowed.file,
      args,
      env: scriptEnvironment(input, sidecarFile),
      signal: input.signal,
      graceMs: input.graceMs,
      onStdoutLine: (line) => input.logs[phase].add(line),
      onStderrLine: (line) => input.logs[phase].add(line),
    });
    if (result.leftovers) input.logs.agent.add(`${label}: killed the processes the script left running`);
    const outcome = toStepOutcome(`${label} script`, result);
    if (outcome.kind !== 'ok') return finish(outcome);
  }

  if (phase === 'pre' && step.importSidecar && written) {
    const read = await readSidecar(sidecarFile);
    if (!read.ok) return finish({ kind: 'failed', error: `${label}: ${read.error}` });
    const text = read.text;
    const reimport = validateReimport(written, text);
    if (!reimport.ok) return finish({ kind: 'failed', error: `${label}: ${reimport.error}` });
    const changed = Object.keys(reimport.changes);
    if (changed.length > 0) input.logs.agent.add(`${label}: sidecar re-import changed ${changed.join(', ')}`);
    return finish({ kind: 'ok' }, reimport.changes);
  }
  return finish({ kind: 'ok' });
}

/** The agent's environment plus the variables the contract promises every script. */
function scriptEnvironment(input: ScriptStepInput, sidecarFile: string): NodeJS.ProcessEnv {
  return {
    ...input.env,
    SIDECAR_FILE: sidecarFile,
    TASK_UUID: input.state.task.uuid,
    SOURCE: input.state.task.source,
    INPUT_FILE: input.paths.inputFile,
    OUTPUT_FILE: input.paths.outputFile,
    TRANSCODER: input.transcoderPath,
    ATTEMPT: String(input.attempt),
  };
}

/**
 * The re-imported sidecar's text: a regular file of at most MAX_SIDECAR_BYTES. A script's runaway
 * output must not fill the agent's memory, and what the script left there may be anything: a link to
 * `/dev/zero` (its size says 0, its reads never end) or a FIFO (opened without waiting for a writer).
 */
async function readSidecar(file: string): Promise<{ ok: true; text: string } | { ok: false; error: string }> {
  let handle: FileHandle;
  try {
    handle = await open(file, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch (err) {
    return { ok: false, error: `cannot read sidecar ${file}: ${(err as Error).message}` };
  }
  try {
    const info = await handle.stat();
    if (!info.isFile())
      return { ok: false, error: `sidecar re-import failed: ${file} is not a regular file` };
    if (info.size > MAX_SIDECAR_BYTES)
      return {
        ok: false,
        error: `sidecar re-import failed: ${file} is ${info.size} bytes; a re-imported sidecar may have at most ${MAX_SIDECAR_BYTES}`,
      };
    // Read at most one chunk past the limit: the file may still be growing.
    const chunks: Buffer[] = [];
    let length = 0;
    for (;;) {
      const chunk = Buffer.allocUnsafe(Math.max(64 * 1024, info.size - length + 1));
      const { bytesRead } = await handle.read(chunk, 0, chunk.length, length);
      if (bytesRead === 0) break;
      chunks.push(chunk.subarray(0, bytesRead));
      length += bytesRead;
      if (length > MAX_SIDECAR_BYTES)
        return {
          ok: false,
          error: `sidecar re-import failed: ${file} grew past ${MAX_SIDECAR_BYTES} bytes while it was read`,
        };
    }
    return { ok: true, text: Buffer.concat(chunks, length).toString('utf8') };
  } catch (err) {
    return { ok: false, error: `cannot read sidecar ${file}: ${(err as Error).message}` };
  } finally {
    await handle.close();
  }
}
