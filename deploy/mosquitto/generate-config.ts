/**
 * Write a Mosquitto config (mosquitto.conf, hashed passwd, acl) for an ffleet fleet.
 *
 *   FFLEET_AGENT_TOKEN=... FFLEET_MQTT_INTERNAL_TOKEN=... \
 *     npx tsx deploy/mosquitto/generate-config.ts --dir /etc/ffleet/mosquitto \
 *       --agents encoder-1,encoder-2 [--port 1883] [--host 0.0.0.0] [--persistence /var/lib/mosquitto] \
 *       [--internal-user ffleet-control-plane] [--run-as mosquitto]
 *
 * Tokens come from the environment, never from argv (argv is visible in the process list).
 */
import { parseArgs } from 'node:util';
import { writeMosquittoConfig } from '../../control-plane/src/broker/mosquitto-config.ts';

const USAGE =
  'usage: FFLEET_AGENT_TOKEN=… FFLEET_MQTT_INTERNAL_TOKEN=… generate-config.ts --dir DIR --agents a,b[,…] [--port 1883] [--host 127.0.0.1] [--persistence DIR] [--internal-user NAME] [--run-as USER]';

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

const result = await writeMosquittoConfig({
  dir: values.dir,
  port: Number(values.port),
  host: values.host,
  agents: values.agents.split(',').map((username) => ({ username: username.trim(), password: agentToken })),
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
