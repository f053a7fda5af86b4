import { existsSync, readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { delimiter, isAbsolute, join, resolve } from 'node:path';
import {
  AGENT_ID_RE,
  BrokerUrl,
  duplicateLabel,
  envError,
  envNumber,
  Label,
  LOG_LEVELS,
  MAX_AGENT_LABELS,
  MAX_SLOTS,
  reservedLabelProblem,
} from '@ffleet/shared';
import { z } from 'zod';

/** Thrown for an invalid environment value; names the variable. */
export class AgentConfigError extends Error {
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super(`invalid configuration: ${variable}: ${message}`);
  }
}

const EnvSchema = z.object({
  /** The broker the agent connects to. */
  MQTT_URL: BrokerUrl.default('mqtt://127.0.0.1:1883'),
  /** The token agents present to join; falls back to the one kept in FFLEET_DATA_DIR. */
  FFLEET_AGENT_TOKEN: z.string().optional(),
  /** Agent identity (MQTT client id and topic level). */
  FFLEET_AGENT_NAME: z.string().regex(AGENT_ID_RE, 'letters, digits, _ . - only, at most 100').optional(),
  /** Concurrent tasks. */
  FFLEET_AGENT_SLOTS: envNumber(z.coerce.number().int().min(0).max(MAX_SLOTS).default(2)),
  /** Comma-separated labels matched against a task's `requires`. */
  FFLEET_AGENT_LABELS: z.string().default(''),
  /** State dir: the outbox lives in `agent-<name>/outbox` under it. */
  FFLEET_DATA_DIR: z.string().min(1).default('./data'),
  /** Transcoder executable (else ffmpeg on PATH, else the bundled one). */
  FFLEET_TRANSCODER: z.string().optional(),
  /**
   * Directories (separated like PATH) that pre/post-processing scripts must live in; unset: any script
   * may run (the spec's default). Checked on the script's real path before it starts.
   */
  FFLEET_AGENT_SCRIPT_DIRS: z.string().default(''),
  /** Heartbeat period (renews leases; keep well under FFLEET_LEASE_TTL_MS). */
  FFLEET_HEARTBEAT_MS: envNumber(z.coerce.number().int().min(100).max(60_000).default(5_000)),
  LOG_LEVEL: z.enum(LOG_LEVELS).default('info'),
});

/** The variables an agent reads (`ffleet --help` lists them). */
export const AGENT_ENV_VARS: readonly string[] = Object.keys(EnvSchema.shape);

export type AgentConfig = {
  mqttUrl: string;
  token: string;
  name: string;
  slots: number;
  labels: string[];
  /** Absolute; empty when unrestricted. */
  scriptDirs: string[];
  dataDir: string;
  heartbeatMs: number;
  logLevel: string;
  env: NodeJS.ProcessEnv;
};

/** Parse the agent's config from an env object. Throws AgentConfigError naming every invalid variable. */
export function parseAgentConfig(env: NodeJS.ProcessEnv): AgentConfig {
  const clean = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== ''));
  const r = EnvSchema.safeParse(clean);
  if (!r.success) {
    const { variable, message } = envError(r.error, clean);
    throw new AgentConfigError(variable, message);
  }
  const e = r.data;
  const labels = e.FFLEET_AGENT_LABELS.split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const l of labels) {
    if (!Label.safeParse(l).success)
      throw new AgentConfigError('FFLEET_AGENT_LABELS', `invalid label ${JSON.stringify(l)}`);
    const reserved = reservedLabelProblem(l);
    if (reserved) throw new AgentConfigError('FFLEET_AGENT_LABELS', reserved);
  }
  const dup = duplicateLabel(labels);
  if (dup) throw new AgentConfigError('FFLEET_AGENT_LABELS', `"${dup.label}" is given twice`);
  // As PATCH /agents/{id} allows: the labels travel in the birth, which the broker keeps (65,535 bytes at most).
  if (labels.length > MAX_AGENT_LABELS)
    throw new AgentConfigError(
      'FFLEET_AGENT_LABELS',
      `${labels.length} labels, more than the ${MAX_AGENT_LABELS} an agent may have`,
    );
  const scriptDirs = e.FFLEET_AGENT_SCRIPT_DIRS.split(delimiter)
    .map((s) => s.trim())
    .filter(Boolean);
  for (const d of scriptDirs) {
    if (!isAbsolute(d))
      throw new AgentConfigError('FFLEET_AGENT_SCRIPT_DIRS', `${JSON.stringify(d)} is not an absolute path`);
  }
  const dataDir = isAbsolute(e.FFLEET_DATA_DIR) ? e.FFLEET_DATA_DIR : resolve(e.FFLEET_DATA_DIR);
  let token = e.FFLEET_AGENT_TOKEN;
  const tokenFile = join(dataDir, 'agent-token');
  if (!token && existsSync(tokenFile)) token = readFileSync(tokenFile, 'utf8').trim();
  if (!token) {
    throw new AgentConfigError(
      'FFLEET_AGENT_TOKEN',
      `not set (and no ${tokenFile}); copy it from the control plane's data dir`,
    );
  }
  const name =
    e.FFLEET_AGENT_NAME ??
    (hostname()
      .replace(/[^A-Za-z0-9_.-]/g, '-')
      .slice(0, 100) ||
      'agent');
  return {
    mqttUrl: e.MQTT_URL,
    token,
    name,
    slots: e.FFLEET_AGENT_SLOTS,
    labels,
    scriptDirs,
    dataDir,
    heartbeatMs: e.FFLEET_HEARTBEAT_MS,
    logLevel: e.LOG_LEVEL,
    env,
  };
}
