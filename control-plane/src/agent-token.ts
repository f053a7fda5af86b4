import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { makeDirectory } from '@ffleet/shared';

/** The file (0600) in the data dir that keeps a generated agent token across restarts. */
export const agentTokenPath = (dataDir: string): string => join(dataDir, 'agent-token');

/** FFLEET_AGENT_TOKEN if set, else the token kept in the data dir (generated on first start). */
export async function loadAgentToken(
  dataDir: string,
  configured: string | undefined,
): Promise<{ token: string; generated: boolean }> {
  if (configured) return { token: configured, generated: false };
  const file = agentTokenPath(dataDir);
  if (existsSync(file)) {
    let kept: string;
    try {
      kept = readFileSync(file, 'utf8').trim();
    } catch (err) {
      throw new Error(`cannot read the agent token file ${file}: ${(err as Error).message}`);
    }
    // Whatever an operator put there is the token (any length, as FFLEET_AGENT_TOKEN): replacing it
    // would lock out every agent configured with it. Only an empty file gets a generated one.
    if (kept !== '') return { token: kept, generated: false };
  }
  await makeDirectory(dataDir);
  const token = randomBytes(24).toString('base64url');
  writeFileSync(file, `${token}\n`, { mode: 0o600 });
  chmodSync(file, 0o600);
  return { token, generated: true };
}
