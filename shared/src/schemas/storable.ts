/**
 * What PostgreSQL can store. Its text and jsonb cannot hold NUL; an unpaired UTF-16 surrogate is
 * rejected by jsonb (and silently turned into U+FFFD in text); jsonb's parser overflows on thousands of
 * nesting levels. The API refuses such input (422), an agent refuses such a re-imported sidecar, and
 * the control plane stores what agents report through {@link toStorable} so one odd character can never
 * make a report fail for ever.
 */

/**
 * Deepest JSON nesting accepted in a body or a sidecar. Real ones (metadata included) are a few levels
 * deep; thousands of levels overflow PostgreSQL's jsonb parser.
 */
export const MAX_JSON_DEPTH = 64;

const UNSTORABLE_SOURCE = String.raw`\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]`;
const UNSTORABLE = new RegExp(UNSTORABLE_SOURCE);
const UNSTORABLE_ALL = new RegExp(UNSTORABLE_SOURCE, 'g');
/** Every string that may hold one: a plain character-class scan, cheap on long captured output. */
const MAYBE_UNSTORABLE = /[\u0000\uD800-\uDFFF]/;

/**
 * Whether a parsed JSON value nests arrays and objects more than `max` levels deep (the value itself
 * being level 1). Iterative, so any depth is measured without using the stack.
 */
export function nestedDeeperThan(value: unknown, max: number): boolean {
  if (value === null || typeof value !== 'object') return false;
  const stack: [object, number][] = [[value, 1]];
  for (let top = stack.pop(); top; top = stack.pop()) {
    const [v, depth] = top;
    if (depth > max) return true;
    for (const x of Array.isArray(v) ? v : Object.values(v))
      if (x !== null && typeof x === 'object') stack.push([x, depth + 1]);
  }
  return false;
}

/** Why a string cannot be stored, or null when it can. */
export function unstorableText(s: string): string | null {
  const m = UNSTORABLE.exec(s);
  if (!m) return null;
  return m[0] === '\u0000' ? 'contains a NUL character' : 'contains an unpaired UTF-16 surrogate';
}

/** The string with every NUL and unpaired surrogate written as a `\uXXXX` escape (for messages). */
export function escapeUnstorable(s: string): string {
  return s.replace(UNSTORABLE_ALL, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/**
 * Issues with a parsed JSON value that no schema expresses: nesting depth, strings (values and keys)
 * the database cannot store, and `__proto__` keys (assigning one sets a prototype, so the key would
 * silently vanish from metadata). Paths name keys as they are; see {@link escapeUnstorable}.
 */
export function findUnsafeJson(value: unknown, path = '', depth = 1): { path: string; message: string }[] {
  const at = (k: string | number) => (path ? `${path}.${k}` : String(k));
  if (typeof value === 'string') {
    const why = unstorableText(value);
    return why ? [{ path, message: why }] : [];
  }
  if (value === null || typeof value !== 'object') return [];
  if (depth > MAX_JSON_DEPTH) return [{ path, message: `nested deeper than ${MAX_JSON_DEPTH} levels` }];
  const out: { path: string; message: string }[] = [];
  if (Array.isArray(value)) {
    for (const [i, v] of value.entries()) out.push(...findUnsafeJson(v, at(i), depth + 1));
    return out;
  }
  for (const [k, v] of Object.entries(value)) {
    const keyIssue = unstorableText(k);
    const why = k === '__proto__' ? '"__proto__" is a reserved key' : keyIssue && `the key ${keyIssue}`;
    if (why) out.push({ path: at(k), message: why });
    else out.push(...findUnsafeJson(v, at(k), depth + 1));
  }
  return out;
}

/**
 * A copy in which every string (keys included) has its NUL characters and unpaired surrogates replaced
 * by U+FFFD; other values as they are. For what agents report: a transcoder may print a NUL.
 */
export function toStorable<T>(v: T): T {
  if (typeof v === 'string') return (MAYBE_UNSTORABLE.test(v) ? v.replace(UNSTORABLE_ALL, '\uFFFD') : v) as T;
  if (Array.isArray(v)) return v.map(toStorable) as T;
  if (v && typeof v === 'object') {
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [toStorable(k), toStorable(x)])) as T;
  }
  return v;
}
