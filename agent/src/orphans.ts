import { readdirSync, readFileSync } from 'node:fs';
import { processRunsSince, processStartTime, procStatFields } from '@ffleet/shared';

/**
 * Every process an agent starts (scripts, transcoder) carries this variable:
 * `<agent name>:<boot id>:<agent pid>:<agent start time>` (runMark).
 */
export const RUN_MARK_VAR = 'FFLEET_AGENT_RUN';

/**
 * Every process runProcess starts carries this variable too, and its descendants inherit it: an id of
 * that one run (step), unique in the agent process. With the run mark it finds what a step started
 * that left the step's process group (findMarkedProcesses).
 */
export const STEP_MARK_VAR = 'FFLEET_AGENT_STEP';

/** This process's start time, read once (it is the same for the process's life): `''` when unknown. */
let ownStart: string | undefined;

/** The mark of this agent process's runs (see RUN_MARK_VAR); made for every run, /proc read once. */
export function runMark(agentName: string, bootId: string): string {
  ownStart ??= processStartTime(process.pid) ?? '';
  return `${agentName}:${bootId}:${process.pid}:${ownStart}`;
}

/**
 * The process that started a marked run is alive (same pid, same start time, not a zombie): another live
 * agent with the same name on this host, whose work is not orphaned. A SIGKILLed agent restarted before
 * its parent reaped it is a zombie: its runs are orphans. Marks without the pid (older agents) say no.
 */
function ownerAlive(rest: string): boolean {
  const [, pid, start] = rest.split(':');
  if (!pid || !start) return false;
  return processRunsSince(pid, start);
}

/**
 * Kill the process groups a previous incarnation of this agent left behind. Steps run in their own
 * process group (so cancel can kill a whole tree). A SIGKILLed agent's direct children die with it
 * (the native spawner's PR_SET_PDEATHSIG), but what a script started itself, or what Node's spawn
 * started where the spawner is not built, keeps running; the restarted agent ends them here.
 * Linux: processes are found by the mark in /proc/<pid>/environ. Returns the killed group ids.
 */
export function killOrphanedRuns(agentName: string, currentBootId: string): number[] {
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((d) => /^\d+$/.test(d));
  } catch {
    return []; // No /proc (not Linux): nothing to find.
  }
  const prefix = `${RUN_MARK_VAR}=${agentName}:`;
  const groups = new Set<number>();
  for (const pid of pids) {
    let environ: string;
    try {
      environ = readFileSync(`/proc/${pid}/environ`, 'latin1');
    } catch {
      continue; // Gone, or not ours to read.
    }
    const mark = environ.split('\0').find((e) => e.startsWith(prefix));
    if (!mark) continue;
    const rest = mark.slice(prefix.length);
    if (rest.split(':')[0] === currentBootId || ownerAlive(rest)) continue;
    const pgrp = Number(procStatFields(pid)?.[2]);
    if (pgrp > 1) groups.add(pgrp);
  }
  for (const g of groups) {
    try {
      process.kill(-g, 'SIGKILL');
    } catch {}
  }
  return [...groups];
}

/** A process found by its marks: its pid, process group and start time (field 22 of its stat). */
export interface MarkedProcess {
  pid: number;
  pgrp: number;
  start: string;
}

/**
 * The live processes whose environment holds exactly `FFLEET_AGENT_RUN=<runMark>` and
 * `FFLEET_AGENT_STEP=<stepId>` (RUN_MARK_VAR, STEP_MARK_VAR), found in `<procDir>/<pid>/environ`: a
 * step's descendants, also those that left its process group. A process without both marks is never
 * returned. No /proc (not Linux): none. A process this one may not read (another user's) is skipped.
 * Reads every process's environ: milliseconds on a busy host, so for rare paths (a cancel) only.
 */
export function findMarkedProcesses(runMark: string, stepId: string, procDir = '/proc'): MarkedProcess[] {
  if (!runMark || !stepId) return [];
  let pids: string[];
  try {
    pids = readdirSync(procDir).filter((d) => /^\d+$/.test(d));
  } catch {
    return []; // No /proc (not Linux): nothing to find.
  }
  // environ holds bytes: read as latin1, they compare with the UTF-8 bytes of the marks (a name may not be ASCII).
  const run = Buffer.from(`${RUN_MARK_VAR}=${runMark}`).toString('latin1');
  const step = Buffer.from(`${STEP_MARK_VAR}=${stepId}`).toString('latin1');
  const found: MarkedProcess[] = [];
  for (const pid of pids) {
    let environ: string;
    try {
      environ = readFileSync(`${procDir}/${pid}/environ`, 'latin1');
    } catch {
      continue; // Gone, or not ours to read.
    }
    // A cheap look first: nearly every process on the host carries neither.
    if (!environ.includes(step)) continue;
    const vars = environ.split('\0');
    if (!vars.includes(step) || !vars.includes(run)) continue;
    let stat: string;
    try {
      stat = readFileSync(`${procDir}/${pid}/stat`, 'latin1');
    } catch {
      continue; // Ended meanwhile.
    }
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // A zombie has exited already: nothing to signal.
    if (fields[0] === 'Z' || fields[0] === 'X') continue;
    const pgrp = Number(fields[2]);
    if (Number.isInteger(pgrp)) found.push({ pid: Number(pid), pgrp, start: fields[19] ?? '' });
  }
  return found;
}
