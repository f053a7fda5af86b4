import { agentTopic, WORK_TOPIC } from '@ffleet/shared';
import type { MqttClient } from 'mqtt';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { connectRaw, TEST_BROKER_KINDS, type TestBroker, waitFor } from './test-brokers.ts';

describe.each(TEST_BROKER_KINDS)('broker security on $kind', ({ start }) => {
  let broker: TestBroker;
  const clients: MqttClient[] = [];

  beforeAll(async () => {
    broker = await start();
  });
  afterAll(async () => {
    await broker?.dispose();
  });
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((c) => c.endAsync(true)));
  });

  async function connectOk(username: string, password: string): Promise<MqttClient> {
    const r = await connectRaw(broker.url, { username, password });
    if (!r.ok) throw new Error(`connect ${username} failed: ${r.error}`);
    clients.push(r.client);
    return r.client;
  }

  /** Internal client recording every message under the root. */
  async function observe(): Promise<{ client: MqttClient; seen: string[] }> {
    const client = await connectOk(broker.internalUser, broker.internalToken);
    const seen: string[] = [];
    client.on('message', (topic, payload) => seen.push(`${topic} ${payload.toString()}`));
    await client.subscribeAsync('ffleet/#', { qos: 1 });
    return { client, seen };
  }

  it('refuses an agent with a wrong token', async () => {
    const r = await connectRaw(broker.url, { username: 'agent-0', password: 'wrong' });
    expect(r.ok).toBe(false);
    if (!r.ok) expect([4, 5]).toContain(r.code);
  });

  it('refuses a client without credentials', async () => {
    const r = await connectRaw(broker.url, { username: '', password: '' });
    expect(r.ok).toBe(false);
  });

  it('accepts a valid agent and routes its own topics to the control plane', async () => {
    const { seen } = await observe();
    const agent = await connectOk('agent-1', broker.agentToken);
    await agent.publishAsync(agentTopic('agent-1', 'events'), 'own', { qos: 1 });
    await waitFor(() => seen.includes(`${agentTopic('agent-1', 'events')} own`), 'own event');
  });

  it('drops what an agent publishes to another agent, to its own inbox or to broadcast', async () => {
    const { seen } = await observe();
    const forbidden = [
      agentTopic('agent-3', 'events'),
      agentTopic('agent-3', 'status'),
      agentTopic('agent-3', 'inbox'),
      agentTopic('agent-2', 'inbox'),
      WORK_TOPIC,
      'ffleet/v1/other',
    ];
    for (const topic of forbidden) {
      // A fresh connection per attempt: aedes closes the connection of a client that breaks the ACL,
      // Mosquitto acknowledges and drops the message. Either outcome means the broker has decided.
      const agent = await connectOk('agent-2', broker.agentToken);
      const closed = new Promise<void>((r) => agent.once('close', () => r()));
      await Promise.race([agent.publishAsync(topic, 'forbidden', { qos: 1 }), closed]);
    }
    const sentinel = await connectOk('agent-2', broker.agentToken);
    await sentinel.publishAsync(agentTopic('agent-2', 'events'), 'sentinel', { qos: 1 });
    await waitFor(() => seen.includes(`${agentTopic('agent-2', 'events')} sentinel`), 'sentinel');
    expect(seen.filter((s) => s.endsWith('forbidden'))).toEqual([]);
  });

  it('never delivers another agent’s inbox to an agent, whatever it subscribes to', async () => {
    const cp = await connectOk(broker.internalUser, broker.internalToken);
    const spy = await connectOk('agent-4', broker.agentToken);
    const received: string[] = [];
    spy.on('message', (topic, payload) => received.push(`${topic} ${payload.toString()}`));
    // aedes answers the refused filters with SUBACK 0x80 (mqtt.js then rejects); Mosquitto grants and
    // filters at delivery. Either way the message must never arrive.
    const refused = await spy
      .subscribeAsync(
        {
          [agentTopic('agent-5', 'inbox')]: { qos: 1 },
          'ffleet/v1/agents/+/inbox': { qos: 1 },
          'ffleet/v1/agents/agent-5/#': { qos: 1 },
          '#': { qos: 1 },
          [agentTopic('agent-4', 'inbox')]: { qos: 1 },
        },
        {},
      )
      .then(
        () => null,
        (e: Error) => e,
      );
    if (broker.kind === 'aedes') expect(refused?.message).toMatch(/Subscribe error/);
    await cp.publishAsync(agentTopic('agent-5', 'inbox'), 'secret', { qos: 1 });
    await cp.publishAsync(agentTopic('agent-4', 'inbox'), 'mine', { qos: 1 });
    await waitFor(() => received.includes(`${agentTopic('agent-4', 'inbox')} mine`), 'own inbox message');
    expect(received.filter((r) => r.includes('secret'))).toEqual([]);
  });

  it('delivers broadcast work hints to agents', async () => {
    const cp = await connectOk(broker.internalUser, broker.internalToken);
    const agent = await connectOk('agent-6', broker.agentToken);
    const got: string[] = [];
    agent.on('message', (topic) => got.push(topic));
    const grants = await agent.subscribeAsync('ffleet/v1/broadcast/#', { qos: 0 });
    expect(grants[0]?.qos).toBe(0);
    await cp.publishAsync(WORK_TOPIC, '{}', { qos: 0 });
    await waitFor(() => got.includes(WORK_TOPIC), 'work hint');
  });
});
