// The `ffleet agent` subcommand, kept apart from bin/ffleet.ts so bin/ffleet.js can run it from a
// bundle without the tsx loader and without commander or the control plane's modules (agent RSS).
import { SHORT_TOKEN_CHARS, SHORT_TOKEN_WARNING } from '@ffleet/shared';
import pino, { type Logger } from 'pino';
import { AgentConfigError, parseAgentConfig } from '../agent/src/config.ts';
import { urlForLogs } from '../agent/src/session/url-for-logs.ts';

/** Exit code for an invalid configuration (CONTRACT/issue: one line naming the variable, exit 2). */
export const EXIT_CONFIG = 2;

export const makeLogger = (level: string): Logger =>
  pino({
    level,
    redact: {
      paths: ['token', 'password', 'secret', '*.token', '*.password', '*.secret', 'headers.authorization'],
      censor: '[redacted]',
    },
  });

/**
 * An agent that could not start (its data directory cannot hold its outbox, …): logged, one line on
 * stderr an operator can act on instead of a stack trace, exit code 1 (2 when another process holds it).
 */
export function agentStartFailed(logger: Logger, err: unknown): never {
  const message = err instanceof Error ? err.message : String(err);
  logger.fatal({ err: message }, 'agent failed to start');
  process.stderr.write(`ffleet: agent failed to start: ${message}\n`);
  // Its outbox in use by another process (a LockedError): a configuration error, not restarted by systemd.
  process.exit((err as { code?: unknown } | null)?.code === 'ELOCKED' ? EXIT_CONFIG : 1);
}

/**
 * How long a drained agent waits for an unreachable control plane to take the results of the tasks it
 * let finish, before it leaves them in its outbox (systemd's agent unit allows an hour to stop).
 */
const DRAIN_FLUSH_MS = 30_000;

/**
 * SIGTERM/SIGINT once: stop claiming, let running tasks finish, stop. Twice: kill running work and
 * hand it back to the queue, then stop.
 */
export function onSignals(
  logger: Logger,
  graceful: () => Promise<void>,
  forced: () => Promise<void>,
  /** False for a control plane without a local agent: it runs no tasks, so the lines do not mention them. */
  runsTasks = true,
): void {
  let count = 0;
  const handle = (sig: string) => {
    count += 1;
    if (count === 1) {
      logger.info(
        { signal: sig },
        runsTasks
          ? 'shutting down: running tasks finish first (signal again to hand them back)'
          : 'shutting down (signal again to stop at once)',
      );
      graceful().then(
        () => process.exit(0),
        (err) => {
          logger.error({ err }, 'shutdown failed');
          process.exit(1);
        },
      );
    } else if (count === 2) {
      logger.warn(
        { signal: sig },
        runsTasks ? 'forced shutdown: running tasks are handed back' : 'forced shutdown',
      );
      forced().then(
        () => process.exit(0),
        () => process.exit(1),
      );
    } else process.exit(1);
  };
  process.on('SIGTERM', () => handle('SIGTERM'));
  process.on('SIGINT', () => handle('SIGINT'));
}

/** `ffleet agent`: one agent for this box, configured from the environment. */
export async function runAgent(version: string): Promise<void> {
  let config: ReturnType<typeof parseAgentConfig>;
  try {
    config = parseAgentConfig(process.env);
  } catch (err) {
    if (err instanceof AgentConfigError) {
      process.stderr.write(`ffleet: ${err.message}\n`);
      process.exit(EXIT_CONFIG);
    }
    throw err;
  }
  const logger = makeLogger(config.logLevel);
  if (config.token.length < SHORT_TOKEN_CHARS)
    logger.warn({ variables: ['FFLEET_AGENT_TOKEN'] }, SHORT_TOKEN_WARNING);
  const { FleetAgent } = await import('../agent/src/fleet-agent.ts');
  const agent = new FleetAgent({
    config,
    logger,
    version,
    // Another process holds this agent's name: a configuration problem, reported like one.
    onRefused: (reason) => {
      process.stderr.write(`ffleet: ${reason}\n`);
      process.exit(EXIT_CONFIG);
    },
  });
  await agent.start().catch((err: unknown) => agentStartFailed(logger, err));
  logger.info(
    { agent: config.name, broker: urlForLogs(config.mqttUrl), slots: config.slots },
    'agent started',
  );
  onSignals(
    logger,
    async () => {
      await agent.drain();
      await agent.stop({ flushMs: DRAIN_FLUSH_MS, evenDisconnected: true });
    },
    () => agent.stop({ flushMs: 2_000 }),
  );
}
