import { z } from 'zod';
import { tokenize } from '../command/tokenize.ts';
import {
  DirectWebhook,
  HttpUrl,
  JsonObject,
  Millis,
  RawResolved,
  Requirement,
  TaskStatus,
  TaskWebhookEvent,
} from './common.ts';

export const PRIORITY_MIN = -1000;
export const PRIORITY_MAX = 1000;
export const Priority = z.number().int().min(PRIORITY_MIN).max(PRIORITY_MAX);

/** Longest command/path string accepted (a defence against abuse, far above real command lines). */
export const MAX_TEXT = 32_768;
const Text = z.string().max(MAX_TEXT);

/**
 * A script path is a command line like `command` (program and arguments, quotes, no shell): one that
 * does not tokenize (an unterminated quote) is refused here rather than failing the task when it runs.
 */
const ScriptPath = Text.superRefine((value, ctx) => {
  const t = tokenize(value);
  if (!t.ok) ctx.addIssue({ code: 'custom', message: t.error });
});

/** Pre-processing as written in a task or preset request. */
export const PreProcessingInput = z
  .strictObject({
    scriptPath: ScriptPath.optional(),
    sidecarPath: Text.optional(),
    importSidecar: z.boolean().optional(),
  })
  .superRefine((step, ctx) => {
    // The re-import reads the sidecar back: without one the task could only fail when it runs.
    if (step.importSidecar && (step.sidecarPath ?? '').trim() === '')
      ctx.addIssue({
        code: 'custom',
        path: ['sidecarPath'],
        message: 'importSidecar needs a sidecarPath: the file the script may change and the task re-imports',
      });
  });
export type PreProcessingInput = z.infer<typeof PreProcessingInput>;

/** Post-processing as written in a task or preset request (no re-import, spec). */
export const PostProcessingInput = z.strictObject({
  scriptPath: ScriptPath.optional(),
  sidecarPath: Text.optional(),
});
export type PostProcessingInput = z.infer<typeof PostProcessingInput>;

/** A direct webhook on a task: only the three task events. */
export const TaskDirectWebhook = z.strictObject({ event: TaskWebhookEvent, url: HttpUrl });

/** Body of `POST /api/v1/tasks` (and each item of a batch). Unknown fields are rejected (422). */
export const TaskCreate = z.strictObject({
  name: z.string().max(1000).optional(),
  command: Text.optional(),
  inputFile: Text.optional(),
  outputFile: Text.optional(),
  priority: Priority.optional(),
  metadata: JsonObject.optional(),
  preProcessing: PreProcessingInput.optional(),
  postProcessing: PostProcessingInput.optional(),
  preset: z.string().max(100).optional(),
  webhooks: z.array(TaskDirectWebhook).max(50).optional(),
  requires: z.array(Requirement).max(50).optional(),
});
export type TaskCreate = z.infer<typeof TaskCreate>;

/** A processing step inside a task snapshot. */
export const ProcessingStep = z.object({
  scriptPath: RawResolved,
  sidecarPath: RawResolved,
  importSidecar: z.boolean(),
  startedAt: Millis,
  finishedAt: Millis,
  error: z.string(),
});
export type ProcessingStep = z.infer<typeof ProcessingStep>;

export const AgentRef = z.object({ id: z.string(), name: z.string() });
export type AgentRef = z.infer<typeof AgentRef>;

/** The task object: API responses, the sidecar snapshot, webhook `data.task` and SSE data. */
export const Task = z.object({
  id: z.string(),
  uuid: z.string(),
  name: z.string(),
  command: RawResolved,
  inputFile: RawResolved,
  outputFile: RawResolved,
  metadata: JsonObject,
  status: TaskStatus,
  progress: z.number(),
  remaining: z.number(),
  error: z.string(),
  /**
   * Why a QUEUED task is not being claimed: no agent offers its `requires`, or every agent that could
   * run it is offline, paused, draining, at 0 slots or without a transcoder; on a running task whose
   * cancel was asked for, what the cancel waits for (its agent's stop, or its lease when the agent is
   * offline). Present only then, and only on the API's task reads and a cancel's answer (not in
   * events): a task that merely waits for a free slot has none.
   */
  waitingFor: z.string().optional(),
  priority: z.number().int(),
  source: z.enum(['api', 'watchfolder']),
  preProcessing: ProcessingStep.nullable(),
  postProcessing: ProcessingStep.nullable(),
  startedAt: Millis,
  finishedAt: Millis,
  createdAt: Millis,
  updatedAt: Millis,
  preset: z.string().nullable(),
  batch: z.string().nullable(),
  webhooks: z.array(DirectWebhook),
  requires: z.array(z.string()),
  attempt: z.number().int(),
  agent: AgentRef.nullable(),
});
export type Task = z.infer<typeof Task>;

/** Filters of `GET /api/v1/tasks`. */
export const TaskListQuery = z.object({
  status: z
    .string()
    .optional()
    .transform((v, ctx) => {
      if (v === undefined || v === '') return undefined;
      const parts = v.split(',').map((s) => s.trim().toUpperCase());
      const out: TaskStatus[] = [];
      for (const p of parts) {
        const r = TaskStatus.safeParse(p);
        if (!r.success) {
          ctx.addIssue({ code: 'custom', message: `unknown status "${p}"` });
          return z.NEVER;
        }
        out.push(r.data);
      }
      return out;
    }),
  source: z.enum(['api', 'watchfolder']).optional(),
  batch: z.string().max(100).optional(),
  preset: z.string().max(100).optional(),
  agent: z.string().max(200).optional(),
  q: z.string().max(200).optional(),
});
export type TaskListQuery = z.infer<typeof TaskListQuery>;
