/** PostgreSQL unique_violation (23505), whichever driver (postgres.js or PGlite, maybe wrapped by drizzle). */
export function isUniqueViolation(err: unknown): boolean {
  const e = err as { code?: string; cause?: { code?: string } };
  return e?.code === '23505' || e?.cause?.code === '23505';
}

/** Node's errors for a database server that cannot be reached (postgres.js passes them through). */
const UNREACHABLE_ERRNOS = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);
/** postgres.js' own codes for a connection it lost or could not make. */
const CONNECTION_CODES = new Set([
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'CONNECT_TIMEOUT',
]);
/** Names for the SQLSTATEs of a server that is there but cannot take work now. */
const SQLSTATE_REASONS: Record<string, string> = {
  '53100': 'disk full',
  '53200': 'out of memory',
  '53300': 'too many connections',
  '57P01': 'shutting down',
  '57P02': 'crashed',
  '57P03': 'starting or shutting down',
};

/**
 * Why the database could not serve a statement, when the fault is the database's and not the
 * request's: it cannot be reached, it refused or dropped the connection (every FATAL error ends a
 * connection), it is out of disk, memory or connections (SQLSTATE class 53), or it is shutting down
 * (57P0x); the embedded database closed under a request during shutdown counts too. Walks the
 * `cause` chain (drizzle wraps driver errors). Undefined for anything else, which stays a 500.
 * The reason names codes only, never a host, a file path or the URL.
 */
export function databaseUnavailableReason(err: unknown): string | undefined {
  for (let e = err as ErrorLike | undefined, depth = 0; e && depth < 5; e = e.cause as ErrorLike, depth++) {
    const code = typeof e.code === 'string' ? e.code : undefined;
    if (code && /^[0-9A-Z]{5}$/.test(code) && typeof e.severity === 'string') {
      const reason = SQLSTATE_REASONS[code] ?? (code.startsWith('53') ? 'insufficient resources' : undefined);
      if (reason) return `${reason}, SQLSTATE ${code}`;
      if (code.startsWith('08')) return `connection failure, SQLSTATE ${code}`;
      if (e.severity === 'FATAL' || e.severity === 'PANIC')
        return `connection refused by the server, SQLSTATE ${code}`;
      return undefined;
    }
    if (code === 'CONNECTION_WAIT_TIMEOUT') return `no connection to it in time, ${code}`;
    if (code && (UNREACHABLE_ERRNOS.has(code) || CONNECTION_CODES.has(code)))
      return `cannot reach it, ${code}`;
    if (e.message === 'PGlite is closed') return 'the embedded database is closed';
  }
  return undefined;
}
interface ErrorLike {
  code?: unknown;
  severity?: unknown;
  message?: unknown;
  cause?: unknown;
}

/** The message of the innermost `cause` (the driver's own words under drizzle's "Failed query: …"). */
export function innermostMessage(err: unknown): string {
  let e = err as ErrorLike | undefined;
  for (let depth = 0; e?.cause && depth < 5; depth++) e = e.cause as ErrorLike;
  return String(e?.message ?? e);
}
