import type { ServiceContext } from '../services/context.ts';

/** Hono variables every route can read. */
export type ApiEnv = { Variables: { ctx: ServiceContext; requestId: string } };
