import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  AGENT_TOKEN_PREFIX,
  agentTokenFor,
  agentTokenPath,
  keptTokenDiffers,
  loadAgentToken,
} from './agent-token.ts';

const root = mkdtempSync(join(tmpdir(), 'ffleet-agent-token-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const dataDir = () => join(root, `d${n++}`);

describe('loadAgentToken', () => {
  it('generates a token once, keeps it 0600, and reads it back on the next start', async () => {
    const dir = dataDir();
    const first = await loadAgentToken(dir, undefined);
    expect(first.generated).toBe(true);
    expect(first.token.length).toBeGreaterThanOrEqual(32);
    expect(statSync(agentTokenPath(dir)).mode & 0o777).toBe(0o600);
    expect(await loadAgentToken(dir, undefined)).toEqual({ token: first.token, generated: false });
    // FFLEET_AGENT_TOKEN wins and leaves the file alone.
    expect(await loadAgentToken(dir, 'configured')).toEqual({ token: 'configured', generated: false });
    expect(readFileSync(agentTokenPath(dir), 'utf8').trim()).toBe(first.token);
  });

  it("keeps an operator's short token instead of replacing it (upgrade QA: agents were locked out)", async () => {
    const dir = dataDir();
    mkdirSync(dir);
    writeFileSync(agentTokenPath(dir), 'abc\n');
    expect(await loadAgentToken(dir, undefined)).toEqual({ token: 'abc', generated: false });
    expect(readFileSync(agentTokenPath(dir), 'utf8')).toBe('abc\n');
  });

  it('replaces only an empty file, and names the file it cannot read', async () => {
    const empty = dataDir();
    mkdirSync(empty);
    writeFileSync(agentTokenPath(empty), ' \n');
    expect((await loadAgentToken(empty, undefined)).generated).toBe(true);
    const dir = dataDir();
    mkdirSync(agentTokenPath(dir), { recursive: true });
    await expect(loadAgentToken(dir, undefined)).rejects.toThrow(
      `cannot read the agent token file ${agentTokenPath(dir)}: EISDIR`,
    );
  });
});

describe('agentTokenFor', () => {
  it('is the HMAC-SHA256 of the name under the fleet token (as openssl computes it), per name and fleet', () => {
    // printf 'ffleet agent token v1\nencode-01' | openssl dgst -sha256 -hmac fleet-secret -binary | base64url
    expect(agentTokenFor('fleet-secret', 'encode-01')).toBe(
      'fa1_xsok6MYLDOwfSOnZg72GK8w6XhacPjEUCE20F7FQojc',
    );
    const tokens = new Set([
      agentTokenFor('fleet-secret', 'encode-01'),
      agentTokenFor('fleet-secret', 'encode-02'),
      agentTokenFor('fleet-secret', 'Encode-01'),
      agentTokenFor('other-secret', 'encode-01'),
    ]);
    expect(tokens.size).toBe(4);
    for (const t of tokens) expect(t).toMatch(new RegExp(`^${AGENT_TOKEN_PREFIX}[A-Za-z0-9_-]{43}$`));
  });

  it('refuses a name no agent can have', () => {
    for (const name of ['', 'a b', 'x/y', 'a'.repeat(101), 'encode-01\n']) {
      expect(() => agentTokenFor('fleet-secret', name), JSON.stringify(name)).toThrow(/invalid agent name/);
    }
  });
});

describe('keptTokenDiffers', () => {
  it('is true only when FFLEET_AGENT_TOKEN is set and the data dir keeps another token', () => {
    const dir = dataDir();
    mkdirSync(dir);
    expect(keptTokenDiffers(dir, 'set')).toBe(false); // no file
    writeFileSync(agentTokenPath(dir), 'kept\n');
    expect(keptTokenDiffers(dir, undefined)).toBe(false);
    expect(keptTokenDiffers(dir, 'kept')).toBe(false);
    expect(keptTokenDiffers(dir, 'set')).toBe(true);
    writeFileSync(agentTokenPath(dir), '\n');
    expect(keptTokenDiffers(dir, 'set')).toBe(false);
  });
});
