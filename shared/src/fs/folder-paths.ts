/**
 * Where `child` lies inside folder `parent`, by their text: `''` when they are one folder, the path
 * below it with `/` between its parts, or null when it is not inside (`/srv/dropbox` is not inside
 * `/srv/drop`). Both are absolute paths of one kind, POSIX (`/…`) or Windows (`C:\…`); trailing
 * separators and repeated ones do not count, and nothing is resolved on disk (links are not followed).
 */
export function relativeInside(parent: string, child: string): string | null {
  const split = (p: string) => p.split(p.startsWith('/') ? '/' : /[\\/]/).filter((part) => part !== '');
  const a = split(parent);
  const b = split(child);
  if (b.length < a.length) return null;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return null;
  return b.slice(a.length).join('/');
}

/** Whether one folder is or lies inside the other. */
export const foldersOverlap = (a: string, b: string): boolean =>
  relativeInside(a, b) !== null || relativeInside(b, a) !== null;
