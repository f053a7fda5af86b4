import { z } from 'zod';
import { AgentLabel, duplicateLabel, Millis } from './common.ts';

/** `draining`: online but claiming nothing — paused by an operator, or shutting down (SIGTERM) until its tasks end. */
export const AgentStatus = z.enum(['online', 'offline', 'draining']);
export type AgentStatus = z.infer<typeof AgentStatus>;

export const MAX_SLOTS = 64;
/** Labels an agent may have, from its own configuration or a PATCH: its birth stays a few kB. */
export const MAX_AGENT_LABELS = 100;

export const Agent = z.object({
  id: z.string(),
  uuid: z.string(),
  name: z.string(),
  status: AgentStatus,
  version: z.string(),
  hostname: z.string(),
  os: z.string(),
  arch: z.string(),
  transcoder: z.object({ path: z.string(), version: z.string() }).nullable(),
  /**
   * Why the agent has no working transcoder (`transcoder` is then null and it claims nothing), as it
   * reported it, e.g. `ffmpeg not found on PATH`. Present only then.
   */
  transcoderError: z.string().optional(),
  encoders: z.array(z.string()),
  hwaccels: z.array(z.string()),
  labels: z.array(z.string()),
  slots: z.number().int(),
  paused: z.boolean(),
  /**
   * The agent the control plane runs in its own process (`npm start`, FFLEET_LOCAL_AGENT). It takes its
   * token from the control plane, so it has no token of its own to replace (`POST …/token` is 409 LOCAL_AGENT).
   */
  local: z.boolean(),
  runningTasks: z.array(z.string()),
  lastSeen: Millis,
  connectedAt: Millis,
  createdAt: Millis,
});
export type Agent = z.infer<typeof Agent>;

/**
 * Body of `PATCH /api/v1/agents/{id}`. `labels` and `slots` override what the agent reports
 * (FFLEET_AGENT_LABELS, FFLEET_AGENT_SLOTS) until cleared with `null`.
 */
export const AgentPatch = z.strictObject({
  paused: z.boolean().optional(),
  labels: z
    .array(AgentLabel)
    .max(MAX_AGENT_LABELS)
    // A list given twice the same label is a mistake in what was sent (a typo, a merge): said, not kept.
    .superRefine((labels, ctx) => {
      const dup = duplicateLabel(labels);
      if (dup) ctx.addIssue({ code: 'custom', message: `"${dup.label}" is given twice`, path: [dup.index] });
    })
    .nullable()
    .optional(),
  slots: z.number().int().min(0).max(MAX_SLOTS).nullable().optional(),
});
export type AgentPatch = z.infer<typeof AgentPatch>;

/** The answer of `POST /api/v1/agents/{id}/token`. */
export const AgentTokenIssued = z.object({
  agent: z.string().describe("the agent's name: the MQTT user name the token logs in"),
  generation: z.number().int().describe('the generation of this token; the ones before it are revoked'),
  token: z.string().describe("the agent's new own token (its FFLEET_AGENT_TOKEN); shown once, not stored"),
  disconnected: z.boolean().describe('a connection of this agent with its old token was closed'),
  known: z
    .boolean()
    .describe('an agent of this name has registered (false: a name not seen yet, or mistyped)'),
  fleetTokenAccepted: z
    .boolean()
    .describe(
      'the fleet token also logs agents in (FFLEET_AGENT_AUTH=shared): a box holding it is not kept out',
    ),
});
export type AgentTokenIssued = z.infer<typeof AgentTokenIssued>;
