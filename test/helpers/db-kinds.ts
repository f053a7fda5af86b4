import { type DbKind, postgresAvailable } from './db.ts';

/**
 * The backends of a dual-backend database test: both when the PostgreSQL server is reachable, else
 * PGlite alone (style: dual-backend database tests). In CI's services pass PostgreSQL alone: the PGlite
 * half does not depend on the pass's environment and already ran, the same, in the embedded pass. Its
 * own module: the probe is a top-level await.
 */
export const dbKinds: DbKind[] = !(await postgresAvailable())
  ? ['pglite']
  : process.env.FFLEET_CI_PASS === 'services'
    ? ['postgres']
    : ['pglite', 'postgres'];
