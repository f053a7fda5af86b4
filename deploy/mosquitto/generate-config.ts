/**
 * Write a Mosquitto config (mosquitto.conf, hashed passwd, acl) for an ffleet fleet.
 *
 *   FFLEET_AGENT_TOKEN=... FFLEET_MQTT_INTERNAL_TOKEN=... \
 *     npx tsx deploy/mosquitto/generate-config.ts --dir /etc/ffleet/mosquitto \
 *       --agents encoder-1,encoder-2 [--port 1883] [--host 0.0.0.0] [--persistence /var/lib/mosquitto] \
 *       [--internal-user ffleet-control-plane] [--run-as mosquitto] [--per-agent-tokens]
 *
 * --per-agent-tokens: each agent's password is its own token (`ffleet agent-token <name>`, derived from
 * FFLEET_AGENT_TOKEN), so a box's token logs in under its own name only; otherwise every agent presents
 * FFLEET_AGENT_TOKEN itself.
 *
 * Tokens come from the environment, never from argv (argv is visible in the process list).
 */
import { parseArgs } from 'node:util';
import { AGENT_ID_RE } from '@ffleet/shared';
import { agentTokenFor } from '../../control-plane/src/agent-token.ts';
import { writeMosquittoConfig } from '../../control-plane/src/broker/mosquitto-config.ts';

const USAGE =
  'usage: FFLEET_AGENT_TOKEN=… FFLEET_MQTT_INTERNAL_TOKEN=… generate-config.ts --dir DIR --agents a,b[,…] [--port 1883] [--host 127.0.0.1] [--persistence DIR] [--internal-user NAME] [--run-as USER] [--per-agent-tokens]';

function usage(problem?: string): never {
  if (problem) console.error(`generate-config: ${problem}`);
  console.error(USAGE);
  process.exit(2);
}

const values = (() => {
  try {
    return parseArgs({
      options: {
        dir: { type: 'string' },
        agents: { type: 'string' },
        port: { type: 'string', default: '1883' },
        host: { type: 'string', default: '127.0.0.1' },
        persistence: { type: 'string' },
        'internal-user': { type: 'string', default: 'ffleet-control-plane' },
        'run-as': { type: 'string' },
        'per-agent-tokens': { type: 'boolean', default: false },
      },
    }).values;
  } catch (err) {
    return usage((err as Error).message);
  }
})();

const agentToken = process.env.FFLEET_AGENT_TOKEN;
const internalToken = process.env.FFLEET_MQTT_INTERNAL_TOKEN;
if (!values.dir || !values.agents || !agentToken || !internalToken) usage();
if (!/^\d+$/.test(values.port) || Number(values.port) < 1 || Number(values.port) > 65535)
  usage(`--port must be a whole number from 1 to 65535, got "${values.port}"`);

const names = values.agents.split(',').map((name) => name.trim());
const ownTokens = values['per-agent-tokens'];
const password = (name: string): string =>
  // An invalid name is reported by writeMosquittoConfig, with the rest of the list's problems.
  ownTokens && AGENT_ID_RE.test(name) ? agentTokenFor(agentToken, name) : agentToken;
const result = await writeMosquittoConfig({
  dir: values.dir,
  port: Number(values.port),
  host: values.host,
  agents: names.map((username) => ({ username, password: password(username) })),
  ownTokens,
  internal: { username: values['internal-user'], password: internalToken },
  persistenceDir: values.persistence,
  runAsUser: values['run-as'],
});
if (!result.ok) {
  console.error(result.error);
  process.exit(1);
}
console.log(`wrote ${result.confPath}, ${result.passwordFile}, ${result.aclFile}`);
console.log(`run: mosquitto -c ${result.confPath}`);
