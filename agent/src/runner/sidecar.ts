import { randomUUID } from 'node:crypto';
import { rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { makeDirectory, type Task } from '@ffleet/shared';

export {
  MAX_SIDECAR_BYTES,
  type ReimportResult,
  type SidecarChanges,
  validateReimport,
} from './sidecar-reimport.ts';

/**
 * The pre-processing sidecar (spec): the task snapshot with status `PRE_PROCESSING`, the command,
 * input and output not resolved yet (`resolved: ""`) and `postProcessing: null`. The
 * `preProcessing` step keeps its resolved script and sidecar paths so the script can see them.
 */
export function buildPreSidecar(task: Task): Task {
  const snapshot = structuredClone(task);
  snapshot.status = 'PRE_PROCESSING';
  snapshot.command = { raw: task.command.raw, resolved: '' };
  snapshot.inputFile = { raw: task.inputFile.raw, resolved: '' };
  snapshot.outputFile = { raw: task.outputFile.raw, resolved: '' };
  snapshot.postProcessing = null;
  return snapshot;
}

/**
 * The post-processing sidecar: the task as it stands after the transcode, with every path and the
 * command resolved and status `RUNNING` (post-processing runs while the task is `RUNNING`).
 */
export function buildPostSidecar(task: Task): Task {
  const snapshot = structuredClone(task);
  snapshot.status = 'RUNNING';
  return snapshot;
}

/** Result of {@link writeSidecar}. */
export type WriteSidecarResult = { ok: true } | { ok: false; error: string };

/**
 * Write a sidecar as pretty JSON (mode 0644), creating its directory. The file is written beside
 * its final name and renamed into place, so a script never reads a half-written sidecar.
 */
export async function writeSidecar(filePath: string, snapshot: Task): Promise<WriteSidecarResult> {
  const temporary = path.join(path.dirname(filePath), `.${path.basename(filePath)}.${randomUUID()}.tmp`);
  try {
    await makeDirectory(path.dirname(filePath));
    await writeFile(temporary, `${JSON.stringify(snapshot, null, 2)}\n`, { mode: 0o644 });
    await rename(temporary, filePath);
    return { ok: true };
  } catch (err) {
    await rm(temporary, { force: true }).catch(() => undefined);
    return { ok: false, error: `failed to write sidecar ${filePath}: ${(err as Error).message}` };
  }
}
