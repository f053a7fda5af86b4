import { type IntervalHistogram, monitorEventLoopDelay } from 'node:perf_hooks';
import { DONE_STATUSES, type EventPayload, isDoneStatus, Task, TaskStatus } from '@ffleet/shared';
import { count } from 'drizzle-orm';
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import type { Database } from '../db/client.ts';
import { agents, tasks } from '../db/schema.ts';
import type { EventBus } from '../events/event-bus.ts';

/** Sampling period of the event-loop delay histograms (see createMetrics). */
const EVENT_LOOP_RESOLUTION_MS = 100;

/**
 * Node's event-loop delay histogram records the whole time between two of its timer's callbacks, so
 * prom-client's gauges from it never go below the sampling period: an idle control plane showed a p99
 * "lag" of 0.108 s and a minimum of 0.099 s, and every usual lag alert (p99 > 50 ms) fired for good.
 * The same gauges, under the same names, from a histogram of our own with the period taken off: what
 * the loop was late by. (prom-client's histogram cannot be switched off; it costs its ten wake-ups a
 * second, as ours does.)
 */
function replaceEventLoopDelayGauges(registry: Registry): void {
  const histogram = monitorEventLoopDelay({ resolution: EVENT_LOOP_RESOLUTION_MS });
  histogram.enable();
  const late = (ns: number) => Math.max(0, ns / 1e9 - EVENT_LOOP_RESOLUTION_MS / 1e3);
  const stats: Record<string, (h: IntervalHistogram) => number> = {
    min: (h) => late(h.min),
    max: (h) => late(h.max),
    mean: (h) => late(h.mean),
    stddev: (h) => h.stddev / 1e9,
    p50: (h) => late(h.percentile(50)),
    p90: (h) => late(h.percentile(90)),
    p99: (h) => late(h.percentile(99)),
  };
  // One reading per scrape for all seven, then a fresh histogram for the next scrape (as prom-client
  // does): the first gauge collected takes it, the others of the same scrape reuse it.
  let reading: Record<string, number> | null = null;
  const read = (): Record<string, number> => {
    if (!reading) {
      const r: Record<string, number> = {};
      for (const [stat, value] of Object.entries(stats)) r[stat] = histogram.count ? value(histogram) : 0;
      reading = r;
      histogram.reset();
      setImmediate(() => {
        reading = null;
      });
    }
    return reading;
  };
  for (const stat of Object.keys(stats)) {
    const name = `ffleet_nodejs_eventloop_lag_${stat}_seconds`;
    const help = (registry.getSingleMetric(name) as { help?: string } | undefined)?.help ?? name;
    registry.removeSingleMetric(name);
    new Gauge({
      name,
      help,
      registers: [registry],
      collect() {
        this.set(read()[stat] ?? 0);
      },
    });
  }
}

/** Upper bounds (seconds) of ffleet_task_duration_seconds: a failed start to a long feature-length encode. */
const TASK_DURATION_BUCKETS = [1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800];

/** Tasks whose finish was counted, remembered to skip a repeat of the same finish (see countTaskEvents). */
const COUNTED_FINISHES_KEPT = 4096;

/** The fields of a task event's `data` (taskEventData) the counters read. */
type TaskEventData = {
  task?: Pick<Task, 'id' | 'status' | 'source' | 'attempt' | 'startedAt' | 'finishedAt'>;
};

/**
 * What happens to tasks, counted from the bus: ffleet_tasks_created_total{source} (task.created),
 * ffleet_tasks_finished_total{status} and ffleet_task_duration_seconds{status} (a task.updated whose task
 * is DONE_*), ffleet_tasks_deleted_total (task.deleted). Returns the unsubscribe function.
 *
 * Every status change is written with its task.updated in the same transaction (saveTaskChange /
 * taskChanged) and the bus publishes a transaction's events once, after its commit: a rolled-back group
 * commit publishes nothing, a duplicate or late agent report is fenced and emits nothing, and no writer
 * updates a DONE_* task but a restart (which makes it QUEUED). So a task.updated with a DONE_* status is
 * a move into it, whatever else the same group emitted (claims, progress, batch.finished). Should a
 * later change ever re-emit a finished task, it is not counted again: a finish is remembered by task id,
 * attempt and finishedAt (after a restart the next finish is a later attempt, or, canceled while
 * queued, a later finishedAt) until the same task shows up not DONE_* or is deleted; the
 * COUNTED_FINISHES_KEPT newest are remembered (the events are read, never retained).
 *
 * Several replicas: the bus is in-process (an EventEmitter). Only `EmittedEvents.publish`, after this
 * process's own commit, puts events on it; nothing relays another replica's events to it (no
 * LISTEN/NOTIFY, nothing over MQTT: what other replicas commit reaches this one only through the
 * database, e.g. the deliveries its webhook dispatcher polls). So each change is counted by the one
 * replica whose transaction made it (the one that served the API call, applied the agent's report or
 * ran the lease sweep), never by one that merely heard of it: `sum without (instance)` of these counters
 * is the fleet's total. Unlike ffleet_tasks (read from the shared database, the same on every replica),
 * they start at 0 with each process; rate() and increase() handle the reset.
 *
 * Not counted, because a task.updated cannot tell them apart: restarts (DONE_* → QUEUED) and requeues
 * of lost or handed-back work (RUNNING → QUEUED) emit the same snapshot, QUEUED with progress, times
 * and agent cleared, and the status it left is in no event (nor, with several replicas, necessarily
 * seen by the replica that emits it).
 */
function countTaskEvents(registry: Registry, bus: EventBus): () => void {
  const sources = Task.shape.source.options;
  const created = new Counter({
    name: 'ffleet_tasks_created_total',
    help: `Tasks created, by source (${sources.join(', ')}), counted by the replica that created them`,
    labelNames: ['source'] as const,
    registers: [registry],
  });
  const finished = new Counter({
    name: 'ffleet_tasks_finished_total',
    help: 'Tasks that reached a DONE_* status, by that status, counted by the replica whose transaction finished them',
    labelNames: ['status'] as const,
    registers: [registry],
  });
  const duration = new Histogram({
    name: 'ffleet_task_duration_seconds',
    help: 'Run time of finished tasks (startedAt, their last claim, to finishedAt) by final status; tasks canceled before any agent started them are not observed',
    labelNames: ['status'] as const,
    buckets: TASK_DURATION_BUCKETS,
    registers: [registry],
  });
  const deleted = new Counter({
    name: 'ffleet_tasks_deleted_total',
    help: 'Tasks deleted, counted by the replica that deleted them',
    registers: [registry],
  });
  // Every series from the start, so a first increment is a rate and not a new series.
  for (const source of sources) created.inc({ source }, 0);
  for (const status of DONE_STATUSES) {
    finished.inc({ status }, 0);
    duration.zero({ status });
  }
  const known = new Set<string>(sources);
  /** Task id → `attempt:finishedAt` of its counted finish (insertion order: oldest first). */
  const counted = new Map<string, string>();

  const onFinished = (task: NonNullable<TaskEventData['task']>) => {
    const key = `${task.attempt}:${task.finishedAt}`;
    if (counted.get(task.id) === key) return;
    counted.delete(task.id);
    counted.set(task.id, key);
    if (counted.size > COUNTED_FINISHES_KEPT) counted.delete(counted.keys().next().value!);
    finished.inc({ status: task.status });
    // Work canceled while queued never started (startedAt 0): it has no run time.
    if (task.startedAt > 0 && task.finishedAt >= task.startedAt)
      duration.observe({ status: task.status }, (task.finishedAt - task.startedAt) / 1000);
  };

  const count = (p: EventPayload) => {
    const task = p.event.startsWith('task.') ? (p.data as TaskEventData | null)?.task : undefined;
    if (!task) return;
    if (p.event === 'task.updated') {
      if (isDoneStatus(task.status)) onFinished(task);
      else if (counted.size > 0) counted.delete(task.id);
    } else if (p.event === 'task.created') {
      created.inc({ source: known.has(task.source) ? task.source : 'other' });
    } else if (p.event === 'task.deleted') {
      counted.delete(task.id);
      deleted.inc();
    }
  };
  // Called synchronously for every event published (progress included): a few property reads. A
  // counter must never break publishing (the bus calls its listeners in turn, after the commit).
  return bus.subscribe((p: EventPayload) => {
    try {
      count(p);
    } catch {
      // a malformed event is not counted
    }
  });
}

/**
 * One registry per app instance (tests build many apps in one process). `bus`: this process's event
 * bus, which the task counters are read from (countTaskEvents); `stop()` unsubscribes them.
 */
export function createMetrics(database: Database, bus: EventBus) {
  const registry = new Registry();
  // The event-loop delay histogram samples with a timer: at prom-client's default 10 ms precision it
  // woke the control plane 100 times a second, idle or not (4 of the ~13 loop turns per short task of
  // bench:fleet (b), 14 → 10 ms of CPU per second for an idle control plane). At 100 ms a blocked loop
  // still shows (a block delays the next sample by its rest), ten wake-ups a second.
  collectDefaultMetrics({
    register: registry,
    prefix: 'ffleet_',
    eventLoopMonitoringPrecision: EVENT_LOOP_RESOLUTION_MS,
  });
  replaceEventLoopDelayGauges(registry);
  const httpDuration = new Histogram({
    name: 'ffleet_http_request_duration_seconds',
    help: 'HTTP request latency by method, route template (never raw ids) and status',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [registry],
  });
  // The gauges read from the database keep their last values while it is unreachable (a failing
  // collect() failed the whole scrape: Prometheus saw the control plane down with its database), and
  // ffleet_database_up says so. It says what GET /health says: an embedded database out of disk still
  // answers the ping, but refuses the writes the control plane needs, so it is down too.
  new Gauge({
    name: 'ffleet_database_up',
    help: 'Whether the database serves the control plane (1) or not (0): 0 while it does not answer, and while the embedded database refuses writes (its disk full; GET /health says db "failing"); while it does not answer, ffleet_tasks and ffleet_agents_online keep their last values (0 if none was read since start)',
    registers: [registry],
    async collect() {
      this.set((await database.ping()) && !database.writeFailure() ? 1 : 0);
    },
  });
  new Gauge({
    name: 'ffleet_tasks',
    help: 'Tasks by status (queue depth)',
    labelNames: ['status'] as const,
    registers: [registry],
    async collect() {
      const rows = await database.db
        .select({ status: tasks.status, n: count() })
        .from(tasks)
        .groupBy(tasks.status)
        .catch(() => null);
      if (!rows) return;
      const by = new Map(rows.map((r) => [r.status, Number(r.n)]));
      for (const s of TaskStatus.options) this.set({ status: s }, by.get(s) ?? 0);
    },
  });
  new Gauge({
    name: 'ffleet_agents_online',
    help: 'Agents currently connected',
    registers: [registry],
    async collect() {
      const rows = await database.db
        .select({ online: agents.online, n: count() })
        .from(agents)
        .groupBy(agents.online)
        .catch(() => null);
      if (rows) this.set(Number(rows.find((r) => r.online)?.n ?? 0));
    },
  });
  const webhookAttempts = new Counter({
    name: 'ffleet_webhook_attempts_total',
    help: 'Webhook delivery attempts by outcome',
    labelNames: ['success'] as const,
    registers: [registry],
  });
  const unsubscribe = countTaskEvents(registry, bus);
  return { registry, httpDuration, webhookAttempts, stop: unsubscribe };
}
export type Metrics = ReturnType<typeof createMetrics>;
