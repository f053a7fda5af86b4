import { foldersOverlap, type WatchfolderAssignment, type WatchfolderYield } from '@ffleet/shared';
import { eq, inArray, or, sql } from 'drizzle-orm';
import type { Db } from '../db/client.ts';
import type { AgentRow, WatchfolderRow } from '../db/mappers.ts';
import { agents, watchfolders } from '../db/schema.ts';

/**
 * Decide which online agent scans each watchfolder: the pinned one (`agent` = name or id) when it is
 * online; else the agent of a watchfolder whose folder overlaps it; else keep the current one while it
 * is online and has not reported the path unreadable; else the online agent with the fewest
 * watchfolders that has not failed on this path.
 */
export function planAssignments(
  folders: readonly WatchfolderRow[],
  online: readonly AgentRow[],
  failed: ReadonlyMap<string, ReadonlySet<string>>,
): Map<string, string | null> {
  const load = new Map(online.map((a) => [a.id, 0]));
  const plan = new Map<string, string | null>();
  const eligible = (wf: WatchfolderRow, a: AgentRow) => !(failed.get(wf.id)?.has(a.id) ?? false);
  const place = (wf: WatchfolderRow, agentId: string | null) => {
    plan.set(wf.id, agentId);
    if (agentId) load.set(agentId, (load.get(agentId) ?? 0) + 1);
  };
  // Watchfolders whose folders overlap, directly or through others (a parent over two subfolders), form
  // one group on one agent, which leaves each file to one of them (agent/src/watch/folder-overlap.ts);
  // on two agents of one shared volume both would take it. The group's agent beats a member staying
  // where it is (a PUT moved it onto another's folder).
  const groupOf = overlapGroups(folders);
  const groupAgent = new Map<number, string>();
  const byId = new Map(online.map((a) => [a.id, a]));
  // Also where that agent cannot read this member's folder (an inner folder not created yet): moved to
  // another agent, the member would take files its group there takes too, and the group's agent reads
  // the folder through its overlapping member anyway once it exists.
  const inGroup = (wf: WatchfolderRow): AgentRow | undefined =>
    byId.get(groupAgent.get(groupOf.get(wf.id)!) ?? '');
  const placeInGroup = (wf: WatchfolderRow, agentId: string | null) => {
    place(wf, agentId);
    const g = groupOf.get(wf.id)!;
    if (agentId && !groupAgent.has(g)) groupAgent.set(g, agentId);
  };
  // Pinned ones first (they decide their group's agent), then the ones that stay, so the balancing
  // below sees their load.
  const unpinned: WatchfolderRow[] = [];
  for (const wf of folders) {
    if (wf.agent) placeInGroup(wf, online.find((x) => x.name === wf.agent || x.id === wf.agent)?.id ?? null);
    else unpinned.push(wf);
  }
  const rest: WatchfolderRow[] = [];
  for (const wf of unpinned) {
    const current = wf.assignedAgentId ? byId.get(wf.assignedAgentId) : undefined;
    const group = inGroup(wf);
    if (group) place(wf, group.id);
    else if (current && eligible(wf, current) && !groupAgent.has(groupOf.get(wf.id)!))
      placeInGroup(wf, current.id);
    else rest.push(wf);
  }
  for (const wf of rest) {
    let best: AgentRow | null = inGroup(wf) ?? null;
    if (!best) {
      const candidates = online.filter((a) => eligible(wf, a));
      // Every agent failed on this path: keep trying the least loaded one so the error stays visible.
      const pool = candidates.length ? candidates : online;
      for (const a of pool) if (!best || (load.get(a.id) ?? 0) < (load.get(best.id) ?? 0)) best = a;
    }
    placeInGroup(wf, best?.id ?? null);
  }
  return plan;
}

/** Each watchfolder's group: the folders that overlap it, directly or through others (union-find). */
function overlapGroups(folders: readonly WatchfolderRow[]): Map<string, number> {
  const parent = folders.map((_, i) => i);
  const find = (i: number): number => {
    while (parent[i] !== i) i = parent[i] = parent[parent[i]!]!;
    return i;
  };
  for (let i = 0; i < folders.length; i++)
    for (let j = i + 1; j < folders.length; j++)
      if (foldersOverlap(folders[i]!.path, folders[j]!.path)) parent[find(j)] = find(i);
  return new Map(folders.map((wf, i) => [wf.id, find(i)]));
}

export const toAssignment = (wf: WatchfolderRow): WatchfolderAssignment => ({
  id: wf.id,
  name: wf.name,
  path: wf.path,
  interval: wf.interval,
  growthChecks: wf.growthChecks,
  filter: wf.filter,
  suspended: wf.suspended,
  createdAt: wf.createdAt,
});

/**
 * The watchfolders whose files an agent leaves alone although they lie in (or are) a folder it scans:
 * those its folders overlap that it does not scan itself, the group's members pinned to another agent
 * (or to one that is offline: their files wait for it rather than go to the outer folder's preset).
 * Two folders both pinned, to different agents, are left alone (boxes with folders of the same name
 * are not one folder) unless an unpinned folder overlaps them too, which declares the tree shared.
 */
export function yieldsFor(
  agentId: string,
  folders: readonly WatchfolderRow[],
  agentOf: (wf: WatchfolderRow) => string | null,
): WatchfolderYield[] {
  const mine = folders.filter((f) => agentOf(f) === agentId);
  if (!mine.length) return [];
  // A group with an unpinned member is one shared volume (any agent may scan that member): there two
  // pinned members are one folder tree too, and leave each other's files alone.
  const groupOf = overlapGroups(folders);
  const shared = new Set(folders.filter((f) => !f.agent).map((f) => groupOf.get(f.id)));
  const sameVolume = (m: WatchfolderRow, o: WatchfolderRow) =>
    !(m.agent && o.agent) || shared.has(groupOf.get(m.id));
  const yields: WatchfolderYield[] = [];
  for (const o of folders) {
    if (agentOf(o) === agentId) continue;
    const overlaps = mine.filter((m) => foldersOverlap(m.path, o.path) && sameVolume(m, o)).map((m) => m.id);
    if (overlaps.length)
      yields.push({
        id: o.id,
        name: o.name,
        path: o.path,
        suspended: o.suspended,
        createdAt: o.createdAt,
        overlaps,
      });
  }
  return yields;
}

/**
 * Why no agent scans a folder (its `error` while unassigned). `known`: the pins that name an agent the
 * control plane has a record of (by name or id), so a mistyped name reads as one.
 */
const unassignedError = (wf: WatchfolderRow, known: ReadonlySet<string>): string =>
  !wf.agent
    ? 'no agent is online to scan this folder'
    : known.has(wf.agent)
      ? `agent ${wf.agent} is not online (offline or draining)`
      : `no agent named ${wf.agent} is known (none has connected under that name, or it was deleted): check the name; the folder is scanned once it connects`;

/** Of the pins of folders left unassigned, those that name an agent on record (one read, only then). */
async function knownPins(
  db: Db,
  folders: readonly WatchfolderRow[],
  plan: Map<string, string | null>,
): Promise<Set<string>> {
  const pins = [
    ...new Set(folders.filter((f) => f.agent && (plan.get(f.id) ?? null) === null).map((f) => f.agent!)),
  ];
  if (!pins.length) return new Set();
  const rows = await db
    .select({ id: agents.id, name: agents.name })
    .from(agents)
    .where(or(inArray(agents.name, pins), inArray(sql<string>`${agents.id}::text`, pins)));
  return new Set(pins.filter((p) => rows.some((r) => r.name === p || r.id === p)));
}

/**
 * Persist the plan; returns the folders whose assignment changed. An unassigned folder always shows
 * why, also when it never had an agent (pinned to a name no agent has, or created while its agent was
 * away): it would otherwise sit with an empty error and never scan.
 */
export async function saveAssignments(
  db: Db,
  folders: readonly WatchfolderRow[],
  plan: Map<string, string | null>,
) {
  const known = await knownPins(db, folders, plan);
  const changed: string[] = [];
  for (const wf of folders) {
    const next = plan.get(wf.id) ?? null;
    const error = next === null ? unassignedError(wf, known) : '';
    if (next !== wf.assignedAgentId || (next === null && wf.error !== error)) {
      await db.update(watchfolders).set({ assignedAgentId: next, error }).where(eq(watchfolders.id, wf.id));
      if (next !== wf.assignedAgentId) changed.push(wf.id);
    }
  }
  return changed;
}
