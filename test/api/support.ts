// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${NAME} wildcards are literal request text.

import { randomUUID } from 'node:crypto';
import { type ClaimedTask, Problem, type TaskReport } from '@ffleet/shared';
import { type SQL, sql } from 'drizzle-orm';
import { expect } from 'vitest';
import type { Database } from '../../control-plane/src/db/client.ts';
import { agents, deliveries, webhookExecutions } from '../../control-plane/src/db/schema.ts';
import { claimTasksIn } from '../../control-plane/src/scheduler/claim.ts';
import { GroupCommit } from '../../control-plane/src/scheduler/group-commit.ts';
import { applyReportIn } from '../../control-plane/src/scheduler/reports.ts';
import type { FleetHooks, ServiceContext } from '../../control-plane/src/services/context.ts';
import type { TestApp } from '../helpers/app.ts';
import { buildApp } from '../helpers/app.ts';

/** Every table the API writes; hostile and failure tests assert none of them changed. */
export const WRITTEN_TABLES = [
  'tasks',
  'batches',
  'presets',
  'watchfolders',
  'webhooks',
  'events',
  'deliveries',
  'idempotency_keys',
  'agents',
  'task_logs',
] as const;
export type TableName = (typeof WRITTEN_TABLES)[number];

/** Rows of a raw query, whatever the driver. */
export const query = <T = Record<string, unknown>>(db: Database, q: SQL): Promise<T[]> =>
  db.rows<T>(db.db, q);

/** Row count of every table the API writes. */
export async function countRows(db: Database): Promise<Record<TableName, number>> {
  const out = {} as Record<TableName, number>;
  for (const t of WRITTEN_TABLES) {
    const [r] = await query<{ n: number }>(db, sql.raw(`select count(*)::int as n from ${t}`));
    out[t] = Number(r?.n ?? 0);
  }
  return out;
}

/** The events table's rows of one event name, oldest first. */
export async function eventRows(db: Database, event?: string) {
  const rows = await query<{ id: string; event: string; payload: { data: Record<string, unknown> } }>(
    db,
    event
      ? sql`select id, event, payload from events where event = ${event} order by created_at, id`
      : sql`select id, event, payload from events order by created_at, id`,
  );
  return rows.map((r) => ({
    ...r,
    payload: typeof r.payload === 'string' ? JSON.parse(r.payload) : r.payload,
  }));
}

/** Deliveries written for one event id. */
export const deliveryRows = (db: Database, eventId: string) =>
  query<{ event: string; url: string; source: string; webhook_id: string | null; task_id: string | null }>(
    db,
    sql`select event, url, source, webhook_id, task_id from deliveries where event_id = ${eventId} order by url`,
  );

/**
 * Assert an RFC 9457 problem response with the given status (and code), returning the body. Every
 * error of the API must look like this, so the tests call it for every 4xx.
 */
export async function expectProblem(res: Response, status: number, code?: string): Promise<Problem> {
  const text = await res.text();
  expect(res.status, text).toBe(status);
  expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  const body = JSON.parse(text) as Problem;
  expect(Problem.safeParse(body).success, text).toBe(true);
  expect(body.status).toBe(status);
  expect(body.title).not.toBe('');
  expect(body.detail).not.toBe('');
  if (code) expect(body.code).toBe(code);
  return body;
}

/** Distinct paths named by a 422's `errors`, in order (one field may break several rules). */
export const errorPaths = (p: Problem): string[] => [...new Set((p.errors ?? []).map((e) => e.path))];

/** A JSON body plus the `X-Total` header of a list response. */
export async function readList<T = Record<string, unknown>>(
  res: Response,
): Promise<{ items: T[]; total: number }> {
  expect(res.status, await res.clone().text()).toBe(200);
  const total = res.headers.get('x-total');
  expect(total).not.toBeNull();
  return { items: (await res.json()) as T[], total: Number(total) };
}

/** Read a 2xx JSON body, failing with the body text otherwise. */
// biome-ignore lint/suspicious/noExplicitAny: response bodies are checked by assertions, not types.
export async function json<T = Record<string, any>>(res: Response, status = 200): Promise<T> {
  const text = await res.text();
  expect(res.status, text).toBe(status);
  return JSON.parse(text) as T;
}

/** Insert an agent row directly (agents register over MQTT, which these HTTP tests do not run). */
export async function insertAgent(db: Database, over: Partial<typeof agents.$inferInsert> = {}) {
  const now = Date.now();
  const [row] = await db.db
    .insert(agents)
    .values({
      id: randomUUID(),
      name: `agent-${randomUUID().slice(0, 8)}`,
      online: false,
      version: '0.1.0',
      hostname: 'host-a',
      os: 'linux',
      arch: 'amd64',
      transcoder: { path: '/usr/bin/ffmpeg', version: '5.1' },
      encoders: ['libx264'],
      hwaccels: [],
      reportedLabels: ['cpu'],
      reportedSlots: 2,
      lastSeen: now,
      connectedAt: now,
      createdAt: now,
      ...over,
    })
    .returning();
  return row!;
}

/** A report's own fields; the task, attempt and lease come from its claim unless given (stale reports). */
export type ReportFields = Omit<TaskReport, 'taskId' | 'attempt' | 'leaseToken'> & Partial<TaskReport>;

/**
 * A new agent claims up to `max` queued tasks through a group commit, as the scheduler does; `report`
 * applies a report of one of those claims in the same group commit (batch checks at the group's end).
 */
export async function claimAsNewAgent(t: { db: Database; ctx: ServiceContext }, max: number) {
  const agent = await insertAgent(t.db);
  const group = new GroupCommit(t.ctx);
  const now = Date.now();
  const claims = await group.run((tx, ev) =>
    claimTasksIn(tx, ev, now, { id: agent.id, name: agent.name, capabilities: [] }, max, 60_000),
  );
  const report = (claim: ClaimedTask, r: ReportFields) =>
    group.run((tx, ev, scope) =>
      applyReportIn(
        tx,
        ev,
        now,
        agent.id,
        { taskId: claim.task.id, attempt: claim.attempt, leaseToken: claim.leaseToken, ...r } as TaskReport,
        60_000,
        (b) => scope.finishBatch(b),
      ),
    );
  return { agent, now, claims, report };
}

/** Fleet hooks that record their calls (the scheduler is not part of these tests). */
export function recordingFleet() {
  const calls = {
    cancelRunning: [] as string[],
    workAvailable: 0,
    /** The non-empty `requires` lists handed to workAvailable, in order. */
    queuedRequires: [] as string[][],
    watchfoldersChanged: 0,
    agentChanged: [] as string[],
  };
  const fleet: FleetHooks = {
    cancelRunning: (t) => calls.cancelRunning.push(t.id),
    workAvailable: (requires) => {
      calls.workAvailable++;
      for (const r of requires ?? []) if (r.length) calls.queuedRequires.push([...r]);
    },
    watchfoldersChanged: () => {
      calls.watchfoldersChanged++;
    },
    agentChanged: (id) => calls.agentChanged.push(id),
  };
  return { fleet, calls };
}

/** Valid request bodies, one per create schema. */
export const VALID = {
  task: () => ({
    command: '-i ${INPUT_FILE} -c:v libx264 ${OUTPUT_FILE}',
    inputFile: '/media/in/clip.mov',
    outputFile: '/media/out/clip.mp4',
  }),
  preset: () => ({
    name: `preset-${randomUUID().slice(0, 8)}`,
    command: '-i ${INPUT_FILE} -c copy ${OUTPUT_FILE}',
  }),
  watchfolder: (preset: string) => ({
    name: `wf-${randomUUID().slice(0, 8)}`,
    interval: 5,
    growthChecks: 3,
    preset,
    path: '/srv/watch/in',
  }),
  webhook: () => ({ event: 'task.created', url: 'http://127.0.0.1:9/hook' }),
};

export const UUID_RE = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/i;
export const UNKNOWN_ID = '00000000-0000-4000-8000-000000000000';

/**
 * Another app over the same database and services (e.g. with API tokens or another client address):
 * building an app is cheap, a fresh database is not.
 */
export function appVariant(t: TestApp, opts: Parameters<typeof buildApp>[3]) {
  return buildApp(t.ctx, t.bus, t.db, opts);
}

/**
 * A failed attempt of a delivery as the dispatcher leaves it (the delivery row, 4 attempts, and its
 * last execution), to redeliver. Returns the execution's and the delivery's ids.
 */
export async function insertFailedAttempt(
  db: Database,
  d: { webhookId: string | null; url: string; secret: string | null },
): Promise<{ executionId: string; deliveryId: string }> {
  const deliveryId = randomUUID();
  const executionId = randomUUID();
  const source = d.webhookId ? 'global' : 'direct';
  const at = 1_700_000_000_000;
  await db.db.insert(deliveries).values({
    id: deliveryId,
    eventId: randomUUID(),
    event: 'preset.updated',
    source,
    state: 'failed',
    attempts: 4,
    nextAttemptAt: 0,
    lockedUntil: 0,
    createdAt: at,
    updatedAt: at,
    ...d,
  });
  await db.db.insert(webhookExecutions).values({
    id: executionId,
    deliveryId,
    webhookId: d.webhookId,
    source,
    event: 'preset.updated',
    url: d.url,
    attempt: 4,
    request: { method: 'POST', headers: {}, body: '{}' },
    response: null,
    error: 'ECONNREFUSED',
    success: false,
    durationMs: 1,
    createdAt: at,
  });
  return { executionId, deliveryId };
}
