import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const BOOT_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * The boot id of the last agent process on this data dir that reached the control plane (the agent
 * holds the dir's lock, so no other process runs on it now); the control plane reads it as "a restart
 * on this box" (hello's previousBootId). `undefined` when there was none or it is unreadable.
 */
export function previousBootId(dir: string): string | undefined {
  try {
    const text = readFileSync(join(dir, 'boot-id'), 'utf8').trim();
    return BOOT_ID.test(text) ? text : undefined;
  } catch {
    return undefined; // none yet (a first start), or unreadable: no previous process is claimed
  }
}

/**
 * Keep `bootId` as this data dir's last process, once it has reached the control plane: a process that
 * dies before (a crash loop) leaves the one the control plane knows in place, so the next restart
 * still names it. Returns why it could not (the next restart's tasks then wait for their leases).
 */
export function keepBootId(dir: string, bootId: string): string | undefined {
  const file = join(dir, 'boot-id');
  try {
    mkdirSync(dir, { recursive: true });
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(tmp, `${bootId}\n`);
    renameSync(tmp, file);
    return undefined;
  } catch (err) {
    return (err as Error).message;
  }
}
