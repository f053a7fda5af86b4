import { Command } from 'commander';
import pino, { type Logger } from 'pino';
import { AgentConfigError, parseAgentConfig } from '../agent/src/config.ts';
import type { FleetAgent } from '../agent/src/fleet-agent.ts';
import { ConfigError, type ControlPlaneConfig, parseConfig } from '../control-plane/src/config/config.ts';
import type { RunningControlPlane } from '../control-plane/src/control-plane.ts';
import { VERSION } from '../control-plane/src/version.ts';

// The heavy parts are imported by the subcommand that needs them: an agent on an encode box does not
// load the database, broker and HTTP stacks (seconds of start-up on a small machine).
const loadControlPlane = () => import('../control-plane/src/control-plane.ts');
const loadAgent = () => import('../agent/src/fleet-agent.ts');

/** Exit code for an invalid configuration (CONTRACT/issue: one line naming the variable, exit 2). */
const EXIT_CONFIG = 2;

function configOrExit<T>(parse: () => T): T {
  try {
    return parse();
  } catch (err) {
    if (err instanceof ConfigError || err instanceof AgentConfigError) {
      process.stderr.write(`ffleet: ${err.message}\n`);
      process.exit(EXIT_CONFIG);
    }
    throw err;
  }
}

const makeLogger = (level: string): Logger =>
  pino({
    level,
    redact: {
      paths: ['token', 'password', 'secret', '*.token', '*.password', '*.secret', 'headers.authorization'],
      censor: '[redacted]',
    },
  });

/**
 * SIGTERM/SIGINT once: stop claiming, let running tasks finish, stop. Twice: kill running work and
 * hand it back to the queue, then stop.
 */
function onSignals(logger: Logger, graceful: () => Promise<void>, forced: () => Promise<void>): void {
  let count = 0;
  const handle = (sig: string) => {
    count += 1;
    if (count === 1) {
      logger.info(
        { signal: sig },
        'shutting down: running tasks finish first (signal again to hand them back)',
      );
      graceful().then(
        () => process.exit(0),
        (err) => {
          logger.error({ err }, 'shutdown failed');
          process.exit(1);
        },
      );
    } else if (count === 2) {
      logger.warn({ signal: sig }, 'forced shutdown: running tasks are handed back');
      forced().then(
        () => process.exit(0),
        () => process.exit(1),
      );
    } else process.exit(1);
  };
  process.on('SIGTERM', () => handle('SIGTERM'));
  process.on('SIGINT', () => handle('SIGINT'));
}

async function runControlPlane(withLocalAgent: boolean): Promise<void> {
  const env = { ...process.env };
  if (withLocalAgent && env.FFLEET_LOCAL_AGENT === undefined) env.FFLEET_LOCAL_AGENT = '1';
  const config: ControlPlaneConfig = configOrExit(() => parseConfig(env));
  const logger = makeLogger(config.logLevel);
  let cp: RunningControlPlane;
  try {
    const { startControlPlane } = await loadControlPlane();
    cp = await startControlPlane(config, logger);
  } catch (err) {
    logger.fatal({ err: (err as Error).message }, 'control plane failed to start');
    process.stderr.write(`ffleet: ${(err as Error).message}\n`);
    process.exit(1);
  }
  let agent: FleetAgent | null = null;
  if (config.localAgent) {
    const agentConfig = configOrExit(() =>
      parseAgentConfig({
        ...env,
        MQTT_URL: cp.mqttUrl,
        FFLEET_AGENT_TOKEN: cp.agentToken,
        FFLEET_DATA_DIR: config.dataDir,
      }),
    );
    const { FleetAgent } = await loadAgent();
    agent = new FleetAgent({ config: agentConfig, logger, version: VERSION });
    await agent.start();
    logger.info({ agent: agentConfig.name, slots: agentConfig.slots }, 'local agent started');
  }
  logger.info(
    { url: `http://${config.host}:${cp.httpPort}`, docs: `http://${config.host}:${cp.httpPort}/api/v1/docs` },
    'ffleet is ready',
  );
  onSignals(
    logger,
    async () => {
      await agent?.drain();
      await agent?.stop();
      await cp.stop();
    },
    async () => {
      await agent?.stop({ flushMs: 2_000 });
      await cp.stop();
    },
  );
}

async function runAgent(): Promise<void> {
  const config = configOrExit(() => parseAgentConfig(process.env));
  const logger = makeLogger(config.logLevel);
  const { FleetAgent } = await loadAgent();
  const agent = new FleetAgent({ config, logger, version: VERSION });
  await agent.start();
  logger.info({ agent: config.name, broker: config.mqttUrl, slots: config.slots }, 'agent started');
  onSignals(
    logger,
    async () => {
      await agent.drain();
      await agent.stop();
    },
    () => agent.stop({ flushMs: 2_000 }),
  );
}

const program = new Command()
  .name('ffleet')
  .description('Media transcoding task service: control plane and encode-box agents')
  .version(VERSION);
program
  .command('start')
  .description('all-in-one: control plane, embedded database and broker, one local agent')
  .action(() => runControlPlane(true));
program
  .command('control-plane')
  .description('the control plane (API, database, broker, scheduling, webhooks)')
  .action(() => runControlPlane(false));
program
  .command('agent')
  .description('an agent for an encode box')
  .action(() => runAgent());

await program.parseAsync(process.argv);
