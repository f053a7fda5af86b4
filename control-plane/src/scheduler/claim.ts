import type { ClaimedTask } from '@ffleet/shared';
import { and, asc, eq, getTableColumns, sql } from 'drizzle-orm';
import { textArrayLiteral } from '../db/array-literal.ts';
import type { Db } from '../db/client.ts';
import { type TaskRow, toTask } from '../db/mappers.ts';
import { taskIsRunning, tasks } from '../db/schema.ts';
import { ph, runCached } from '../db/statement-cache.ts';
import { type EmittedEvents, webhooksExist } from '../events/outbox.ts';
import { emitTaskUpdated, isUuid } from '../services/tasks.ts';

/** Pre-processing is "defined" when it names a script or a sidecar (the runner's rule too). */
const hasPreProcessing = sql`(coalesce(${tasks.preProcessing}->'scriptPath'->>'raw', '') <> ''
        OR coalesce(${tasks.preProcessing}->'sidecarPath'->>'raw', '') <> '')`;

/** The bound form of each capability list, kept while the list lives (the fleet keeps one per agent row). */
const boundCapabilities = new WeakMap<readonly string[], string>();

function capabilitiesParam(caps: readonly string[]): string {
  let bound = boundCapabilities.get(caps);
  if (bound === undefined) {
    bound = textArrayLiteral(caps);
    boundCapabilities.set(caps, bound);
  }
  return bound;
}

export type ClaimingAgent = {
  id: string;
  name: string;
  capabilities: readonly string[];
  /**
   * The agent's slots. When given, the claim takes at most `slots - (tasks it runs now)` tasks, counted
   * in the same statement (no separate count round trip before every claim).
   */
  slots?: number;
  /** Tasks the agent says it still runs (`claim.holding`): never handed to it again by this claim. */
  holding?: readonly string[];
};

/**
 * Claim up to `max` queued tasks for one agent in ONE statement, in the caller's transaction (group
 * commit runs many claims in one):
 *
 *   UPDATE tasks SET … WHERE id = ANY(ARRAY(
 *     SELECT id FROM tasks WHERE status='QUEUED' AND requires <@ caps
 *     ORDER BY priority DESC NULLS LAST, created_at, id
 *     LIMIT greatest(0, least(max, slots - (SELECT count(*) … running on this agent)))
 *     FOR UPDATE SKIP LOCKED))
 *
 * The free-slot count is part of the statement: no separate count round trip before every claim.
 * Ordering: higher priority first, FIFO within a priority (id breaks ties, batches share created_at).
 * Plan: the candidates must come from tasks_claim_idx (status, priority DESC NULLS LAST, created_at, id)
 * read in order, which stops after `limit` rows. `ORDER BY priority DESC` (NULLS FIRST) does not match
 * that index, and `requires <@ caps` is estimated at 0.5 % of the rows (so "sort the few matches" looks
 * free): PostgreSQL and PGlite then read EVERY queued index entry, dead ones included, and sorted them
 * on every claim (2,650 index entries per claim in a 300-agent run; most of the database's CPU). The
 * ORDER BY says NULLS LAST (priority is NOT NULL, same order) and the filter is wrapped in coalesce
 * (estimated at 50 %, same result: neither side is ever NULL).
 * Locking: SKIP LOCKED lets concurrent claimers (agents, control-plane replicas) pass over rows another
 * transaction is claiming instead of waiting, so no task is handed out twice and nobody blocks.
 * Lease: every claim starts a new attempt with a fresh random lease token; reports must carry both
 * (fencing), and the lease expires `leaseTtlMs` after the last heartbeat or report.
 * The first status is the spec's "Task starts" transition: PRE_PROCESSING when pre-processing is
 * defined, else RUNNING (the transcoder runs).
 */
export async function claimTasksIn(
  tx: Db,
  ev: EmittedEvents,
  now: number,
  agent: ClaimingAgent,
  max: number,
  leaseTtlMs: number,
): Promise<ClaimedTask[]> {
  if (max <= 0 || (agent.slots !== undefined && agent.slots <= 0)) return [];
  const values: Record<string, unknown> = {
    max,
    slots: agent.slots ?? 0,
    agentId: agent.id,
    agentName: agent.name,
    now,
    leaseExpiresAt: now + leaseTtlMs,
    // One parameter, not one per capability: an agent with Debian's ffmpeg offers ~230 capabilities
    // (every encoder), and binding each made a PGlite claim take 4.7 ms instead of 1.5 ms.
    caps: capabilitiesParam(agent.capabilities),
  };
  const withSlots = agent.slots !== undefined;
  const check = ev.wantsWebhookCheck;
  // Rare (an agent back from a freeze with runs it still finishes): its own statement shape, so the
  // common claim stays as it is.
  const holding = (agent.holding ?? []).filter(isUuid);
  if (holding.length) values.holding = `{${holding.join(',')}}`;
  // One shape per slot limit or not, and webhook check or not: built once (statement-cache.ts).
  const claimed = await runCached<(TaskRow & { webhooksExist?: boolean })[]>(
    tx,
    `claim:${withSlots}:${check}:${holding.length > 0}`,
    () => {
      const limit = withSlots
        ? sql`GREATEST(0, LEAST(${ph('max')}::int, ${ph('slots')}::int - (SELECT count(*)::int FROM ${tasks} WHERE ${and(
            eq(tasks.agentId, ph('agentId')),
            taskIsRunning,
          )})))`
        : ph('max');
      const candidates = tx
        .select({ id: tasks.id })
        .from(tasks)
        // Both the filter's wrapping and NULLS LAST keep the plan on tasks_claim_idx, walked in order and
        // stopped at the first free matching rows (see above).
        .where(
          and(
            eq(tasks.status, 'QUEUED'),
            sql`coalesce(${tasks.requires} <@ ${ph('caps')}::text[], false)`,
            holding.length ? sql`NOT (${tasks.id} = ANY(${ph('holding')}::uuid[]))` : undefined,
          ),
        )
        .orderBy(sql`${tasks.priority} DESC NULLS LAST`, asc(tasks.createdAt), asc(tasks.id))
        // drizzle renders an SQL limit as is (the type only admits numbers and placeholders).
        .limit(limit as unknown as number)
        .for('update', { skipLocked: true });
      // `= ANY(ARRAY(…))`, not `IN (…)`: the candidates are one InitPlan and the rows to update are
      // found through the primary key. With `IN`, once ANALYZE has seen a large queue, the planner
      // estimated the LIMIT (an expression) at a tenth of the queued rows and turned the claim into a
      // hash semi join over a sequential scan of the whole tasks table (8,000 queued tasks on PGlite,
      // after ANALYZE: 9.1 ms per claim that way, 2.3 ms this way).
      return (
        tx
          .update(tasks)
          .set({
            status: sql`CASE WHEN ${hasPreProcessing} THEN 'PRE_PROCESSING' ELSE 'RUNNING' END`,
            attempt: sql`${tasks.attempt} + 1`,
            leaseToken: sql`gen_random_uuid()::text`,
            leaseExpiresAt: ph('leaseExpiresAt'),
            agentId: ph('agentId'),
            agentName: ph('agentName'),
            reportSeq: -1,
            startedAt: ph('now'),
            finishedAt: 0,
            progress: 0,
            // Unknown (-1) once the transcoder runs; a task in pre-processing is still at its start (spec: 0).
            remaining: sql`CASE WHEN ${hasPreProcessing} THEN 0 ELSE -1 END`,
            error: '',
            cancelRequested: false,
            updatedAt: ph('now'),
          } as unknown as Partial<typeof tasks.$inferInsert>)
          .where(sql`${tasks.id} = ANY(ARRAY(${candidates}))`)
          // Whether the claimed tasks' task.updated events need the events statement (outbox.ts).
          .returning(check ? { ...getTableColumns(tasks), webhooksExist } : getTableColumns(tasks))
      );
    },
    values,
  );
  if (check && claimed.length) ev.sawWebhooks(claimed[0]!.webhooksExist === true);
  // RETURNING order is unspecified; hand tasks out in queue order.
  claimed.sort((a, b) => b.priority - a.priority || a.createdAt - b.createdAt || a.id.localeCompare(b.id));
  const out: ClaimedTask[] = [];
  for (const row of claimed) {
    const task = toTask(row);
    await emitTaskUpdated(ev, task, now);
    out.push({ task, attempt: row.attempt, leaseToken: row.leaseToken!, leaseTtlMs });
  }
  return out;
}
