/**
 * One control plane per PostgreSQL database. Two of them on one database do not share the work, they
 * disturb each other: the second one's start marks every agent offline; with an embedded broker each
 * hears only its own agents, so a cancel sent through the other one never reaches the box; on one
 * external broker both handle every agent message (two claims answered for one request, one agent's
 * reports applied twice) and, on the generated Mosquitto configuration, they log in under one client id
 * and knock each other off. So a control plane holds a session-level advisory lock on its database for
 * as long as it runs, and a second one is refused at start with a message naming the holder. (The
 * embedded database has its data dir's lock file for the same purpose.)
 */
import { LockedError } from '@ffleet/shared';
import type { Logger } from 'pino';
import postgres from 'postgres';

/** The advisory lock's key: 'fflt' as a 32-bit number, so that pg_locks shows it as classid 0, objid KEY. */
export const CONTROL_PLANE_LOCK_KEY = 0x66666c74;
/** How often the lock's connection is checked (a server restart ends the session, and the lock with it). */
const CHECK_MS = 10_000;

type Holder = { pid: number; addr: string | null; since: Date | null; app: string | null };

/**
 * Take the lock on the database at `url`, or reject with a LockedError naming the control plane that
 * holds it. Resolves to the release function (it ends the lock's session).
 */
export async function claimControlPlaneLock(
  url: string,
  logger: Logger,
  opts: { checkMs?: number } = {},
): Promise<() => Promise<void>> {
  const sql = postgres(url, {
    max: 1,
    idle_timeout: 0,
    max_lifetime: null,
    onnotice: () => {},
    connection: { application_name: 'ffleet control plane' },
  });
  const holds = async () =>
    (
      await sql<{ n: number }[]>`
        SELECT count(*)::int AS n FROM pg_locks
        WHERE locktype = 'advisory' AND classid = 0 AND objid = ${CONTROL_PLANE_LOCK_KEY} AND objsubid = 1
          AND pid = pg_backend_pid() AND granted`
    )[0]!.n > 0;
  const take = async () =>
    (await sql<{ ok: boolean }[]>`SELECT pg_try_advisory_lock(${CONTROL_PLANE_LOCK_KEY}::bigint) AS ok`)[0]!
      .ok;
  try {
    if (!(await take())) {
      const holder = await holderOf(sql);
      throw new LockedError(
        `another ffleet control plane uses this database${describe(holder)}: ffleet runs one control plane ` +
          'per database (one per deployment); stop that one first, or give this one its own database',
      );
    }
  } catch (err) {
    await sql.end({ timeout: 2 }).catch(() => {});
    throw err;
  }
  // The session can end under us (a server restart, a cut connection), and the lock with it: take it again
  // on the next connection; if another control plane took it meanwhile, say so loudly (it cannot be
  // settled from here: the operator has started two).
  let lostLogged = false;
  const timer = setInterval(() => {
    void (async () => {
      if ((await holds()) || (await take())) {
        lostLogged = false;
        return;
      }
      if (lostLogged) return;
      lostLogged = true;
      logger.error(
        { holder: describe(await holderOf(sql)) },
        'another ffleet control plane took this database while this one had lost its connection: two control planes on one database disturb each other; stop one of them',
      );
    })().catch(() => {
      // The database is unreachable now: checked again at the next tick.
    });
  }, opts.checkMs ?? CHECK_MS);
  timer.unref();
  return async () => {
    clearInterval(timer);
    // Ending the session releases the lock.
    await sql.end({ timeout: 2 }).catch(() => {});
  };
}

async function holderOf(sql: postgres.Sql): Promise<Holder | null> {
  const [h] = await sql<Holder[]>`
    SELECT a.pid, host(a.client_addr) AS addr, a.backend_start AS since, a.application_name AS app
    FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.classid = 0 AND l.objid = ${CONTROL_PLANE_LOCK_KEY} AND l.objsubid = 1
      AND l.granted AND l.pid <> pg_backend_pid()`;
  return h ?? null;
}

function describe(h: Holder | null): string {
  if (!h) return '';
  const from = h.addr ? ` from ${h.addr}` : ' over a local socket';
  const since = h.since ? `, connected since ${new Date(h.since).toISOString()}` : '';
  return ` (its session is PostgreSQL backend ${h.pid}${from}${since})`;
}
