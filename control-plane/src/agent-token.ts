import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** The file (0600) in the data dir that keeps a generated agent token across restarts. */
export const agentTokenPath = (dataDir: string): string => join(dataDir, 'agent-token');

/** FFLEET_AGENT_TOKEN if set, else the token kept in the data dir (generated on first start). */
export function loadAgentToken(
  dataDir: string,
  configured: string | undefined,
): { token: string; generated: boolean } {
  if (configured) return { token: configured, generated: false };
  const file = agentTokenPath(dataDir);
  if (existsSync(file)) {
    const t = readFileSync(file, 'utf8').trim();
    if (t.length >= 8) return { token: t, generated: false };
  }
  mkdirSync(dataDir, { recursive: true });
  const token = randomBytes(24).toString('base64url');
  writeFileSync(file, `${token}\n`, { mode: 0o600 });
  chmodSync(file, 0o600);
  return { token, generated: true };
}
