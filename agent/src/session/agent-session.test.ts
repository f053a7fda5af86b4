import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  type AgentBirth,
  type AgentHello,
  type AgentRequest,
  agentTopic,
  type InboxMessage,
  PROTOCOL_VERSION,
  type TaskReport,
  WORK_TOPIC,
} from '@ffleet/shared';
import pino from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
// Test-only reach into the control plane: the session is tested against the real counterpart.
import { ControlPlaneClient } from '../../../control-plane/src/broker/control-plane-client.ts';
import {
  captureLogger,
  connectRaw,
  qos1PublishPacket,
  TEST_BROKER_KINDS,
  type TestBroker,
  waitFor,
} from '../../../control-plane/src/broker/test-brokers.ts';
import { type TcpRelay, tcpRelay } from '../../../test/helpers/tcp-relay.ts';
import { Outbox } from '../outbox/outbox.ts';
import { AgentSession, type AgentSessionOptions } from './agent-session.ts';

const silent = pino({ level: 'silent' });
const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const AGENT_SCRIPT = fileURLToPath(new URL('./fixtures/run-agent.ts', import.meta.url));

const birthInfo = () => ({
  version: '0.1.0',
  protocol: PROTOCOL_VERSION,
  hostname: 'h',
  os: 'linux',
  arch: 'x64',
  transcoder: null,
  encoders: [],
  hwaccels: [],
  labels: ['gpu'],
  slots: 2,
});

const report = (seq: number, taskId = 't1'): TaskReport => ({
  kind: 'log',
  taskId,
  attempt: 1,
  leaseToken: 'lease',
  seq,
  step: 'transcoder',
  text: `line ${seq}`,
});

/** What the control plane saw from agents, in arrival order. */
interface Seen {
  births: Array<{ agent: string; birth: AgentBirth; retained: boolean; at: number }>;
  hellos: Array<{ agent: string; hello: AgentHello }>;
  heartbeats: Array<{ agent: string; freeSlots: number }>;
  requests: Array<{ agent: string; request: AgentRequest }>;
  reports: Array<{ agent: string; report: TaskReport }>;
  order: string[];
}

describe.each(TEST_BROKER_KINDS)('AgentSession on $kind', ({ start }) => {
  let broker: TestBroker;
  let cp: ControlPlaneClient;
  let seen: Seen;
  const cleanups: Array<() => Promise<unknown>> = [];
  let names = 0;
  const nextName = () => `agent-${names++}`;

  beforeAll(async () => {
    broker = await start();
  });
  afterAll(async () => {
    await broker?.dispose();
  });
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  async function startCp(): Promise<void> {
    seen = { births: [], hellos: [], heartbeats: [], requests: [], reports: [], order: [] };
    cp = new ControlPlaneClient({
      url: broker.url,
      username: broker.internalUser,
      password: broker.internalToken,
      logger: silent,
    });
    cp.onBirth((agent, birth, retained) => {
      seen.births.push({ agent, birth, retained, at: performance.now() });
      seen.order.push(`${agent} birth ${birth.state}`);
    });
    cp.onHello((agent, hello) => {
      seen.hellos.push({ agent, hello });
      seen.order.push(`${agent} hello`);
    });
    cp.onHeartbeat((agent, hb) => void seen.heartbeats.push({ agent, freeSlots: hb.freeSlots }));
    cp.onRequest((agent, request) => void seen.requests.push({ agent, request }));
    cp.onReport((agent, r) => void seen.reports.push({ agent, report: r }));
    const r = await cp.start();
    if (!r.ok) throw new Error(r.error);
    cleanups.push(() => cp.stop());
  }

  async function tempDir(): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), 'ffleet-session-'));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    return dir;
  }

  async function openOutbox(dir?: string): Promise<Outbox> {
    const outbox = new Outbox({ dir: dir ?? (await tempDir()), logger: silent });
    await outbox.start();
    cleanups.push(() => outbox.stop());
    return outbox;
  }

  async function startSession(
    name: string,
    overrides: Partial<AgentSessionOptions> = {},
    waitConnected = true,
  ): Promise<AgentSession> {
    const session = new AgentSession({
      url: broker.url,
      name,
      token: broker.agentToken,
      birth: birthInfo,
      running: () => [{ taskId: 'run-1', attempt: 2, leaseToken: 'lt' }],
      freeSlots: () => 1,
      heartbeatMs: 60_000,
      outbox: overrides.outbox ?? (await openOutbox()),
      logger: silent,
      backoff: { minMs: 50, maxMs: 400 },
      ...overrides,
    });
    cleanups.push(() => session.stop({ graceful: false }));
    const up = new Promise<void>((r) => session.once('connection', () => r()));
    session.start();
    if (waitConnected) await up;
    return session;
  }

  const reportsOf = (agent: string) => seen.reports.filter((r) => r.agent === agent).map((r) => r.report.seq);

  it('announces birth and hello again when a control plane subscribes after it (resync broadcast)', async () => {
    const name = nextName();
    await startSession(name, { previousBootId: '11111111-1111-4111-8111-111111111111' });
    // The control plane arrives later (e.g. it resubscribed after a broker restart): the agent's first
    // hello went to nobody, and only the resync broadcast brings it.
    await startCp();
    await waitFor(() => seen.hellos.some((h) => h.agent === name), 'hello after resync');
    const hello = seen.hellos.find((h) => h.agent === name)!.hello;
    expect(hello.running).toEqual([{ taskId: 'run-1', attempt: 2, leaseToken: 'lt' }]);
    // The process before it on its data dir: the control plane reads it as a restart on that box.
    expect(hello.previousBootId).toBe('11111111-1111-4111-8111-111111111111');
    expect(seen.births.some((b) => b.agent === name && b.birth.state === 'online')).toBe(true);
  });

  it('announces a retained online birth, then hello with running tasks, then heartbeats', async () => {
    await startCp();
    const name = nextName();
    const session = await startSession(name, { heartbeatMs: 50 });
    await waitFor(() => seen.heartbeats.some((h) => h.agent === name), 'heartbeat');
    expect(seen.order.filter((o) => o.startsWith(`${name} `)).slice(0, 2)).toEqual([
      `${name} birth online`,
      `${name} hello`,
    ]);
    const birth = seen.births.find((b) => b.agent === name)!.birth;
    expect(birth).toMatchObject({ state: 'online', name, bootId: session.bootId, labels: ['gpu'], slots: 2 });
    expect(seen.hellos.find((h) => h.agent === name)?.hello).toMatchObject({
      bootId: session.bootId,
      running: [{ taskId: 'run-1', attempt: 2, leaseToken: 'lt' }],
    });
    expect(seen.heartbeats.find((h) => h.agent === name)?.freeSlots).toBe(1);
  });

  it('keeps reports in the outbox until acked, and publishes concurrent reports in call order', async () => {
    await startCp();
    const name = nextName();
    const outbox = await openOutbox();
    const session = await startSession(name, { outbox });
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, seq) => session.publishReport(report(seq))),
    );
    expect(results.every((r) => r.ok)).toBe(true);
    await waitFor(() => reportsOf(name).length === 40, '40 reports');
    expect(reportsOf(name)).toEqual(Array.from({ length: 40 }, (_, i) => i));
    expect(outbox.size()).toBe(40);
    for (let seq = 0; seq < 40; seq++)
      await cp.sendInbox(name, { type: 'ack', taskId: 't1', attempt: 1, seq });
    await waitFor(() => outbox.size() === 0, 'acks to empty the outbox');
  });

  it('answers awaitResult from request.result / claim.result and clears durable requests', async () => {
    await startCp();
    const name = nextName();
    const outbox = await openOutbox();
    const session = await startSession(name, { outbox });
    cp.onRequest(async (agent, req) => {
      if (req.type === 'claim')
        await cp.sendInbox(agent, { type: 'claim.result', requestId: req.requestId, tasks: [] });
      else
        await cp.sendInbox(agent, {
          type: 'request.result',
          requestId: req.requestId,
          ok: true,
          taskId: 'new',
        });
    });
    const watch: AgentRequest = {
      type: 'watch.file',
      requestId: 'req-w1',
      watchfolderId: 'wf',
      relativePath: 'a.mov',
      size: 10,
      mtimeMs: 1,
    };
    expect(await session.request(watch, { durable: true })).toEqual({ ok: true });
    expect(await session.awaitResult('req-w1', 5_000)).toMatchObject({
      ok: true,
      reply: { type: 'request.result', ok: true, taskId: 'new' },
    });
    await waitFor(() => outbox.size() === 0, 'durable request removed');
    expect(await session.request({ type: 'claim', requestId: 'req-c1', max: 1 }, { durable: false })).toEqual(
      {
        ok: true,
      },
    );
    expect(await session.awaitResult('req-c1', 5_000)).toMatchObject({
      ok: true,
      reply: { type: 'claim.result' },
    });
    expect(await session.awaitResult('never', 50)).toEqual({ ok: false, error: 'timeout' });
  });

  it('emits inbox messages and work hints, and drops malformed inbox payloads with a warning', async () => {
    const name = nextName();
    const { logger, records } = captureLogger();
    const session = await startSession(name, { logger });
    const inbox: InboxMessage[] = [];
    let hints = 0;
    session.on('inbox', (m) => inbox.push(m));
    session.on('work', () => hints++);
    session.on('inbox', () => {
      throw new Error('listener bug must not break the session');
    });
    // A raw internal client, to send what the typed ControlPlaneClient never would.
    const raw = await connectRaw(broker.url, {
      username: broker.internalUser,
      password: broker.internalToken,
    });
    if (!raw.ok) throw new Error(raw.error);
    cleanups.push(() => raw.client.endAsync(true));
    const cancel: InboxMessage = { type: 'task.cancel', taskId: 't9', attempt: 1, reason: 'user' };
    await raw.client.publishAsync(agentTopic(name, 'inbox'), 'garbage', { qos: 1 });
    await raw.client.publishAsync(agentTopic(name, 'inbox'), '{"type":"task.cancel"}', { qos: 1 });
    await raw.client.publishAsync(agentTopic(name, 'inbox'), JSON.stringify(cancel), { qos: 1 });
    await raw.client.publishAsync(WORK_TOPIC, '{}', { qos: 0 });
    await waitFor(() => inbox.length === 1 && hints === 1, 'cancel and hint');
    expect(inbox[0]).toEqual(cancel);
    expect(records.filter((r) => r.msg === 'dropped malformed inbox message').length).toBe(2);
    expect(records.filter((r) => r.msg === 'session listener failed').length).toBe(1);
    expect(session.connected).toBe(true);
  });

  it('sends hello again with the same bootId after it was disconnected', async () => {
    await startCp();
    const name = nextName();
    const session = await startSession(name);
    await waitFor(() => seen.hellos.some((h) => h.agent === name), 'first hello');
    // Taking over the client id drops the agent's connection, as a network blip would.
    const kicker = await connectRaw(broker.url, { username: name, password: broker.agentToken });
    if (kicker.ok) await kicker.client.endAsync(true);
    await waitFor(() => seen.hellos.filter((h) => h.agent === name).length >= 2, 'second hello');
    expect(seen.hellos.filter((h) => h.agent === name).map((h) => h.hello.bootId)).toEqual([
      session.bootId,
      session.bootId,
    ]);
  });

  it('replays unacked reports after a broker restart, in order, losing nothing', async () => {
    await startCp();
    const name = nextName();
    const outbox = await openOutbox();
    // resendAfterMs covers reports replayed before the control plane itself had reconnected.
    const session = await startSession(name, { outbox, resendAfterMs: 500 });
    for (let seq = 0; seq < 5; seq++) await session.publishReport(report(seq));
    await waitFor(() => reportsOf(name).length === 5, 'reports before the outage');
    const down = new Promise<void>((r) => session.once('connection', () => r()));
    await broker.stop();
    await down;
    for (let seq = 5; seq < 10; seq++) expect((await session.publishReport(report(seq))).ok).toBe(true);
    expect(outbox.size()).toBe(10);
    const before = seen.reports.length;
    const restartedAt = performance.now();
    await broker.start();
    await waitFor(() => new Set(reportsOf(name)).size === 10, 'all ten reports', 15_000);
    const recoveryMs = performance.now() - restartedAt;
    console.info(
      `all reports at the control plane ${recoveryMs.toFixed(0)} ms after ${broker.kind} restarted`,
    );
    const firstArrivals = [...new Set(seen.reports.slice(before).map((r) => r.report.seq))];
    expect(firstArrivals).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    for (let seq = 0; seq < 10; seq++)
      await cp.sendInbox(name, { type: 'ack', taskId: 't1', attempt: 1, seq });
    await waitFor(() => outbox.size() === 0, 'outbox emptied by acks');
  });

  it('replays what a previous run left in the outbox when it connects', async () => {
    await startCp();
    const name = nextName();
    const dir = await tempDir();
    const previous = await openOutbox(dir);
    for (let seq = 0; seq < 3; seq++) {
      await previous.put(`t1:1:${seq}`, agentTopic(name, 'events'), JSON.stringify(report(seq)));
    }
    await previous.stop();
    await startSession(name, { outbox: await openOutbox(dir) });
    await waitFor(() => reportsOf(name).length === 3, 'replayed reports');
    expect(reportsOf(name)).toEqual([0, 1, 2]);
  });

  it('republishes the retained birth on updateBirth with what the callback now returns', async () => {
    await startCp();
    const name = nextName();
    let encoders: string[] = [];
    const session = await startSession(name, { birth: () => ({ ...birthInfo(), encoders }) });
    await waitFor(() => seen.births.some((b) => b.agent === name), 'first birth');
    encoders = ['libx264', 'libx265'];
    session.updateBirth();
    await waitFor(() => seen.births.filter((b) => b.agent === name).length === 2, 'second birth');
    expect(seen.births.filter((b) => b.agent === name).map((b) => b.birth.encoders)).toEqual([[], encoders]);
  });

  it('publishes a retained offline birth on graceful stop, idempotently', async () => {
    await startCp();
    const name = nextName();
    const session = await startSession(name);
    await Promise.all([session.stop({ graceful: true }), session.stop({ graceful: true })]);
    await waitFor(
      () => seen.births.some((b) => b.agent === name && b.birth.state === 'offline'),
      'offline birth',
    );
    expect(seen.births.filter((b) => b.agent === name).at(-1)?.birth.bootId).toBe(session.bootId);
  });

  it('stops promptly while the broker is down, with reports still waiting in the outbox', async () => {
    const name = nextName();
    const outbox = await openOutbox();
    const session = await startSession(name, { outbox });
    const down = new Promise<void>((r) => session.once('connection', () => r()));
    await broker.stop();
    try {
      await down;
      await session.publishReport(report(0));
      const t = performance.now();
      await session.stop({ graceful: true });
      expect(performance.now() - t).toBeLessThan(1_000);
      expect(outbox.list().map((e) => e.key)).toEqual(['t1:1:0']);
    } finally {
      await broker.start();
    }
  });

  it('logs no broker warning for a message that arrives while it stops (write after end)', async () => {
    const name = nextName();
    const { logger, records } = captureLogger();
    // The all-in-one's control plane answers the agent's `draining` birth with a config: it can reach
    // the agent after mqtt.js ended the socket, and its PUBACK is then written to the ended stream.
    const late: InboxMessage = { type: 'ack', taskId: 't1', attempt: 1, seq: 0 };
    const relay = await lateMessageRelay(broker.port, agentTopic(name, 'inbox'), JSON.stringify(late));
    cleanups.push(() => relay.close());
    const session = await startSession(name, { url: relay.url, logger });
    await session.stop({ graceful: true });
    expect(relay.injected()).toBe(true);
    // The race really happened (the error is there, at debug)...
    await waitFor(() => records.some((r) => r.err === 'write after end'), 'the write-after-end error');
    // ...and it is not reported as a broker problem.
    expect(records.filter((r) => r.level >= 40).map((r) => r.msg)).toEqual([]);
  });

  it('takes a connection lost before its subscriptions were answered for what it is, and connects again', async () => {
    const { logger, records } = captureLogger();
    const rejections: unknown[] = [];
    const onRejection = (reason: unknown) => rejections.push(reason);
    process.on('unhandledRejection', onRejection);
    cleanups.push(async () => {
      process.off('unhandledRejection', onRejection);
    });
    const relay = await cutAtFirstSubscribe(broker.port);
    cleanups.push(() => relay.close());
    // mqtt.js rejects the pending SUBSCRIBE with an ErrorWithSubackPacket that has no packet.
    await startSession(nextName(), { url: relay.url, logger, backoff: { minMs: 10, maxMs: 30 } });
    expect(relay.cut()).toBe(true);
    await new Promise((r) => setImmediate(r));
    expect(rejections).toEqual([]);
    expect(records.some((r) => r.level === 40 && r.msg === 'subscribe failed; will retry on reconnect')).toBe(
      true,
    );
    expect(records.filter((r) => r.level >= 50).map((r) => r.msg)).toEqual([]);
  });

  it('still warns when the broker goes away while it runs', async () => {
    const { logger, records } = captureLogger();
    const session = await startSession(nextName(), { logger, backoff: { minMs: 10, maxMs: 30 } });
    const down = new Promise<void>((r) => session.once('connection', () => r()));
    await broker.stop();
    try {
      await down;
      await waitFor(
        () => records.some((r) => r.msg === 'broker unreachable; retrying with backoff'),
        'the unreachable warning',
      );
      expect(records.find((r) => r.msg === 'broker unreachable; retrying with backoff')?.level).toBe(40);
    } finally {
      await broker.start();
    }
  });

  it('logs a refused login once per streak and keeps retrying with backoff', async () => {
    const { logger, records } = captureLogger();
    const name = nextName();
    const session = await startSession(
      name,
      { token: 'wrong', logger, backoff: { minMs: 10, maxMs: 30 } },
      false,
    );
    const refusals: number[] = [];
    session.on('refused', (code) => refusals.push(code));
    await waitFor(
      () => records.filter((r) => r.msg === 'broker connection failed again').length >= 4,
      'retries',
    );
    const loud = records.filter((r) => r.level >= 40);
    expect(loud.map((r) => r.msg)).toEqual([
      `broker refused this agent: check the agent name and token (a control plane with FFLEET_AGENT_AUTH=per-agent takes only the agent's own token: run \`ffleet agent-token ${name}\` where it runs, with \`--generation N\` once the token was replaced through POST /api/v1/agents/${name}/token; the control plane's log names the exact command); retrying with backoff`,
    ]);
    expect(session.connected).toBe(false);
    // Every refusal is told (the fleet agent stops its runs once their leases must have run out).
    expect(refusals.length).toBeGreaterThanOrEqual(3);
    expect(new Set(refusals).size).toBe(1);
    expect([4, 5]).toContain(refusals[0]);
  });

  it('gets its Last Will published quickly after being SIGKILLed, and it stays retained', async () => {
    await startCp();
    const name = nextName();
    const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', AGENT_SCRIPT], {
      cwd: REPO_ROOT,
      env: {
        ...process.env,
        FFLEET_TEST_URL: broker.url,
        FFLEET_TEST_NAME: name,
        FFLEET_TEST_TOKEN: broker.agentToken,
        FFLEET_TEST_OUTBOX: await tempDir(),
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    cleanups.push(async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    });
    const bootId = await new Promise<string>((resolve) => {
      let buf = '';
      child.stdout?.on('data', (d: Buffer) => {
        buf += d.toString();
        const m = /connected (\S+)/.exec(buf);
        if (m) resolve(m[1]!);
      });
    });
    await waitFor(
      () => seen.births.some((b) => b.agent === name && b.birth.state === 'online'),
      'online birth',
    );
    const killedAt = performance.now();
    child.kill('SIGKILL');
    await waitFor(
      () => seen.births.some((b) => b.agent === name && b.birth.state === 'offline'),
      'Last Will',
    );
    const will = seen.births.find((b) => b.agent === name && b.birth.state === 'offline')!;
    const delayMs = will.at - killedAt;
    console.info(`Last Will delay after SIGKILL on ${broker.kind}: ${delayMs.toFixed(1)} ms`);
    expect(will.birth.bootId).toBe(bootId);
    expect(delayMs).toBeLessThan(2_000);
    // A control plane connecting afterwards finds the offline birth retained.
    const late = new ControlPlaneClient({
      url: broker.url,
      username: broker.internalUser,
      password: broker.internalToken,
      logger: silent,
      clientId: 'cp-late',
    });
    const retained: AgentBirth[] = [];
    late.onBirth((agent, b, isRetained) => {
      if (agent === name && isRetained) retained.push(b);
    });
    await cp.stop(); // Mosquitto ties client id to username: one internal client at a time.
    cleanups.push(() => late.stop());
    expect((await late.start()).ok).toBe(true);
    await waitFor(() => retained.length === 1, 'retained offline birth');
    expect(retained[0]).toMatchObject({ state: 'offline', bootId });
  });
});

/**
 * A TCP relay to the broker on `port` that, once the agent has ended its side of the connection (it
 * does right after its DISCONNECT), still hands it one QoS 1 PUBLISH on `topic`: what a broker does
 * that sent a message just before it read the DISCONNECT. Deterministic, unlike racing a real one.
 */
async function lateMessageRelay(
  port: number,
  topic: string,
  payload: string,
): Promise<TcpRelay & { injected: () => boolean }> {
  let injected = false;
  const relay = await tcpRelay(
    { port },
    (agentSide, brokerSide) => {
      let agentEnded = false;
      agentSide.on('data', (d: Buffer) => brokerSide.write(d));
      brokerSide.on('data', (d: Buffer) => {
        if (!agentSide.writableEnded) agentSide.write(d);
      });
      agentSide.on('end', () => {
        agentEnded = true;
        brokerSide.end();
        agentSide.write(qos1PublishPacket(topic, payload, 4242));
        injected = true;
        setTimeout(() => agentSide.end(), 50);
      });
      // The broker closes its side on the DISCONNECT; the agent's FIN may reach us a moment later.
      brokerSide.on('close', () => {
        setTimeout(() => {
          if (!agentEnded) agentSide.destroy();
        }, 500);
      });
    },
    { allowHalfOpen: true },
  );
  return { ...relay, injected: () => injected };
}

/**
 * A TCP relay to the broker on `port` that drops the first connection as soon as the client sends a
 * SUBSCRIBE (before any SUBACK can come back); later connections pass untouched.
 */
async function cutAtFirstSubscribe(port: number): Promise<TcpRelay & { cut: () => boolean }> {
  let cut = false;
  const relay = await tcpRelay({ port }, (agentSide, brokerSide) => {
    const first = !cut;
    agentSide.on('data', (d: Buffer) => {
      // 0x82: SUBSCRIBE (type 8, flags 0010). The CONNECT goes in its own write before it.
      if (first && !cut && d[0] === 0x82) {
        cut = true;
        agentSide.destroy();
        brokerSide.destroy();
        return;
      }
      brokerSide.write(d);
    });
    brokerSide.on('data', (d: Buffer) => agentSide.write(d));
    agentSide.on('close', () => brokerSide.destroy());
    brokerSide.on('close', () => agentSide.destroy());
  });
  return { ...relay, cut: () => cut };
}
