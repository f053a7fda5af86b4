import { closeSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const LOCK_FILE = join(tmpdir(), 'ffleet-test-external-broker.lock');
const POLL_MS = 250;
/** Other test files may hold the broker for their whole run; wait longer than any one of them takes. */
const WAIT_MS = 15 * 60_000;

const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
};

/**
 * Take the machine-wide lock that gives one test cluster at a time the shared external broker.
 * A lock left by a dead process is taken over. Resolves with the release function.
 */
export async function acquireExternalBrokerLock(): Promise<() => void> {
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    try {
      const fd = openSync(LOCK_FILE, 'wx');
      writeSync(fd, String(process.pid));
      closeSync(fd);
      const release = () => {
        process.off('exit', release);
        try {
          if (readFileSync(LOCK_FILE, 'utf8') === String(process.pid)) unlinkSync(LOCK_FILE);
        } catch {
          // Already gone.
        }
      };
      process.on('exit', release);
      return release;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    let holder = 0;
    try {
      holder = Number(readFileSync(LOCK_FILE, 'utf8'));
    } catch {
      continue; // Released between our two calls.
    }
    if (holder === process.pid)
      throw new Error('this process already holds a cluster on the external broker');
    if (holder && !isAlive(holder)) {
      try {
        unlinkSync(LOCK_FILE);
      } catch {
        // Someone else took it over first.
      }
      continue;
    }
    if (Date.now() > deadline)
      throw new Error(`external broker lock ${LOCK_FILE} held by pid ${holder} for too long`);
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}
