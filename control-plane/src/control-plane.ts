import { createHash, randomBytes } from 'node:crypto';
import { statfsSync } from 'node:fs';
import { chmod, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { makeDirectory, SHORT_TOKEN_WARNING, takeLockFile } from '@ffleet/shared';
import type { ServerType } from '@hono/node-server';
import type { Logger } from 'pino';
import { agentTokenFor, agentTokenPath, keptTokenDiffers, loadAgentToken } from './agent-token.ts';
import type { AgentTokenIssuer } from './api/agents.ts';
import { createApp } from './api/app.ts';
import { createApiServer } from './api/client-errors.ts';
import { ConflictError } from './api/errors.ts';
import { healthFacts } from './api/health-facts.ts';
import { createMetrics } from './api/metrics.ts';
import { redeliverThrough } from './api/webhooks.ts';
import { ControlPlaneClient } from './broker/control-plane-client.ts';
import { EmbeddedBroker, type LocalBrokerLink } from './broker/embedded-broker.ts';
import type { ControlPlaneConfig } from './config/config.ts';
import { type Database, openDatabase } from './db/client.ts';
import { claimControlPlaneLock } from './db/control-plane-lock.ts';
import { PgliteCheckpointer } from './db/pglite-checkpointer.ts';
import { EventBus } from './events/event-bus.ts';
import { RetentionSweeper } from './events/retention.ts';
import { Fleet } from './scheduler/fleet.ts';
import { loadTokenGenerations, nextTokenGeneration } from './services/agent-credentials.ts';
import type { ServiceContext } from './services/context.ts';
import { normalizeStoredFolderPaths } from './services/watchfolders.ts';
import { VERSION } from './version.ts';
import { DeliveryDispatcher } from './webhooks/delivery-dispatcher.ts';

/** The control plane's own MQTT user (all rights on the embedded broker). */
export const INTERNAL_MQTT_USER = 'ffleet-control-plane';

export type RunningControlPlane = {
  httpPort: number;
  mqttUrl: string;
  agentToken: string;
  /**
   * The own token that logs `name` in now (agentTokenFor at its current generation on the embedded
   * broker; generation 0 with an external one).
   */
  ownAgentToken(name: string): string;
  database: Database;
  ctx: ServiceContext;
  stop(): Promise<void>;
};

function listen(
  app: ReturnType<typeof createApp>,
  host: string,
  port: number,
): Promise<{ server: ServerType; port: number }> {
  return new Promise((resolve, reject) => {
    const server = createApiServer(app.fetch, host);
    server.listen(port, host, () => {
      const address = server.address();
      resolve({ server, port: typeof address === 'object' && address ? address.port : port });
    });
    server.once('error', (err: NodeJS.ErrnoException) =>
      reject(
        err.code === 'EADDRINUSE'
          ? new Error(`HTTP port ${port} on ${host} is already in use; set PORT to a free port`)
          : err,
      ),
    );
  });
}

/**
 * Before the embedded database is opened: this process's lock on it (a second control plane on the same
 * data dir would open the same PGlite files and corrupt them), and a clear error where its files belong
 * to another user (a one-off `sudo ffleet start`), which PGlite reports only as "failed to initialize".
 * Returns the lock's release, for the stops.
 */
export async function claimEmbeddedDatabase(dataDir: string): Promise<() => Promise<void>> {
  await makeDirectory(dataDir);
  const dir = join(dataDir, 'pglite');
  const release = takeLockFile(
    join(dataDir, 'pglite.lock'),
    `the embedded database in ${dir}`,
    'stop that process first, or give this one its own FFLEET_DATA_DIR',
  );
  try {
    const uid = process.getuid?.();
    for (const path of [dir, join(dir, 'PG_VERSION'), join(dir, 'global', 'pg_control')]) {
      const owner = await stat(path).then(
        (s) => s.uid,
        () => undefined,
      );
      if (uid !== undefined && owner !== undefined && owner !== uid)
        throw new Error(
          `${path} belongs to user id ${owner}, not to the user running ffleet (${uid}): ` +
            `give the data dir to this user (chown -R) or run ffleet as its owner`,
        );
    }
  } catch (err) {
    release();
    throw err;
  }
  return async () => release();
}

/** The database files hold webhook secrets: readable by the service's user only, as PostgreSQL's are. */
async function keepPrivate(dir: string): Promise<void> {
  await chmod(dir, 0o700).catch(() => {});
}

/** Compose and start every long-lived part of the control plane. `stop()` undoes it in reverse. */
export async function startControlPlane(
  config: ControlPlaneConfig,
  logger: Logger,
  /**
   * `localAgentName`: the agent `ffleet start` runs in this process (FFLEET_LOCAL_AGENT). Its token comes
   * from here (ownAgentToken), so POST /api/v1/agents/{id}/token refuses its name: it could only lock it out.
   */
  opts: { localAgentName?: string } = {},
): Promise<RunningControlPlane> {
  const stops: (() => Promise<void>)[] = [];
  // Once, in reverse order, whoever calls it: a forced stop (second SIGTERM) calls it again while the
  // first call runs, and reversing `stops` in place let that second call close the database and the
  // broker while the fleet still used them.
  let stopping: Promise<void> | null = null;
  const stopAll = () =>
    (stopping ??= (async () => {
      for (const s of [...stops].reverse()) await s().catch((err) => logger.error({ err }, 'stop failed'));
    })());
  if (config.shortTokens.length) logger.warn({ variables: config.shortTokens }, SHORT_TOKEN_WARNING);
  if (config.cors && config.apiTokens.length === 0) {
    logger.warn(
      { origins: config.cors.any ? ['*'] : [...config.cors.origins] },
      'FFLEET_CORS_ORIGINS without FFLEET_API_TOKENS: pages of these origins opened on this machine use the API without a token (they can create tasks, which run scripts)',
    );
  }
  try {
    if (!config.databaseUrl)
      stops.push(
        await claimEmbeddedDatabase(config.dataDir).catch((err: unknown) => {
          throw embeddedDatabaseStartError(err, config.dataDir);
        }),
      );
    // With a local agent on a PostgreSQL server, the data dir holds that agent's outbox, which it locks
    // only once it starts, after this whole start (which marks every agent offline in the shared
    // database: a second process on the data dir left the running one's agent offline, its watchfolders
    // unscanned). Taken first here, as the embedded database's lock is.
    else if (opts.localAgentName) {
      await makeDirectory(config.dataDir);
      const release = takeLockFile(
        join(config.dataDir, 'start.lock'),
        `the data dir ${config.dataDir}`,
        'stop that process first, or give this one its own FFLEET_DATA_DIR',
      );
      stops.push(async () => release());
    }
    const database = config.databaseUrl
      ? await openDatabase({ kind: 'postgres', url: config.databaseUrl, prepare: config.pgPrepare }).catch(
          (err: unknown) => {
            throw databaseStartError(err);
          },
        )
      : await openDatabase({ kind: 'pglite', dataDir: join(config.dataDir, 'pglite') }).catch(
          (err: unknown) => {
            throw embeddedDatabaseStartError(err, config.dataDir);
          },
        );
    if (!config.databaseUrl) await keepPrivate(join(config.dataDir, 'pglite'));
    stops.push(() => database.close());
    // One control plane per database (control-plane-lock.ts), before this one marks any agent offline.
    // Behind a transaction-mode pooler (FFLEET_PG_PREPARE=0) a session lock would stay on whichever server
    // connection took it: not checked there.
    if (config.databaseUrl && config.pgPrepare !== false)
      stops.push(await claimControlPlaneLock(config.databaseUrl, logger));
    logger.info({ db: database.kind }, 'database ready');
    for (const warning of database.warnings) logger.error({ db: database.kind }, warning);
    const renamed = await normalizeStoredFolderPaths(database.db);
    if (renamed) logger.info({ watchfolders: renamed }, 'watchfolder paths normalised');

    const { token: agentToken, generated } = await loadAgentToken(config.dataDir, config.agentToken);
    if (generated) logger.info({ file: agentTokenPath(config.dataDir) }, 'generated an agent token');
    if (keptTokenDiffers(config.dataDir, config.agentToken))
      logger.warn(
        { file: agentTokenPath(config.dataDir) },
        'FFLEET_AGENT_TOKEN differs from the agent token kept in the data dir: an agent or `ffleet agent-token` reading that file gets a token this control plane refuses (update the file or remove it)',
      );

    let mqttUrl = config.mqttUrl;
    let cpUser = INTERNAL_MQTT_USER;
    // Credentials only for an external broker: the local link to the embedded one logs in as nobody.
    let cpPass = '';
    let local: LocalBrokerLink | undefined;
    let rotateAgentToken: AgentTokenIssuer['rotate'];
    let generationOf = (_name: string) => 0;
    if (!mqttUrl) {
      const broker = new EmbeddedBroker({
        port: config.mqttPort,
        agentToken,
        agentAuth: config.agentAuth,
        tokenGenerations: await loadTokenGenerations(database.db),
        // The control plane needs no login here (local link below): its user name stays reserved, with a
        // random token nobody holds, so no agent can connect under it and get its rights.
        internalUser: INTERNAL_MQTT_USER,
        internalToken: randomBytes(24).toString('base64url'),
        logger,
      });
      const { port } = await broker.start();
      stops.push(() => broker.stop());
      mqttUrl = `mqtt://127.0.0.1:${port}`;
      // The control plane talks to a broker in its own process without an MQTT connection.
      local = broker.localLink();
      generationOf = (name) => broker.tokenGeneration(name);
      rotateAgentToken = async (name) => {
        if (name === opts.localAgentName)
          throw new ConflictError(
            'LOCAL_AGENT',
            `${name} is this control plane's local agent (FFLEET_LOCAL_AGENT), which takes its token from the control plane and holds none to lose; to give that name a token of its own, run it as a separate agent (FFLEET_LOCAL_AGENT=0)`,
          );
        const generation = await nextTokenGeneration(database.db, name, Date.now());
        const disconnected = broker.setTokenGeneration(name, generation);
        return { generation, token: agentTokenFor(agentToken, name, generation), disconnected };
      };
    } else {
      if (config.agentAuth === 'per-agent')
        logger.info(
          'FFLEET_AGENT_AUTH=per-agent: the external broker checks agent logins (its password file decides which tokens it takes)',
        );
      const u = new URL(mqttUrl);
      if (u.username) cpUser = decodeURIComponent(u.username);
      cpPass = u.password ? decodeURIComponent(u.password) : agentToken;
      u.username = '';
      u.password = '';
      mqttUrl = u.toString();
    }

    const bus = new EventBus();
    const ctx: ServiceContext = {
      database,
      bus,
      logger,
      fleet: { cancelRunning() {}, workAvailable() {}, watchfoldersChanged() {}, agentChanged() {} },
      now: () => Date.now(),
      ...(opts.localAgentName ? { localAgentName: opts.localAgentName } : {}),
    };
    // Stable per deployment (so the persistent session survives restarts), distinct between deployments
    // that share a broker.
    const deployment = createHash('sha256')
      .update(config.databaseUrl ?? config.dataDir)
      .digest('hex')
      .slice(0, 12);
    const mqtt = new ControlPlaneClient({
      url: mqttUrl,
      username: cpUser,
      password: cpPass,
      logger,
      clientId: `${INTERNAL_MQTT_USER}-${deployment}`,
      local,
    });
    const fleet = new Fleet({ ctx, mqtt, logger, leaseTtlMs: config.leaseTtlMs });
    ctx.fleet = fleet;
    await fleet.start();
    const started = await mqtt.start();
    if (!started.ok) throw new Error(started.error);
    stops.push(() => mqtt.stop());
    stops.push(() => fleet.stop());

    const metrics = createMetrics(database, bus);
    stops.push(async () => metrics.stop());
    const dispatcher = new DeliveryDispatcher({
      database,
      logger,
      timeoutMs: config.webhookTimeoutMs,
      userAgent: `ffleet/${VERSION}`,
      onAttempt: (success: boolean) => metrics.webhookAttempts.inc({ success: String(success) }),
    });
    await dispatcher.start();
    stops.push(() => dispatcher.stop());
    const retention = new RetentionSweeper({ database, logger, executionsMs: config.executionRetentionMs });
    retention.start();
    stops.push(() => retention.stop());
    // PGlite has no checkpointer process: without this its WAL grows until restart (a no-op on PostgreSQL).
    const checkpointer = new PgliteCheckpointer({ database, logger });
    checkpointer.start();
    stops.push(() => checkpointer.stop());
    // Deliveries written by another replica are found by the dispatcher's own poll.
    const unsubscribe = bus.onDeliveries(() => dispatcher.wake());
    stops.push(async () => unsubscribe());

    const app = createApp({
      ctx,
      bus,
      metrics,
      version: VERSION,
      apiTokens: config.apiTokens,
      cors: config.cors,
      bodyLimit: config.bodyLimit,
      redeliver: redeliverThrough(dispatcher),
      agentTokens: {
        fleetTokenAccepted: config.agentAuth !== 'per-agent',
        ...(rotateAgentToken ? { rotate: rotateAgentToken } : {}),
      },
      health: () => healthFacts(database, () => mqtt.connected),
    });
    const { server, port } = await listen(app, config.host, config.port);
    stops.push(
      () =>
        new Promise<void>((resolve) => {
          server.close(() => resolve());
          // SSE clients keep connections open; do not wait for them.
          (server as unknown as { closeAllConnections?: () => void }).closeAllConnections?.();
        }),
    );
    logger.info({ host: config.host, port }, 'HTTP API listening');
    return {
      httpPort: port,
      mqttUrl,
      agentToken,
      ownAgentToken: (name) => agentTokenFor(agentToken, name, generationOf(name)),
      database,
      ctx,
      stop: stopAll,
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
}

/**
 * Why the PostgreSQL of DATABASE_URL could not be opened, in one line. The first statement fails
 * wrapped by drizzle ("Failed query: SELECT to_regclass(…)"), with the reason (connection refused, no
 * such database, password authentication failed, an unknown host) only in its `cause`. The URL is not
 * repeated: it may hold a password.
 */
/**
 * The embedded database's start (its lock file, PGlite) failed: on a full disk PGlite says only
 * "Aborted()", a write ENOSPC without a file, so a nearly full file system under the data dir is named as
 * the likely cause. Another process's lock and a newer database keep their own errors (exit code 2).
 */
export function embeddedDatabaseStartError(err: unknown, dataDir: string): Error {
  const code = (err as { code?: unknown } | null)?.code;
  if (!(err instanceof Error) || code === 'ENEWERDB' || code === 'ELOCKED') return err as Error;
  let free: number | undefined;
  try {
    const fs = statfsSync(dataDir);
    free = fs.bavail * fs.bsize;
  } catch {
    // Unknown: the error stands alone.
  }
  if (free === undefined || free >= LOW_DISK_BYTES) return err;
  return new Error(
    `cannot start the embedded database in ${dataDir}: its file system has ${free} bytes free (${err.message}); free some space and start again`,
    { cause: err },
  );
}
/** Less than this free beside the embedded database: a failed start is most likely for want of space. */
const LOW_DISK_BYTES = 1024 * 1024;

export function databaseStartError(err: unknown): Error {
  if (!(err instanceof Error) || (err as { code?: unknown }).code === 'ENEWERDB') return err as Error;
  let reason: unknown = err;
  while (reason instanceof Error && reason.message.startsWith('Failed query:') && reason.cause)
    reason = reason.cause;
  const r = reason as { code?: unknown; message?: unknown };
  const message = typeof r.message === 'string' && r.message ? r.message : String(reason);
  const code = typeof r.code === 'string' && !message.includes(r.code) ? `${r.code} ` : '';
  return new Error(`cannot open the database of DATABASE_URL: ${code}${message}`, { cause: err });
}
