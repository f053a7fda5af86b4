import { z } from 'zod';

/** pino's levels: the values LOG_LEVEL takes. */
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

/** Body of `PUT /api/v1/system/log-level`, and the answer of both its routes. */
export const LogLevel = z.strictObject({ level: z.enum(LOG_LEVELS) });
export type LogLevel = z.infer<typeof LogLevel>;
