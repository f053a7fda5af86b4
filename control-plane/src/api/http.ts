import { createHash } from 'node:crypto';
import { findUnsafeJson, PageQuery, unstorableText } from '@ffleet/shared';
import type { Context } from 'hono';
import type { z } from 'zod';
import { BadRequestError, HttpError, ValidationError } from './errors.ts';
import { withoutNullOptionals } from './null-as-absent.ts';

const JSON_TYPE = /^application\/([a-z0-9.+-]+\+)?json\s*(;|$)/i;

/** zod's own wording (a schema's custom message never starts so): it is reworded for operators. */
const ZOD_DEFAULT = /^(Too small|Too big|Invalid input|Invalid option):/;

const UNITS: Record<string, [string, string]> = {
  string: ['character', 'characters'],
  array: ['item', 'items'],
  set: ['item', 'items'],
};

/** A bound in words: `at least 1`, `at most 200 characters`, `more than 0`. */
function bound(
  kind: 'min' | 'max',
  origin: string,
  value: number | bigint,
  inclusive: boolean | undefined,
): string {
  const n = Number(value);
  const unit = UNITS[origin];
  const words =
    inclusive === false
      ? kind === 'min'
        ? 'more than'
        : 'less than'
      : kind === 'min'
        ? 'at least'
        : 'at most';
  return unit ? `${words} ${n} ${n === 1 ? unit[0] : unit[1]}` : `${words} ${n}`;
}

/** What zod said, in the words an operator reads (its default messages only). */
function reworded(issue: z.core.$ZodIssue): string {
  if (!ZOD_DEFAULT.test(issue.message)) return issue.message;
  switch (issue.code) {
    case 'invalid_type':
      if (issue.message.endsWith('received undefined')) return 'is required';
      return `must be ${article(EXPECTED[issue.expected] ?? issue.expected)}`;
    case 'too_small':
      if (issue.origin === 'string' && Number(issue.minimum) === 1) return 'must not be empty';
      if (issue.origin === 'array' && Number(issue.minimum) === 1) return 'must not be empty';
      return `must be ${bound('min', issue.origin, issue.minimum, issue.inclusive)}`;
    case 'too_big':
      return `must be ${bound('max', issue.origin, issue.maximum, issue.inclusive)}`;
    case 'invalid_value':
      return `must be one of: ${issue.values.map((v) => (typeof v === 'string' ? v : JSON.stringify(v))).join(', ')}`;
    default:
      return issue.message;
  }
}

/** zod's type names where JSON has another word. */
const EXPECTED: Record<string, string> = { int: 'whole number', record: 'object' };

const article = (type: string): string => (/^[aeiou]/.test(type) ? `an ${type}` : `a ${type}`);

/**
 * Map zod issues to `{path, message}` (unknown keys get one entry each, at their own path), worded for
 * an operator: `is required`, `must not be empty`, `must be at most 1000`, `must be one of: a, b`
 * instead of zod's wording for developers ("Invalid input: expected string, received undefined", "Too
 * small: expected string to have >=1 characters"); a field is named once per message (an empty name is
 * also blank). A schema's own messages are kept.
 */
export function zodIssues(error: z.ZodError): { path: string; message: string }[] {
  const out: { path: string; message: string }[] = [];
  const empty = new Set<string>();
  for (const issue of error.issues) {
    const base = issue.path.map(String).join('.');
    if (issue.code === 'unrecognized_keys') {
      for (const k of issue.keys) out.push({ path: base ? `${base}.${k}` : k, message: 'unknown field' });
      continue;
    }
    const message = reworded(issue);
    if (message === 'must not be empty') empty.add(base);
    else if (empty.has(base) && message === 'must not be blank') continue;
    out.push({ path: base, message });
  }
  return out;
}

/**
 * `raw` is the body as sent; `canonical` is the body as read (read-only fields and FFmate's `null`s
 * left out, keys sorted, no whitespace), so two bodies that mean the same request compare equal.
 */
export type ParsedBody<T> = { data: T; raw: string; canonical: string };

export type BodyOptions = {
  /** Response-only fields a client may send back on PUT (they are ignored). */
  readOnly?: readonly string[];
  /**
   * A create or a replace: `null` on an optional field that does not take `null` is read as the field
   * left out, as FFmate reads it (null-as-absent.ts). Not for PATCH, where leaving a field out means
   * "unchanged" and a `null` there more likely meant "clear".
   */
  nullIsAbsent?: boolean;
  /**
   * Checks the service makes once the body passed the schema that can be made on the body as read (a
   * task's command): run when the schema fails too, so one answer lists every problem it can and a
   * client does not fix a body one round at a time. Issues at a path the schema reported are dropped.
   */
  alsoCheck?: (json: unknown) => { path: string; message: string }[];
};

/** Read a JSON body: 415 when it is not JSON, 400 when it does not parse, 422 when it fails the schema. */
export async function parseJsonBody<T>(
  c: Context,
  schema: z.ZodType<T>,
  { readOnly = [], nullIsAbsent = false, alsoCheck }: BodyOptions = {},
): Promise<ParsedBody<T>> {
  const type = c.req.header('content-type') ?? '';
  if (!JSON_TYPE.test(type)) {
    throw new HttpError(
      415,
      'UNSUPPORTED_MEDIA_TYPE',
      'Unsupported Media Type',
      'the body must be JSON sent with Content-Type: application/json',
    );
  }
  // A compressed body would be read as text and fail as "not valid JSON: Unexpected token …".
  const encoding = (c.req.header('content-encoding') ?? 'identity').trim().toLowerCase();
  if (encoding !== '' && encoding !== 'identity') {
    throw new HttpError(
      415,
      'UNSUPPORTED_MEDIA_TYPE',
      'Unsupported Media Type',
      `Content-Encoding ${JSON.stringify(encoding)} is not accepted; send the JSON body uncompressed`,
    );
  }
  let raw: string;
  try {
    raw = await c.req.text();
  } catch (err) {
    // Reading the body failed: the client went away (ECONNRESET, possibly wrapped by the body-limit
    // stream) or its body was too large. The request's fault, not the server's, and not the database's,
    // whose lost connections are ECONNRESET too and a 503 to retry: so it is said here, where it is known.
    if (err instanceof HttpError) throw err;
    throw new HttpError(400, 'REQUEST_ABORTED', 'Bad Request', 'the request body was cut off');
  }
  if (raw.trim() === '')
    throw new BadRequestError('MALFORMED_JSON', 'the request body is empty; a JSON object was expected');
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch (err) {
    throw new BadRequestError(
      'MALFORMED_JSON',
      `the request body is not valid JSON: ${(err as Error).message}`,
    );
  }
  if (json === null || typeof json !== 'object' || Array.isArray(json)) {
    throw new ValidationError('the body must be a JSON object', [
      { path: '', message: 'expected an object' },
    ]);
  }
  const unsafe = findUnsafeJson(json);
  if (unsafe.length)
    throw new ValidationError('the request body holds values that cannot be stored', unsafe.slice(0, 20));
  if (readOnly.length) {
    const copy = { ...(json as Record<string, unknown>) };
    for (const k of readOnly) delete copy[k];
    json = copy;
  }
  if (nullIsAbsent) json = withoutNullOptionals(schema, json);
  const r = schema.safeParse(json);
  if (!r.success) {
    const issues = zodIssues(r.error);
    if (alsoCheck) {
      const seen = new Set(issues.map((i) => i.path));
      for (const more of alsoCheck(json)) if (!seen.has(more.path)) issues.push(more);
    }
    throw new ValidationError('the request body is invalid', issues);
  }
  return { data: r.data, raw, canonical: canonicalJson(json) };
}

/** JSON with every object's keys sorted, so key order and whitespace do not change the text. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => {
    if (v === null || typeof v !== 'object' || Array.isArray(v)) return v;
    const sorted: Record<string, unknown> = Object.create(null);
    for (const k of Object.keys(v).sort()) sorted[k] = (v as Record<string, unknown>)[k];
    return sorted;
  });
}

/** 400 when a query parameter (name or value) holds text the database cannot take. */
export function checkQueryText(c: Context): void {
  for (const [k, values] of Object.entries(c.req.queries())) {
    for (const v of [k, ...values]) {
      const why = unstorableText(v);
      if (why) throw new BadRequestError('INVALID_QUERY', `query parameter ${JSON.stringify(k)} ${why}`);
    }
  }
}

/**
 * Parse query parameters with a schema; failures are 400 (CONTRACT.md: bad query). A parameter named in
 * `lists` may be given more than once and counts as the comma-separated list of its values
 * (`status=A&status=B` is `status=A,B`); any other given twice is a 400, so no value is silently dropped
 * or read as one text (`q=a&q=b` would search for "a,b").
 */
export function parseQuery<T>(c: Context, schema: z.ZodType<T>, lists: readonly string[] = []): T {
  const query: Record<string, string> = {};
  // Only this schema's own parameters (the page schema sees the filters too).
  const own = (schema as { shape?: Record<string, unknown> }).shape;
  for (const [k, vs] of Object.entries(c.req.queries())) {
    if (vs.length > 1 && !lists.includes(k) && (!own || Object.hasOwn(own, k)))
      throw new BadRequestError('INVALID_QUERY', 'the query parameters are invalid', [
        { path: k, message: `is given ${vs.length} times; it takes one value` },
      ]);
    query[k] = vs.join(',');
  }
  const r = schema.safeParse(query);
  if (!r.success)
    throw new BadRequestError('INVALID_QUERY', 'the query parameters are invalid', zodIssues(r.error));
  return r.data;
}

export const parsePage = (c: Context): PageQuery => parseQuery(c, PageQuery);

/** A list response: bare JSON array, `X-Total` header. */
export function listResponse(c: Context, items: unknown[], total: number) {
  c.header('X-Total', String(total));
  return c.json(items);
}

export function created(c: Context, path: string, body: unknown) {
  c.header('Location', path);
  return c.json(body, 201);
}

export const sha256 = (s: string): string => createHash('sha256').update(s).digest('hex');
