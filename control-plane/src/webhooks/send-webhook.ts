import dns, { type LookupAddress } from 'node:dns';
import http from 'node:http';
import https from 'node:https';
import { signPayload } from './signature.ts';

/** Response bodies are recorded up to this size; the rest is never read (a hostile receiver can't fill memory). */
export const MAX_RESPONSE_BODY_BYTES = 64 * 1024;

export type WebhookRequest = { method: 'POST'; headers: Record<string, string>; body: string };
export type WebhookResponse = { status: number; headers: Record<string, string>; body: string };

/** Why an attempt was cut short from outside: the dispatcher is stopping. */
export const SHUTDOWN = 'dispatcher stopped';

/** One POST's outcome. `permanent` failures (a URL that can never work) are not worth retrying. */
export type AttemptResult =
  | { ok: true; startedAt: number; request: WebhookRequest; response: WebhookResponse; durationMs: number }
  | {
      ok: false;
      startedAt: number;
      request: WebhookRequest;
      response: WebhookResponse | null;
      error: string;
      durationMs: number;
      permanent: boolean;
      /** The dispatcher stopped mid-attempt: not a receiver failure, nothing to record. */
      shutdown: boolean;
    };

export type SendWebhookOptions = {
  url: string;
  /** The event id: `webhook-id`, stable across retries so receivers can deduplicate. */
  eventId: string;
  body: string;
  secret: string | null;
  userAgent: string;
  /** Covers the whole attempt: connect, headers and body. */
  timeoutMs: number;
  /**
   * Send with this fetch instead of the built-in client (node:http with a keep-alive agent, several
   * times cheaper in CPU per request than Node's fetch). Same results either way.
   */
  fetch?: typeof fetch;
  /** Aborted with reason SHUTDOWN when the dispatcher stops. */
  signal?: AbortSignal;
  now: () => number;
};

class AttemptTimeout extends Error {}

/** The request exactly as it will be sent (and recorded): Standard Webhooks headers, signed when a secret is set. */
export function buildRequest(
  opts: Pick<SendWebhookOptions, 'eventId' | 'body' | 'secret' | 'userAgent'>,
  nowMs: number,
) {
  const timestamp = Math.floor(nowMs / 1000);
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    'user-agent': opts.userAgent,
    'webhook-id': opts.eventId,
    'webhook-timestamp': String(timestamp),
  };
  if (opts.secret) {
    headers['webhook-signature'] = signPayload({
      secret: opts.secret,
      id: opts.eventId,
      timestamp,
      body: opts.body,
    });
  }
  return { method: 'POST', headers, body: opts.body } satisfies WebhookRequest;
}

/** Only http(s) targets: fetch would happily "deliver" to a data: URL. */
function checkUrl(raw: string): string | null {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return `invalid URL: ${raw.slice(0, 200)}`;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return `unsupported URL scheme ${url.protocol}`;
  return null;
}

function describeError(e: unknown, signal: AbortSignal, timeoutMs: number): string {
  if (signal.aborted)
    return signal.reason instanceof AttemptTimeout ? `timeout after ${timeoutMs} ms` : SHUTDOWN;
  const err = e as { message?: string; cause?: { code?: string; message?: string } };
  // undici reports "fetch failed" and hides the useful part (ECONNREFUSED, ENOTFOUND, …) in `cause`.
  const cause = err.cause?.message ?? err.cause?.code;
  return cause ? `${err.message ?? 'error'}: ${cause}` : (err.message ?? String(e));
}

/** Read at most MAX_RESPONSE_BODY_BYTES, then drop the connection's remaining body. Never throws. */
async function readCapped(res: Response): Promise<{ bytes: Buffer; error: unknown }> {
  const reader = res.body?.getReader();
  if (!reader) return { bytes: Buffer.alloc(0), error: null };
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    while (total < MAX_RESPONSE_BODY_BYTES) {
      const { done, value } = await reader.read();
      if (done) return { bytes: Buffer.concat(chunks), error: null };
      chunks.push(value);
      total += value.byteLength;
    }
    // Not awaited: cancelling a body whose sender stalls must not stall us.
    reader.cancel().catch(() => {});
    return { bytes: Buffer.concat(chunks).subarray(0, MAX_RESPONSE_BODY_BYTES), error: null };
  } catch (error) {
    return { bytes: Buffer.concat(chunks).subarray(0, MAX_RESPONSE_BODY_BYTES), error };
  }
}

/**
 * POST one webhook attempt. Redirects are not followed (a 3xx is a failure). Every outcome is a value:
 * transport errors, timeouts and hostile responses (huge, slow, not UTF-8) become `{ok: false}`.
 */
export async function sendWebhook(opts: SendWebhookOptions): Promise<AttemptResult> {
  const startedAt = opts.now();
  const request = buildRequest(opts, startedAt);
  const t0 = performance.now();
  const elapsed = () => Math.round(performance.now() - t0);
  const fail = (error: string, response: WebhookResponse | null, permanent = false): AttemptResult => ({
    ok: false,
    startedAt,
    request,
    response,
    error,
    durationMs: elapsed(),
    permanent,
    shutdown: error === SHUTDOWN,
  });

  const badUrl = checkUrl(opts.url);
  if (badUrl) return fail(badUrl, null, true);
  if (opts.signal?.aborted) return fail(SHUTDOWN, null);

  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new AttemptTimeout()), opts.timeoutMs);
  const onStop = () => controller.abort(SHUTDOWN);
  opts.signal?.addEventListener('abort', onStop, { once: true });
  try {
    let res: RawResponse;
    try {
      const url = new URL(opts.url);
      res =
        opts.fetch || !nodeCanSend(url)
          ? await viaFetch(opts.fetch ?? globalThis.fetch, opts.url, request, controller.signal)
          : await viaNode(url, request, controller.signal);
    } catch (e) {
      return fail(describeError(e, controller.signal, opts.timeoutMs), null);
    }
    const response: WebhookResponse = {
      status: res.status,
      headers: res.headers,
      // Invalid UTF-8 becomes U+FFFD instead of failing the record.
      body: new TextDecoder('utf-8', { fatal: false }).decode(res.bytes),
    };
    // 2xx = delivered (CONTRACT), whatever becomes of the body after the status line: a receiver that
    // answered 200 and then dropped the connection or dripped its body past the timeout has the event,
    // and retrying it sent it up to four times. The record keeps the body as far as it was read.
    if (res.status >= 200 && res.status < 300) {
      return { ok: true, startedAt, request, response, durationMs: elapsed() };
    }
    if (res.error) return fail(describeError(res.error, controller.signal, opts.timeoutMs), response);
    if (res.status >= 300 && res.status < 400) {
      const to = res.headers.location;
      return fail(
        `redirect not followed: HTTP ${res.status}${to ? ` to ${to.slice(0, 500)}` : ''}`,
        response,
      );
    }
    return fail(`HTTP ${res.status}`, response);
  } finally {
    clearTimeout(timer);
    opts.signal?.removeEventListener('abort', onStop);
  }
}

/** A response as far as it was read: at most MAX_RESPONSE_BODY_BYTES, and why reading stopped early. */
type RawResponse = { status: number; headers: Record<string, string>; bytes: Buffer; error: unknown };

async function viaFetch(
  fetchFn: typeof fetch,
  url: string,
  request: WebhookRequest,
  signal: AbortSignal,
): Promise<RawResponse> {
  const res = await fetchFn(url, {
    method: 'POST',
    headers: request.headers,
    body: request.body,
    redirect: 'manual',
    signal,
  });
  const read = await readCapped(res);
  return { status: res.status, headers: Object.fromEntries(res.headers), ...read };
}

/**
 * How long a host name's lookup (its addresses, or its failure) serves the attempts that follow it.
 * Node looks a host up for every new connection, one `getaddrinfo` on libuv's 4 threads each: a burst of
 * hundreds of attempts to a name that does not resolve (no connection is ever kept alive there) queued
 * behind each other and the resolver's retransmits, took up to the attempt timeout each and held their
 * delivery slots meanwhile, so the retries of the first failures ran seconds late (on the machine where
 * this was found, one lookup of such a name took 12 ms, 64 at once 5 s at the median).
 */
export const LOOKUP_REUSE_MS = 1_000;

type LookupCallback = (err: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void;
type Lookup = { addresses: LookupAddress[]; error: NodeJS.ErrnoException | null; until: number };
/** By family, hints and host name: the lookup running (its waiters) or the last one's answer. */
const lookups = new Map<string, LookupCallback[] | Lookup>();

/** A failure of its own for each attempt (net and http decorate the error they are given). */
function copyError(e: NodeJS.ErrnoException): NodeJS.ErrnoException {
  return Object.assign(new Error(e.message), {
    code: e.code,
    errno: e.errno,
    syscall: e.syscall,
    hostname: (e as { hostname?: string }).hostname,
  });
}

/**
 * `dns.lookup` as net calls it, shared: attempts to one host wait for the lookup already running and
 * take its answer, which then serves those starting within LOOKUP_REUSE_MS.
 */
function sharedLookup(
  hostname: string,
  options: dns.LookupOptions,
  callback: (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void,
): void {
  const answer: LookupCallback = (err, addresses) => {
    if (err) callback(copyError(err), options.all ? [] : '');
    else if (options.all)
      callback(
        null,
        addresses.map((a) => ({ ...a })),
      );
    else callback(null, addresses[0]!.address, addresses[0]!.family);
  };
  const key = `${options.family ?? 0}/${options.hints ?? 0}/${hostname}`;
  const entry = lookups.get(key);
  if (Array.isArray(entry)) {
    entry.push(answer);
    return;
  }
  if (entry && entry.until > performance.now()) {
    process.nextTick(answer, entry.error, entry.addresses);
    return;
  }
  if (lookups.size >= 1_000) {
    const now = performance.now();
    for (const [k, v] of lookups) if (!Array.isArray(v) && v.until <= now) lookups.delete(k);
  }
  const waiters: LookupCallback[] = [answer];
  lookups.set(key, waiters);
  try {
    dns.lookup(hostname, { family: options.family, hints: options.hints, all: true }, (err, addresses) => {
      const error = err ?? (addresses.length === 0 ? noAddress(hostname) : null);
      lookups.set(key, { addresses, error, until: performance.now() + LOOKUP_REUSE_MS });
      for (const w of waiters) w(error, addresses);
    });
  } catch (e) {
    // Refused before any lookup started (a malformed name): nothing to share or keep.
    lookups.delete(key);
    throw e;
  }
}

function noAddress(hostname: string): NodeJS.ErrnoException {
  return Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), {
    code: 'ENOTFOUND',
    syscall: 'getaddrinfo',
    hostname,
  });
}

/**
 * Keep-alive agents shared by every attempt: connections to a receiver are reused across deliveries
 * (a connection per attempt would cost a TCP handshake each). Idle connections are closed after
 * 4 s, or earlier when the receiver announces a shorter `Keep-Alive: timeout`.
 */
const agents = {
  'http:': new http.Agent({ keepAlive: true, timeout: 4_000 }),
  'https:': new https.Agent({ keepAlive: true, timeout: 4_000 }),
};

/**
 * A URL with credentials (refused when a webhook is saved; an older row may hold one) goes through
 * fetch, which refuses it with its own words. Every other URL is sent here, also on the ports fetch
 * refuses (WHATWG "bad ports", e.g. 6000 or 10080): a receiver on a studio's network may listen there,
 * and a webhook the API accepted must be deliverable.
 */
const nodeCanSend = (url: URL) => !url.username && !url.password;

/** Node's header object, flattened like fetch's Headers (repeated values joined with ", "). */
function flatHeaders(h: http.IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(h)) {
    if (v !== undefined) out[k] = Array.isArray(v) ? v.join(', ') : v;
  }
  return out;
}

/**
 * POST with node:http(s): resolves once the response body is read (up to the cap) or reading it
 * failed; rejects when no response arrived. `signal` aborts at any point (the socket is destroyed).
 */
function viaNode(url: URL, request: WebhookRequest, signal: AbortSignal): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const body = Buffer.from(request.body);
    let settle: ((error: unknown) => void) | null = null;
    const req = (url.protocol === 'https:' ? https : http).request(
      url,
      {
        method: 'POST',
        headers: { ...request.headers, 'content-length': String(body.byteLength) },
        agent: agents[url.protocol as 'http:' | 'https:'],
        lookup: sharedLookup as typeof dns.lookup,
      },
      (res) => {
        const chunks: Buffer[] = [];
        let total = 0;
        let done = false;
        settle = (error) => {
          if (done) return;
          done = true;
          signal.removeEventListener('abort', onAbort);
          const bytes = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
          resolve({
            status: res.statusCode ?? 0,
            headers: flatHeaders(res.headers),
            bytes: bytes.subarray(0, MAX_RESPONSE_BODY_BYTES),
            error,
          });
        };
        res.on('data', (chunk: Buffer) => {
          chunks.push(chunk);
          total += chunk.byteLength;
          if (total >= MAX_RESPONSE_BODY_BYTES) {
            // Enough: drop the connection rather than read (or wait for) the rest.
            settle?.(null);
            res.destroy();
          }
        });
        res.on('end', () => settle?.(null));
        // Worded as fetch words it, so the log reads the same whichever client sent.
        const cutShort = () => new Error('terminated', { cause: new Error('other side closed') });
        res.on('error', () => settle?.(cutShort()));
        res.on('close', () => settle?.(res.complete ? null : cutShort()));
      },
    );
    const onAbort = () => {
      const e = signal.reason instanceof Error ? signal.reason : new Error(String(signal.reason));
      req.destroy(e);
      settle?.(e);
    };
    req.on('error', (e) => {
      if (settle) settle(e);
      else {
        signal.removeEventListener('abort', onAbort);
        // Worded as fetch words it: "fetch failed: connect ECONNREFUSED 127.0.0.1:9".
        reject(new Error('fetch failed', { cause: e }));
      }
    });
    if (signal.aborted) return onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    req.end(body);
  });
}
