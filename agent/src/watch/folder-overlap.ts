import { relativeInside, type WatchfolderAssignment, type WatchfolderYield } from '@ffleet/shared';

/**
 * What a watchfolder leaves to the other watchfolders this agent scans: a folder inside its own is the
 * inner watchfolder's (a drop folder's `special/` subfolder with a preset of its own; suspended, it
 * holds its files back), and of two on one folder, the one created first takes the files (then the
 * lower id) unless it is suspended and the other is not. Without this, each would
 * submit every file before either had written its `.lock`: one task per watchfolder per file.
 */
export type YieldPlan = {
  /** Folders relative to this one's root (`/`-separated) whose files are another watchfolder's. */
  nested: string[];
  /** Set when another watchfolder watches this very folder and takes its files: its name. */
  shadowedBy: string | null;
};

export const NO_YIELDS: YieldPlan = { nested: [], shadowedBy: null };

type Ordered = Pick<WatchfolderAssignment, 'id' | 'name' | 'suspended' | 'createdAt'>;

const comesFirst = (a: Ordered, b: Ordered): boolean =>
  (a.createdAt ?? 0) !== (b.createdAt ?? 0) ? (a.createdAt ?? 0) < (b.createdAt ?? 0) : a.id < b.id;

/**
 * The plan of every assignment, by id (most agents scan one folder: all of them NO_YIELDS). `yieldTo`:
 * watchfolders scanned elsewhere (the config's), each counted only for the assignments it `overlaps`.
 */
export function planYields(
  assignments: readonly WatchfolderAssignment[],
  yieldTo: readonly WatchfolderYield[] = [],
): Map<string, YieldPlan> {
  const plans = new Map<string, YieldPlan>();
  for (const a of assignments) {
    let plan = NO_YIELDS;
    // Of the watchfolders on this very folder, the first created that is not suspended takes its files.
    let owner: Ordered | null = a.suspended ? null : a;
    const others = yieldTo.length
      ? [...assignments, ...yieldTo.filter((y) => y.overlaps.includes(a.id))]
      : assignments;
    for (const b of others) {
      if (b.id === a.id) continue;
      const rel = relativeInside(a.path, b.path);
      if (rel === null) continue;
      if (rel === '') {
        if (!b.suspended && (owner === null || comesFirst(b, owner))) owner = b;
        continue;
      }
      plan = { ...plan, nested: [...plan.nested, rel] };
    }
    if (owner !== null && owner !== a) plan = { ...plan, shadowedBy: owner.name };
    plans.set(a.id, plan);
  }
  return plans;
}

/** Whether the file at `rel` (relative to the folder, `/`-separated) is another watchfolder's. */
export function yieldsFile(plan: YieldPlan, rel: string): boolean {
  if (plan.shadowedBy !== null) return true;
  for (const dir of plan.nested) if (rel.startsWith(`${dir}/`)) return true;
  return false;
}

/** The scan error a shadowed watchfolder shows. */
export const shadowedError = (name: string): string =>
  `another watchfolder (${JSON.stringify(name)}) watches this folder and takes its files; this one submits none`;
