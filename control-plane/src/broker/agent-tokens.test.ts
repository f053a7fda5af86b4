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

  async function start(agentAuth?: 'shared' | 'per-agent'): Promise<{ url: string; records: LogRecord[] }> {
    const { logger, records } = captureLogger('warn');
    const broker = new EmbeddedBroker({
      port: 0,
      host: '127.0.0.1',
      agentToken: FLEET_TOKEN,
      ...(agentAuth ? { agentAuth } : {}),
      internalUser: 'ffleet-control-plane',
      internalToken: 'internal-token-for-the-tests',
      logger,
    });
    brokers.push(broker);
    const { port } = await broker.start();
    return { url: `mqtt://127.0.0.1:${port}`, records };
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
    expect(await logsIn(url, 'encode-03', agentTokenFor('another-fleet', 'encode-03'))).toBe(false);
    // The internal user never logs in with an agent's token.
    expect(
      await logsIn(url, 'ffleet-control-plane', agentTokenFor(FLEET_TOKEN, 'ffleet-control-plane')),
    ).toBe(false);

    const refusals = records.filter((r) => String(r.msg).startsWith('connection refused'));
    expect(refusals.map((r) => r.username)).toEqual([
      'encode-02',
      'encode-03',
      'encode-03',
      'ffleet-control-plane',
    ]);
    // The fleet token presented by an agent: the log says what to do instead.
    expect(refusals[1]!.msg).toContain('FFLEET_AGENT_AUTH=per-agent');
    expect(refusals[1]!.msg).toContain('ffleet agent-token encode-03');
    expect(refusals[0]!.msg).toBe('connection refused: bad credentials');
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
});
