/**
 * A lock file that says which process owns a directory (an embedded database, an agent's outbox), as
 * PostgreSQL's `postmaster.pid` does: two processes on one PGlite data directory each see their own
 * database and corrupt the files (seen: accepted tasks gone, a corrupt primary-key index), and two on one
 * outbox replay each other's reports. Nothing else stops a second `ffleet start` on the same data dir.
 *
 * The file is created with O_EXCL and holds the owner's pid, its start time (`/proc/<pid>/stat`, so a
 * reused pid — PID 1 in every container — is not mistaken for the owner), the boot id and the host. A
 * file whose owner is gone (killed, crashed, the machine rebooted) is stale and taken over. Unlike
 * flock(2), it also works on network shares; a lock held from another host cannot be checked from here
 * and is refused with the way out in the message.
 */
import { closeSync, openSync, readFileSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { READ_ONLY_FS } from './make-directory.ts';
import { processStartTime, procStatFields } from './proc-stat.ts';

type Holder = { pid: number; start: string | null; boot: string | null; host: string; command: string };

/** A lock file being written by its new owner right now reads empty or partial for this long at most. */
const WRITE_WINDOW_MS = 5_000;

/**
 * Another process holds the lock, or it cannot be judged: a configuration error the operator must
 * resolve (the ffleet command exits with code 2, so systemd does not restart it in a loop).
 */
export class LockedError extends Error {
  readonly code = 'ELOCKED';
}

function readText(path: string): string | null {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return null;
  }
}

/** The lock file's text, null when it is gone; a file this user cannot read is never taken over. */
function readLock(path: string, what: string): string | null {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    let owner = '';
    try {
      owner = ` (it belongs to user id ${statSync(path).uid}, this process runs as ${process.getuid?.()})`;
    } catch {
      // Gone meanwhile: the message below still holds.
    }
    throw new LockedError(
      `${what} cannot be checked: ${path} is not readable${owner}; run ffleet as the user that owns the data dir`,
    );
  }
}

const bootId = (): string | null => readText('/proc/sys/kernel/random/boot_id');

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
  // A zombie (killed, not yet reaped by its parent) answers kill(0) but holds nothing any more.
  return procStatFields(pid)?.[0] !== 'Z';
}

function me(): Holder {
  return {
    pid: process.pid,
    start: processStartTime(process.pid),
    boot: bootId(),
    host: hostname(),
    command: process.argv.slice(1).join(' ').slice(0, 200),
  };
}

/** Whether the process the file names still runs (on this host; another host's is assumed to). */
function holds(h: Holder): boolean {
  if (h.host !== hostname()) return true;
  if (h.boot && bootId() && h.boot !== bootId()) return false;
  if (!alive(h.pid)) return false;
  const start = processStartTime(h.pid);
  return h.start === null || start === null || start === h.start;
}

/**
 * Take `path` for this process, or throw a LockedError naming the live owner (`what` names what is
 * locked and `hint` the way out, for the message). Returns the release function: it removes the file
 * if it is still ours.
 */
export function takeLockFile(path: string, what: string, hint: string): () => void {
  const mine = me();
  for (let attempt = 0; attempt < 5; attempt++) {
    let fd: number;
    try {
      fd = openSync(path, 'wx', 0o600);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'EROFS')
        throw new LockedError(
          `${what} cannot be used: the file system holding ${path} is ${READ_ONLY_FS}; make it writable, ` +
            'or choose another data dir (FFLEET_DATA_DIR)',
        );
      if (code === 'EACCES' || code === 'EPERM')
        throw new LockedError(
          `${what} cannot be used: ${(err as Error).message}; give the data dir (FFLEET_DATA_DIR) to the user ` +
            `running ffleet${process.getuid ? ` (user id ${process.getuid()})` : ''}, or choose another`,
        );
      if (code !== 'EEXIST') throw err;
      const text = readLock(path, what);
      if (text === null) continue; // Released meanwhile: try again.
      let holder: Holder | null = null;
      try {
        holder = JSON.parse(text) as Holder;
      } catch {
        // Partial, or not ours: judged by its age below.
      }
      if (holder && Number.isInteger(holder.pid) && typeof holder.host === 'string') {
        if (holds(holder)) throw inUse(path, what, hint, holder);
      } else {
        let age = Number.POSITIVE_INFINITY;
        try {
          age = Date.now() - statSync(path).mtimeMs;
        } catch {
          continue; // Gone meanwhile: try again.
        }
        if (age < WRITE_WINDOW_MS) throw inUse(path, what, hint, null);
      }
      try {
        unlinkSync(path);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
      }
      continue;
    }
    try {
      writeSync(fd, `${JSON.stringify(mine)}\n`);
    } catch (err) {
      // Not taken after all (a full disk, an I/O error): an empty file left here would read as "another
      // process that is starting" to every start within WRITE_WINDOW_MS, which exit 2 and systemd does
      // not restart, so the service stayed down after the disk was freed.
      closeSync(fd);
      try {
        unlinkSync(path);
      } catch {
        // Gone already.
      }
      throw err;
    }
    closeSync(fd);
    return () => {
      const text = readText(path);
      try {
        const h = text ? (JSON.parse(text) as Holder) : null;
        if (h?.pid === mine.pid && h.start === mine.start) unlinkSync(path);
      } catch {
        // Not ours any more, or already gone.
      }
    };
  }
  throw new LockedError(`${what} is in use: could not take ${path}`);
}

function inUse(path: string, what: string, hint: string, h: Holder | null): LockedError {
  const who = !h
    ? 'another process that is starting'
    : h.host !== hostname()
      ? `process ${h.pid} on host ${h.host} (${h.command}); if that host no longer runs it, remove ${path}`
      : h.pid === process.pid
        ? 'this process already'
        : `process ${h.pid} (${h.command})`;
  return new LockedError(`${what} is in use by ${who}; ${hint}`);
}
