import { createHmac, timingSafeEqual } from 'node:crypto';

/** Standard Webhooks secrets look like `whsec_<base64 key>`. */
const WHSEC_PREFIX = 'whsec_';

/** Standard Webhooks' recommended replay window for `webhook-timestamp`. */
export const SIGNATURE_TOLERANCE_S = 5 * 60;

/**
 * The HMAC key for a webhook secret. A secret in Standard Webhooks form (`whsec_<base64>`) is decoded
 * to its key bytes, so receivers using a Standard Webhooks library verify it unchanged; any other
 * secret is used as its UTF-8 bytes (what a hand-written receiver would naturally do).
 */
export function secretKey(secret: string): Buffer {
  if (secret.startsWith(WHSEC_PREFIX)) {
    const key = Buffer.from(secret.slice(WHSEC_PREFIX.length), 'base64');
    // A prefix followed by nothing decodable is treated as a plain secret rather than an empty key.
    if (key.length > 0) return key;
  }
  return Buffer.from(secret, 'utf8');
}

/** The signed content of Standard Webhooks: `<msg id>.<unix seconds>.<raw body>`. */
const signedContent = (id: string, timestamp: number, body: string) => `${id}.${timestamp}.${body}`;

/** `webhook-signature` header value: `v1,<base64 HMAC-SHA256 of "id.timestamp.body">`. */
export function signPayload(opts: { secret: string; id: string; timestamp: number; body: string }): string {
  const mac = createHmac('sha256', secretKey(opts.secret))
    .update(signedContent(opts.id, opts.timestamp, opts.body))
    .digest('base64');
  return `v1,${mac}`;
}

export type VerifyInput = {
  secret: string;
  /** `webhook-id` header. */
  id: string;
  /** `webhook-timestamp` header (unix seconds, as sent). */
  timestamp: string | number;
  /** Raw request body exactly as received. */
  body: string;
  /** `webhook-signature` header: one or more space-separated `v1,<base64>` entries. */
  signature: string;
  /** Unix milliseconds "now" for the replay window; default Date.now(). */
  now?: number;
  toleranceS?: number;
};

/**
 * Check a Standard Webhooks signature (any `v1` entry of the header may match) and that the timestamp
 * is inside the replay window. Returns a value, never throws: receivers and tests switch on it.
 */
export function verifySignature(input: VerifyInput): { ok: true } | { ok: false; reason: string } {
  const ts = Number(input.timestamp);
  if (!Number.isInteger(ts)) return { ok: false, reason: 'invalid timestamp' };
  const nowS = Math.floor((input.now ?? Date.now()) / 1000);
  if (Math.abs(nowS - ts) > (input.toleranceS ?? SIGNATURE_TOLERANCE_S)) {
    return { ok: false, reason: 'timestamp outside tolerance' };
  }
  const expected = Buffer.from(signPayload({ ...input, timestamp: ts }).slice(3), 'base64');
  for (const entry of input.signature.split(' ')) {
    const [version, mac] = entry.split(',', 2);
    if (version !== 'v1' || !mac) continue;
    const given = Buffer.from(mac, 'base64');
    if (given.length === expected.length && timingSafeEqual(given, expected)) return { ok: true };
  }
  return { ok: false, reason: 'no matching signature' };
}
