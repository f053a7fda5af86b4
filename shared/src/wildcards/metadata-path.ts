/**
 * Characters that can make a path more than dot-separated keys and indexes. A path without any of
 * them (and not starting with `!` or `..`) takes the plain walk in {@link lookupMetadataPath}.
 */
const SPECIAL = /[\\*?#|@[{]/;

/**
 * gjson's built-in modifiers (v1.18). `@name` (up to the first `.`, `|` or `:`) at the start of a
 * component is a modifier only when `name` is one of these; any other `@…` component is a key.
 */
const MODIFIERS: ReadonlySet<string> = new Set([
  'pretty',
  'ugly',
  'reverse',
  'this',
  'flatten',
  'join',
  'valid',
  'keys',
  'values',
  'tostr',
  'fromstr',
  'group',
  'dig',
]);

/** gjson's static literals (`!true`, …), compared lower-cased. */
const LITERAL_WORDS: ReadonlySet<string> = new Set(['true', 'false', 'null', 'nan', 'inf']);

/** Glob tokens: a code point, or one of these. */
const STAR = -1;
const ANY = -2;

/** A walk that found nothing (distinct from a found `null`, which stops a wildcard search). */
const MISSING: unique symbol = Symbol('missing');
type Found = unknown | typeof MISSING;

/** One `.`-separated component of a path. */
interface Component {
  /** The component as written, escapes kept. */
  raw: string;
  /** Index of `raw` in the path. */
  start: number;
  /** The component with escapes removed: the key it names. */
  key: string;
  /** Whether `raw` has a `\`: such a component is never an array index or `#` (as in gjson). */
  escaped: boolean;
  /** Glob tokens when the component has an unescaped `*` or `?`; null for an exact key. */
  glob: number[] | null;
}

/**
 * The value at a path inside task metadata as wildcard text (`${METADATA_<path>}`), with the gjson
 * path syntax FFmate resolves these wildcards with (FFmate uses gjson v1.18 on its JSON-encoded
 * metadata). Supported:
 *
 * - Components separated by `.`; `\` makes the next character literal (`fav\.movie` is the key
 *   `fav.movie`, `\*` a literal star, `\\` a backslash); a `\` ending the path is dropped.
 * - On an object: the component is a key, own keys only (`constructor`, `__proto__`, `toString`
 *   never reach `Object.prototype`). A digit-only component is a key too. A component with an
 *   unescaped `*` (any run of characters, also none) or `?` (exactly one character, i.e. code point)
 *   is a pattern: matching keys are tried in code point order, and the first one through which the
 *   rest of the path resolves (to anything, `null` too) wins, as gjson searches: `a*.1` on
 *   `{"a":[1],"aa":[2,3]}` is `3`. Code point order is the order FFmate's gjson sees, because FFmate
 *   encodes the metadata with Go's `json.Marshal`, which sorts keys; ffleet's `jsonb` column does
 *   not keep the order keys were sent in.
 * - On an array: a digit-only component is an index (leading zeros allowed: `list.01` is `list.1`);
 *   `#` as the last component is the array's length; `#.<rest>` is the JSON array of `<rest>`
 *   resolved on each element, leaving out elements where it is missing (a found `null` stays:
 *   `[{"a":null},{},{"a":2}]` with `#.a` gives `[null,2]`); `#.` chains nest (`a.#.b.#.c`).
 * - Anything else on an array (a key, a pattern, an escaped component) is missing.
 *
 * Output: a string as is, a number or boolean in its JSON form, an object or array as JSON text;
 * `null`, a missing path, a walk into a scalar and the empty path give `""`. (Through
 * `${METADATA_…}` a path cannot contain `{` or `}`: resolve.ts's wildcard pattern excludes both.)
 *
 * Resolved to `""` as a missing path, not implemented: a path with an unescaped `|` (pipes); a
 * component starting with `@` + a built-in modifier name (`@reverse`, `@this`, …; `@type` and other
 * names stay keys); a component starting with an unescaped `[` or `{` (multipaths; gjson falls back
 * to a key when the brackets do not balance, ffleet does not: write `\[` for such a key); a
 * component starting with `#(` or `#[` (queries); a JSON literal (`!true`, `!"x"`, `!1`, …) or a
 * `..` (JSON lines) at the start of the path or right after `#.`.
 *
 * Differences from FFmate kept on purpose: an escaped `*`/`?` is always literal (gjson reads it as a
 * wildcard when the same key also has an unescaped one); a string array element never yields a
 * value under `#.` (gjson can read brackets inside the string as JSON). Objects and arrays are
 * printed as `JSON.stringify` text of the stored value, where FFmate prints Go's `json.Marshal` text
 * (keys sorted, `<`, `>`, `&` escaped as `\u003c`…); numbers in that text are the same in both. A
 * number printed on its own differs only at |n| ≥ 1e21 or < 1e-6 (`1e+21` here, all digits there).
 */
export function lookupMetadataPath(metadata: unknown, path: string): string {
  if (path === '') return '';
  if (SPECIAL.test(path) || path.charCodeAt(0) === 0x21 /* ! */ || path.startsWith('..')) {
    const components = parsePath(path);
    if (components === null) return '';
    const found = walk(metadata, components, 0);
    return found === MISSING ? '' : formatMetadataValue(found);
  }
  let current: unknown = metadata;
  for (const segment of path.split('.')) {
    if (Array.isArray(current)) {
      if (!isIndex(segment)) return '';
      current = current[Number(segment)];
    } else if (typeof current === 'object' && current !== null) {
      // Own keys only: `constructor` or `__proto__` must not reach Object.prototype.
      if (!Object.hasOwn(current, segment)) return '';
      current = (current as Record<string, unknown>)[segment];
    } else {
      return '';
    }
    if (current === undefined) return '';
  }
  return formatMetadataValue(current);
}

function formatMetadataValue(value: unknown): string {
  if (value === null || value === undefined) return '';
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') {
    return String(value);
  }
  return JSON.stringify(value);
}

/** A non-empty run of ASCII digits (gjson's array index; leading zeros allowed). */
function isIndex(segment: string): boolean {
  if (segment.length === 0) return false;
  for (let i = 0; i < segment.length; i++) {
    const c = segment.charCodeAt(i);
    if (c < 0x30 || c > 0x39) return false;
  }
  return true;
}

/** Split a path into components, or null when it uses syntax that resolves to `""`. */
function parsePath(path: string): Component[] | null {
  const components: Component[] = [];
  let start = 0;
  let key = '';
  let escaped = false;
  let wild = false;
  let tokens: number[] = [];
  const close = (end: number): void => {
    components.push({ raw: path.slice(start, end), start, key, escaped, glob: wild ? tokens : null });
    start = end + 1;
    key = '';
    escaped = false;
    wild = false;
    tokens = [];
  };
  let i = 0;
  while (i < path.length) {
    const c = path.charCodeAt(i);
    if (c === 0x2e /* . */) {
      close(i);
      i += 1;
      continue;
    }
    if (c === 0x7c /* | */) return null;
    let at = i;
    if (c === 0x5c /* \ */) {
      escaped = true;
      at = i + 1;
      if (at === path.length) break; // a trailing `\` is dropped
    } else if (c === 0x2a /* * */ || c === 0x3f /* ? */) {
      wild = true;
      tokens.push(c === 0x2a ? STAR : ANY);
      key += path[i];
      i += 1;
      continue;
    }
    const cp = path.codePointAt(at) as number;
    const width = cp > 0xffff ? 2 : 1;
    tokens.push(cp);
    key += path.slice(at, at + width);
    i = at + width;
  }
  close(path.length);

  for (let n = 0; n < components.length; n++) {
    const raw = (components[n] as Component).raw;
    const first = raw.charCodeAt(0);
    if (first === 0x5b /* [ */ || first === 0x7b /* { */) return null;
    if (first === 0x23 /* # */ && (raw[1] === '(' || raw[1] === '[')) return null;
    if (first === 0x40 /* @ */ && MODIFIERS.has(modifierName(raw))) return null;
  }
  if (!isGetPathSupported(path, 0)) return null;
  for (let n = 0; n + 1 < components.length; n++) {
    if ((components[n] as Component).raw !== '#') continue;
    if (!isGetPathSupported(path, (components[n + 1] as Component).start)) return null;
  }
  return components;
}

/** The name after `@` up to the first `.`, `|` or `:` (gjson scans the raw text). */
function modifierName(raw: string): string {
  let end = 1;
  while (end < raw.length && raw[end] !== '.' && raw[end] !== '|' && raw[end] !== ':') end++;
  return raw.slice(1, end);
}

/**
 * Whether the path from `from` on, where gjson starts a new lookup (the whole path, or the rest
 * after `#.`), is neither a JSON literal (`!true`, `!"x"`, `!1`, `![…]`) nor JSON lines (`..`).
 */
function isGetPathSupported(path: string, from: number): boolean {
  if (path.startsWith('..', from)) return false;
  if (path[from] !== '!' || path.length - from < 2) return true;
  const next = path[from + 1] as string;
  if ('{["+-0123456789'.includes(next)) return false;
  let end = from + 1;
  while (end < path.length && path[end] !== '.' && path[end] !== '|') end++;
  return !LITERAL_WORDS.has(path.slice(from + 1, end).toLowerCase());
}

/** Resolve components `i…` on `value` (gjson's walk, on parsed JSON). */
function walk(value: unknown, components: readonly Component[], i: number): Found {
  let current = value;
  for (; i < components.length; i++) {
    const component = components[i] as Component;
    if (Array.isArray(current)) {
      if (component.raw === '#') {
        if (i === components.length - 1) return current.length;
        const values: unknown[] = [];
        for (const element of current) {
          const found = walk(element, components, i + 1);
          if (found !== MISSING) values.push(found);
        }
        return values;
      }
      if (component.escaped || !isIndex(component.raw)) return MISSING;
      current = current[Number(component.raw)];
    } else if (typeof current === 'object' && current !== null) {
      if (component.glob !== null) return walkPattern(current, component.glob, components, i);
      // Own keys only: `constructor` or `__proto__` must not reach Object.prototype.
      if (!Object.hasOwn(current, component.key)) return MISSING;
      current = (current as Record<string, unknown>)[component.key];
    } else {
      return MISSING;
    }
    if (current === undefined) return MISSING;
  }
  return current;
}

/** Keys matching the pattern component `i`, in code point order; the first that resolves wins. */
function walkPattern(object: object, glob: readonly number[], components: readonly Component[], i: number) {
  const keys = Object.keys(object).filter((key) => globMatch(key, glob));
  if (keys.length > 1) keys.sort(compareCodePoints);
  for (const key of keys) {
    const value = (object as Record<string, unknown>)[key];
    if (value === undefined) continue;
    const found = walk(value, components, i + 1);
    if (found !== MISSING) return found;
  }
  return MISSING;
}

/** Whether `text` matches glob tokens (`*` any run of code points, `?` one code point). */
function globMatch(text: string, glob: readonly number[]): boolean {
  let t = 0;
  let g = 0;
  let starAt = -1;
  let starText = 0;
  while (t < text.length) {
    const cp = text.codePointAt(t) as number;
    const token = g < glob.length ? (glob[g] as number) : undefined;
    if (token === STAR) {
      starAt = g;
      starText = t;
      g += 1;
    } else if (token !== undefined && (token === ANY || token === cp)) {
      t += cp > 0xffff ? 2 : 1;
      g += 1;
    } else if (starAt >= 0) {
      // Let the last `*` take one more code point and retry after it.
      const skipped = text.codePointAt(starText) as number;
      starText += skipped > 0xffff ? 2 : 1;
      t = starText;
      g = starAt + 1;
    } else {
      return false;
    }
  }
  while (g < glob.length && glob[g] === STAR) g += 1;
  return g === glob.length;
}

/** Order strings by code point (UTF-8 byte order, as Go sorts map keys), not by UTF-16 unit. */
function compareCodePoints(a: string, b: string): number {
  const length = Math.min(a.length, b.length);
  for (let i = 0; i < length; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x === y) continue;
    // Surrogates (D800–DFFF) encode code points above FFFF: move them above E000–FFFF.
    x = x >= 0xe000 ? x - 0x800 : x >= 0xd800 ? x + 0x2000 : x;
    y = y >= 0xe000 ? y - 0x800 : y >= 0xd800 ? y + 0x2000 : y;
    return x - y;
  }
  return a.length - b.length;
}
