import { randomUUID } from 'node:crypto';
import { getConnInfo } from '@hono/node-server/conninfo';
import { type Context, Hono } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { matchedRoutes } from 'hono/route';
import { equalSecrets } from '../broker/broker-acl.ts';
import { databaseUnavailableReason, innermostMessage } from '../db/errors.ts';
import type { EventBus } from '../events/event-bus.ts';
import { EventHistory } from '../events/event-history.ts';
import type { ServiceContext } from '../services/context.ts';
import { apiReference } from '../ui/api-reference.ts';
import { dashboard } from '../ui/dashboard.ts';
import { type AgentTokenIssuer, agentsApi } from './agents.ts';
import type { ApiEnv } from './app-env.ts';
import { batchesApi } from './batches.ts';
import { type CorsPolicy, cors } from './cors.ts';
import { DATABASE_RETRY_AFTER_S, HttpError, problemBody, UnauthorizedError } from './errors.ts';
import { eventStream } from './events-stream.ts';
import { checkQueryText } from './http.ts';
import type { Metrics } from './metrics.ts';
import { buildOpenApi } from './openapi.ts';
import { presetsApi } from './presets.ts';
import { isPublicPath } from './public-paths.ts';
import { logLevelApi } from './system-log-level.ts';
import { tasksApi } from './tasks.ts';
import { watchfoldersApi } from './watchfolders.ts';
import { type Redeliver, webhooksApi } from './webhooks.ts';

export type AppDeps = {
  ctx: ServiceContext;
  bus: EventBus;
  metrics: Metrics;
  version: string;
  apiTokens: string[];
  /** Cross-origin access (FFLEET_CORS_ORIGINS); undefined: none. */
  cors?: CorsPolicy;
  bodyLimit: number;
  redeliver: Redeliver;
  /** Agents' own tokens (POST /api/v1/agents/{id}/token); without it the broker is taken as external. */
  agentTokens?: Omit<AgentTokenIssuer, 'authenticated'>;
  /** Extra health facts (broker, agents) from the running parts. */
  health?: () => Promise<Record<string, unknown>>;
  /** Client address; defaults to the node socket's remote address. */
  remoteAddress?: (c: Context) => string | undefined;
};

const isLoopback = (a: string | undefined) =>
  !!a && (a === '::1' || a.startsWith('127.') || a.startsWith('::ffff:127.'));

/**
 * A Host header that names this machine's loopback: `localhost` (and `*.localhost`), `127.x.x.x`, `[::1]`,
 * with any port; none at all (HTTP/1.0) too. Without API tokens only such requests are served: a web
 * page can rebind its own domain name to 127.0.0.1 (DNS rebinding), and the browser then sends the API
 * a loopback connection whose Host is that domain — that page must not get to create tasks that run
 * scripts on this machine.
 */
export function isLoopbackHost(host: string | undefined): boolean {
  if (host === undefined) return true;
  const name = host.trim().toLowerCase().replace(/:\d*$/, '').replace(/\.$/, '');
  if (name === '[::1]' || name === 'localhost' || name.endsWith('.localhost')) return true;
  return /^127(\.(25[0-5]|2[0-4]\d|1?\d?\d)){3}$/.test(name);
}

function defaultRemote(c: Context): string | undefined {
  try {
    return getConnInfo(c).remote.address;
  } catch {
    return undefined;
  }
}

function tokenMatches(given: string, tokens: readonly string[]): boolean {
  let ok = false;
  // Every token compared, each through its hash (equalSecrets): no early exit on a match, and neither
  // a token's length nor its first differing byte shows in the time taken.
  for (const t of tokens) if (equalSecrets(given, t)) ok = true;
  return ok;
}

function problem(c: Context, err: HttpError, headers: Record<string, string> = {}) {
  const body = problemBody(err.status, err.title, err.code, err.message, err.errors);
  return c.body(JSON.stringify(body), err.status as 400, {
    'Content-Type': 'application/problem+json',
    ...headers,
  });
}

/** Build the HTTP app. Never binds a port. */

export function createApp(deps: AppDeps) {
  const app = new Hono<ApiEnv>();
  const tokens = deps.apiTokens;
  const remote = deps.remoteAddress ?? defaultRemote;
  const openapi = JSON.stringify(buildOpenApi(deps.version));
  const logger = deps.ctx.logger;
  const eventHistory = new EventHistory(deps.bus); // records once the first SSE client connects

  app.use('*', async (c, next) => {
    const requestId = c.req.header('x-request-id')?.slice(0, 100) || randomUUID();
    c.set('requestId', requestId);
    c.set('ctx', deps.ctx);
    c.header('X-Request-Id', requestId);
    c.header('X-Server', `ffleet/${deps.version}`);
    // No response is to be read as another type than it says (task logs are text/plain of any content).
    c.header('X-Content-Type-Options', 'nosniff');
    const start = performance.now();
    await next();
    // The label is the template of the handler that serves the path (e.g. /api/v1/tasks/:id), also
    // when a middleware answered first (401, 413), so ids never become label values. Middleware is
    // registered for ALL methods; the first method-specific match is the route's handler.
    const route = matchedRoutes(c).find((r) => r.method !== 'ALL')?.path ?? 'unmatched';
    deps.metrics.httpDuration.observe(
      { method: c.req.method, route, status: String(c.res.status) },
      (performance.now() - start) / 1000,
    );
  });

  // Before the token check: a browser's preflight never carries the token.
  app.use('*', cors(deps.cors, { guardUnsafe: tokens.length === 0 }));

  app.use('*', async (c, next) => {
    if (isPublicPath(c.req.path)) return next();
    if (tokens.length === 0) {
      if (!isLoopback(remote(c))) {
        throw new UnauthorizedError('no API tokens are configured, so only loopback clients are served');
      }
      if (!isLoopbackHost(c.req.header('host'))) {
        throw new UnauthorizedError(
          'no API tokens are configured, so only requests addressed to localhost, 127.0.0.1 or [::1] are served ' +
            '(set FFLEET_API_TOKENS to serve other host names)',
        );
      }
      return next();
    }
    const header = c.req.header('authorization') ?? '';
    const m = /^Bearer\s+(.+)$/i.exec(header);
    if (!m || !tokenMatches(m[1]!.trim(), tokens)) {
      c.header('WWW-Authenticate', 'Bearer realm="ffleet"');
      throw new UnauthorizedError(m ? 'invalid API token' : 'missing Authorization: Bearer <token>');
    }
    return next();
  });

  const tooLarge = () => {
    throw new HttpError(
      413,
      'PAYLOAD_TOO_LARGE',
      'Content Too Large',
      `the body exceeds ${deps.bodyLimit} bytes`,
    );
  };
  const limitBody = bodyLimit({ maxSize: deps.bodyLimit, onError: tooLarge });
  app.use('/api/*', async (c, next) => {
    // hono's bodyLimit decided by the headers alone in these cases, but it reads `c.req.raw.body`
    // first, which makes @hono/node-server build a full web Request and stream (a third of a small
    // POST's CPU) instead of reading the body directly. Same decisions, without touching the body:
    const method = c.req.method;
    if (method === 'GET' || method === 'HEAD') return next(); // a fetch Request never has a body here
    const length = c.req.header('content-length');
    if (length !== undefined && c.req.header('transfer-encoding') === undefined) {
      return Number.parseInt(length || '0', 10) > deps.bodyLimit ? tooLarge() : next();
    }
    // hono's bodyLimit reads a body without Content-Length before the route runs: a failure while it
    // reads is the client's (it went away), not the database's, whose lost connections are ECONNRESET too.
    let routeRuns = false;
    try {
      return await limitBody(c, () => {
        routeRuns = true;
        return next();
      });
    } catch (err) {
      if (routeRuns || err instanceof HttpError) throw err;
      throw new HttpError(400, 'REQUEST_ABORTED', 'Bad Request', 'the request body was cut off');
    }
  });

  app.use('/api/*', async (c, next) => {
    checkQueryText(c);
    return next();
  });

  app.get('/health', async (c) => {
    // Side by side: while PostgreSQL cannot be reached each waits up to WAIT_FOR_CONNECTION_S for a
    // connection, and a monitor should get its 503 within that, not twice that.
    const [db, extra] = await Promise.all([
      deps.ctx.database.ping(),
      deps.health ? deps.health().catch(() => ({})) : {},
    ]);
    // An embedded database out of disk still answers the ping while it refuses the writes the API sends
    // it: a load balancer or monitor must see that node as failing, not send it more writes.
    const dbError = db ? deps.ctx.database.writeFailure() : undefined;
    // What is wrong with the install although it serves (an unpatched driver): shown, not failed on.
    const warnings = deps.ctx.database.warnings.length ? { warnings: deps.ctx.database.warnings } : {};
    if (!db) return c.json({ status: 'error', db: 'unreachable', ...extra, ...warnings }, 503);
    if (dbError) return c.json({ status: 'error', db: 'failing', dbError, ...extra, ...warnings }, 503);
    return c.json({ status: 'ok', db: 'ok', ...extra, ...warnings }, 200);
  });
  app.get('/metrics', async (c) =>
    c.body(await deps.metrics.registry.metrics(), 200, { 'Content-Type': deps.metrics.registry.contentType }),
  );
  app.get('/api/v1/version', (c) => c.json({ version: deps.version }));
  app.route('/api/v1/system/log-level', logLevelApi({ logger, remoteAddress: remote }));
  app.get('/api/v1/openapi.json', (c) => c.body(openapi, 200, { 'Content-Type': 'application/json' }));
  app.route('/api/v1/docs', apiReference);
  app.get('/api/v1/events', (c) => eventStream(c, eventHistory, logger));
  app.route('/api/v1/tasks', tasksApi);
  app.route('/api/v1/batches', batchesApi);
  app.route('/api/v1/presets', presetsApi);
  app.route('/api/v1/watchfolders', watchfoldersApi);
  app.route('/api/v1/webhooks', webhooksApi(deps.redeliver));
  app.route(
    '/api/v1/agents',
    agentsApi({
      authenticated: deps.apiTokens.length > 0,
      fleetTokenAccepted: deps.agentTokens?.fleetTokenAccepted ?? true,
      ...(deps.agentTokens?.rotate ? { rotate: deps.agentTokens.rotate } : {}),
    }),
  );
  app.route('/ui', dashboard);
  app.get('/ui/', (c) => c.redirect('/ui', 302));
  app.get('/', (c) => c.redirect('/ui', 302)); // as FFmate, whose web UI is at /ui too

  app.notFound((c) =>
    problem(c, new HttpError(404, 'ROUTE_NOT_FOUND', 'Not Found', `no route ${c.req.method} ${c.req.path}`)),
  );
  app.onError((err, c) => {
    if (err instanceof HttpError) return problem(c, err);
    // The database's fault, not the request's: a 503 the client may retry, and a short log line
    // instead of the failed statement with its parameters.
    const unavailable = databaseUnavailableReason(err);
    if (unavailable) {
      logger.warn(
        {
          requestId: c.get('requestId'),
          path: c.req.path,
          reason: unavailable,
          cause: innermostMessage(err),
        },
        'request failed: the database is unavailable',
      );
      return problem(
        c,
        new HttpError(
          503,
          'DATABASE_UNAVAILABLE',
          'Service Unavailable',
          `the database is unavailable (${unavailable}); retry the request later`,
        ),
        { 'Retry-After': String(DATABASE_RETRY_AFTER_S) },
      );
    }
    logger.error({ err, requestId: c.get('requestId'), path: c.req.path }, 'unhandled error');
    return problem(
      c,
      new HttpError(
        500,
        'INTERNAL',
        'Internal Server Error',
        `internal error (request ${c.get('requestId')})`,
      ),
    );
  });
  return app;
}
export type App = ReturnType<typeof createApp>;
