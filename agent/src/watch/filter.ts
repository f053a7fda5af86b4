import type { WatchfolderFilter } from '@ffleet/shared';

/** Suffix of the marker written beside a processed file (spec: "<file>.lock"). */
export const LOCK_SUFFIX = '.lock';

/** A watchfolder filter prepared for fast per-file checks. */
export type CompiledFilter = {
  /** Lower-case extensions to keep; `null` when include is empty (everything passes). */
  include: ReadonlySet<string> | null;
  /** Lower-case extensions to skip; checked before include. */
  exclude: ReadonlySet<string>;
};

function normalizeExtensions(list: readonly string[] | undefined): string[] {
  // The schema already forbids dots; stripping a leading one keeps a hand-written ".MOV" working.
  return (list ?? []).map((e) => e.trim().replace(/^\.+/, '').toLowerCase()).filter((e) => e.length > 0);
}

/** Turn the wire filter into sets of lower-case extensions (matching ignores case). */
export function compileFilter(filter: WatchfolderFilter | undefined): CompiledFilter {
  const include = normalizeExtensions(filter?.extensions?.include);
  const exclude = normalizeExtensions(filter?.extensions?.exclude);
  return { include: include.length > 0 ? new Set(include) : null, exclude: new Set(exclude) };
}

/** True when two filters keep exactly the same files. */
export function isSameFilter(a: CompiledFilter, b: CompiledFilter): boolean {
  const sameSet = (x: ReadonlySet<string> | null, y: ReadonlySet<string> | null): boolean =>
    x === null || y === null ? x === y : x.size === y.size && [...x].every((e) => y.has(e));
  return sameSet(a.include, b.include) && sameSet(a.exclude, b.exclude);
}

/** Lower-case text after the last dot of a file name; `''` when there is none. */
export function extensionOf(name: string): string {
  const dot = name.lastIndexOf('.');
  return dot <= 0 ? '' : name.slice(dot + 1).toLowerCase();
}

/** Apply the spec's filter rule to a file name: exclude first, then a non-empty include keeps only its own. */
export function matchesFilter(name: string, filter: CompiledFilter): boolean {
  const ext = extensionOf(name);
  if (filter.exclude.has(ext)) return false;
  return filter.include === null || filter.include.has(ext);
}

/** Dot-files and dot-directories are never scanned. */
export function isHiddenName(name: string): boolean {
  return name.startsWith('.');
}

/** Lock markers are never candidates themselves (case-insensitive, so `X.LOCK` is not transcoded either). */
export function isLockName(name: string): boolean {
  return name.length > LOCK_SUFFIX.length && name.toLowerCase().endsWith(LOCK_SUFFIX);
}

/** A file name the scanner may submit (not hidden, not a lock, passes the extension filter). */
export function isCandidateName(name: string, filter: CompiledFilter): boolean {
  return !isHiddenName(name) && !isLockName(name) && matchesFilter(name, filter);
}

/**
 * True when a path below the watchfolder lies in a hidden directory or is itself hidden or a lock.
 * `rel` uses `/` separators; the watchfolder root's own name never counts (it may live under a dot-dir).
 */
export function isIgnoredRelativePath(rel: string): boolean {
  if (rel === '') return false;
  const parts = rel.split('/');
  const base = parts[parts.length - 1] ?? '';
  return parts.some(isHiddenName) || isLockName(base);
}
