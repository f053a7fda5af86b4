import type { PageQuery } from '@ffleet/shared';

/** An ordered select that still takes its page: a drizzle query before `.limit()`. */
type OrderedSelect<T> = { limit(n: number): { offset(n: number): PromiseLike<T[]> } };

/**
 * One page of `rows` and the total behind it (the `X-Total` of a list route), the two queries in
 * parallel. `total` is a `select({ n: count() })` query over the same rows, or a number counted some
 * other way (tasks read theirs from task_counts).
 */
export async function paginate<T>(
  rows: OrderedSelect<T>,
  total: PromiseLike<{ n: number }[] | number>,
  page: PageQuery,
): Promise<{ rows: T[]; total: number }> {
  const [items, counted] = await Promise.all([
    rows.limit(page.perPage).offset(page.page * page.perPage),
    total,
  ]);
  return { rows: items, total: typeof counted === 'number' ? counted : Number(counted[0]?.n ?? 0) };
}
