import { hostname } from 'node:os';
import { isAbsolute, resolve } from 'node:path';
import { BrokerUrl, envError, envNumber, LOG_LEVELS, SHORT_TOKEN_CHARS } from '@ffleet/shared';
import { z } from 'zod';
import { type CorsPolicy, parseCorsOrigins } from '../api/cors.ts';

const bool = z
  .enum(['1', '0', 'true', 'false', 'yes', 'no', 'on', 'off', ''])
  .transform((v) => ['1', 'true', 'yes', 'on'].includes(v));
const port = z.coerce.number().int().min(0).max(65535);
const positiveInt = z.coerce.number().int().min(1);

/** Every environment variable ffleet reads (CONTRACT.md "Configuration"), validated once at start. */
const EnvSchema = z.object({
  /** HTTP listen port. */
  PORT: envNumber(port.default(3000)),
  /** HTTP listen address; non-loopback requires FFLEET_API_TOKENS. */
  HOST: z.string().min(1).default('127.0.0.1'),
  /** PostgreSQL URL; unset → embedded PGlite under FFLEET_DATA_DIR. */
  DATABASE_URL: z
    .string()
    .regex(/^postgres(ql)?:\/\//, 'must be a postgres:// or postgresql:// URL')
    .optional(),
  /** State of the embedded database, broker and agent outbox. */
  FFLEET_DATA_DIR: z.string().min(1).default('./data'),
  /** External broker; unset → embedded broker. */
  MQTT_URL: BrokerUrl.optional(),
  /** Embedded broker listen port. */
  MQTT_PORT: envNumber(port.default(1883)),
  /** Comma-separated API tokens; unset → loopback clients only. */
  FFLEET_API_TOKENS: z.string().optional(),
  /**
   * Origins whose web pages may call the API (comma-separated, e.g. `https://mam.example.com`), or `*`
   * (needs FFLEET_API_TOKENS); unset → no cross-origin access (api/cors.ts).
   */
  FFLEET_CORS_ORIGINS: z.string().optional(),
  /** Token agents present to join; generated and kept in the data dir when unset. */
  FFLEET_AGENT_TOKEN: z.string().optional(),
  /**
   * What the embedded broker lets an agent log in with: `shared` the fleet token or the agent's own
   * token, `per-agent` only the agent's own (`ffleet agent-token <name>`; agent-token.ts).
   */
  FFLEET_AGENT_AUTH: z.enum(['shared', 'per-agent']).default('shared'),
  /** Run one agent inside the control-plane process. */
  FFLEET_LOCAL_AGENT: bool.default(false),
  /** Per-attempt webhook delivery timeout. */
  FFLEET_WEBHOOK_TIMEOUT_MS: envNumber(positiveInt.max(600_000).default(10_000)),
  /** A running task's lease without a heartbeat. */
  FFLEET_LEASE_TTL_MS: envNumber(positiveInt.min(1000).max(3_600_000).default(30_000)),
  /**
   * Named (prepared) statements on PostgreSQL. Set `0` behind a pooler in transaction mode (pgbouncer
   * before 1.21), where a prepared statement may not exist on the next transaction's server connection.
   */
  FFLEET_PG_PREPARE: bool.default(true),
  /** Days webhook delivery attempts (`/webhooks/executions`) are kept; 0 keeps them forever. */
  FFLEET_EXECUTION_RETENTION_DAYS: envNumber(z.coerce.number().int().min(0).max(36_500).default(30)),
  /** Largest accepted request body in bytes. */
  FFLEET_BODY_LIMIT: envNumber(positiveInt.default(1024 * 1024)),
  /** pino level. */
  LOG_LEVEL: z.enum(LOG_LEVELS).default('info'),
});

/** The variables the control plane reads (`ffleet --help` lists them). */
export const CONTROL_PLANE_ENV_VARS: readonly string[] = Object.keys(EnvSchema.shape);

export type ControlPlaneConfig = {
  port: number;
  host: string;
  databaseUrl: string | undefined;
  pgPrepare: boolean;
  dataDir: string;
  mqttUrl: string | undefined;
  mqttPort: number;
  apiTokens: string[];
  /** Cross-origin access; undefined: none. */
  cors: CorsPolicy | undefined;
  agentToken: string | undefined;
  agentAuth: 'shared' | 'per-agent';
  /** Token variables holding a token shorter than SHORT_TOKEN_CHARS: accepted, warned about at start. */
  shortTokens: string[];
  localAgent: boolean;
  webhookTimeoutMs: number;
  /** How long delivery attempts are kept; Infinity: forever. */
  executionRetentionMs: number;
  leaseTtlMs: number;
  bodyLimit: number;
  logLevel: string;
};

export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super(`invalid configuration: ${variable}: ${message}`);
  }
}

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost', '[::1]']);
export const isLoopbackHost = (h: string): boolean => LOOPBACK.has(h) || h.startsWith('127.');

/** Parse the control plane's config from an env object. Throws ConfigError naming every invalid variable. */
export function parseConfig(env: Record<string, string | undefined>): ControlPlaneConfig {
  // Empty strings mean "unset" (common in compose files and systemd units).
  const clean = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== ''));
  const r = EnvSchema.safeParse(clean);
  if (!r.success) {
    const { variable, message } = envError(r.error, clean);
    throw new ConfigError(variable, message);
  }
  const e = r.data;
  const apiTokens = (e.FFLEET_API_TOKENS ?? '')
    .split(',')
    .map((t) => t.trim())
    .filter(Boolean);
  const shortTokens = [
    ...(apiTokens.some((t) => t.length < SHORT_TOKEN_CHARS) ? ['FFLEET_API_TOKENS'] : []),
    ...((e.FFLEET_AGENT_TOKEN?.length ?? SHORT_TOKEN_CHARS) < SHORT_TOKEN_CHARS
      ? ['FFLEET_AGENT_TOKEN']
      : []),
  ];
  if (!isLoopbackHost(e.HOST) && apiTokens.length === 0) {
    throw new ConfigError(
      'HOST',
      `binding ${e.HOST} (not loopback) without FFLEET_API_TOKENS would expose the API unauthenticated; set FFLEET_API_TOKENS or HOST=127.0.0.1`,
    );
  }
  const cors = parseCorsOrigins(e.FFLEET_CORS_ORIGINS);
  if (!cors.ok) throw new ConfigError('FFLEET_CORS_ORIGINS', cors.error);
  if (cors.policy?.any && apiTokens.length === 0) {
    throw new ConfigError(
      'FFLEET_CORS_ORIGINS',
      '`*` without FFLEET_API_TOKENS would let any web page opened on this machine create tasks (which run scripts); set FFLEET_API_TOKENS or list the origins',
    );
  }
  const dataDir = isAbsolute(e.FFLEET_DATA_DIR) ? e.FFLEET_DATA_DIR : resolve(e.FFLEET_DATA_DIR);
  return {
    port: e.PORT,
    host: e.HOST,
    databaseUrl: e.DATABASE_URL,
    pgPrepare: e.FFLEET_PG_PREPARE,
    dataDir,
    mqttUrl: e.MQTT_URL,
    mqttPort: e.MQTT_PORT,
    apiTokens,
    cors: cors.policy,
    agentToken: e.FFLEET_AGENT_TOKEN,
    agentAuth: e.FFLEET_AGENT_AUTH,
    shortTokens,
    localAgent: e.FFLEET_LOCAL_AGENT,
    webhookTimeoutMs: e.FFLEET_WEBHOOK_TIMEOUT_MS,
    executionRetentionMs:
      e.FFLEET_EXECUTION_RETENTION_DAYS === 0
        ? Number.POSITIVE_INFINITY
        : e.FFLEET_EXECUTION_RETENTION_DAYS * 86_400_000,
    leaseTtlMs: e.FFLEET_LEASE_TTL_MS,
    bodyLimit: e.FFLEET_BODY_LIMIT,
    logLevel: e.LOG_LEVEL,
  };
}

export const defaultAgentName = (): string =>
  hostname()
    .replace(/[^A-Za-z0-9_.-]/g, '-')
    .slice(0, 100) || 'agent';
