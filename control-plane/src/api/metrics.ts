import { TaskStatus } from '@ffleet/shared';
import { count } from 'drizzle-orm';
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import type { Database } from '../db/client.ts';
import { agents, tasks } from '../db/schema.ts';

/** One registry per app instance (tests build many apps in one process). */
export function createMetrics(database: Database) {
  const registry = new Registry();
  // The event-loop delay histogram samples with a timer: at prom-client's default 10 ms precision it
  // woke the control plane 100 times a second, idle or not (4 of the ~13 loop turns per short task of
  // bench:fleet (b), 14 → 10 ms of CPU per second for an idle control plane). At 100 ms a blocked loop
  // still shows (a block delays the next sample by its rest), ten wake-ups a second.
  collectDefaultMetrics({ register: registry, prefix: 'ffleet_', eventLoopMonitoringPrecision: 100 });
  const httpDuration = new Histogram({
    name: 'ffleet_http_request_duration_seconds',
    help: 'HTTP request latency by method, route template (never raw ids) and status',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [registry],
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
        .groupBy(tasks.status);
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
        .groupBy(agents.online);
      this.set(Number(rows.find((r) => r.online)?.n ?? 0));
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
