import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const BOOT_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Keep `bootId` in the agent's own directory and return the one it replaces: the process that used
 * this data dir before (the agent holds the dir's lock, so no other process runs on it now). The
 * control plane reads it as "a restart on this box" (hello's previousBootId). `undefined` when there was
 * none, it is unreadable, or it cannot be replaced (say so in the log; the control plane then waits for
 * the old process's leases instead of requeueing its tasks at once).
 */
export function swapBootId(dir: string, bootId: string): { previous?: string; error?: string } {
  const file = join(dir, 'boot-id');
  let previous: string | undefined;
  try {
    const text = readFileSync(file, 'utf8').trim();
    if (BOOT_ID.test(text)) previous = text;
  } catch {
    // none yet (a first start), or unreadable: no previous process is claimed
  }
  try {
    mkdirSync(dir, { recursive: true });
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(tmp, `${bootId}\n`);
    renameSync(tmp, file);
  } catch (err) {
    // A restart must not claim a process it did not replace next time round.
    return { error: (err as Error).message };
  }
  return previous === undefined ? {} : { previous };
}
