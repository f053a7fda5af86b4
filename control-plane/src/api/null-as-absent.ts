import type { z } from 'zod';

/** The parts of a zod 4 schema definition this walk reads. */
type Def = {
  type: string;
  innerType?: z.ZodType;
  in?: z.ZodType;
  shape?: Record<string, z.ZodType>;
  element?: z.ZodType;
};

/** Definitions that wrap one schema without changing the shape of the value it takes. */
const WRAPPERS = new Set(['optional', 'nullable', 'default', 'prefault', 'readonly', 'nonoptional', 'catch']);

/** The object or array schema under its wrappers (`optional`, `nullable`, a pipe's input, …). */
function core(schema: z.ZodType): Def {
  let def = schema._zod.def as Def;
  for (let depth = 0; depth < 16; depth++) {
    const next = WRAPPERS.has(def.type) ? def.innerType : def.type === 'pipe' ? def.in : undefined;
    if (!next) break;
    def = next._zod.def as Def;
  }
  return def;
}

const isPlainObject = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * `value` with every `null` left out where its schema takes the field's absence but not `null` (an
 * optional field that is not nullable), in nested objects and in arrays of objects too. FFmate's clients
 * send `null` for "not set" (Go decodes it as the zero value, and FFmate's own answers carry `"filter":
 * null`, `"include": null`), so a create or a replace reads it as leaving the field out. A field whose
 * schema takes `null` keeps it (it means something there: a watchfolder's `agent: null`), so does a
 * required field (the schema then says what it must be), and free-form objects (`metadata`) are kept as
 * sent. The value is copied where it changes, never modified.
 */
export function withoutNullOptionals(schema: z.ZodType, value: unknown): unknown {
  const def = core(schema);
  if (def.type === 'array' && def.element && Array.isArray(value)) {
    const element = def.element;
    let changed = false;
    const out = value.map((item) => {
      const next = withoutNullOptionals(element, item);
      if (next !== item) changed = true;
      return next;
    });
    return changed ? out : value;
  }
  if (def.type !== 'object' || !def.shape || !isPlainObject(value)) return value;
  let out: Record<string, unknown> | null = null;
  for (const [key, field] of Object.entries(value)) {
    const fieldSchema = Object.hasOwn(def.shape, key) ? def.shape[key] : undefined;
    if (!fieldSchema) continue; // an unknown field is refused by the schema itself
    if (field === null) {
      if (!fieldSchema.safeParse(null).success && fieldSchema.safeParse(undefined).success) {
        out ??= { ...value };
        delete out[key];
      }
      continue;
    }
    const next = withoutNullOptionals(fieldSchema, field);
    if (next !== field) {
      out ??= { ...value };
      out[key] = next;
    }
  }
  return out ?? value;
}
