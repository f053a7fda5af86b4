import { resolve } from 'node:path';
import { AGENT_ID_RE } from '@ffleet/shared';
import { Command, CommanderError } from 'commander';
import { AGENT_ENV_VARS, AgentConfigError, parseAgentConfig } from '../agent/src/config.ts';
import type { FleetAgent } from '../agent/src/fleet-agent.ts';
import { agentTokenFor, agentTokenPath, readKeptAgentToken } from '../control-plane/src/agent-token.ts';
import {
  CONTROL_PLANE_ENV_VARS,
  ConfigError,
  type ControlPlaneConfig,
  parseConfig,
} from '../control-plane/src/config/config.ts';
import type { RunningControlPlane } from '../control-plane/src/control-plane.ts';
import { VERSION } from '../control-plane/src/version.ts';
import { agentStartFailed, EXIT_CONFIG, makeLogger, onSignals, runAgent } from './agent-main.ts';

// The heavy parts are imported by the subcommand that needs them: an agent on an encode box does not
// load the database, broker and HTTP stacks (seconds of start-up on a small machine).
const loadControlPlane = () => import('../control-plane/src/control-plane.ts');
const loadAgent = () => import('../agent/src/fleet-agent.ts');

const CONFIG_PREFIX = 'invalid configuration: ';

/** The problems a config parse reports (`VAR: rule` parts), or the parsed value. */
function problemsOf<T>(parse: () => T): { ok: true; value: T } | { ok: false; problems: string[] } {
  try {
    return { ok: true, value: parse() };
  } catch (err) {
    if (err instanceof ConfigError || err instanceof AgentConfigError) {
      return { ok: false, problems: err.message.replace(CONFIG_PREFIX, '').split('; ') };
    }
    throw err;
  }
}

/** One line naming every invalid variable (README, Configuration), exit code 2. */
function exitInvalid(problems: string[]): never {
  process.stderr.write(`ffleet: ${CONFIG_PREFIX}${[...new Set(problems)].join('; ')}\n`);
  process.exit(EXIT_CONFIG);
}

/** The local agent's environment: the control plane's broker, token and data dir. */
const localAgentEnv = (env: NodeJS.ProcessEnv, mqttUrl: string, token: string, dataDir: string) => ({
  ...env,
  MQTT_URL: mqttUrl,
  FFLEET_AGENT_TOKEN: token,
  FFLEET_DATA_DIR: dataDir,
});

/**
 * WASI's numbers (errno) for what PGlite's file system throws without a message, e.g. when the disk is
 * full while the embedded database is created (it printed `ffleet: undefined`).
 */
const WASI_ERRNO: Record<number, string> = {
  2: 'EACCES (permission denied)',
  29: 'EIO (input/output error)',
  44: 'ENOENT (no such file or directory)',
  51: 'ENOSPC (no space left on device)',
  63: 'EPERM (operation not permitted)',
  69: 'EROFS (read-only file system)',
};

/** A start failure in one line, also for errors without a message (PGlite's file system errors). */
function describeStartError(err: unknown): string {
  if (err instanceof Error && err.message) return err.message;
  const errno = (err as { errno?: unknown } | null)?.errno;
  if (typeof errno === 'number')
    return `the embedded database's file system failed: ${WASI_ERRNO[errno] ?? `errno ${errno}`}`;
  return String(err);
}

async function runControlPlane(withLocalAgent: boolean): Promise<void> {
  const env = { ...process.env };
  if (withLocalAgent && env.FFLEET_LOCAL_AGENT === undefined) env.FFLEET_LOCAL_AGENT = '1';
  // Both configurations are checked before anything starts, so that one line names every invalid
  // variable, the local agent's too (its broker URL and token come from the control plane later:
  // stand-ins here).
  const parsed = problemsOf(() => parseConfig(env));
  const localAgent = parsed.ok
    ? parsed.value.localAgent
    : ['1', 'true'].includes(env.FFLEET_LOCAL_AGENT ?? '');
  const agentChecked = localAgent
    ? problemsOf(() =>
        parseAgentConfig(
          localAgentEnv(
            env,
            'mqtt://127.0.0.1:1883',
            'a-stand-in-token',
            parsed.ok ? parsed.value.dataDir : (env.FFLEET_DATA_DIR ?? './data'),
          ),
        ),
      )
    : null;
  const problems = [
    ...(parsed.ok ? [] : parsed.problems),
    ...(agentChecked?.ok === false ? agentChecked.problems : []),
  ];
  if (!parsed.ok || problems.length) exitInvalid(problems);
  const config: ControlPlaneConfig = parsed.value;
  const logger = makeLogger(config.logLevel);
  let cp: RunningControlPlane;
  try {
    const { startControlPlane } = await loadControlPlane();
    cp = await startControlPlane(
      config,
      logger,
      agentChecked?.ok ? { localAgentName: agentChecked.value.name } : {},
    );
  } catch (err) {
    const why = describeStartError(err);
    logger.fatal({ err: why }, 'control plane failed to start');
    process.stderr.write(`ffleet: ${why}\n`);
    // Its data dir in use by another process (a LockedError), or a database a newer ffleet migrated:
    // configuration errors, as for the agent (systemd does not restart on them).
    const code = (err as { code?: unknown } | null)?.code;
    process.exit(code === 'ELOCKED' || code === 'ENEWERDB' ? EXIT_CONFIG : 1);
  }
  let agent: FleetAgent | null = null;
  if (config.localAgent) {
    const agentParsed = problemsOf(() =>
      parseAgentConfig(localAgentEnv(env, cp.mqttUrl, cp.agentToken, config.dataDir)),
    );
    if (!agentParsed.ok) {
      await cp.stop().catch(() => {});
      exitInvalid(agentParsed.problems);
    }
    // Under FFLEET_AGENT_AUTH=per-agent the fleet token logs no agent in: the local agent gets its own.
    const agentConfig =
      config.agentAuth === 'per-agent'
        ? { ...agentParsed.value, token: cp.ownAgentToken(agentParsed.value.name) }
        : agentParsed.value;
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
  // An IPv6 address goes in brackets in a URL (http://[::1]:3000).
  const origin = `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${cp.httpPort}`;
  logger.info({ url: origin, dashboard: `${origin}/ui`, docs: `${origin}/api/v1/docs` }, 'ffleet is ready');
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
    agent !== null,
  );
}

/**
 * `ffleet agent-token <name>`: the token that logs in `name` and no other agent (agentTokenFor), from
 * FFLEET_AGENT_TOKEN or the one the control plane keeps in FFLEET_DATA_DIR. It never generates one: a
 * token nobody's control plane holds would let nothing in. `--generation`: the token of that generation
 * (after `POST /api/v1/agents/{id}/token` revoked the ones before; the API answers with the new token too).
 */
function printAgentToken(name: string, generationText = '0'): void {
  if (!AGENT_ID_RE.test(name)) {
    exitInvalid([
      `agent name ${JSON.stringify(name)}: use 1-100 letters, digits, '_', '.', '-' (as FFLEET_AGENT_NAME)`,
    ]);
  }
  const generation = Number(generationText);
  if (!/^\d{1,9}$/.test(generationText) || !Number.isSafeInteger(generation))
    exitInvalid([`--generation: must be a whole number from 0, got ${JSON.stringify(generationText)}`]);
  let fleetToken = process.env.FFLEET_AGENT_TOKEN;
  if (!fleetToken) {
    const dataDir = resolve(process.env.FFLEET_DATA_DIR || './data');
    const file = agentTokenPath(dataDir);
    try {
      fleetToken = readKeptAgentToken(dataDir);
    } catch (err) {
      const why = (err as NodeJS.ErrnoException).code === 'ENOENT' ? 'not found' : (err as Error).message;
      exitInvalid([
        `FFLEET_AGENT_TOKEN: not set, and ${file}: ${why}; run this where the control plane runs (or set FFLEET_DATA_DIR to its data dir)`,
      ]);
    }
    if (!fleetToken) exitInvalid([`FFLEET_AGENT_TOKEN: not set, and ${file} is empty`]);
  }
  process.stdout.write(`${agentTokenFor(fleetToken, name, generation)}\n`);
}

/** `--help`'s closing lines: the commands take no options, everything comes from the environment. */
function configurationHelp(): string {
  const wrap = (label: string, names: readonly string[]) => {
    const lines: string[] = [];
    let line = '';
    for (const name of names) {
      const next = line ? `${line}, ${name}` : name;
      if (next.length > 90 && line) {
        lines.push(`${line},`);
        line = name;
      } else line = next;
    }
    lines.push(line);
    return lines.map((l, i) => `  ${(i === 0 ? label : '').padEnd(15)}${l}`).join('\n');
  };
  return [
    '',
    'Configuration comes from environment variables (README, "Configuration"):',
    wrap('control plane', CONTROL_PLANE_ENV_VARS),
    wrap('agent', AGENT_ENV_VARS),
    'An invalid value stops ffleet with exit code 2 and one line naming every invalid variable.',
  ].join('\n');
}

const program = new Command()
  .name('ffleet')
  .description('Media transcoding task service: control plane and encode-box agents')
  .version(VERSION)
  // A usage mistake is a configuration error: one line and exit code 2 (systemd does not restart it),
  // like an invalid variable; help and --version still exit 0.
  .exitOverride()
  .configureOutput({
    writeErr: (s) => process.stderr.write(s.startsWith('error: ') ? `ffleet: ${s.slice(7)}` : s),
  })
  // The commands take no options: everything is configured through the environment.
  .addHelpText('afterAll', configurationHelp);
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
program
  .command('agent-token')
  .description("print an agent's own token (run where the control plane's agent token is)")
  .argument('<name>', "the agent's name (its FFLEET_AGENT_NAME)")
  .option(
    '--generation <n>',
    'the generation POST /api/v1/agents/{id}/token last gave this name (default 0: the token as first issued)',
  )
  // A name may start with '-' (FFLEET_AGENT_NAME=-x is valid): taken as the name, not as an option.
  .allowUnknownOption()
  .action((name: string, opts: { generation?: string }) => printAgentToken(name, opts.generation));

if (process.argv.length <= 2) {
  process.stderr.write(
    'ffleet: missing command: start | control-plane | agent | agent-token (ffleet --help lists them)\n',
  );
  process.exit(EXIT_CONFIG);
}
try {
  await program.parseAsync(process.argv);
} catch (err) {
  if (!(err instanceof CommanderError)) throw err;
  process.exit(err.exitCode === 0 ? 0 : EXIT_CONFIG);
}
