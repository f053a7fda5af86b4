import { readFileSync } from 'node:fs';

/**
 * The fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, …), or null when the
 * process is gone or there is no /proc. The name (field 2) may hold spaces and parentheses, so the
 * fields are counted from the last ')'.
 */
export function procStatFields(pid: number | string): string[] | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
}

/** When a process started (field 22 of its stat: clock ticks after boot), or null when it is gone. */
export const processStartTime = (pid: number | string): string | null => procStatFields(pid)?.[19] ?? null;

/**
 * Whether the process `pid` that started at `start` (processStartTime) still runs: not gone, not a
 * reused pid, and not a zombie (killed, not reaped yet by its parent: a SIGKILLed agent whose service
 * manager has not collected it holds nothing any more).
 */
export function processRunsSince(pid: number | string, start: string): boolean {
  const fields = procStatFields(pid);
  return fields !== null && fields[19] === start && fields[0] !== 'Z' && fields[0] !== 'X';
}
