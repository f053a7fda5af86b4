import pino from 'pino';
import { parseConfig } from '../../control-plane/src/config/config.ts';
import { type RunningControlPlane, startControlPlane } from '../../control-plane/src/control-plane.ts';

/**
 * A whole control plane in this process on free loopback ports (HTTP and its embedded broker), its data
 * in `dataDir`, with the variables of `env` on top (FFLEET_API_TOKENS, FFLEET_AGENT_AUTH, DATABASE_URL, …);
 * logging off. The caller stops it.
 */
export function startLocalControlPlane(
  dataDir: string,
  env: Record<string, string> = {},
  opts: Parameters<typeof startControlPlane>[2] = {},
): Promise<RunningControlPlane> {
  return startControlPlane(
    parseConfig({ FFLEET_DATA_DIR: dataDir, HOST: '127.0.0.1', PORT: '0', MQTT_PORT: '0', ...env }),
    pino({ level: 'silent' }),
    opts,
  );
}
