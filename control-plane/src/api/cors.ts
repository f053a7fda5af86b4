import type { MiddlewareHandler } from 'hono';
import type { ApiEnv } from './app-env.ts';
import { HttpError } from './errors.ts';

/**
 * Cross-origin access for browser clients served from another origin (a studio's asset manager, a
 * custom dashboard): `FFLEET_CORS_ORIGINS`, a comma-separated list of origins, or `*`.
 *
 * Unset (the default), no response carries CORS headers, so a page of another origin can neither read
 * the API's answers nor send it anything but a "simple" request: JSON bodies need `Content-Type:
 * application/json` (415 otherwise), and without API tokens a change asked by another origin's page
 * is refused outright (`guardUnsafe`: cancel and restart have no body). That default matters most
 * without API tokens: any web page opened on the control plane's machine could otherwise create
 * tasks, which run scripts. For that reason `*` needs FFLEET_API_TOKENS (config.ts).
 *
 * Listed origins get `Access-Control-Allow-Origin` on every response (errors too, so a client can read
 * the problem+json body), the response headers a client needs exposed (`X-Total`, `Location`, …), and
 * preflights answered 204 without a token (a browser never sends one on a preflight; the request
 * itself still needs it). No credentials mode: the API takes bearer tokens, never cookies. A preflight
 * from an origin not listed gets 403 with a problem body naming the variable, instead of the 401/404
 * it would otherwise get.
 */
export type CorsPolicy = { any: true } | { any: false; origins: ReadonlySet<string> };

/** Parse FFLEET_CORS_ORIGINS; returns an error message for the first invalid entry. */
export function parseCorsOrigins(
  value: string | undefined,
): { ok: true; policy: CorsPolicy | undefined } | { ok: false; error: string } {
  const entries = (value ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  if (entries.length === 0) return { ok: true, policy: undefined };
  if (entries.includes('*')) {
    return entries.length === 1
      ? { ok: true, policy: { any: true } }
      : { ok: false, error: '`*` allows every origin: give it alone, not in a list' };
  }
  const origins = new Set<string>();
  for (const entry of entries) {
    if (entry.includes('*')) {
      return {
        ok: false,
        error: `${JSON.stringify(entry)}: no wildcards in an origin (list each one, or \`*\` alone)`,
      };
    }
    const origin = originOf(entry);
    if (origin === undefined) {
      return {
        ok: false,
        error: `${JSON.stringify(entry)} is not an origin (scheme://host[:port], e.g. https://mam.example.com, no path)`,
      };
    }
    origins.add(origin);
  }
  return { ok: true, policy: { any: false, origins } };
}

/** The origin as a browser serialises it (lower case, no default port), or undefined if `s` is not one. */
function originOf(s: string): string | undefined {
  let url: URL;
  try {
    url = new URL(s);
  } catch {
    return undefined;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return undefined;
  if (url.username || url.password || url.search || url.hash) return undefined;
  // `new URL` adds the path `/`; an entry must not have one of its own (`https://a.example/x`, or a
  // trailing slash, which a browser's Origin header never has and would then never match).
  if (!/^[a-z][a-z0-9+.-]*:\/\/[^/?#]+$/i.test(s)) return undefined;
  return url.origin;
}

/** The API's response headers a cross-origin client may read (beyond the CORS-safelisted ones). */
const EXPOSED = [
  'Location',
  'X-Total',
  'X-Request-Id',
  'X-Server',
  'Retry-After',
  'Idempotent-Replayed',
  'WWW-Authenticate',
].join(', ');
const METHODS = 'GET, HEAD, POST, PUT, PATCH, DELETE';
const PREFLIGHT_MAX_AGE_S = 600;

const UNSAFE_METHODS: ReadonlySet<string> = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/**
 * Whether `origin` names the host the request was sent to (a page of this control plane: /ui): the
 * same host name, and the same port where `Host` gives one (`localhost:80` is `http://localhost`).
 */
export function sameHost(origin: string, host: string | undefined): boolean {
  if (host === undefined) return false;
  let o: URL;
  let h: URL;
  try {
    o = new URL(origin);
    h = new URL(`http://${host.trim()}`);
  } catch {
    return false; // `null` (a sandboxed frame, a file: page, after a cross-origin redirect) or garbage
  }
  if (o.protocol !== 'http:' && o.protocol !== 'https:') return false;
  if (o.hostname !== h.hostname) return false;
  // URL drops a scheme's default port: '' is 80 for `h` (read as http) and the scheme's default for `o`.
  return h.port === '' ? o.port === '' : o.port === h.port;
}

/** The 403 for a change asked by a page of `from` (an origin, or "another site"). */
const changeRefused = (from: string) =>
  new HttpError(
    403,
    'ORIGIN_NOT_ALLOWED',
    'Forbidden',
    `a page of ${from} may not change anything here: without FFLEET_API_TOKENS only this control plane's own pages and the origins in FFLEET_CORS_ORIGINS may`,
  );

/** `Sec-Fetch-Site` values of a request a page of another site made (browsers since 2020 send it). */
const CROSS_SITE: ReadonlySet<string> = new Set(['cross-site', 'same-site']);

/**
 * `guardUnsafe`: refuse changes asked by pages of other origins (no API tokens configured). A page
 * cannot read another origin's answers without CORS, but a "simple" request (a form post, a fetch
 * without custom headers) is sent without a preflight, and the routes without a body (cancel,
 * restart, redeliver) would act on it: any web page opened on the control plane's machine could
 * cancel its tasks. Browsers send `Origin` with every such request; a page of this host (the
 * dashboard) and the listed origins may, others get 403. With API tokens a page cannot send the token
 * without a preflight, so there is nothing to guard (and a reverse proxy may change `Host`).
 */
export function cors(
  policy: CorsPolicy | undefined,
  opts: { guardUnsafe?: boolean } = {},
): MiddlewareHandler<ApiEnv> {
  const allows = (origin: string) => policy !== undefined && (policy.any || policy.origins.has(origin));
  return async (c, next) => {
    const origin = c.req.header('origin');
    if (origin === undefined) {
      // Old browsers sent form posts without Origin; their Sec-Fetch-Site still says where from.
      const site = c.req.header('sec-fetch-site');
      if (
        opts.guardUnsafe &&
        UNSAFE_METHODS.has(c.req.method) &&
        site !== undefined &&
        CROSS_SITE.has(site)
      ) {
        throw changeRefused('another site');
      }
      // The answer depends on Origin once a list is set: caches must not hand one origin's to another.
      if (policy !== undefined) c.header('Vary', 'Origin', { append: true });
      return next();
    }
    const preflight =
      c.req.method === 'OPTIONS' && c.req.header('access-control-request-method') !== undefined;
    if (!allows(origin)) {
      if (opts.guardUnsafe && UNSAFE_METHODS.has(c.req.method) && !sameHost(origin, c.req.header('host'))) {
        throw changeRefused(origin);
      }
      if (!preflight) return next(); // no CORS headers: the browser keeps the answer from the page
      throw new HttpError(
        403,
        'ORIGIN_NOT_ALLOWED',
        'Forbidden',
        policy === undefined
          ? `cross-origin requests are not enabled (origin ${origin}); list the origin in FFLEET_CORS_ORIGINS`
          : `origin ${origin} is not in FFLEET_CORS_ORIGINS`,
      );
    }
    if (preflight) {
      const headers: Record<string, string> = {
        'Access-Control-Allow-Origin': policy?.any ? '*' : origin,
        'Access-Control-Allow-Methods': METHODS,
        'Access-Control-Max-Age': String(PREFLIGHT_MAX_AGE_S),
        Vary: 'Origin, Access-Control-Request-Headers',
      };
      const requested = c.req.header('access-control-request-headers');
      if (requested) headers['Access-Control-Allow-Headers'] = requested;
      return c.body(null, 204, headers);
    }
    c.header('Access-Control-Allow-Origin', policy?.any ? '*' : origin);
    c.header('Access-Control-Expose-Headers', EXPOSED);
    c.header('Vary', 'Origin', { append: true });
    return next();
  };
}
