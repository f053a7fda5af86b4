import { existsSync } from 'node:fs';
import { join } from 'node:path';
import pino from 'pino';
import { parseConfig } from '../../control-plane/src/config/config.ts';
import { type RunningControlPlane, startControlPlane } from '../../control-plane/src/control-plane.ts';
import { seedPgliteDir } from './db.ts';

/**
 * A whole control plane in this process on free loopback ports (HTTP and its embedded broker), its data
 * in `dataDir`, with the variables of `env` on top (FFLEET_API_TOKENS, FFLEET_AGENT_AUTH, DATABASE_URL, …);
 * logging off. The caller stops it. Its embedded database starts as a copy of a migrated one
 * (seedPgliteDir): a test of the first start itself runs the CLI (test/cli, test/fleet/all-in-one).
 */
export async function startLocalControlPlane(
  dataDir: string,
  env: Record<string, string> = {},
  opts: Parameters<typeof startControlPlane>[2] = {},
): Promise<RunningControlPlane> {
  if (!env.DATABASE_URL && !existsSync(join(dataDir, 'pglite'))) await seedPgliteDir(join(dataDir, 'pglite'));
  return startControlPlane(
    parseConfig({ FFLEET_DATA_DIR: dataDir, HOST: '127.0.0.1', PORT: '0', MQTT_PORT: '0', ...env }),
    pino({ level: 'silent' }),
    opts,
  );
}
