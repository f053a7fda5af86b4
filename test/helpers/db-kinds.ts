import { type DbKind, postgresAvailable } from './db.ts';

/**
 * The backends of a dual-backend database test: both when the PostgreSQL server is reachable, else
 * PGlite alone (style: dual-backend database tests). Its own module: the probe is a top-level await.
 */
export const dbKinds: DbKind[] = (await postgresAvailable()) ? ['pglite', 'postgres'] : ['pglite'];
