import { LogLevel } from '@ffleet/shared';
import type { Context } from 'hono';
import { Hono } from 'hono';
import type { Logger } from 'pino';
import type { ApiEnv } from './app-env.ts';
import { parseJsonBody } from './http.ts';

/** A User-Agent is the client's own text: only its start goes into the log line. */
const MAX_USER_AGENT = 200;

export type LogLevelDeps = {
  /** The control plane's root logger: every component's logger is a child of it. */
  logger: Logger;
  remoteAddress: (c: Context) => string | undefined;
};

/**
 * The control plane's log level, changed at runtime (FFmate's `PATCH /api/v1/debug/{namespace}`).
 * The components' loggers are `child()`ren made without a level of their own, and a pino child made
 * so reads its level from its parent's (its prototype): setting the root's level changes all of them
 * at once, those made later too. It lasts until the next PUT or a restart (LOG_LEVEL is the start
 * value), and is this process's only (each replica has its own).
 */
export const logLevelApi = ({ logger, remoteAddress }: LogLevelDeps) =>
  new Hono<ApiEnv>()
    .get('/', (c) => c.json({ level: logger.level }))
    .put('/', async (c) => {
      const { data } = await parseJsonBody(c, LogLevel);
      const from = logger.level;
      // Who asked, never with what: the Authorization header (the token) is not logged.
      const changed = () =>
        logger.warn(
          {
            from,
            to: data.level,
            requestId: c.get('requestId'),
            remote: remoteAddress(c),
            userAgent: c.req.header('user-agent')?.slice(0, MAX_USER_AGENT),
          },
          'log level changed through the API',
        );
      // The line goes out under whichever of the two levels lets a warning through (before a change
      // to error or silent, after a change from one).
      if (logger.isLevelEnabled('warn')) {
        changed();
        logger.level = data.level;
      } else {
        logger.level = data.level;
        changed();
      }
      return c.json({ level: logger.level });
    });
