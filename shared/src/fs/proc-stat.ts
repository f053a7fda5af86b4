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
