import type { Agent, Batch, Preset, Task, Watchfolder, Webhook, WebhookExecution } from '@ffleet/shared';
import type { agents, batches, presets, tasks, watchfolders, webhookExecutions, webhooks } from './schema.ts';

export type TaskRow = typeof tasks.$inferSelect;
export type PresetRow = typeof presets.$inferSelect;
export type BatchRow = typeof batches.$inferSelect;
export type WatchfolderRow = typeof watchfolders.$inferSelect;
export type WebhookRow = typeof webhooks.$inferSelect;
export type AgentRow = typeof agents.$inferSelect;
export type ExecutionRow = typeof webhookExecutions.$inferSelect;

export function toTask(r: TaskRow): Task {
  return {
    id: r.id,
    uuid: r.id,
    name: r.name,
    command: { raw: r.commandRaw, resolved: r.commandResolved },
    inputFile: { raw: r.inputRaw, resolved: r.inputResolved },
    outputFile: { raw: r.outputRaw, resolved: r.outputResolved },
    metadata: r.metadata ?? {},
    status: r.status as Task['status'],
    progress: r.progress,
    remaining: r.remaining,
    error: r.error,
    priority: r.priority,
    source: r.source as Task['source'],
    preProcessing: r.preProcessing ?? null,
    postProcessing: r.postProcessing ?? null,
    startedAt: r.startedAt,
    finishedAt: r.finishedAt,
    createdAt: r.createdAt,
    updatedAt: r.updatedAt,
    preset: r.presetId,
    batch: r.batchId,
    webhooks: (r.webhooks ?? []) as Task['webhooks'],
    requires: r.requires ?? [],
    attempt: r.attempt,
    agent: r.agentId ? { id: r.agentId, name: r.agentName ?? '' } : null,
  };
}

export function toPreset(r: PresetRow): Preset {
  return {
    id: r.id,
    uuid: r.id,
    name: r.name,
    description: r.description,
    command: r.command,
    outputFile: r.outputFile,
    priority: r.priority,
    preProcessing: r.preProcessing ?? null,
    postProcessing: r.postProcessing ?? null,
    webhooks: (r.webhooks ?? []) as Preset['webhooks'],
    requires: r.requires ?? [],
    createdAt: r.createdAt,
    updatedAt: r.updatedAt,
  };
}

export function toBatch(r: BatchRow, counts: Record<string, number>, taskIds: string[]): Batch {
  return {
    id: r.id,
    uuid: r.id,
    name: r.name,
    status: r.status as Batch['status'],
    taskCount: r.taskCount,
    counts,
    tasks: taskIds,
    createdAt: r.createdAt,
    updatedAt: r.updatedAt,
    finishedAt: r.finishedAt,
  };
}

export function toWatchfolder(r: WatchfolderRow, assigned: { id: string; name: string } | null): Watchfolder {
  return {
    id: r.id,
    uuid: r.id,
    name: r.name,
    description: r.description,
    interval: r.interval,
    growthChecks: r.growthChecks,
    preset: r.presetId,
    path: r.path,
    suspended: r.suspended,
    filter: {
      extensions: {
        include: r.filter?.extensions?.include ?? [],
        exclude: r.filter?.extensions?.exclude ?? [],
      },
    },
    agent: r.agent,
    assignedAgent: assigned,
    lastCheck: r.lastCheck,
    error: r.error,
    createdAt: r.createdAt,
    updatedAt: r.updatedAt,
  };
}

/** Never exposes the secret: only `hasSecret`. */
export function toWebhook(r: WebhookRow): Webhook {
  return {
    id: r.id,
    uuid: r.id,
    event: r.event as Webhook['event'],
    url: r.url,
    hasSecret: r.secret !== null && r.secret !== '',
    createdAt: r.createdAt,
    updatedAt: r.updatedAt,
  };
}

export function toExecution(r: ExecutionRow): WebhookExecution {
  return {
    id: r.id,
    uuid: r.id,
    deliveryId: r.deliveryId,
    webhook: r.webhookId,
    source: r.source as WebhookExecution['source'],
    event: r.event,
    url: r.url,
    attempt: r.attempt,
    request: r.request,
    response: r.response ?? null,
    error: r.error,
    success: r.success,
    durationMs: r.durationMs,
    createdAt: r.createdAt,
  };
}

export const effectiveLabels = (r: AgentRow): string[] => r.labelsOverride ?? r.reportedLabels ?? [];
export const effectiveSlots = (r: AgentRow): number => r.slotsOverride ?? r.reportedSlots;

export function toAgent(r: AgentRow, runningTasks: string[], local = false): Agent {
  // Draining: paused by an operator, or shutting down on its own (SIGTERM); either way it claims nothing.
  const status: Agent['status'] = !r.online ? 'offline' : r.paused || r.shuttingDown ? 'draining' : 'online';
  return {
    id: r.id,
    uuid: r.id,
    name: r.name,
    status,
    version: r.version,
    hostname: r.hostname,
    os: r.os,
    arch: r.arch,
    transcoder: r.transcoder ?? null,
    ...(!r.transcoder && r.transcoderError ? { transcoderError: r.transcoderError } : {}),
    encoders: r.encoders ?? [],
    hwaccels: r.hwaccels ?? [],
    labels: effectiveLabels(r),
    slots: effectiveSlots(r),
    paused: r.paused,
    local,
    runningTasks,
    lastSeen: r.lastSeen,
    connectedAt: r.connectedAt,
    createdAt: r.createdAt,
  };
}

const ASCII = /^[\x00-\x7f]*$/;

/** jsonb's key order: shorter (in UTF-8 bytes) first, then bytewise. */
function jsonbKeyOrder(a: string, b: string): number {
  if (ASCII.test(a) && ASCII.test(b)) return a.length - b.length || (a < b ? -1 : a > b ? 1 : 0);
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length - y.length || Buffer.compare(x, y);
}

function sortJsonbKeys(v: unknown): unknown {
  if (v === null || typeof v !== 'object') return v;
  if (Array.isArray(v)) return v.map(sortJsonbKeys);
  const keys = Object.keys(v).sort(jsonbKeyOrder);
  // fromEntries defines own properties, so even a "__proto__" key stays data.
  return Object.fromEntries(keys.map((k) => [k, sortJsonbKeys((v as Record<string, unknown>)[k])]));
}

/**
 * The value a jsonb column gives back for `v`: JSON semantics (undefined dropped, non-finite numbers
 * null, -0 is 0) and objects' keys in jsonb's storage order. Lets a writer answer with what a read of
 * the row would return without reading it back.
 */
export function asJsonb<T>(v: T): T {
  if (v === null || v === undefined) return v;
  return sortJsonbKeys(JSON.parse(JSON.stringify(v))) as T;
}
