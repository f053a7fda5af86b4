import { execFile } from 'node:child_process';
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** The system ffmpeg/ffprobe (the agents resolve ffmpeg from PATH the same way). */
const FFMPEG = 'ffmpeg';
const FFPROBE = 'ffprobe';

/**
 * A small test video generated with lavfi (`testsrc`), MPEG-4 part 2 in MP4: quick to make and to
 * transcode. Returns its absolute path.
 */
export async function makeTestVideo(dir: string, name: string, seconds: number): Promise<string> {
  const file = join(dir, name);
  mkdirSync(dirname(file), { recursive: true });
  await run(FFMPEG, [
    '-nostdin',
    '-v',
    'error',
    '-y',
    '-f',
    'lavfi',
    '-i',
    `testsrc=duration=${seconds}:size=160x120:rate=25`,
    '-c:v',
    'mpeg4',
    '-q:v',
    '10',
    file,
  ]);
  return file;
}

/** Container duration in seconds (ffprobe), or null when the file is not a readable media file. */
export async function probeDurationSeconds(file: string): Promise<number | null> {
  try {
    const { stdout } = await run(FFPROBE, [
      '-v',
      'error',
      '-show_entries',
      'format=duration',
      '-of',
      'csv=p=0',
      file,
    ]);
    const d = Number.parseFloat(stdout.trim());
    return Number.isFinite(d) ? d : null;
  } catch {
    return null;
  }
}

/** An executable `/bin/sh` script; returns its path. */
export function writeScript(dir: string, name: string, body: string): string {
  const file = join(dir, name);
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, `#!/bin/sh\n${body}\n`);
  chmodSync(file, 0o755);
  return file;
}

/**
 * Poll `fn` until it returns a truthy value (which is returned); a throw counts as "not yet".
 * Rejects after `timeoutMs` naming `what` and the last error.
 */
export async function waitFor<T>(
  fn: () => T | Promise<T>,
  timeoutMs: number,
  what = 'condition',
  everyMs = 100,
): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let lastError = '';
  for (;;) {
    try {
      const v = await fn();
      if (v) return v as NonNullable<T>;
    } catch (err) {
      lastError = (err as Error).message;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}${lastError ? ` (last error: ${lastError})` : ''}`,
      );
    }
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
