import type { TaskStatus } from '@ffleet/shared';
import { sql } from 'drizzle-orm';
import {
  bigint,
  boolean,
  doublePrecision,
  index,
  integer,
  jsonb,
  pgTable,
  text,
  uniqueIndex,
  uuid,
} from 'drizzle-orm/pg-core';

// Timestamps are Unix milliseconds (CONTRACT.md) stored as bigint; mode 'number' is safe until year 287396.
const ms = (name: string) => bigint(name, { mode: 'number' }).notNull().default(0);

/**
 * The status lists of the partial indexes on tasks, written out as SQL literals (`IN ('A','B')`): the
 * indexes' predicates and the queries that must use them are built from these, so they cannot drift
 * apart. Literals, not parameters: only a predicate the planner can prove lets a prepared statement's
 * generic plan use a partial index.
 */
const inStatuses = (statuses: readonly TaskStatus[]) =>
  sql.raw(`IN (${statuses.map((s) => `'${s}'`).join(',')})`);
const RUNNING = inStatuses(['PRE_PROCESSING', 'RUNNING']);
const OPEN = inStatuses(['QUEUED', 'PRE_PROCESSING', 'RUNNING']);

/** A processing step as stored (raw/resolved pairs, like the snapshot). */
export type StoredStep = {
  scriptPath: { raw: string; resolved: string };
  sidecarPath: { raw: string; resolved: string };
  importSidecar: boolean;
  startedAt: number;
  finishedAt: number;
  error: string;
};

/**
 * What a requeue clears of the attempt it gives up (agent, start, resolved paths, steps), kept so that
 * the attempt's late success can still finish the task while no other attempt has started
 * (reports.ts adoptLateSuccess).
 */
export type LostRun = {
  agentId: string | null;
  agentName: string | null;
  startedAt: number;
  commandResolved: string;
  inputResolved: string;
  outputResolved: string;
  preProcessing: StoredStep | null;
  postProcessing: StoredStep | null;
};

export const tasks = pgTable(
  'tasks',
  {
    id: uuid('id').primaryKey(),
    name: text('name').notNull(),
    commandRaw: text('command_raw').notNull(),
    commandResolved: text('command_resolved').notNull().default(''),
    inputRaw: text('input_raw').notNull().default(''),
    inputResolved: text('input_resolved').notNull().default(''),
    outputRaw: text('output_raw').notNull().default(''),
    outputResolved: text('output_resolved').notNull().default(''),
    metadata: jsonb('metadata').$type<Record<string, unknown>>().notNull().default({}),
    status: text('status').notNull(),
    progress: doublePrecision('progress').notNull().default(0),
    remaining: doublePrecision('remaining').notNull().default(0),
    error: text('error').notNull().default(''),
    priority: integer('priority').notNull().default(0),
    source: text('source').notNull().default('api'),
    preProcessing: jsonb('pre_processing').$type<StoredStep | null>(),
    postProcessing: jsonb('post_processing').$type<StoredStep | null>(),
    startedAt: ms('started_at'),
    finishedAt: ms('finished_at'),
    createdAt: ms('created_at'),
    updatedAt: ms('updated_at'),
    presetId: uuid('preset_id'),
    batchId: uuid('batch_id'),
    webhooks: jsonb('webhooks').$type<{ event: string; url: string }[]>().notNull().default([]),
    requires: text('requires').array().notNull().default(sql`'{}'::text[]`),
    // Fleet: the current attempt, its fencing token and lease.
    attempt: integer('attempt').notNull().default(0),
    maxAttempts: integer('max_attempts').notNull().default(3),
    agentId: uuid('agent_id'),
    agentName: text('agent_name'),
    leaseToken: text('lease_token'),
    leaseExpiresAt: ms('lease_expires_at'),
    /** Highest report seq applied for the current attempt (duplicates are ignored). */
    reportSeq: integer('report_seq').notNull().default(-1),
    /**
     * The last attempt lost with its agent (lease expired, agent restarted without it): its lease token,
     * number and highest report seq. That agent's late reports are stale, but the output they carry is
     * still stored, under that attempt, once per seq.
     */
    lostLeaseToken: text('lost_lease_token'),
    lostAttempt: integer('lost_attempt').notNull().default(0),
    lostReportSeq: integer('lost_report_seq').notNull().default(-1),
    /** The requeued lost attempt's run (null when the last loss did not requeue). */
    lostRun: jsonb('lost_run').$type<LostRun | null>(),
    /** Set when a running task was asked to stop; the agent finishes the cancel. */
    cancelRequested: boolean('cancel_requested').notNull().default(false),
    /** Watchfolder idempotency key: (watchfolder, relative path, size, mtime). */
    watchKey: text('watch_key'),
    watchfolderId: uuid('watchfolder_id'),
  },
  (t) => [
    // The claim query: WHERE status='QUEUED' ORDER BY priority DESC, created_at, id.
    index('tasks_claim_idx').on(t.status, t.priority.desc(), t.createdAt, t.id),
    index('tasks_created_idx').on(t.createdAt.desc(), t.id.desc()),
    index('tasks_status_created_idx').on(t.status, t.createdAt.desc()),
    // Index diet (migration 0004). Every update that moves a task's status writes a new entry into
    // every index of the table that covers the row, so a task's three row versions (insert, claim,
    // result) paid for indexes nothing reads: columns that are NULL for most tasks are indexed only
    // where set; agent_id alone had no reader (running-task lookups use tasks_agent_running_idx).
    index('tasks_batch_idx').on(t.batchId, t.createdAt.desc()).where(sql`batch_id IS NOT NULL`),
    // "Does this batch still have open tasks?" after each of its tasks finishes: one entry to find,
    // whatever the batch's size (a count of the batch's open tasks read the whole batch every time).
    // created_at is there for the check's ORDER BY, which keeps the planner on this index.
    index('tasks_batch_open_idx')
      .on(t.batchId, t.createdAt)
      .where(sql`batch_id IS NOT NULL AND status ${OPEN}`),
    index('tasks_preset_idx').on(t.presetId).where(sql`preset_id IS NOT NULL`),
    // The free-slot count inside a claim: this agent's running tasks. The lease sweeper reads it too
    // (all running tasks, lease checked on the row): with no index on lease_expires_at, a progress
    // report or lease renewal changes no indexed column and is a HOT update (no index writes).
    index('tasks_agent_running_idx').on(t.agentId).where(sql`status ${RUNNING}`),
    index('tasks_source_idx').on(t.source, t.createdAt.desc()),
    uniqueIndex('tasks_watch_key_idx').on(t.watchKey).where(sql`watch_key IS NOT NULL`),
  ],
);

/** A task an agent holds: the predicate of tasks_agent_running_idx. */
export const taskIsRunning = sql`${tasks.status} ${RUNNING}`;
/** A task not finished yet (queued or running): the status part of tasks_batch_open_idx's predicate. */
export const taskIsOpen = sql`${tasks.status} ${OPEN}`;

export const taskLogs = pgTable(
  'task_logs',
  {
    id: bigint('id', { mode: 'number' }).primaryKey().generatedAlwaysAsIdentity(),
    taskId: uuid('task_id').notNull(),
    attempt: integer('attempt').notNull(),
    step: text('step').notNull(),
    text: text('text').notNull(),
    createdAt: ms('created_at'),
  },
  (t) => [index('task_logs_task_idx').on(t.taskId, t.id)],
);

export const presets = pgTable(
  'presets',
  {
    id: uuid('id').primaryKey(),
    name: text('name').notNull(),
    description: text('description').notNull().default(''),
    command: text('command').notNull(),
    outputFile: text('output_file').notNull().default(''),
    priority: integer('priority').notNull().default(0),
    preProcessing: jsonb('pre_processing').$type<{
      scriptPath: string;
      sidecarPath: string;
      importSidecar: boolean;
    } | null>(),
    postProcessing: jsonb('post_processing').$type<{ scriptPath: string; sidecarPath: string } | null>(),
    webhooks: jsonb('webhooks').$type<{ event: string; url: string }[]>().notNull().default([]),
    requires: text('requires').array().notNull().default(sql`'{}'::text[]`),
    createdAt: ms('created_at'),
    updatedAt: ms('updated_at'),
  },
  (t) => [index('presets_created_idx').on(t.createdAt.desc())],
);

export const batches = pgTable(
  'batches',
  {
    id: uuid('id').primaryKey(),
    name: text('name').notNull().default(''),
    status: text('status').notNull().default('RUNNING'),
    taskCount: integer('task_count').notNull().default(0),
    createdAt: ms('created_at'),
    updatedAt: ms('updated_at'),
    finishedAt: ms('finished_at'),
  },
  (t) => [index('batches_created_idx').on(t.createdAt.desc())],
);

export const watchfolders = pgTable(
  'watchfolders',
  {
    id: uuid('id').primaryKey(),
    name: text('name').notNull(),
    description: text('description').notNull().default(''),
    interval: integer('interval').notNull(),
    growthChecks: integer('growth_checks').notNull(),
    presetId: uuid('preset_id').notNull(),
    path: text('path').notNull(),
    suspended: boolean('suspended').notNull().default(false),
    filter: jsonb('filter')
      .$type<{ extensions: { include: string[]; exclude: string[] } }>()
      .notNull()
      .default({ extensions: { include: [], exclude: [] } }),
    agent: text('agent'),
    assignedAgentId: uuid('assigned_agent_id'),
    lastCheck: ms('last_check'),
    error: text('error').notNull().default(''),
    createdAt: ms('created_at'),
    updatedAt: ms('updated_at'),
  },
  (t) => [
    uniqueIndex('watchfolders_name_idx').on(t.name),
    index('watchfolders_created_idx').on(t.createdAt.desc()),
  ],
);

export const webhooks = pgTable(
  'webhooks',
  {
    id: uuid('id').primaryKey(),
    event: text('event').notNull(),
    url: text('url').notNull(),
    secret: text('secret'),
    createdAt: ms('created_at'),
    updatedAt: ms('updated_at'),
  },
  (t) => [index('webhooks_event_idx').on(t.event), index('webhooks_created_idx').on(t.createdAt.desc())],
);

/** Every emitted event (the outbox's source of truth; SSE and deliveries derive from it). */
export const events = pgTable(
  'events',
  {
    id: uuid('id').primaryKey(),
    event: text('event').notNull(),
    payload: jsonb('payload')
      .$type<{ id: string; event: string; timestamp: string; data: unknown }>()
      .notNull(),
    createdAt: ms('created_at'),
  },
  (t) => [index('events_created_idx').on(t.createdAt)],
);

/**
 * One row per (event, target URL): the webhook outbox. Written in the transaction of the change
 * that caused the event; the dispatcher claims due rows with SKIP LOCKED.
 */
export const deliveries = pgTable(
  'deliveries',
  {
    id: uuid('id').primaryKey(),
    eventId: uuid('event_id').notNull(),
    event: text('event').notNull(),
    webhookId: uuid('webhook_id'),
    source: text('source').notNull(),
    url: text('url').notNull(),
    secret: text('secret'),
    taskId: uuid('task_id'),
    /** A task.updated that only changed progress/remaining (coalesced per task per 5 s). */
    progressOnly: boolean('progress_only').notNull().default(false),
    state: text('state').notNull().default('pending'),
    attempts: integer('attempts').notNull().default(0),
    nextAttemptAt: ms('next_attempt_at'),
    lockedUntil: ms('locked_until'),
    lastError: text('last_error').notNull().default(''),
    createdAt: ms('created_at'),
    updatedAt: ms('updated_at'),
    /**
     * Creation order, exact: the events of one task applied in one group commit share a millisecond
     * of `created_at`, and ordering them by their random ids delivered a task's DONE before its last
     * RUNNING. Rows are numbered in the order their events were emitted (eventsStatement).
     */
    seq: bigint('seq', { mode: 'number' }).notNull().generatedAlwaysAsIdentity(),
  },
  (t) => [
    index('deliveries_due_idx').on(t.nextAttemptAt).where(sql`state = 'pending'`),
    index('deliveries_task_idx').on(t.taskId, t.url),
    // A webhook's PUT (new target) and DELETE (drop what is left) touch its pending rows only.
    index('deliveries_webhook_pending_idx').on(t.webhookId).where(sql`state = 'pending'`),
    // Coalescing looks up a target's pending and last-attempted progress deliveries.
    index('deliveries_pending_target_idx').on(t.taskId, t.url, t.seq).where(sql`state = 'pending'`),
    index('deliveries_progress_sent_idx')
      .on(t.taskId, t.url, t.updatedAt)
      .where(sql`progress_only AND attempts > 0`),
  ],
);

export const webhookExecutions = pgTable(
  'webhook_executions',
  {
    id: uuid('id').primaryKey(),
    deliveryId: uuid('delivery_id').notNull(),
    webhookId: uuid('webhook_id'),
    source: text('source').notNull(),
    event: text('event').notNull(),
    url: text('url').notNull(),
    attempt: integer('attempt').notNull(),
    request: jsonb('request')
      .$type<{ method: string; headers: Record<string, string>; body: string }>()
      .notNull(),
    response: jsonb('response').$type<{
      status: number;
      headers: Record<string, string>;
      body: string;
    } | null>(),
    error: text('error').notNull().default(''),
    success: boolean('success').notNull(),
    durationMs: integer('duration_ms').notNull(),
    taskId: uuid('task_id'),
    createdAt: ms('created_at'),
  },
  (t) => [
    index('executions_created_idx').on(t.createdAt.desc()),
    index('executions_webhook_idx').on(t.webhookId),
    index('executions_task_idx').on(t.taskId),
    index('executions_delivery_idx').on(t.deliveryId),
  ],
);

export const agents = pgTable(
  'agents',
  {
    id: uuid('id').primaryKey(),
    name: text('name').notNull(),
    online: boolean('online').notNull().default(false),
    bootId: text('boot_id').notNull().default(''),
    version: text('version').notNull().default(''),
    protocol: integer('protocol').notNull().default(0),
    hostname: text('hostname').notNull().default(''),
    os: text('os').notNull().default(''),
    arch: text('arch').notNull().default(''),
    transcoder: jsonb('transcoder').$type<{ path: string; version: string } | null>(),
    transcoderError: text('transcoder_error').notNull().default(''),
    encoders: text('encoders').array().notNull().default(sql`'{}'::text[]`),
    hwaccels: text('hwaccels').array().notNull().default(sql`'{}'::text[]`),
    /** Labels and slots the agent reports from its own config. */
    reportedLabels: text('reported_labels').array().notNull().default(sql`'{}'::text[]`),
    reportedSlots: integer('reported_slots').notNull().default(0),
    /** Operator overrides from PATCH /agents/{id}; null = use the reported value. */
    labelsOverride: text('labels_override').array(),
    slotsOverride: integer('slots_override'),
    paused: boolean('paused').notNull().default(false),
    /**
     * The agent said in its birth that it is shutting down (a first SIGTERM): it claims nothing more
     * and leaves once its running tasks are done. Shown as `draining`; cleared by its next birth or will.
     */
    shuttingDown: boolean('shutting_down').notNull().default(false),
    lastSeen: ms('last_seen'),
    connectedAt: ms('connected_at'),
    createdAt: ms('created_at'),
  },
  (t) => [uniqueIndex('agents_name_idx').on(t.name)],
);

/**
 * The generation of each agent name's own token (agentTokenFor): `POST /api/v1/agents/{id}/token` moves
 * it on, which revokes the token before it. A name without a row is at generation 0. Kept by name and
 * apart from `agents`, so deleting an agent's row does not bring a revoked token back.
 */
export const agentCredentials = pgTable('agent_credentials', {
  name: text('name').primaryKey(),
  generation: integer('generation').notNull(),
  rotatedAt: ms('rotated_at'),
});

export const idempotencyKeys = pgTable(
  'idempotency_keys',
  {
    key: text('key').notNull(),
    route: text('route').notNull(),
    bodyHash: text('body_hash').notNull(),
    status: integer('status').notNull(),
    response: jsonb('response').notNull(),
    location: text('location'),
    createdAt: ms('created_at'),
  },
  (t) => [uniqueIndex('idempotency_route_key_idx').on(t.route, t.key)],
);

/**
 * Exact task counts for list totals (X-Total) without counting the tasks table: triggers on `tasks`
 * append signed deltas per status (migration 0002); the sum per status is the count. Rows are only ever
 * inserted by writers (no row locks, no contention), and folded into one row per status from time to
 * time (compactTaskCounts).
 */
export const taskCounts = pgTable('task_counts', {
  status: text('status').notNull(),
  n: bigint('n', { mode: 'number' }).notNull(),
});
