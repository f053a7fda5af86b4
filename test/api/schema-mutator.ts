import type { z } from 'zod';

/**
 * Wrong-value generation for the hostile-input tests: walk a zod schema alongside a valid body, list
 * every field (present or optional-and-absent), and replace some with values of the wrong type or
 * out of range, drop required ones or add unknown keys. Only zod's public-but-internal `_zod.def` is
 * read, so every schema in @ffleet/shared is covered without a hand-written list of fields.
 */

// biome-ignore lint/suspicious/noExplicitAny: zod's internal definitions are untyped here on purpose.
type Def = { type: string; [k: string]: any };
const defOf = (s: unknown): Def => (s as { _zod: { def: Def } })._zod.def;

/** A seeded PRNG (mulberry32): the same seed replays the same bodies. */
export function createRandom(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n: number) => Math.floor(next() * n);
  const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)]!;
  return { next, int, pick };
}
export type Random = ReturnType<typeof createRandom>;

type Core = { def: Def; optional: boolean; nullable: boolean };

/** Strip optional/nullable/default wrappers, remembering what they allowed. */
function unwrap(schema: unknown): Core {
  let def = defOf(schema);
  let optional = false;
  let nullable = false;
  for (;;) {
    if (def.type === 'optional' || def.type === 'default') optional = true;
    else if (def.type === 'nullable') nullable = true;
    else if (def.type === 'pipe') {
      def = defOf(def.in);
      continue;
    } else return { def, optional, nullable };
    def = defOf(def.innerType);
  }
}

/** A field of the body: where it is, its core schema, and whether it is currently present. */
export type Field = { path: (string | number)[]; core: Core; present: boolean };

/** Every field reachable from `value` following `schema`, the root included. */
export function listFields(schema: unknown, value: unknown, path: (string | number)[] = []): Field[] {
  const core = unwrap(schema);
  const out: Field[] = [{ path, core, present: true }];
  if (core.def.type === 'object' && value && typeof value === 'object') {
    for (const [key, child] of Object.entries(core.def.shape as Record<string, unknown>)) {
      const v = (value as Record<string, unknown>)[key];
      if (v === undefined) out.push({ path: [...path, key], core: unwrap(child), present: false });
      else out.push(...listFields(child, v, [...path, key]));
    }
  } else if (core.def.type === 'array' && Array.isArray(value) && value.length > 0) {
    out.push(...listFields(core.def.element, value[0], [...path, 0]));
  }
  return out;
}

const checkOf = (def: Def, kind: string) =>
  (def.checks ?? []).map((c: unknown) => defOf(c) as Def).find((c: Def) => c.check === kind);

/** Values that the field's schema must reject (each is wrong in type, range, format or shape). */
export function wrongValues(core: Core, valid: unknown, rnd: Random): unknown[] {
  const { def } = core;
  const vals: unknown[] = [{ nested: true }, [1, 'two']];
  if (!core.nullable) vals.push(null);
  switch (def.type) {
    case 'string': {
      vals.push(42, true, -1.5);
      const max = checkOf(def, 'max_length')?.maximum;
      if (typeof max === 'number') vals.push('x'.repeat(max + 1 + rnd.int(3)));
      if ((checkOf(def, 'min_length')?.minimum ?? 0) >= 1) vals.push('');
      if (checkOf(def, 'string_format')) vals.push('bad value with spaces & $ymbols!');
      if (checkOf(def, 'custom')) vals.push('relative/not-a-url', 'ftp:/x');
      // Schema-valid text that PostgreSQL cannot store: the API must still answer 422.
      vals.push('nul\u0000byte', 'lone \ud800 surrogate');
      break;
    }
    case 'number': {
      vals.push('5', true, 1e308, -1e308);
      if (checkOf(def, 'number_format')) vals.push(1.5, 0.0001);
      const lo = checkOf(def, 'greater_than');
      const hi = checkOf(def, 'less_than');
      if (lo) vals.push(lo.value - 1 - rnd.int(1000));
      if (hi) vals.push(hi.value + 1 + rnd.int(1000));
      break;
    }
    case 'boolean':
      vals.push('true', 1, 0, 'false');
      break;
    case 'enum': {
      const entries = Object.values(def.entries as Record<string, string>);
      vals.push('not.an.event', 7, entries[0]!.toUpperCase(), ` ${entries[0]}`);
      break;
    }
    case 'array': {
      vals.push('a,b', 3, { 0: 'x' });
      const max = checkOf(def, 'max_length')?.maximum;
      if (typeof max === 'number' && Array.isArray(valid) && valid.length > 0) {
        vals.push(Array.from({ length: max + 1 }, () => valid[0]));
      }
      if ((checkOf(def, 'min_length')?.minimum ?? 0) >= 1) vals.push([]);
      break;
    }
    case 'object':
      vals.push('{}', 12, [{ a: 1 }]);
      break;
    case 'record': {
      let deep: unknown = 1;
      for (let i = 0; i < 70; i++) deep = [deep];
      vals.push('{}', 12, [{ a: 1 }], { deep }, { 'k\u0000': 1 }, { k: ['\udfff'] });
      break;
    }
    default:
      return [];
  }
  return vals;
}

const clone = <T>(v: T): T => JSON.parse(JSON.stringify(v)) as T;

function setAt(root: unknown, path: (string | number)[], value: unknown, remove = false): void {
  let node = root as Record<string | number, unknown>;
  for (const key of path.slice(0, -1)) node = node[key] as Record<string | number, unknown>;
  const last = path[path.length - 1]!;
  if (remove) delete node[last];
  else node[last] = value;
}
const getAt = (root: unknown, path: (string | number)[]) =>
  path.reduce<unknown>((n, k) => (n as Record<string | number, unknown>)?.[k], root);

export type Mutant = { body: unknown; mutated: string[] };

/**
 * One to three mutations of `valid`: a wrong value at a field, a required field dropped, or an
 * unknown key added to an object. Returns null when the result happens to still be valid (the
 * caller draws again), so every mutant is one the schema rejects. `accepted` is what the endpoint
 * makes of a body before its schema reads it (a create's `null` on an optional field is the field
 * left out: null-as-absent.ts).
 */
export function mutate(
  schema: z.ZodType,
  valid: unknown,
  rnd: Random,
  accepted: (body: unknown) => unknown = (body) => body,
): Mutant | null {
  const body = clone(valid);
  const mutated: string[] = [];
  const n = 1 + rnd.int(3);
  for (let i = 0; i < n; i++) {
    const fields = listFields(schema, body).filter((f) => f.path.length > 0);
    const f = rnd.pick(fields);
    const parentPath = f.path.slice(0, -1);
    const parent = getAt(body, parentPath);
    if (!parent || typeof parent !== 'object') continue;
    const roll = rnd.next();
    if (roll < 0.12 && !f.core.optional && f.present && !Array.isArray(parent)) {
      setAt(body, f.path, undefined, true);
      mutated.push(f.path.join('.'));
    } else if (roll < 0.24 && !Array.isArray(parent)) {
      const key = rnd.pick(['zz_unknown', 'extra', 'Command', 'input_file', 'status', 'progress']);
      setAt(body, [...parentPath, key], rnd.pick([1, 'x', null, {}, []]));
      mutated.push([...parentPath, key].join('.'));
    } else {
      const wrong = wrongValues(f.core, getAt(body, f.path), rnd);
      if (wrong.length === 0) continue;
      setAt(body, f.path, clone(rnd.pick(wrong)));
      mutated.push(f.path.join('.'));
    }
  }
  if (mutated.length === 0 || (schema.safeParse(accepted(body)).success && isStorable(body))) return null;
  return { body, mutated };
}

const BAD_TEXT = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Could PostgreSQL store this JSON as is (no NUL, no lone surrogate, at most 64 levels deep)? */
export function isStorable(v: unknown, depth = 1): boolean {
  if (typeof v === 'string') return !BAD_TEXT.test(v);
  if (v === null || typeof v !== 'object') return true;
  if (depth > 64) return false;
  return Object.entries(v).every(([k, x]) => !BAD_TEXT.test(k) && isStorable(x, depth + 1));
}

/** Does a reported error path point at (or inside, or above) one of the mutated fields? */
export const namesMutation = (errorPath: string, mutated: string[]): boolean =>
  mutated.some((m) => errorPath === m || errorPath.startsWith(`${m}.`) || m.startsWith(`${errorPath}.`));
