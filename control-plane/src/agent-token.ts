import { createHmac, randomBytes } from 'node:crypto';
import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { AGENT_ID_RE, makeDirectory } from '@ffleet/shared';

/** The file (0600) in the data dir that keeps a generated agent token across restarts. */
export const agentTokenPath = (dataDir: string): string => join(dataDir, 'agent-token');

/**
 * The token kept in the data dir, trimmed ('' for an empty file). Throws the file system's error (ENOENT
 * when there is none). The control plane, `ffleet agent-token` and the start-up check read it here.
 */
export const readKeptAgentToken = (dataDir: string): string =>
  readFileSync(agentTokenPath(dataDir), 'utf8').trim();

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
      kept = readKeptAgentToken(dataDir);
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

/**
 * True when FFLEET_AGENT_TOKEN is set and the data dir keeps a different token (an earlier generated
 * one): agents on this host and `ffleet agent-token` read that file when they have no FFLEET_AGENT_TOKEN
 * themselves, and would present a token this control plane refuses.
 */
export function keptTokenDiffers(dataDir: string, configured: string | undefined): boolean {
  if (!configured) return false;
  try {
    const kept = readKeptAgentToken(dataDir);
    return kept !== '' && kept !== configured;
  } catch {
    return false;
  }
}

/** Marks a per-agent token (and its derivation's version): `fa1_` + 43 base64url characters. */
export const AGENT_TOKEN_PREFIX = 'fa1_';

/**
 * The token of one agent: an HMAC-SHA256 of its name under the fleet's agent token. The control plane
 * (which holds the fleet token) recomputes it at each login, so no table of tokens is kept; the box
 * holds only its own token, which logs in under its own name and no other. `ffleet agent-token <name>`
 * prints it; `FFLEET_AGENT_AUTH=per-agent` makes it the only way in (the fleet token then stays on the
 * control plane). Rotating the fleet token replaces every agent's token; one agent's token is replaced
 * (and the one before it revoked) by moving its name to the next `generation` (agent_credentials).
 */
export function agentTokenFor(fleetToken: string, agentName: string, generation = 0): string {
  if (!AGENT_ID_RE.test(agentName)) throw new Error(`invalid agent name ${JSON.stringify(agentName)}`);
  if (!Number.isSafeInteger(generation) || generation < 0)
    throw new Error(`invalid token generation ${JSON.stringify(generation)}`);
  // Generation 0 is the token as first issued (no suffix: tokens printed before generations existed
  // stay valid); each `POST /api/v1/agents/{id}/token` moves the name to the next one.
  const what = generation === 0 ? agentName : `${agentName}\n${generation}`;
  const mac = createHmac('sha256', fleetToken).update(`ffleet agent token v1\n${what}`).digest();
  return `${AGENT_TOKEN_PREFIX}${mac.toString('base64url')}`;
}
