import { type SQL, type SQLWrapper, sql } from 'drizzle-orm';

/**
 * A PostgreSQL array literal (`{"a","b\\"c"}`) of text values, bound as ONE text parameter and cast
 * in the statement (`$1::text[]`, `$1::uuid[]`): the same on postgres-js and PGlite, which type JS
 * arrays differently, and one statement text whatever the number of values. Every element is quoted,
 * so commas, braces, spaces, quotes, backslashes and the word NULL stay text.
 */
export const textArrayLiteral = (values: readonly string[]): string =>
  `{${values.map((v) => `"${v.replace(/[\\"]/g, (c) => `\\${c}`)}"`).join(',')}}`;

/**
 * `column = ANY($n::type[])`, the values bound as one array literal: one statement text for any number
 * of values. drizzle's `inArray` binds a parameter per value, so every list length is a statement of
 * its own, prepared again on every pooled PostgreSQL connection and kept for the connection's life.
 */
export function anyOf(column: SQLWrapper, values: readonly string[], type: 'uuid' | 'text'): SQL {
  return sql`${column} = ANY(${textArrayLiteral(values)}::${sql.raw(type)}[])`;
}

/**
 * `unnest($1::t1[], $2::t2[], …) AS alias(c1, c2, …)`: rows given column by column, each column one
 * array-literal parameter, so the text is the same for any number of rows (a VALUES list is not).
 */
export function unnestRows(
  alias: string,
  columns: readonly (readonly [name: string, type: string, values: readonly (string | number)[]])[],
): SQL {
  const arrays = sql.join(
    columns.map(([, type, values]) => sql`${textArrayLiteral(values.map(String))}::${sql.raw(type)}[]`),
    sql`, `,
  );
  return sql`unnest(${arrays}) AS ${sql.raw(alias)}(${sql.raw(columns.map(([name]) => name).join(', '))})`;
}
