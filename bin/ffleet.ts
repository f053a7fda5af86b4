import { Command } from 'commander';
import { AgentConfigError, parseAgentConfig } from '../agent/src/config.ts';
import type { FleetAgent } from '../agent/src/fleet-agent.ts';
import { ConfigError, type ControlPlaneConfig, parseConfig } from '../control-plane/src/config/config.ts';
import type { RunningControlPlane } from '../control-plane/src/control-plane.ts';
import { VERSION } from '../control-plane/src/version.ts';
import { agentStartFailed, EXIT_CONFIG, makeLogger, onSignals, runAgent } from './agent-main.ts';

// The heavy parts are imported by the subcommand that needs them: an agent on an encode box does not
// load the database, broker and HTTP stacks (seconds of start-up on a small machine).
const loadControlPlane = () => import('../control-plane/src/control-plane.ts');
const loadAgent = () => import('../agent/src/fleet-agent.ts');

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
    try {
      await agent.start();
    } catch (err) {
      // The control plane is up: close it (its embedded database and broker) before leaving.
      await cp.stop().catch(() => {});
      agentStartFailed(logger, err);
    }
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
  .action(() => runAgent(VERSION));

await program.parseAsync(process.argv);
