// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${NAME} wildcards are literal text here, not template placeholders.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Task } from '@ffleet/shared';

/** A quick, deterministic encode (MPEG-4 part 2): the same input always gives the same bytes. */
export const ENCODE = '-y -i ${INPUT_FILE} -c:v mpeg4 -q:v 10 ${OUTPUT_FILE}';
/** `-re` reads the input in real time: the task lasts as long as its input, whatever the CPU. */
export const REALTIME = `-re ${ENCODE}`;

/** A pre-processing step that runs `scriptPath` and re-imports its sidecar (one per task, under `dir`). */
export const reimportingStep = (dir: string, scriptPath: string) => ({
  scriptPath,
  sidecarPath: join(dir, 'sidecars', '${TASK_UUID}.json'),
  importSidecar: true,
});

/** The transcoder is running and has reported progress (so it is really encoding). */
export const isEncoding = (t: Task): boolean => t.status === 'RUNNING' && t.progress > 0;

export const md5 = (file: string): string => createHash('md5').update(readFileSync(file)).digest('hex');

/** {@link ENCODE} of `input` run once, undisturbed; returns the output's md5. */
export function referenceEncode(input: string, output: string): string {
  execFileSync('ffmpeg', [
    '-nostdin',
    '-v',
    'error',
    '-y',
    '-i',
    input,
    '-c:v',
    'mpeg4',
    '-q:v',
    '10',
    output,
  ]);
  return md5(output);
}

/** True while `pid` is a live ffmpeg process. */
export function isTranscoder(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('ffmpeg');
  } catch {
    return false; // Gone.
  }
}
