import { once } from 'node:events';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { networkInterfaces } from 'node:os';
import { agentTopic, MQTT_MAX_PAYLOAD_BYTES } from '@ffleet/shared';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { EmbeddedBroker, isLoopback } from './embedded-broker.ts';
import { MQTT_MAX_PACKET_BYTES } from './packet-size-cap.ts';
import { captureLogger, connectRaw, connectSocket, streamOversizedPublish, waitFor } from './test-brokers.ts';

const silent = pino({ level: 'silent' });
const creds = {
  agentToken: 'tok-agent',
  internalUser: 'ffleet-control-plane',
  internalToken: 'tok-internal',
};

describe('EmbeddedBroker', () => {
  const brokers: EmbeddedBroker[] = [];
  const servers: Server[] = [];
  const make = (port: number, logger: pino.Logger = silent) => {
    const b = new EmbeddedBroker({ port, host: '127.0.0.1', logger, ...creds });
    brokers.push(b);
    return b;
  };
  afterEach(async () => {
    await Promise.all(brokers.splice(0).map((b) => b.stop()));
    await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
  });

  it('binds a free port when asked for port 0 and reports it', async () => {
    const { port } = await make(0).start();
    expect(port).toBeGreaterThan(0);
    const c = await connectRaw(`mqtt://127.0.0.1:${port}`, {
      username: creds.internalUser,
      password: creds.internalToken,
    });
    expect(c.ok).toBe(true);
    if (c.ok) await c.client.endAsync();
  });

  it('stops idempotently and can start again on the same port', async () => {
    const b = make(0);
    const { port } = await b.start();
    await b.stop();
    await b.stop();
    expect((await make(port).start()).port).toBe(port);
  });

  it('rejects with a message naming the port and MQTT_PORT / MQTT_URL when the port is taken', async () => {
    const blocker = createServer();
    servers.push(blocker);
    await new Promise<void>((r) => blocker.listen(0, '127.0.0.1', () => r()));
    const addr = blocker.address();
    const port = typeof addr === 'object' && addr ? addr.port : 0;
    const err = await make(port)
      .start()
      .then(
        () => null,
        (e: Error) => e,
      );
    expect(err).toBeInstanceOf(Error);
    expect(err?.message).toContain(String(port));
    expect(err?.message).toContain('MQTT_PORT');
    expect(err?.message).toContain('MQTT_URL');
    expect(err?.message).not.toMatch(/\n\s+at /);
  });

  it('refuses an agent whose client id differs from its username', async () => {
    const { port } = await make(0).start();
    const c = await connectRaw(`mqtt://127.0.0.1:${port}`, {
      username: 'agent-1',
      password: creds.agentToken,
      clientId: 'agent-2',
    });
    expect(c).toMatchObject({ ok: false, code: 4 });
  });

  it('refuses the internal user name with the agent token, and an agent name outside AGENT_ID_RE', async () => {
    const { port } = await make(0).start();
    const url = `mqtt://127.0.0.1:${port}`;
    expect(await connectRaw(url, { username: creds.internalUser, password: creds.agentToken })).toMatchObject(
      {
        ok: false,
        code: 4,
      },
    );
    expect(await connectRaw(url, { username: 'bad name', password: creds.agentToken })).toMatchObject({
      ok: false,
      code: 4,
    });
  });

  it('lets the internal user connect with any client id', async () => {
    const { port } = await make(0).start();
    const c = await connectRaw(`mqtt://127.0.0.1:${port}`, {
      username: creds.internalUser,
      password: creds.internalToken,
      clientId: 'whatever-id',
    });
    expect(c.ok).toBe(true);
    if (c.ok) await c.client.endAsync();
  });

  it('logs a refused oversized publish with the agent, topic and size, never the payload', async () => {
    const { logger, records } = captureLogger('info');
    const { port } = await make(0, logger).start();
    const c = await connectRaw(`mqtt://127.0.0.1:${port}`, {
      username: 'agent-1',
      password: creds.agentToken,
    });
    if (!c.ok) throw new Error(c.error);
    const closed = new Promise<void>((r) => c.client.once('close', () => r()));
    const topic = agentTopic('agent-1', 'events');
    const payload = Buffer.alloc(MQTT_MAX_PAYLOAD_BYTES + 1, 'secret-output ');
    await Promise.race([c.client.publishAsync(topic, payload, { qos: 1 }), closed]);
    await closed;
    await c.client.endAsync(true);
    expect(records).toContainEqual(
      expect.objectContaining({
        level: 40,
        msg: 'publish refused: payload too large',
        agent: 'agent-1',
        topic,
        bytes: MQTT_MAX_PAYLOAD_BYTES + 1,
      }),
    );
    expect(JSON.stringify(records)).not.toContain('secret-output');
  });

  it('logs a retained publish outside the agent’s status as refused, naming agent and topic', async () => {
    const { logger, records } = captureLogger('info');
    const { port } = await make(0, logger).start();
    const c = await connectRaw(`mqtt://127.0.0.1:${port}`, {
      username: 'agent-2',
      password: creds.agentToken,
    });
    if (!c.ok) throw new Error(c.error);
    const closed = new Promise<void>((r) => c.client.once('close', () => r()));
    const topic = agentTopic('agent-2', 'heartbeat');
    await Promise.race([c.client.publishAsync(topic, '{}', { qos: 0, retain: true }), closed]);
    await closed;
    await c.client.endAsync(true);
    expect(records).toContainEqual(
      expect.objectContaining({ level: 40, agent: 'agent-2', topic, msg: expect.stringMatching(/retained/) }),
    );
  });

  it('logs the client, topic and announced size of a packet it hangs up on', async () => {
    const { logger, records } = captureLogger('info');
    const { port } = await make(0, logger).start();
    const socket = await connectSocket(port, 'agent-3', creds.agentToken);
    const topic = agentTopic('agent-3', 'events');
    const announced = MQTT_MAX_PACKET_BYTES + 1;
    const r = await streamOversizedPublish(socket, topic, 2 * MQTT_MAX_PACKET_BYTES, announced);
    expect(r.closed).toBe(true);
    await waitFor(() => records.some((l) => l.msg === 'connection closed: MQTT packet too large'), 'warning');
    expect(records).toContainEqual(
      expect.objectContaining({ level: 40, client: 'agent-3', cmd: 'publish', topic, bytes: announced }),
    );
  });

  /** A TCP connection to the broker that never sends a byte; `closed` resolves when the broker hangs up. */
  async function idleSocket(host: string, port: number): Promise<{ socket: Socket; closed: Promise<void> }> {
    const socket = connect({ host, port });
    socket.on('error', () => {});
    const closed = once(socket, 'close').then(() => {});
    await once(socket, 'connect');
    return { socket, closed };
  }
  const within = (p: Promise<void>, ms: number) =>
    Promise.race([p.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), ms))]);

  it('closes at once a connection beyond the limit of those waiting to log in, and admits again once they leave', async () => {
    const { logger, records } = captureLogger('info');
    const b = new EmbeddedBroker({
      port: 0,
      host: '127.0.0.1',
      logger,
      ...creds,
      maxPending: { total: 4, perAddress: 2 },
    });
    brokers.push(b);
    const { port } = await b.start();
    // Loopback has no limit of its own (a simulated fleet, agents on this host): the total applies.
    const waiting = await Promise.all([1, 2, 3, 4].map(() => idleSocket('127.0.0.1', port)));
    const fifth = await idleSocket('127.0.0.1', port);
    expect(await within(fifth.closed, 2_000)).toBe(true);
    expect(await within(waiting[0]!.closed, 200)).toBe(false);
    expect(records).toContainEqual(
      expect.objectContaining({
        level: 40,
        address: '127.0.0.1',
        pending: 4,
        msg: expect.stringMatching(/^connection closed: too many connections waiting to log in/),
      }),
    );
    for (const w of waiting) w.socket.destroy();
    await Promise.all(waiting.map((w) => w.closed));
    const r = await connectRaw(`mqtt://127.0.0.1:${port}`, {
      username: 'agent-5',
      password: creds.agentToken,
    });
    if (!r.ok) throw new Error(r.error);
    // A client that logged in no longer counts: four more may wait beside it.
    const more = await Promise.all([1, 2, 3, 4].map(() => idleSocket('127.0.0.1', port)));
    expect(await within(more[3]!.closed, 300)).toBe(false);
    await r.client.endAsync(true);
    for (const m of more) m.socket.destroy();
  });

  // Needs an address of this host other than loopback, for the broker to see a remote one.
  const lan = Object.values(networkInterfaces())
    .flat()
    .find((i) => i && i.family === 'IPv4' && !i.internal)?.address;
  it.runIf(lan !== undefined)(
    'allows each other address only a few connections waiting to log in',
    async () => {
      const b = new EmbeddedBroker({
        port: 0,
        host: lan,
        logger: silent,
        ...creds,
        maxPending: { total: 10, perAddress: 2 },
      });
      brokers.push(b);
      const { port } = await b.start();
      const two = await Promise.all([1, 2].map(() => idleSocket(lan!, port)));
      const third = await idleSocket(lan!, port);
      expect(await within(third.closed, 2_000)).toBe(true);
      expect(await within(two[0]!.closed, 200)).toBe(false);
      for (const t of two) t.socket.destroy();
    },
  );

  it('tells loopback addresses (IPv4, IPv6, IPv4-mapped) from others', () => {
    for (const a of ['127.0.0.1', '127.8.9.10', '::1', '::ffff:127.0.0.1'])
      expect(isLoopback(a), a).toBe(true);
    for (const a of ['10.0.0.1', '::ffff:10.0.0.1', '1127.0.0.1', 'fe80::1', ''])
      expect(isLoopback(a), a).toBe(false);
  });
});
