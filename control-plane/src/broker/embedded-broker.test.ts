import { createServer, type Server } from 'node:net';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { EmbeddedBroker } from './embedded-broker.ts';
import { connectRaw } from './test-brokers.ts';

const silent = pino({ level: 'silent' });
const creds = {
  agentToken: 'tok-agent',
  internalUser: 'ffleet-control-plane',
  internalToken: 'tok-internal',
};

describe('EmbeddedBroker', () => {
  const brokers: EmbeddedBroker[] = [];
  const servers: Server[] = [];
  const make = (port: number) => {
    const b = new EmbeddedBroker({ port, host: '127.0.0.1', logger: silent, ...creds });
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
});
