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
  fetch: typeof fetch;
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
    let res: Response;
    try {
      res = await opts.fetch(opts.url, {
        method: 'POST',
        headers: request.headers,
        body: request.body,
        redirect: 'manual',
        signal: controller.signal,
      });
    } catch (e) {
      return fail(describeError(e, controller.signal, opts.timeoutMs), null);
    }
    const read = await readCapped(res);
    const response: WebhookResponse = {
      status: res.status,
      headers: Object.fromEntries(res.headers),
      // Invalid UTF-8 becomes U+FFFD instead of failing the record.
      body: new TextDecoder('utf-8', { fatal: false }).decode(read.bytes),
    };
    if (read.error) return fail(describeError(read.error, controller.signal, opts.timeoutMs), response);
    if (res.status >= 200 && res.status < 300) {
      return { ok: true, startedAt, request, response, durationMs: elapsed() };
    }
    if (res.status >= 300 && res.status < 400) {
      const to = res.headers.get('location');
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
