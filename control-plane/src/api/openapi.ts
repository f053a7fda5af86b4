import * as S from '@ffleet/shared';
import { z } from 'zod';
import type { QueuedDelivery as QueuedDeliveryType } from '../webhooks/redeliver.ts';
import { DATABASE_RETRY_AFTER_S } from './errors.ts';
import type { healthFacts } from './health-facts.ts';
import { PRESET_READ_ONLY } from './presets.ts';
import { isPublicPath } from './public-paths.ts';
import { WATCHFOLDER_READ_ONLY } from './watchfolders.ts';
import { WEBHOOK_READ_ONLY } from './webhooks.ts';

type Op = {
  method: 'get' | 'post' | 'put' | 'patch' | 'delete';
  path: string;
  summary: string;
  tag: string;
  body?: string;
  /** A JSON response: the component's name. */
  response?: string;
  /** A text response: its media type (the body is a string). */
  text?: string;
  list?: boolean;
  status?: number;
  /** The query's schemas, as the route parses them (parsePage, parseQuery). */
  query?: z.ZodObject[];
  /** When the route answers 409, and with which codes (services and routes: every ConflictError). */
  conflict?: string;
};

/** `GET /api/v1/version` (app.ts). */
const Version = z.object({ version: z.string() });

/**
 * `GET /health` (app.ts): the database check, and (control-plane.ts `health`, health-facts.ts) the
 * broker and the agents online, which an app built without them (tests) leaves out.
 */
const Health = z.object({
  status: z.enum(['ok', 'error']),
  db: z
    .enum(['ok', 'unreachable', 'failing'])
    .describe(
      'failing: the embedded database answers, but refused statements for lack of resources (disk full, out of memory: SQLSTATE class 53), until a refused statement succeeds again or a minute passes without a refusal',
    ),
  dbError: z
    .string()
    .optional()
    .describe(
      'with db failing: why, as a SQLSTATE, and when, e.g. "disk full, SQLSTATE 53100, refused since 2025-01-01T00:00:00.000Z, the last time at 2025-01-01T00:00:07.000Z"',
    ),
  broker: z.enum(['ok', 'disconnected']).optional(),
  warnings: z
    .array(z.string())
    .optional()
    .describe(
      'what is wrong with the install although it serves, e.g. a postgres.js without the fixes `npm install` applies; absent when nothing is',
    ),
  agents: z
    .object({
      online: z
        .number()
        .int()
        .nonnegative()
        .nullable()
        .describe('agents online; null while the database is unreachable'),
    })
    .optional(),
});

/** The 202 body of `POST /webhooks/executions/{id}/redeliver` (webhooks/redeliver.ts). */
const QueuedDelivery = z.object({
  deliveryId: z.string().describe('the new delivery (its attempts: GET /webhooks/executions?deliveryId=)'),
  eventId: z.string().describe("the original event's id (the payload, and so `webhook-id`, is the same)"),
  event: z.string().describe('the event name'),
  webhook: z.string().nullable().describe('the global webhook; null for a direct one'),
  source: z.enum(['global', 'direct']),
  url: z.string(),
  state: z.literal('pending'),
  createdAt: S.Millis,
});

// The schemas above say what the code sends: a change to either side that the other lacks fails typecheck.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : never) : never;
const _queuedDelivery: Same<z.infer<typeof QueuedDelivery>, QueuedDeliveryType> = true;
type HealthOut = z.infer<typeof Health>;
const _healthFacts: Same<
  { broker: NonNullable<HealthOut['broker']>; agents: NonNullable<HealthOut['agents']> },
  Awaited<ReturnType<typeof healthFacts>>
> = true;
void _queuedDelivery;
void _healthFacts;

/** The components, generated from the shared zod schemas (the single source of truth). */
const COMPONENTS: Record<string, z.ZodType> = {
  Task: S.Task,
  TaskCreate: S.TaskCreate,
  Preset: S.Preset,
  PresetCreate: S.PresetCreate,
  Batch: S.Batch,
  BatchCreate: S.BatchCreate,
  Watchfolder: S.Watchfolder,
  WatchfolderCreate: S.WatchfolderCreate,
  WatchfolderPatch: S.WatchfolderPatch,
  Webhook: S.Webhook,
  WebhookCreate: S.WebhookCreate,
  WebhookExecution: S.WebhookExecution,
  Agent: S.Agent,
  AgentPatch: S.AgentPatch,
  AgentTokenIssued: S.AgentTokenIssued,
  EventPayload: S.EventPayload,
  LogLevel: S.LogLevel,
  Problem: S.Problem,
  Version,
  Health,
  QueuedDelivery,
};

/**
 * How the routes read each request body component (parseJsonBody's options there): `readOnly`, the
 * response-only fields a client may send back (a GET's answer, PUT again), which are dropped unread
 * (the READ_ONLY lists of presets.ts, watchfolders.ts, webhooks.ts); `nullIsAbsent`, a `null` on an
 * optional field that does not take `null` read as the field left out (null-as-absent.ts), in nested
 * objects and arrays of objects too.
 */
const BODY_READING: Record<string, { readOnly?: readonly string[]; nullIsAbsent?: boolean }> = {
  TaskCreate: { nullIsAbsent: true },
  BatchCreate: { nullIsAbsent: true },
  PresetCreate: { readOnly: PRESET_READ_ONLY, nullIsAbsent: true },
  WatchfolderCreate: { readOnly: WATCHFOLDER_READ_ONLY, nullIsAbsent: true },
  WatchfolderPatch: { readOnly: WATCHFOLDER_READ_ONLY },
  WebhookCreate: { readOnly: WEBHOOK_READ_ONLY, nullIsAbsent: true },
};

const PAGE = S.PageQuery;

/**
 * `GET /api/v1/events` (events-stream.ts reads these itself). `lastEventId` (and the Last-Event-ID
 * header) takes any text: one that is not the id of an event still in the history is not refused but
 * answered with `ready` `{"resumed":false,…}`.
 */
const EventsQuery = z.object({ events: z.string().optional(), lastEventId: z.string().optional() });

const LAST_EVENT_ID =
  'resume after this event id (the header wins over the query parameter); the first `ready` event says ' +
  'whether it was resumed: `{"resumed":true,"replayed":N}`, or `{"resumed":false,"lastEventId":…}` (its ' +
  'first 100 characters) when the id is not one of the events kept in memory: too old, another process, ' +
  'or not an event id at all (any text is taken, of any length)';

/** What the schemas do not say about a query parameter (merged over the schema derived from them). */
const QUERY_DOCS: Record<string, { schema?: object; description: string }> = {
  page: { description: 'page number, from 0 (decimal digits)' },
  perPage: { description: 'items per page (decimal digits)' },
  status: {
    description:
      'task statuses, comma-separated or the parameter repeated (`status=QUEUED&status=RUNNING`), any case; blank: all',
  },
  name: {
    description:
      'only presets whose name contains this text, ignoring case (% _ and \\ match themselves); blank: all',
  },
  success: { description: 'only successful (`true`) or failed (`false`) attempts' },
  deliveryId: {
    schema: { format: 'uuid' },
    description: "only the attempts of this delivery (one event's retries to one target)",
  },
  events: {
    description: `comma-separated event names to receive (${S.EventName.options.join(', ')}); given more than once, the lists together; blank: all`,
  },
  lastEventId: { description: LAST_EVENT_ID },
};

/**
 * The query parameters a route reads through `schema`: what the route takes (the schema's input), but
 * a page number as the integer it is read as, its largest the digits the query takes (QueryInt).
 */
function queryParams(schema: z.ZodObject): unknown[] {
  const input = toSchema(schema, 'input') as { properties: Record<string, Record<string, unknown>> };
  const output = toSchema(schema, 'output') as { properties: Record<string, Record<string, unknown>> };
  return Object.entries(input.properties).map(([name, given]) => {
    let param: Record<string, unknown> = given;
    const digits = typeof given.pattern === 'string' && /^\^\[0-9\]\{1,(\d+)\}\$$/.exec(given.pattern);
    const read = output.properties[name];
    if (digits && read?.type === 'integer') {
      param = { ...read, maximum: Math.min(Number(read.maximum), 10 ** Number(digits[1]) - 1) };
    }
    const docs = QUERY_DOCS[name];
    return {
      name,
      in: 'query',
      required: false,
      ...(docs ? { description: docs.description } : {}),
      schema: { ...param, ...docs?.schema },
    };
  });
}

/** Routes that answer without the database (no 503). */
const WITHOUT_DATABASE = new Set(['/api/v1/version', '/api/v1/system/log-level']);

const OPS: Op[] = [
  {
    method: 'post',
    path: '/api/v1/tasks',
    summary: 'Create a task',
    tag: 'tasks',
    body: 'TaskCreate',
    response: 'Task',
    status: 201,
    conflict: 'IDEMPOTENCY_KEY_REUSED: the Idempotency-Key was used with another body',
  },
  {
    method: 'get',
    path: '/api/v1/tasks',
    summary: 'List tasks (newest first)',
    tag: 'tasks',
    response: 'Task',
    list: true,
    query: [PAGE, S.TaskListQuery],
  },
  { method: 'get', path: '/api/v1/tasks/{id}', summary: 'Get a task', tag: 'tasks', response: 'Task' },
  {
    method: 'delete',
    path: '/api/v1/tasks/{id}',
    summary: 'Delete a task (cancels it first if running)',
    tag: 'tasks',
    status: 204,
  },
  {
    method: 'patch',
    path: '/api/v1/tasks/{id}/cancel',
    summary: 'Cancel a task',
    tag: 'tasks',
    response: 'Task',
    conflict: 'TASK_FINISHED: the task is already finished',
  },
  {
    method: 'post',
    path: '/api/v1/tasks/{id}/cancel',
    summary: 'Cancel a task (alias of PATCH)',
    tag: 'tasks',
    response: 'Task',
    conflict: 'TASK_FINISHED: the task is already finished',
  },
  {
    method: 'patch',
    path: '/api/v1/tasks/{id}/restart',
    summary: 'Restart a finished task',
    tag: 'tasks',
    response: 'Task',
    conflict: 'TASK_NOT_FINISHED: only finished tasks can be restarted',
  },
  {
    method: 'post',
    path: '/api/v1/tasks/{id}/restart',
    summary: 'Restart a finished task (alias of PATCH)',
    tag: 'tasks',
    response: 'Task',
    conflict: 'TASK_NOT_FINISHED: only finished tasks can be restarted',
  },
  {
    method: 'get',
    path: '/api/v1/tasks/{id}/logs',
    summary: 'Captured script and transcoder output (text)',
    tag: 'tasks',
    text: 'text/plain',
  },
  {
    method: 'post',
    path: '/api/v1/batches',
    summary: 'Create a batch (all or nothing)',
    tag: 'batches',
    body: 'BatchCreate',
    response: 'Batch',
    status: 201,
    conflict: 'IDEMPOTENCY_KEY_REUSED: the Idempotency-Key was used with another body',
  },
  {
    method: 'get',
    path: '/api/v1/batches',
    summary: 'List batches',
    tag: 'batches',
    response: 'Batch',
    list: true,
    query: [PAGE],
  },
  { method: 'get', path: '/api/v1/batches/{id}', summary: 'Get a batch', tag: 'batches', response: 'Batch' },
  {
    method: 'get',
    path: '/api/v1/batches/{id}/tasks',
    summary: 'Tasks of a batch',
    tag: 'batches',
    response: 'Task',
    list: true,
    query: [PAGE],
  },
  {
    method: 'patch',
    path: '/api/v1/batches/{id}/cancel',
    summary: 'Cancel every unfinished task of a batch',
    tag: 'batches',
    response: 'Batch',
    conflict: 'BATCH_FINISHED: the batch is already finished',
  },
  {
    method: 'post',
    path: '/api/v1/batches/{id}/cancel',
    summary: 'Cancel a batch (alias of PATCH)',
    tag: 'batches',
    response: 'Batch',
    conflict: 'BATCH_FINISHED: the batch is already finished',
  },
  {
    method: 'post',
    path: '/api/v1/presets',
    summary: 'Create a preset',
    tag: 'presets',
    body: 'PresetCreate',
    response: 'Preset',
    status: 201,
  },
  {
    method: 'get',
    path: '/api/v1/presets',
    summary: 'List presets (newest first); `name` filters by name',
    tag: 'presets',
    response: 'Preset',
    list: true,
    query: [PAGE, S.PresetListQuery],
  },
  {
    method: 'get',
    path: '/api/v1/presets/{id}',
    summary: 'Get a preset',
    tag: 'presets',
    response: 'Preset',
  },
  {
    method: 'put',
    path: '/api/v1/presets/{id}',
    summary: 'Replace a preset',
    tag: 'presets',
    body: 'PresetCreate',
    response: 'Preset',
  },
  {
    method: 'delete',
    path: '/api/v1/presets/{id}',
    summary: 'Delete a preset (409 while a watchfolder uses it)',
    tag: 'presets',
    status: 204,
    conflict: 'PRESET_IN_USE: a watchfolder uses the preset',
  },
  {
    method: 'post',
    path: '/api/v1/watchfolders',
    summary: 'Create a watchfolder',
    tag: 'watchfolders',
    body: 'WatchfolderCreate',
    response: 'Watchfolder',
    status: 201,
    conflict: 'WATCHFOLDER_NAME_TAKEN: another watchfolder has this name',
  },
  {
    method: 'get',
    path: '/api/v1/watchfolders',
    summary: 'List watchfolders',
    tag: 'watchfolders',
    response: 'Watchfolder',
    list: true,
    query: [PAGE],
  },
  {
    method: 'get',
    path: '/api/v1/watchfolders/{id}',
    summary: 'Get a watchfolder',
    tag: 'watchfolders',
    response: 'Watchfolder',
  },
  {
    method: 'put',
    path: '/api/v1/watchfolders/{id}',
    summary: 'Replace a watchfolder',
    tag: 'watchfolders',
    body: 'WatchfolderCreate',
    response: 'Watchfolder',
    conflict: 'WATCHFOLDER_NAME_TAKEN: another watchfolder has this name',
  },
  {
    method: 'patch',
    path: '/api/v1/watchfolders/{id}',
    summary: 'Change some fields of a watchfolder (e.g. {"suspended": true}); the rest stays as stored',
    tag: 'watchfolders',
    body: 'WatchfolderPatch',
    response: 'Watchfolder',
    conflict: 'WATCHFOLDER_NAME_TAKEN: another watchfolder has this name',
  },
  {
    method: 'delete',
    path: '/api/v1/watchfolders/{id}',
    summary: 'Delete a watchfolder',
    tag: 'watchfolders',
    status: 204,
  },
  {
    method: 'post',
    path: '/api/v1/webhooks',
    summary: 'Register a webhook',
    tag: 'webhooks',
    body: 'WebhookCreate',
    response: 'Webhook',
    status: 201,
  },
  {
    method: 'get',
    path: '/api/v1/webhooks',
    summary: 'List webhooks',
    tag: 'webhooks',
    response: 'Webhook',
    list: true,
    query: [PAGE],
  },
  {
    method: 'get',
    path: '/api/v1/webhooks/executions',
    summary: 'Delivery attempts (newest first); `deliveryId` follows the retries of one delivery',
    tag: 'webhooks',
    response: 'WebhookExecution',
    list: true,
    query: [PAGE, S.ExecutionListQuery],
  },
  {
    method: 'get',
    path: '/api/v1/webhooks/executions/{id}',
    summary: 'One delivery attempt',
    tag: 'webhooks',
    response: 'WebhookExecution',
  },
  {
    method: 'post',
    path: '/api/v1/webhooks/executions/{id}/redeliver',
    summary:
      "Deliver the event of an attempt again (to a global webhook's current URL; 409 once it is deleted)",
    tag: 'webhooks',
    response: 'QueuedDelivery',
    status: 202,
    conflict:
      'WEBHOOK_DELETED: the global webhook of the attempt was deleted; WEBHOOK_EVENT_CHANGED: it now receives another event',
  },
  {
    method: 'get',
    path: '/api/v1/webhooks/{id}',
    summary: 'Get a webhook',
    tag: 'webhooks',
    response: 'Webhook',
  },
  {
    method: 'put',
    path: '/api/v1/webhooks/{id}',
    summary: 'Replace a webhook',
    tag: 'webhooks',
    body: 'WebhookCreate',
    response: 'Webhook',
  },
  {
    method: 'delete',
    path: '/api/v1/webhooks/{id}',
    summary: 'Delete a webhook',
    tag: 'webhooks',
    status: 204,
  },
  {
    method: 'get',
    path: '/api/v1/agents',
    summary: 'List agents',
    tag: 'agents',
    response: 'Agent',
    list: true,
    query: [PAGE],
  },
  {
    method: 'get',
    path: '/api/v1/agents/{id}',
    summary: 'Get an agent (id or name)',
    tag: 'agents',
    response: 'Agent',
  },
  {
    method: 'patch',
    path: '/api/v1/agents/{id}',
    summary: 'Pause/drain, labels, slots',
    tag: 'agents',
    body: 'AgentPatch',
    response: 'Agent',
  },
  {
    method: 'delete',
    path: '/api/v1/agents/{id}',
    summary: 'Remove an offline agent',
    tag: 'agents',
    status: 204,
    conflict: 'AGENT_ONLINE: the agent is online',
  },
  {
    method: 'post',
    path: '/api/v1/agents/{id}/token',
    summary:
      'A new own token for the agent (id or name, also a name not seen yet), revoking the one before: its connection with the old token is closed and refused from then on. Needs API tokens (403 without); 409 with an external broker (MQTT_URL), which checks agent logins itself',
    tag: 'agents',
    response: 'AgentTokenIssued',
    conflict:
      "EXTERNAL_BROKER: agents log in to an external broker (MQTT_URL), which checks their tokens itself; LOCAL_AGENT: the name is the control plane's local agent (FFLEET_LOCAL_AGENT)",
  },
  {
    method: 'get',
    path: '/api/v1/events',
    summary:
      'Server-sent events (same payload as webhooks); `events` = comma-separated event names to receive; ' +
      'resume after an event id with the Last-Event-ID header (or `lastEventId`): the first `ready` event ' +
      'says whether it was resumed',
    tag: 'system',
    query: [EventsQuery],
    text: 'text/event-stream',
  },
  { method: 'get', path: '/api/v1/version', summary: 'Version', tag: 'system', response: 'Version' },
  {
    method: 'get',
    path: '/api/v1/system/log-level',
    summary: "The control plane's current log level",
    tag: 'system',
    response: 'LogLevel',
  },
  {
    method: 'put',
    path: '/api/v1/system/log-level',
    summary:
      `Change the control plane's log level at once, for every component, until restart or the next PUT ` +
      `(LOG_LEVEL is the start value); one of ${S.LOG_LEVELS.join(', ')}`,
    tag: 'system',
    body: 'LogLevel',
    response: 'LogLevel',
  },
  {
    method: 'get',
    path: '/health',
    summary: 'Health (503 when the database is unreachable or refuses writes)',
    tag: 'system',
    response: 'Health',
  },
  {
    method: 'get',
    path: '/metrics',
    summary: 'Prometheus metrics (text exposition format 0.0.4)',
    tag: 'system',
    // prom-client's Registry.contentType (metrics.ts), less its `charset=utf-8`.
    text: 'text/plain; version=0.0.4',
  },
];

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const problem = (description: string, headers?: Record<string, unknown>) => ({
  description,
  ...(headers ? { headers } : {}),
  content: { 'application/problem+json': { schema: ref('Problem') } },
});

/** Response headers (app.ts, http.ts, tasks.ts). */
const HEADERS = {
  Location: {
    description: 'the path of the created resource (`/api/v1/<collection>/<id>`)',
    required: true,
    schema: { type: 'string' },
  },
  IdempotentReplayed: {
    description: 'on a replay: the first response to this Idempotency-Key and body, answered again',
    required: false,
    schema: { type: 'string', const: 'true' },
  },
  WwwAuthenticate: {
    description: 'with API tokens configured (FFLEET_API_TOKENS): `Bearer realm="ffleet"`',
    required: false,
    schema: { type: 'string', examples: ['Bearer realm="ffleet"'] },
  },
  RetryAfter: {
    description: 'seconds to wait before retrying',
    required: true,
    schema: { type: 'integer', minimum: 0, examples: [DATABASE_RETRY_AFTER_S] },
  },
  XTotal: { schema: { type: 'integer' }, description: 'total matching rows' },
};

const WRITE_METHODS: ReadonlySet<Op['method']> = new Set(['post', 'put', 'patch', 'delete']);

/** cors.ts: a change asked by a page of another origin, without API tokens. */
const ORIGIN_NOT_ALLOWED =
  'ORIGIN_NOT_ALLOWED: without API tokens (FFLEET_API_TOKENS), a change asked by a page of another ' +
  'origin (an `Origin` that is neither this host nor in FFLEET_CORS_ORIGINS, or without one a ' +
  '`Sec-Fetch-Site` of cross-site or same-site). A CORS preflight (OPTIONS) from an origin not in ' +
  'FFLEET_CORS_ORIGINS gets the same 403, with or without API tokens.';

function toSchema(schema: z.ZodType, io: 'input' | 'output') {
  const json = z.toJSONSchema(schema, { io, unrepresentable: 'any' }) as Record<string, unknown>;
  delete json.$schema;
  return json;
}

type JsonSchema = Record<string, unknown>;

/** Whether `schema` (as z.toJSONSchema writes them) takes `null`. */
function takesNull(schema: JsonSchema): boolean {
  const type = schema.type;
  if (type === 'null' || (Array.isArray(type) && type.includes('null'))) return true;
  for (const k of ['anyOf', 'oneOf'] as const) {
    const branches = schema[k];
    if (Array.isArray(branches) && branches.some((b) => takesNull(b as JsonSchema))) return true;
  }
  if ('const' in schema) return schema.const === null;
  if (Array.isArray(schema.enum)) return schema.enum.includes(null);
  return type === undefined && !('$ref' in schema) && !('allOf' in schema) && !('not' in schema);
}

/**
 * null-as-absent.ts in JSON Schema: an optional field that does not take `null` takes it too (as left
 * out), in nested objects (also under a nullable) and in arrays of objects, as `withoutNullOptionals`
 * walks them; free-form objects (no `properties`) and unions are not walked there, nor here.
 */
function nullAsAbsent(schema: JsonSchema): JsonSchema {
  const branches = schema.anyOf as JsonSchema[] | undefined;
  if (branches?.length === 2 && branches.some((b) => b.type === 'null')) {
    return { ...schema, anyOf: branches.map((b) => (b.type === 'null' ? b : nullAsAbsent(b))) };
  }
  if (schema.type === 'array' && schema.items) {
    return { ...schema, items: nullAsAbsent(schema.items as JsonSchema) };
  }
  const properties = schema.properties as Record<string, JsonSchema> | undefined;
  if (schema.type !== 'object' || !properties) return schema;
  const required = new Set((schema.required as string[] | undefined) ?? []);
  const out: Record<string, JsonSchema> = {};
  for (const [key, field] of Object.entries(properties)) {
    const walked = nullAsAbsent(field);
    out[key] = required.has(key) || takesNull(walked) ? walked : { anyOf: [walked, { type: 'null' }] };
  }
  return { ...schema, properties: out };
}

/** A request body component as the routes read it (BODY_READING). */
function asRead(name: string, schema: JsonSchema): JsonSchema {
  const reading = BODY_READING[name];
  if (!reading) return schema;
  let out = reading.nullIsAbsent ? nullAsAbsent(schema) : schema;
  if (reading.readOnly?.length) {
    const properties = { ...(out.properties as Record<string, JsonSchema>) };
    for (const k of reading.readOnly) {
      properties[k] ??= {
        description: 'read-only (a field of the response, sent back as read): accepted and ignored',
      };
    }
    out = { ...out, properties };
  }
  return out;
}

/** Build the OpenAPI 3.1 document from the shared schemas and the route table. */
export function buildOpenApi(version: string) {
  const schemas: Record<string, unknown> = {};
  for (const [name, schema] of Object.entries(COMPONENTS)) {
    const request = name.endsWith('Create') || name.endsWith('Patch');
    schemas[name] = request ? asRead(name, toSchema(schema, 'input')) : toSchema(schema, 'output');
  }
  const paths: Record<string, Record<string, unknown>> = {};
  for (const op of OPS) {
    const params: unknown[] = [];
    if (op.path.includes('{id}'))
      params.push({ name: 'id', in: 'path', required: true, schema: { type: 'string' } });
    for (const q of op.query ?? []) params.push(...queryParams(q));
    const status = String(op.status ?? 200);
    const idempotent = op.method === 'post' && (op.path === '/api/v1/tasks' || op.path === '/api/v1/batches');
    const headers: Record<string, unknown> = {};
    if (op.list) headers['X-Total'] = HEADERS.XTotal;
    if (status === '201') headers.Location = HEADERS.Location;
    if (idempotent) headers['Idempotent-Replayed'] = HEADERS.IdempotentReplayed;
    const content = op.response
      ? {
          'application/json': {
            schema: op.list ? { type: 'array', items: ref(op.response) } : ref(op.response),
          },
        }
      : op.text
        ? { [op.text]: { schema: { type: 'string' } } }
        : undefined;
    const ok = {
      description: status === '204' ? 'No Content' : status === '202' ? 'Accepted' : 'OK',
      ...(Object.keys(headers).length ? { headers } : {}),
      ...(content ? { content } : {}),
    };
    const open = isPublicPath(op.path);
    const responses: Record<string, unknown> = open
      ? { [status]: ok }
      : {
          [status]: ok,
          '401': problem('missing or invalid token', { 'WWW-Authenticate': HEADERS.WwwAuthenticate }),
        };
    if (op.body)
      Object.assign(responses, {
        '400': problem('malformed JSON'),
        '413': problem('body too large'),
        '415': problem('not JSON'),
        '422': problem('validation failed'),
      });
    // Every write to /api/* passes the body limit, also where the route reads no body.
    if (!op.body && op.method !== 'get' && op.path.startsWith('/api/'))
      responses['413'] = problem('a body (which this route does not read) too large');
    if (op.query) responses['400'] = problem('bad query');
    if (op.path.includes('{id}')) responses['404'] = problem('unknown id');
    if (idempotent) {
      responses['400'] = problem('malformed JSON, or an Idempotency-Key of 0 or more than 255 characters');
      params.push({
        name: 'Idempotency-Key',
        in: 'header',
        required: false,
        description:
          'Within 24 h the same key with the same body answers the first response again (Idempotent-Replayed: true); another body is a 409 IDEMPOTENCY_KEY_REUSED. Bodies are compared as read: key order, whitespace and a null read as a field left out do not count. An empty key (or a longer one) is a 400 INVALID_IDEMPOTENCY_KEY.',
        schema: { type: 'string', minLength: 1, maxLength: 255 },
      });
    }
    if (op.path === '/api/v1/events')
      params.push({
        name: 'Last-Event-ID',
        in: 'header',
        required: false,
        schema: { type: 'string' },
        description: LAST_EVENT_ID,
      });
    if (op.conflict) responses['409'] = problem(op.conflict);
    const forbidden: string[] = [];
    if (op.path === '/api/v1/agents/{id}/token')
      forbidden.push(
        'API_TOKENS_REQUIRED: no API tokens are configured: credentials are handed out only to authenticated clients',
      );
    if (WRITE_METHODS.has(op.method)) forbidden.push(ORIGIN_NOT_ALLOWED);
    if (forbidden.length) responses['403'] = problem(forbidden.join('; '));
    if (op.path === '/health')
      responses['503'] = {
        description: 'the database is unreachable (db: unreachable) or refuses writes (db: failing)',
        content: { 'application/json': { schema: ref('Health') } },
      };
    else if (op.path.startsWith('/api/v1/') && !WITHOUT_DATABASE.has(op.path))
      responses['503'] = problem(
        'DATABASE_UNAVAILABLE: the database is unavailable (unreachable, out of disk, shutting down); retry later',
        { 'Retry-After': HEADERS.RetryAfter },
      );
    paths[op.path] ??= {};
    paths[op.path]![op.method] = {
      summary: op.summary,
      tags: [op.tag],
      // Served without a token (public-paths.ts): the document's global bearer requirement is lifted.
      ...(open ? { security: [] } : {}),
      parameters: params,
      ...(op.body
        ? {
            requestBody: {
              required: true,
              ...bodyDescription(op.body),
              content: { 'application/json': { schema: ref(op.body) } },
            },
          }
        : {}),
      responses,
    };
  }
  return {
    openapi: '3.1.0',
    info: { title: 'ffleet', version, description: 'Media transcoding task service: control plane API' },
    servers: [{ url: '/' }],
    components: { schemas, securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
    security: [{ bearer: [] }],
    paths,
  };
}

/** What the request body's schema alone does not say. */
function bodyDescription(name: string): { description?: string } {
  const reading = BODY_READING[name];
  const parts: string[] = [];
  // null-as-absent.ts: creates and replaces read FFmate's `null` for "not set".
  if (reading?.nullIsAbsent)
    parts.push('`null` on an optional field that does not take `null` reads as leaving it out');
  if (reading?.readOnly?.length)
    parts.push(
      `the response's read-only fields (${reading.readOnly.join(', ')}) may be sent back and are ignored, so a GET's answer can be sent again`,
    );
  return parts.length ? { description: parts.join('; ') } : {};
}
