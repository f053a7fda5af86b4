import {
  type AgentBirth,
  type AgentHeartbeat,
  type AgentHello,
  type AgentRequest,
  agentTopic,
  type TaskReport,
  WORK_TOPIC,
} from '@ffleet/shared';
import type { MqttClient } from 'mqtt';
import pino from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ControlPlaneClient, type SendResult } from './control-plane-client.ts';
import {
  captureLogger,
  connectRaw,
  findFreePort,
  sampleBirth,
  startAedesTestBroker,
  TEST_BROKER_KINDS,
  type TestBroker,
  waitFor,
} from './test-brokers.ts';

const silent = pino({ level: 'silent' });

const report = (seq: number): TaskReport => ({
  kind: 'update',
  taskId: 't1',
  attempt: 1,
  leaseToken: 'lease',
  seq,
  patch: { progress: seq },
});

/** Each broker over an MQTT connection, and the embedded one (aedes) over its local link as well. */
const TRANSPORTS = [
  ...TEST_BROKER_KINDS.map((k) => ({ ...k, via: 'an MQTT connection', local: false })),
  { kind: 'aedes' as const, start: startAedesTestBroker, via: 'the local link', local: true },
];

describe.each(TRANSPORTS)('ControlPlaneClient on $kind over $via', ({ kind, start, local }) => {
  let broker: TestBroker;
  const cps: ControlPlaneClient[] = [];
  const raws: MqttClient[] = [];

  beforeAll(async () => {
    broker = await start();
  });
  afterAll(async () => {
    await broker?.dispose();
  });
  afterEach(async () => {
    await Promise.all(cps.splice(0).map((c) => c.stop()));
    await Promise.all(raws.splice(0).map((c) => c.endAsync(true)));
  });

  async function startCp(
    opts: { logger?: pino.Logger; clientId?: string; setup?: (cp: ControlPlaneClient) => void } = {},
  ): Promise<ControlPlaneClient> {
    const cp = new ControlPlaneClient({
      url: broker.url,
      username: broker.internalUser,
      password: broker.internalToken,
      logger: opts.logger ?? silent,
      clientId: opts.clientId,
      local: local ? broker.localLink!() : undefined,
    });
    cps.push(cp);
    opts.setup?.(cp);
    const r = await cp.start();
    if (!r.ok) throw new Error(r.error);
    return cp;
  }

  async function rawAgent(name: string): Promise<MqttClient> {
    const r = await connectRaw(broker.url, { username: name, password: broker.agentToken });
    if (!r.ok) throw new Error(r.error);
    raws.push(r.client);
    return r.client;
  }

  it('hands every agent message kind to its handler with the agent id from the topic', async () => {
    const cp = await startCp();
    const got: string[] = [];
    cp.onBirth((id, b, retained) => void got.push(`birth ${id} ${b.slots} ${retained}`));
    cp.onHello((id, h) => void got.push(`hello ${id} ${h.running.length}`));
    cp.onHeartbeat((id, hb) => void got.push(`heartbeat ${id} ${hb.freeSlots}`));
    cp.onRequest((id, r) => void got.push(`request ${id} ${r.type}`));
    cp.onReport((id, r) => void got.push(`report ${id} ${r.seq}`));
    const agent = await rawAgent('agent-0');
    const hello: AgentHello = { bootId: 'b', running: [{ taskId: 't', attempt: 1, leaseToken: 'l' }], ts: 1 };
    const hb: AgentHeartbeat = { bootId: 'b', freeSlots: 3, running: [], ts: 1 };
    const req: AgentRequest = { type: 'claim', requestId: 'r1', max: 2 };
    await agent.publishAsync(agentTopic('agent-0', 'status'), JSON.stringify(sampleBirth('agent-0')), {
      qos: 1,
      retain: true,
    });
    await agent.publishAsync(agentTopic('agent-0', 'hello'), JSON.stringify(hello), { qos: 1 });
    await agent.publishAsync(agentTopic('agent-0', 'heartbeat'), JSON.stringify(hb), { qos: 0 });
    await agent.publishAsync(agentTopic('agent-0', 'requests'), JSON.stringify(req), { qos: 1 });
    await agent.publishAsync(agentTopic('agent-0', 'events'), JSON.stringify(report(7)), { qos: 1 });
    await waitFor(() => got.length === 5, 'five messages');
    expect(got).toEqual([
      'birth agent-0 2 false',
      'hello agent-0 1',
      'heartbeat agent-0 3',
      'request agent-0 claim',
      'report agent-0 7',
    ]);
    // A control plane that subscribes later gets the birth as a retained message.
    const retained: string[] = [];
    await startCp({
      clientId: 'cp-late',
      setup: (late) => late.onBirth((id, _b, r) => void retained.push(`${id} ${r}`)),
    });
    await waitFor(() => retained.includes('agent-0 true'), 'retained birth');
    await agent.publishAsync(agentTopic('agent-0', 'status'), '', { qos: 1, retain: true });
  });

  it('drops and logs malformed payloads, keeps running, and still delivers the next valid one', async () => {
    const { logger, records } = captureLogger();
    const cp = await startCp({ logger });
    const reports: number[] = [];
    cp.onReport((_id, r) => void reports.push(r.seq));
    cp.onBirth(() => {
      throw new Error('must not be called');
    });
    const agent = await rawAgent('agent-1');
    const bad: Array<[Parameters<typeof agentTopic>[1], string]> = [
      ['events', 'not json'],
      ['events', JSON.stringify({ kind: 'update', taskId: 't1' })],
      ['status', '{"state":"online"}'],
      ['hello', '[]'],
      ['heartbeat', '{"freeSlots":"many"}'],
      ['requests', JSON.stringify({ type: 'claim', requestId: 'r', max: 9999 })],
      // A valid report whose metadata nests 100,000 levels (600 kB, with a \u escape so that its strings
      // are made storable): walking it recursively overflowed the stack and took the process down.
      [
        'events',
        JSON.stringify({ ...report(2), patch: { metadata: { a: 1 } } }).replace(
          '{"a":1}',
          `${'{"a":'.repeat(100_000)}"\\u0041"${'}'.repeat(100_000)}`,
        ),
      ],
    ];
    for (const [kind, payload] of bad)
      await agent.publishAsync(agentTopic('agent-1', kind), payload, { qos: 1 });
    await agent.publishAsync(agentTopic('agent-1', 'events'), JSON.stringify(report(1)), { qos: 1 });
    await waitFor(() => reports.length === 1, 'valid report after the malformed ones');
    const drops = records.filter((r) => r.msg === 'dropped malformed agent message');
    expect(drops.map((d) => [d.agent, d.topic])).toEqual(
      bad.map(([kind]) => ['agent-1', agentTopic('agent-1', kind)]),
    );
    expect(drops.every((d) => d.level === 40)).toBe(true);
    expect(cp.connected).toBe(true);
  });

  // The embedded broker refuses such a publish itself (broker-security.test.ts); Mosquitto passes it on.
  it.runIf(kind === 'mosquitto')(
    'drops, unparsed, a message over its topic kind’s limit (65,535 bytes but for reports)',
    async () => {
      const { logger, records } = captureLogger();
      const cp = await startCp({ logger });
      const requests: string[] = [];
      cp.onRequest((_id, r) => void requests.push(r.requestId));
      const agent = await rawAgent('agent-20');
      // Valid JSON of 70 kB: 16 MiB of it held the event loop for 1.8 s while it was parsed.
      await agent.publishAsync(agentTopic('agent-20', 'requests'), `[${'[],'.repeat(23_000)}[]]`, {
        qos: 1,
      });
      const claim = { type: 'claim', requestId: 'after', max: 1 };
      await agent.publishAsync(agentTopic('agent-20', 'requests'), JSON.stringify(claim), { qos: 1 });
      await waitFor(() => requests.length === 1, 'the claim after the wide message');
      expect(requests).toEqual(['after']);
      const drops = records.filter((r) => r.msg === 'dropped agent message: payload too large for its topic');
      expect(drops.map((d) => [d.agent, d.kind, d.limit])).toEqual([['agent-20', 'requests', 65_535]]);
    },
  );

  it('hands on every string PostgreSQL cannot store (NUL, unpaired surrogate) as U+FFFD', async () => {
    // Without it a report or birth holding one failed its transaction for ever (jsonb refuses them).
    const cp = await startCp();
    const births: AgentBirth[] = [];
    const beats: AgentHeartbeat[] = [];
    const reports: TaskReport[] = [];
    cp.onBirth((_id, b) => void births.push(b));
    cp.onHeartbeat((_id, hb) => void beats.push(hb));
    cp.onReport((_id, r) => void reports.push(r));
    const agent = await rawAgent('agent-2');
    const birth = { ...sampleBirth('agent-2'), hostname: 'h\udcff', encoders: ['libx264', 'odd\u0000enc'] };
    const hb: AgentHeartbeat = {
      bootId: 'b',
      freeSlots: 0,
      running: [{ taskId: 't', attempt: 1, leaseToken: 'l\u0000' }],
      ts: 1,
    };
    const odd: TaskReport = {
      kind: 'update',
      taskId: 't1',
      attempt: 1,
      leaseToken: 'lease',
      seq: 2,
      patch: { metadata: { 'file\udcff': 'clip-\ud800.mov', pair: '\ud83c\udfac' }, error: 'e\u0000' },
      logs: [{ step: 'pre', text: 'lone \udfff\n' }],
    };
    await agent.publishAsync(agentTopic('agent-2', 'status'), JSON.stringify(birth), { qos: 1 });
    await agent.publishAsync(agentTopic('agent-2', 'heartbeat'), JSON.stringify(hb), { qos: 1 });
    await agent.publishAsync(agentTopic('agent-2', 'events'), JSON.stringify(odd), { qos: 1 });
    // No escape at all (the payload skips the copy): a surrogate as raw CESU-8 bytes, which are not UTF-8.
    const [head, tail] = JSON.stringify({ ...hb, bootId: 'raw-@', running: [] }).split('@');
    const rawBeat = Buffer.concat([Buffer.from(head!), Buffer.from([0xed, 0xb3, 0xbf]), Buffer.from(tail!)]);
    await agent.publishAsync(agentTopic('agent-2', 'heartbeat'), rawBeat, { qos: 1 });
    await waitFor(() => births.length + beats.length + reports.length === 4, 'the four messages');
    expect(births[0]).toMatchObject({ hostname: 'h\uFFFD', encoders: ['libx264', 'odd\uFFFDenc'] });
    expect(beats[0]!.running).toEqual([{ taskId: 't', attempt: 1, leaseToken: 'l\uFFFD' }]);
    expect(beats[1]!.bootId).toMatch(/^raw-\uFFFD+$/);
    expect(reports[0]).toMatchObject({
      patch: { metadata: { 'file\uFFFD': 'clip-\uFFFD.mov', pair: '🎬' }, error: 'e\uFFFD' },
      logs: [{ step: 'pre', text: 'lone \uFFFD\n' }],
    });
  });

  it('survives handlers that throw or reject', async () => {
    const { logger, records } = captureLogger();
    const cp = await startCp({ logger });
    const seen: number[] = [];
    cp.onReport(() => {
      throw new Error('boom');
    });
    cp.onReport(async () => {
      throw new Error('async boom');
    });
    // The database down: the fleet logs that outage once, so each message it fails is only a debug line.
    cp.onReport(async () => {
      throw new Error('Failed query: …', {
        cause: Object.assign(new Error('closed'), { code: 'CONNECTION_CLOSED' }),
      });
    });
    cp.onReport((_id, r) => void seen.push(r.seq));
    const agent = await rawAgent('agent-2');
    for (const seq of [1, 2]) {
      await agent.publishAsync(agentTopic('agent-2', 'events'), JSON.stringify(report(seq)), { qos: 1 });
    }
    await waitFor(
      () =>
        seen.length === 2 &&
        records.filter((r) => r.msg === 'handler failed' && r.level === 50).length === 4 &&
        records.filter((r) => r.msg === 'handler failed: the database is unavailable' && r.level === 20)
          .length === 2,
      'logs',
    );
  });

  it('sends inbox messages to one agent and work hints to all', async () => {
    const cp = await startCp();
    const agent = await rawAgent('agent-3');
    const got: string[] = [];
    agent.on('message', (topic, payload) => got.push(`${topic} ${payload.toString()}`));
    await agent.subscribeAsync({ [agentTopic('agent-3', 'inbox')]: { qos: 1 }, [WORK_TOPIC]: { qos: 0 } });
    expect(await cp.sendInbox('agent-3', { type: 'ack', taskId: 't1', attempt: 1, seq: 4 })).toEqual({
      ok: true,
    });
    expect(await cp.broadcastWork()).toEqual({ ok: true });
    await waitFor(() => got.length === 2, 'inbox and hint');
    expect(JSON.parse(got[0]!.split(' ')[1]!)).toEqual({ type: 'ack', taskId: 't1', attempt: 1, seq: 4 });
    expect(got[1]).toMatch(new RegExp(`^${WORK_TOPIC} `));
    expect(await cp.sendInbox('bad/id', { type: 'refused', reason: 'x' })).toMatchObject({ ok: false });
  });

  it.skipIf(local)(
    'answers what its persistent session queued while it was away, as it arrives',
    async () => {
      const clientId = `cp-persist-${Math.random().toString(36).slice(2, 8)}`;
      await (await startCp({ clientId })).stop();
      const agent = await rawAgent('agent-6');
      const inbox: string[] = [];
      agent.on('message', (_topic, payload) => inbox.push(payload.toString()));
      await agent.subscribeAsync({ [agentTopic('agent-6', 'inbox')]: { qos: 1 } });
      const req: AgentRequest = { type: 'claim', requestId: 'queued-1', max: 1 };
      await agent.publishAsync(agentTopic('agent-6', 'requests'), JSON.stringify(req), { qos: 1 });
      // Back: the queued claim is handled before the subscriptions are acknowledged, and answered.
      const sent: SendResult[] = [];
      await startCp({
        clientId,
        setup: (cp) =>
          cp.onRequest((id, r) => {
            if (r.type === 'claim')
              void cp
                .sendInbox(id, { type: 'claim.result', requestId: r.requestId, tasks: [] })
                .then((x) => sent.push(x));
          }),
      });
      await waitFor(() => sent.length === 1, 'the answer sent');
      expect(sent).toEqual([{ ok: true }]);
      await waitFor(() => inbox.length === 1, 'the answer received');
      expect(JSON.parse(inbox[0]!)).toMatchObject({ type: 'claim.result', requestId: 'queued-1' });
    },
  );

  it.skipIf(!local)("acknowledges an agent's QoS 1 publish only once the handler has it", async () => {
    const cp = await startCp();
    const reports: number[] = [];
    cp.onReport((_id, r) => void reports.push(r.seq));
    const agent = await rawAgent('agent-5');
    for (const seq of [1, 2, 3]) {
      await agent.publishAsync(agentTopic('agent-5', 'events'), JSON.stringify(report(seq)), { qos: 1 });
      expect(reports.at(-1)).toBe(seq);
    }
  });

  it.skipIf(!local)('is disconnected once the broker stops, and sends nothing after', async () => {
    const cp = await startCp();
    const events: boolean[] = [];
    cp.on('connection', (c) => events.push(c));
    await broker.stop();
    await waitFor(() => events.includes(false), 'disconnect event');
    expect(cp.connected).toBe(false);
    expect(await cp.broadcastWork()).toMatchObject({ ok: false });
    await broker.start();
  });

  it.skipIf(local)(
    'reports refused credentials and an unreachable broker from start() as values',
    async () => {
      const wrong = new ControlPlaneClient({
        url: broker.url,
        username: broker.internalUser,
        password: 'nope',
        logger: silent,
      });
      cps.push(wrong);
      const r = await wrong.start();
      expect(r.ok).toBe(false);
      if (!r.ok) expect(r.error).toContain('refused');
      const port = await findFreePort();
      const nowhere = new ControlPlaneClient({
        url: `mqtt://127.0.0.1:${port}`,
        username: 'x',
        password: 'y',
        logger: silent,
        startTimeoutMs: 300,
      });
      cps.push(nowhere);
      expect(await nowhere.start()).toMatchObject({ ok: false });
    },
  );

  it.skipIf(local)(
    'emits connection events across a broker restart and receives again afterwards',
    async () => {
      const cp = await startCp();
      const events: boolean[] = [];
      cp.on('connection', (c) => events.push(c));
      const reports: number[] = [];
      cp.onReport((_id, r) => void reports.push(r.seq));
      await broker.stop();
      await waitFor(() => events.includes(false), 'disconnect event');
      await broker.start();
      await waitFor(() => events.at(-1) === true, 'reconnect event', 10_000);
      const agent = await rawAgent('agent-4');
      await agent.publishAsync(agentTopic('agent-4', 'events'), JSON.stringify(report(3)), { qos: 1 });
      await waitFor(() => reports.includes(3), 'report after restart');
    },
  );
});
