import { type IntervalHistogram, monitorEventLoopDelay } from 'node:perf_hooks';
import { TaskStatus } from '@ffleet/shared';
import { count } from 'drizzle-orm';
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import type { Database } from '../db/client.ts';
import { agents, tasks } from '../db/schema.ts';

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

/** One registry per app instance (tests build many apps in one process). */
export function createMetrics(database: Database) {
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
  // ffleet_database_up says so.
  new Gauge({
    name: 'ffleet_database_up',
    help: 'Whether the database answers (1) or not (0); while it does not, ffleet_tasks and ffleet_agents_online keep their last values (0 if none was read since start)',
    registers: [registry],
    async collect() {
      this.set((await database.ping()) ? 1 : 0);
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
  return { registry, httpDuration, webhookAttempts };
}
export type Metrics = ReturnType<typeof createMetrics>;
