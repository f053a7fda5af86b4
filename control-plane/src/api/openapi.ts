import * as S from '@ffleet/shared';
import { z } from 'zod';
import { isPublicPath } from './public-paths.ts';

type Op = {
  method: 'get' | 'post' | 'put' | 'patch' | 'delete';
  path: string;
  summary: string;
  tag: string;
  body?: string;
  response?: string;
  list?: boolean;
  status?: number;
  query?: string[];
};

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
};

const PAGE = ['page', 'perPage'];

/** Query parameters documented beyond "a string" (the rest are plain strings; page/perPage integers). */
const QUERY_DOCS: Record<string, { schema: object; description: string }> = {
  name: {
    schema: { type: 'string', maxLength: 200 },
    description:
      'only presets whose name contains this text, ignoring case (% _ and \\ match themselves); blank: all',
  },
  deliveryId: {
    schema: { type: 'string', format: 'uuid' },
    description: "only the attempts of this delivery (one event's retries to one target)",
  },
};

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
  },
  {
    method: 'get',
    path: '/api/v1/tasks',
    summary: 'List tasks (newest first)',
    tag: 'tasks',
    response: 'Task',
    list: true,
    query: [...PAGE, 'status', 'source', 'batch', 'preset', 'agent', 'q'],
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
  },
  {
    method: 'post',
    path: '/api/v1/tasks/{id}/cancel',
    summary: 'Cancel a task (alias of PATCH)',
    tag: 'tasks',
    response: 'Task',
  },
  {
    method: 'patch',
    path: '/api/v1/tasks/{id}/restart',
    summary: 'Restart a finished task',
    tag: 'tasks',
    response: 'Task',
  },
  {
    method: 'post',
    path: '/api/v1/tasks/{id}/restart',
    summary: 'Restart a finished task (alias of PATCH)',
    tag: 'tasks',
    response: 'Task',
  },
  {
    method: 'get',
    path: '/api/v1/tasks/{id}/logs',
    summary: 'Captured script and transcoder output (text)',
    tag: 'tasks',
  },
  {
    method: 'post',
    path: '/api/v1/batches',
    summary: 'Create a batch (all or nothing)',
    tag: 'batches',
    body: 'BatchCreate',
    response: 'Batch',
    status: 201,
  },
  {
    method: 'get',
    path: '/api/v1/batches',
    summary: 'List batches',
    tag: 'batches',
    response: 'Batch',
    list: true,
    query: PAGE,
  },
  { method: 'get', path: '/api/v1/batches/{id}', summary: 'Get a batch', tag: 'batches', response: 'Batch' },
  {
    method: 'get',
    path: '/api/v1/batches/{id}/tasks',
    summary: 'Tasks of a batch',
    tag: 'batches',
    response: 'Task',
    list: true,
    query: PAGE,
  },
  {
    method: 'patch',
    path: '/api/v1/batches/{id}/cancel',
    summary: 'Cancel every unfinished task of a batch',
    tag: 'batches',
    response: 'Batch',
  },
  {
    method: 'post',
    path: '/api/v1/batches/{id}/cancel',
    summary: 'Cancel a batch (alias of PATCH)',
    tag: 'batches',
    response: 'Batch',
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
    query: [...PAGE, 'name'],
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
  },
  {
    method: 'post',
    path: '/api/v1/watchfolders',
    summary: 'Create a watchfolder',
    tag: 'watchfolders',
    body: 'WatchfolderCreate',
    response: 'Watchfolder',
    status: 201,
  },
  {
    method: 'get',
    path: '/api/v1/watchfolders',
    summary: 'List watchfolders',
    tag: 'watchfolders',
    response: 'Watchfolder',
    list: true,
    query: PAGE,
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
  },
  {
    method: 'patch',
    path: '/api/v1/watchfolders/{id}',
    summary: 'Change some fields of a watchfolder (e.g. {"suspended": true}); the rest stays as stored',
    tag: 'watchfolders',
    body: 'WatchfolderPatch',
    response: 'Watchfolder',
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
    query: PAGE,
  },
  {
    method: 'get',
    path: '/api/v1/webhooks/executions',
    summary: 'Delivery attempts (newest first); `deliveryId` follows the retries of one delivery',
    tag: 'webhooks',
    response: 'WebhookExecution',
    list: true,
    query: [...PAGE, 'webhook', 'event', 'success', 'task', 'deliveryId'],
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
    status: 202,
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
    query: PAGE,
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
  },
  {
    method: 'post',
    path: '/api/v1/agents/{id}/token',
    summary:
      'A new own token for the agent (id or name, also a name not seen yet), revoking the one before: its connection with the old token is closed and refused from then on. Needs API tokens (403 without); 409 with an external broker (MQTT_URL), which checks agent logins itself',
    tag: 'agents',
    response: 'AgentTokenIssued',
  },
  {
    method: 'get',
    path: '/api/v1/events',
    summary:
      'Server-sent events (same payload as webhooks); `events` = comma-separated event names to receive; ' +
      'resume after an event id with the Last-Event-ID header (or `lastEventId`): the first `ready` event ' +
      'says whether it was resumed',
    tag: 'system',
    query: ['events', 'lastEventId'],
  },
  { method: 'get', path: '/api/v1/version', summary: 'Version', tag: 'system' },
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
  { method: 'get', path: '/health', summary: 'Health (503 when the database is unreachable)', tag: 'system' },
  { method: 'get', path: '/metrics', summary: 'Prometheus metrics', tag: 'system' },
];

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const problem = (description: string) => ({
  description,
  content: { 'application/problem+json': { schema: ref('Problem') } },
});

function toSchema(schema: z.ZodType, io: 'input' | 'output') {
  const json = z.toJSONSchema(schema, { io, unrepresentable: 'any' }) as Record<string, unknown>;
  delete json.$schema;
  return json;
}

/** Build the OpenAPI 3.1 document from the shared schemas and the route table. */
export function buildOpenApi(version: string) {
  const schemas: Record<string, unknown> = {};
  for (const [name, schema] of Object.entries(COMPONENTS)) {
    schemas[name] = toSchema(schema, name.endsWith('Create') || name.endsWith('Patch') ? 'input' : 'output');
  }
  const paths: Record<string, Record<string, unknown>> = {};
  for (const op of OPS) {
    const params: unknown[] = [];
    if (op.path.includes('{id}'))
      params.push({ name: 'id', in: 'path', required: true, schema: { type: 'string' } });
    for (const q of op.query ?? [])
      params.push({
        name: q,
        in: 'query',
        required: false,
        ...(QUERY_DOCS[q] ?? { schema: { type: q === 'page' || q === 'perPage' ? 'integer' : 'string' } }),
      });
    const status = String(op.status ?? 200);
    const ok = op.response
      ? {
          description: 'OK',
          content: {
            'application/json': {
              schema: op.list ? { type: 'array', items: ref(op.response) } : ref(op.response),
            },
          },
          ...(op.list
            ? { headers: { 'X-Total': { schema: { type: 'integer' }, description: 'total matching rows' } } }
            : {}),
        }
      : { description: status === '204' ? 'No Content' : 'OK' };
    const open = isPublicPath(op.path);
    const responses: Record<string, unknown> = open
      ? { [status]: ok }
      : { [status]: ok, '401': problem('missing or invalid token') };
    if (op.body)
      Object.assign(responses, {
        '400': problem('malformed JSON'),
        '413': problem('body too large'),
        '415': problem('not JSON'),
        '422': problem('validation failed'),
      });
    if (op.query) responses['400'] = problem('bad query');
    if (op.path.includes('{id}')) responses['404'] = problem('unknown id');
    const idempotent = op.method === 'post' && (op.path === '/api/v1/tasks' || op.path === '/api/v1/batches');
    if (idempotent) {
      params.push({
        name: 'Idempotency-Key',
        in: 'header',
        required: false,
        description:
          'Within 24 h the same key with the same body answers the first response again (Idempotent-Replayed: true); another body is a 409 IDEMPOTENCY_KEY_REUSED. Bodies are compared as read: key order, whitespace and a null read as a field left out do not count.',
        schema: { type: 'string', maxLength: 255 },
      });
    }
    if (op.path === '/api/v1/events')
      params.push({
        name: 'Last-Event-ID',
        in: 'header',
        required: false,
        schema: { type: 'string', maxLength: 100 },
        description: 'resume after this event id; the first `ready` event says whether it was resumed',
      });
    if (
      idempotent ||
      /cancel|restart|redeliver|presets\/\{id\}|watchfolders/.test(op.path) ||
      (op.method === 'delete' && op.path === '/api/v1/agents/{id}') ||
      op.path === '/api/v1/agents/{id}/token'
    ) {
      responses['409'] = problem(idempotent ? 'Idempotency-Key reused with another body' : 'state conflict');
    }
    if (op.path === '/api/v1/agents/{id}/token')
      responses['403'] = problem(
        'no API tokens are configured: credentials are handed out only to authenticated clients',
      );
    if (op.path === '/health') responses['503'] = { description: 'the database is unreachable' };
    else if (op.path.startsWith('/api/v1/') && !WITHOUT_DATABASE.has(op.path))
      responses['503'] = problem(
        'the database is unavailable (unreachable, out of disk, shutting down); retry later',
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
              // null-as-absent.ts: creates and replaces read FFmate's `null` for "not set".
              ...(op.body.endsWith('Create')
                ? {
                    description:
                      '`null` on an optional field that does not take `null` reads as leaving it out',
                  }
                : {}),
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
