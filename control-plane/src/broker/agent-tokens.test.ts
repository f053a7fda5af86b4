// Agents' own tokens on the embedded broker (FFLEET_AGENT_AUTH): which token logs in which name.
import type { MqttClient } from 'mqtt';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { agentTokenFor } from '../agent-token.ts';
import { EmbeddedBroker } from './embedded-broker.ts';
import { captureLogger, connectRaw, type LogRecord } from './test-brokers.ts';

const FLEET_TOKEN = 'fleet-token-for-the-tests';

describe('agent tokens on the embedded broker', () => {
  const brokers: EmbeddedBroker[] = [];
  const clients: MqttClient[] = [];
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((c) => c.endAsync(true)));
  });
  afterAll(async () => {
    await Promise.all(brokers.map((b) => b.stop()));
  });

  async function start(
    agentAuth?: 'shared' | 'per-agent',
    level: 'warn' | 'info' = 'warn',
    tokenGenerations?: ReadonlyMap<string, number>,
  ): Promise<{ url: string; records: LogRecord[]; broker: EmbeddedBroker }> {
    const { logger, records } = captureLogger(level);
    const broker = new EmbeddedBroker({
      port: 0,
      host: '127.0.0.1',
      agentToken: FLEET_TOKEN,
      ...(agentAuth ? { agentAuth } : {}),
      ...(tokenGenerations ? { tokenGenerations } : {}),
      internalUser: 'ffleet-control-plane',
      internalToken: 'internal-token-for-the-tests',
      logger,
    });
    brokers.push(broker);
    const { port } = await broker.start();
    return { url: `mqtt://127.0.0.1:${port}`, records, broker };
  }

  async function logsIn(url: string, username: string, password: string): Promise<boolean> {
    const r = await connectRaw(url, { username, password });
    if (r.ok) clients.push(r.client);
    else expect(r.code, `${username}: ${r.error}`).toBe(4);
    return r.ok;
  }

  it('per-agent: an agent logs in with its own token only, never under another name or with the fleet token', async () => {
    const { url, records } = await start('per-agent');
    const own = agentTokenFor(FLEET_TOKEN, 'encode-01');
    expect(await logsIn(url, 'encode-01', own)).toBe(true);
    expect(await logsIn(url, 'encode-02', own)).toBe(false);
    expect(await logsIn(url, 'encode-02', agentTokenFor(FLEET_TOKEN, 'encode-02'))).toBe(true);
    expect(await logsIn(url, 'encode-03', FLEET_TOKEN)).toBe(false);
    // Another fleet's token for the right name.
    expect(await logsIn(url, 'encode-04', agentTokenFor('another-fleet', 'encode-04'))).toBe(false);
    // The internal user never logs in with an agent's token, nor with the fleet token.
    expect(
      await logsIn(url, 'ffleet-control-plane', agentTokenFor(FLEET_TOKEN, 'ffleet-control-plane')),
    ).toBe(false);
    expect(await logsIn(url, 'ffleet-control-plane', FLEET_TOKEN)).toBe(false);
    // A box retrying with backoff is logged once a minute, not at every attempt; a new reason is logged.
    for (let i = 0; i < 3; i++) expect(await logsIn(url, 'encode-03', FLEET_TOKEN)).toBe(false);
    expect(await logsIn(url, 'encode-03', 'wrong')).toBe(false);
    // The right token under another client id: refused for that, and said so.
    const r = await connectRaw(url, {
      username: 'encode-05',
      password: agentTokenFor(FLEET_TOKEN, 'encode-05'),
      clientId: 'encode-01',
    });
    expect(r.ok).toBe(false);

    const refusals = records.filter((r) => String(r.msg).startsWith('connection refused'));
    expect(refusals.map((r) => [r.username, r.msg])).toEqual([
      [
        'encode-02',
        "connection refused: bad credentials: an agent's own token, but not encode-02's under this control plane's agent token (print it with ffleet agent-token encode-02 where the control plane runs, with its FFLEET_AGENT_TOKEN or data dir)",
      ],
      [
        'encode-03',
        "connection refused: the fleet's agent token no longer logs agents in (FFLEET_AGENT_AUTH=per-agent); give this box its own token: ffleet agent-token encode-03",
      ],
      [
        'encode-04',
        "connection refused: bad credentials: an agent's own token, but not encode-04's under this control plane's agent token (print it with ffleet agent-token encode-04 where the control plane runs, with its FFLEET_AGENT_TOKEN or data dir)",
      ],
      // No hint naming the control plane's own user as an agent to make a token for.
      ['ffleet-control-plane', 'connection refused: bad credentials'],
      ['encode-03', 'connection refused: bad credentials'],
      [
        'encode-05',
        'connection refused: the client id "encode-01" is not the user name "encode-05": an agent logs in with its name as both',
      ],
    ]);
    // No token ever reaches the log.
    const logged = JSON.stringify(records);
    expect(logged).not.toContain(FLEET_TOKEN);
    expect(logged).not.toContain(own);
  });

  it('shared (the default): the fleet token logs in any agent name, and an own token still only its name', async () => {
    const { url } = await start();
    expect(await logsIn(url, 'encode-01', FLEET_TOKEN)).toBe(true);
    expect(await logsIn(url, 'encode-02', agentTokenFor(FLEET_TOKEN, 'encode-02'))).toBe(true);
    expect(await logsIn(url, 'encode-03', agentTokenFor(FLEET_TOKEN, 'encode-02'))).toBe(false);
    expect(await logsIn(url, 'encode-04', 'wrong')).toBe(false);
  });

  it("takes an agent's own token of its current generation only: a revoked one is refused and named as such", async () => {
    const { url, records } = await start('per-agent', 'warn', new Map([['encode-01', 2]]));
    expect(await logsIn(url, 'encode-01', agentTokenFor(FLEET_TOKEN, 'encode-01'))).toBe(false);
    expect(await logsIn(url, 'encode-01', agentTokenFor(FLEET_TOKEN, 'encode-01', 1))).toBe(false);
    expect(await logsIn(url, 'encode-01', agentTokenFor(FLEET_TOKEN, 'encode-01', 3))).toBe(false);
    expect(await logsIn(url, 'encode-01', agentTokenFor(FLEET_TOKEN, 'encode-01', 2))).toBe(true);
    // Other names are at generation 0.
    expect(await logsIn(url, 'encode-02', agentTokenFor(FLEET_TOKEN, 'encode-02'))).toBe(true);
    const refusals = records.filter((r) => String(r.msg).startsWith('connection refused'));
    expect(refusals.map((r) => r.msg)).toEqual([
      "connection refused: a revoked token: encode-01's own token of generation 0, replaced by generation 2 (POST /api/v1/agents/encode-01/token)",
      "connection refused: a revoked token: encode-01's own token of generation 1, replaced by generation 2 (POST /api/v1/agents/encode-01/token)",
      "connection refused: bad credentials: an agent's own token, but not encode-01's under this control plane's agent token (print it with ffleet agent-token encode-01 --generation 2 where the control plane runs, with its FFLEET_AGENT_TOKEN or data dir)",
    ]);
  });

  it('a new generation disconnects the agent logged in with its own token, not one logged in with the fleet token', async () => {
    const { url, broker } = await start('shared');
    const own = await connectRaw(url, {
      username: 'encode-01',
      password: agentTokenFor(FLEET_TOKEN, 'encode-01'),
    });
    const fleet = await connectRaw(url, { username: 'encode-02', password: FLEET_TOKEN });
    if (!own.ok || !fleet.ok) throw new Error('could not log in');
    clients.push(own.client, fleet.client);
    const closed = new Promise<void>((resolve) => own.client.once('close', () => resolve()));
    expect(broker.setTokenGeneration('encode-01', 1)).toBe(true);
    await closed;
    expect(broker.setTokenGeneration('encode-02', 1)).toBe(false);
    expect(broker.setTokenGeneration('encode-03', 1)).toBe(false); // not connected
    // Never backwards (two rotations told out of order): generation 1 stays the one that logs in.
    expect(broker.setTokenGeneration('encode-01', 1)).toBe(false);
    expect(broker.setTokenGeneration('encode-01', 0)).toBe(false);
    expect(broker.tokenGeneration('encode-01')).toBe(1);
    await new Promise((r) => setTimeout(r, 100));
    expect(fleet.client.connected).toBe(true);
    // The old token is refused from now on; the new one and (shared) the fleet token log in.
    expect(await logsIn(url, 'encode-01', agentTokenFor(FLEET_TOKEN, 'encode-01'))).toBe(false);
    expect(await logsIn(url, 'encode-01', agentTokenFor(FLEET_TOKEN, 'encode-01', 1))).toBe(true);
    expect(await logsIn(url, 'encode-03', FLEET_TOKEN)).toBe(true);
  });

  it('logs at start which logins it takes', async () => {
    const { records } = await start('per-agent', 'info');
    expect(records.find((r) => r.msg === 'embedded MQTT broker listening')).toMatchObject({
      agentAuth: 'per-agent',
    });
  });
});
