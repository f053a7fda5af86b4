import { type Placeholder, sql } from 'drizzle-orm';
import type { Db } from './client.ts';

/**
 * Statements whose SQL drizzle builds once per shape.
 *
 * drizzle builds the SQL text of a query from its chunks every time it runs: ~200 µs for a task
 * report's fenced `UPDATE … RETURNING` (measured, warm JIT), a tenth of what the control plane spends
 * per short task. The hot statements of the agent protocol (claims, reports, their log rows, the batch
 * check) have few shapes, so their text, parameter list and result fields are kept per `key` and only
 * the values change per call: the query is built with {@link ph} placeholders where values go, and
 * each call prepares it on its own transaction's session (cheap: no SQL is built) and executes it
 * with the values — through drizzle's own prepared-query path, so parameters are encoded and rows
 * mapped exactly as for a query built in place.
 *
 * The `key` must name everything the built statement depends on besides the placeholder values
 * (which columns are set, how many array elements, which constant lists): two calls with one key run
 * the same SQL.
 */

/** A drizzle query builder (its `prepare` gives the SQL, parameters and result fields). */
type Preparable = { prepare(name: string): unknown };

/** The parts of drizzle's prepared query that are the same for every call of one shape. */
type Template = {
  query: { sql: string; params: unknown[] };
  fields: unknown;
  joinsNotNullableMap: unknown;
};

type PreparedQuery = {
  joinsNotNullableMap: unknown;
  execute(values: Record<string, unknown>): Promise<unknown>;
};
type Session = {
  prepareQuery(
    query: { sql: string; params: unknown[] },
    fields: unknown,
    name: string | undefined,
    isResponseInArrayMode: boolean,
  ): PreparedQuery;
};

/** Shapes kept (bounded: a key built from data by mistake cannot grow it without limit). */
const MAX_TEMPLATES = 500;
const templates = new Map<string, Template>();
const TEMPLATE_NAME = 'ffleet_template';

/** A placeholder for a value given per call (`values[name]`). */
export const ph = (name: string): Placeholder => sql.placeholder(name);

/**
 * Run the statement of shape `key` in `tx` with `values` for its placeholders. `build` makes the query
 * (on `tx`) the first time this shape runs; its SQL is kept and reused by later calls.
 */
export function runCached<T>(
  tx: Db,
  key: string,
  build: () => Preparable,
  values: Record<string, unknown>,
): Promise<T> {
  let t = templates.get(key);
  if (t === undefined) {
    // The name is not used: only the SQL, parameters and fields are kept.
    const p = build().prepare(TEMPLATE_NAME) as Template;
    t = { query: p.query, fields: p.fields, joinsNotNullableMap: p.joinsNotNullableMap };
    if (templates.size < MAX_TEMPLATES) templates.set(key, t);
  }
  const session = (tx as unknown as { session: Session }).session;
  const q = session.prepareQuery(t.query, t.fields, undefined, true);
  q.joinsNotNullableMap = t.joinsNotNullableMap;
  return q.execute(values) as Promise<T>;
}

/**
 * `q` with its statement rewritten by `wrap` (e.g. into a data-modifying CTE of a larger statement) and
 * `extra` placeholders appended to its parameters: `wrap` gets the SQL text and the number the first
 * extra parameter takes (`$n`). The result fields stay `q`'s, so the wrapping statement must return
 * `q`'s columns in `q`'s order (`SELECT * FROM` the CTE).
 */
export function wrapped(
  q: Preparable,
  wrap: (text: string, next: number) => string,
  extra: Placeholder[],
): Preparable {
  return {
    prepare(name: string): Template {
      const p = q.prepare(name) as Template;
      return {
        query: { sql: wrap(p.query.sql, p.query.params.length + 1), params: [...p.query.params, ...extra] },
        fields: p.fields,
        joinsNotNullableMap: p.joinsNotNullableMap,
      };
    },
  };
}

/** How many shapes are kept (tests). */
export const cachedShapes = (): number => templates.size;
