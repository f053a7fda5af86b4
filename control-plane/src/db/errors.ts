/** PostgreSQL unique_violation (23505), whichever driver (postgres.js or PGlite, maybe wrapped by drizzle). */
export function isUniqueViolation(err: unknown): boolean {
  const e = err as { code?: string; cause?: { code?: string } };
  return e?.code === '23505' || e?.cause?.code === '23505';
}
