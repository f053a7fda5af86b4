import { z } from 'zod';
import { RawResolved, TaskStatus } from '../schemas/common.ts';
import { MAX_JSON_DEPTH, nestedDeeperThan } from '../schemas/storable.ts';
import { ProcessingStep, Task } from '../schemas/task.ts';
import { WatchfolderFilter } from '../schemas/watchfolder.ts';

const Running = z.object({ taskId: z.string(), attempt: z.number().int(), leaseToken: z.string() });
export type RunningTask = z.infer<typeof Running>;

/** Retained on `.../status`. The Last Will is the same shape with `state: "offline"`. */
export const AgentBirth = z.object({
  state: z.enum(['online', 'offline']),
  bootId: z.string(),
  name: z.string(),
  version: z.string(),
  protocol: z.number().int(),
  hostname: z.string(),
  os: z.string(),
  arch: z.string(),
  transcoder: z.object({ path: z.string(), version: z.string() }).nullable(),
  /** Why the agent has no working transcoder (it then claims nothing). */
  transcoderError: z.string().optional(),
  encoders: z.array(z.string()),
  hwaccels: z.array(z.string()),
  labels: z.array(z.string()),
  slots: z.number().int(),
  /**
   * The agent is shutting down (a first SIGTERM): it claims nothing more, has stopped scanning, and
   * leaves once its running tasks are done. Republished (retained) when the drain starts.
   */
  draining: z.boolean().optional(),
  ts: z.number(),
});
export type AgentBirth = z.infer<typeof AgentBirth>;

/** `.../hello` after every (re)connect. */
export const AgentHello = z.object({
  bootId: z.string(),
  /**
   * The boot id of the process that used this agent's data dir before this one (it is kept there):
   * set, this process is that one's restart on the same box, which has killed what that one left
   * running. The tasks that process held and this one does not list are requeued at once; without it
   * (another process took the name: a cloned box) their leases decide.
   */
  previousBootId: z.string().optional(),
  running: z.array(Running),
  ts: z.number(),
});
export type AgentHello = z.infer<typeof AgentHello>;

/** `.../heartbeat` every few seconds; renews the leases of `running`. */
export const AgentHeartbeat = z.object({
  bootId: z.string(),
  freeSlots: z.number().int(),
  running: z.array(Running),
  ts: z.number(),
});
export type AgentHeartbeat = z.infer<typeof AgentHeartbeat>;

/** `.../requests` (agent → cp). */
export const AgentRequest = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('claim'),
    requestId: z.string(),
    max: z.number().int().min(1).max(64),
    /**
     * Tasks this agent is still running (or finishing): none of them is handed to it again, even if
     * the control plane gave its attempt up meanwhile (the agent was frozen or cut off). Else the
     * claim could overtake the attempt's late result, which then finds a new attempt and is refused.
     */
    holding: z.array(z.string()).max(256).optional(),
  }),
  z.object({
    type: z.literal('watch.file'),
    requestId: z.string(),
    watchfolderId: z.string(),
    relativePath: z.string(),
    size: z.number().int().nonnegative(),
    mtimeMs: z.number(),
  }),
  /** The `.lock` of a watch task's file is on disk: a later submit of that version means "process again". */
  z.object({
    type: z.literal('watch.locked'),
    requestId: z.string(),
    watchfolderId: z.string(),
    taskId: z.string(),
  }),
  z.object({
    type: z.literal('watch.state'),
    requestId: z.string(),
    watchfolderId: z.string(),
    lastCheck: z.number(),
    error: z.string(),
    /**
     * The folder itself cannot be read on this agent (missing, not a directory, no permission): the
     * control plane tries another agent. Absent from older agents (their `error` text is read then).
     */
    unreadable: z.boolean().optional(),
  }),
]);
export type AgentRequest = z.infer<typeof AgentRequest>;

/** Fields of a task an agent may set through a report. */
export const TaskPatch = z.object({
  status: TaskStatus.optional(),
  progress: z.number().min(0).max(100).optional(),
  remaining: z.number().optional(),
  error: z.string().optional(),
  startedAt: z.number().optional(),
  finishedAt: z.number().optional(),
  name: z.string().optional(),
  priority: z.number().int().optional(),
  metadata: z.record(z.string(), z.unknown()).optional(),
  webhooks: z.array(z.object({ event: z.string(), url: z.string() })).optional(),
  command: RawResolved.optional(),
  inputFile: RawResolved.optional(),
  outputFile: RawResolved.optional(),
  preProcessing: ProcessingStep.nullable().optional(),
  postProcessing: ProcessingStep.nullable().optional(),
  /**
   * With `status: 'QUEUED'`: a live agent gives the attempt back on purpose (its claim was answered too
   * late to start it, or the agent is being stopped for good), so the attempt does not count against
   * the task's limit. A hand-back without it (an agent restarted after a crash returning the runs it
   * lost) counts, as a lost lease does: a task that kills its agent must not be retried forever.
   */
  deliberate: z.boolean().optional(),
});
export type TaskPatch = z.infer<typeof TaskPatch>;

export const LogStepName = z.enum(['pre', 'transcoder', 'post', 'agent']);

/** Captured output of one step of a run. */
export const LogText = z.object({ step: LogStepName, text: z.string() });
export type LogText = z.infer<typeof LogText>;

/**
 * `.../events` (agent → cp): one report about one attempt of one task. `seq` increases per
 * (task, attempt); the control plane applies each seq once, only with the current lease token.
 * An update may carry `logs`: output captured just before it (a run's last lines and its final
 * status travel as one report), stored with it under the same fence and seq.
 */
export const TaskReport = z.discriminatedUnion('kind', [
  z.object({
    kind: z.literal('update'),
    taskId: z.string(),
    attempt: z.number().int(),
    leaseToken: z.string(),
    seq: z.number().int().nonnegative(),
    patch: TaskPatch,
    logs: z.array(LogText).optional(),
  }),
  z.object({
    kind: z.literal('log'),
    taskId: z.string(),
    attempt: z.number().int(),
    leaseToken: z.string(),
    seq: z.number().int().nonnegative(),
    step: LogStepName,
    text: z.string(),
  }),
]);
export type TaskReport = z.infer<typeof TaskReport>;

export const WatchfolderAssignment = z.object({
  id: z.string(),
  name: z.string(),
  path: z.string(),
  interval: z.number().int(),
  growthChecks: z.number().int(),
  filter: WatchfolderFilter,
  suspended: z.boolean(),
  /** Of two watchfolders on one folder, the one created first takes its files (watch-supervisor.ts). */
  createdAt: z.number().optional(),
});
export type WatchfolderAssignment = z.infer<typeof WatchfolderAssignment>;

/**
 * A watchfolder another agent scans (or none, while its pinned agent is offline) whose folder overlaps
 * one this agent scans: its files are not this agent's to take (agent/src/watch/folder-overlap.ts).
 */
export const WatchfolderYield = WatchfolderAssignment.pick({
  id: true,
  name: true,
  path: true,
  suspended: true,
  createdAt: true,
}).extend({
  /**
   * The ids of this agent's watchfolders that leave files to it (not one pinned to this agent while it
   * is pinned to another: boxes with folders of the same name are not one folder).
   */
  overlaps: z.array(z.string()),
});
export type WatchfolderYield = z.infer<typeof WatchfolderYield>;

export const ClaimedTask = z.object({
  task: Task,
  attempt: z.number().int(),
  leaseToken: z.string(),
  leaseTtlMs: z.number().int(),
});
export type ClaimedTask = z.infer<typeof ClaimedTask>;

/** `.../inbox` (cp → agent). */
export const InboxMessage = z.discriminatedUnion('type', [
  z.object({ type: z.literal('claim.result'), requestId: z.string(), tasks: z.array(ClaimedTask) }),
  z.object({ type: z.literal('ack'), taskId: z.string(), attempt: z.number().int(), seq: z.number().int() }),
  z.object({
    type: z.literal('task.cancel'),
    taskId: z.string(),
    attempt: z.number().int(),
    reason: z.string(),
  }),
  z.object({
    type: z.literal('config'),
    slots: z.number().int(),
    labels: z.array(z.string()),
    paused: z.boolean(),
    watchfolders: z.array(WatchfolderAssignment),
    /** Sent only when not empty; an older agent ignores it (and takes those files, as it did). */
    yieldTo: z.array(WatchfolderYield).optional(),
  }),
  z.object({
    type: z.literal('request.result'),
    requestId: z.string(),
    ok: z.boolean(),
    error: z.string().optional(),
    taskId: z.string().optional(),
  }),
  /**
   * The control plane will not work with this agent (`reason`). With `bootId`, only that process is
   * refused (two processes share the agent's name and its inbox; the other one keeps working): it leaves.
   */
  z.object({ type: z.literal('refused'), reason: z.string(), bootId: z.string().optional() }),
]);
export type InboxMessage = z.infer<typeof InboxMessage>;

/**
 * Deepest nesting a protocol message may have: a task's metadata may be {@link MAX_JSON_DEPTH} levels
 * deep, and a message holds it a few levels down (`claim.result` → tasks → task → metadata).
 */
export const MAX_MESSAGE_DEPTH = MAX_JSON_DEPTH + 16;

/** Parse a JSON MQTT payload against a schema; null (never a throw) when it does not fit. */
export function parseMessage<T>(schema: z.ZodType<T>, payload: Buffer | string): T | null {
  let json: unknown;
  try {
    json = JSON.parse(typeof payload === 'string' ? payload : payload.toString('utf8'));
  } catch {
    return null;
  }
  // Before anything walks it recursively (the schema, toStorable, the database's jsonb parser): a
  // message nested 100,000 levels deep is 600 kB, well under the broker's size limit.
  if (nestedDeeperThan(json, MAX_MESSAGE_DEPTH)) return null;
  const r = schema.safeParse(json);
  return r.success ? r.data : null;
}
