import { execFileSync } from 'node:child_process';
import { chmod, mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connectAsync } from 'mqtt';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { renderMosquittoAcl, renderMosquittoConf, writeMosquittoConfig } from './mosquitto-config.ts';
import { isMosquittoAvailable, MosquittoProcess } from './mosquitto-process.ts';
import { MQTT_MAX_PACKET_BYTES } from './packet-size-cap.ts';
import { findFreePort } from './test-brokers.ts';

const asRoot = process.getuid?.() === 0;
const uidOf = (user: string): number | null => {
  try {
    return Number(execFileSync('id', ['-u', user], { encoding: 'utf8' }).trim());
  } catch {
    return null;
  }
};

describe('the examples in deploy/mosquitto', () => {
  it('are what its README command generates (regenerate them when the generator changes)', async () => {
    const examples = join(import.meta.dirname, '../../../deploy/mosquitto');
    expect(await readFile(join(examples, 'mosquitto.conf.example'), 'utf8')).toBe(
      renderMosquittoConf({
        port: 1883,
        host: '0.0.0.0',
        passwordFile: '/etc/ffleet/mosquitto/passwd',
        aclFile: '/etc/ffleet/mosquitto/acl',
        maxQueuedMessages: 10_000,
        persistenceDir: '/var/lib/mosquitto',
        runAsUser: 'mosquitto',
      }),
    );
    expect(await readFile(join(examples, 'acl.example'), 'utf8')).toBe(
      renderMosquittoAcl('ffleet-control-plane'),
    );
  });
});

describe('renderMosquittoAcl', () => {
  it('confines agents to their own topics and gives the internal user the whole root', () => {
    const acl = renderMosquittoAcl('ffleet-cp');
    expect(acl.split('\n').filter((l) => l && !l.startsWith('#'))).toEqual([
      'pattern write ffleet/v1/agents/%u/status',
      'pattern write ffleet/v1/agents/%u/hello',
      'pattern write ffleet/v1/agents/%u/heartbeat',
      'pattern write ffleet/v1/agents/%u/requests',
      'pattern write ffleet/v1/agents/%u/events',
      'pattern read ffleet/v1/agents/%u/inbox',
      'pattern read ffleet/v1/broadcast/#',
      'user ffleet-cp',
      'topic readwrite ffleet/v1/#',
    ]);
  });
});

describe('renderMosquittoConf', () => {
  it('disables anonymous access, ties client id to username and sets the queue limit', () => {
    const conf = renderMosquittoConf({
      port: 18883,
      host: '127.0.0.1',
      passwordFile: '/etc/ffleet/passwd',
      aclFile: '/etc/ffleet/acl',
      maxQueuedMessages: 10_000,
    });
    for (const line of [
      'allow_anonymous false',
      'password_file /etc/ffleet/passwd',
      'acl_file /etc/ffleet/acl',
      'use_username_as_clientid true',
      'persistence false',
      'max_queued_messages 10000',
      'listener 18883 127.0.0.1',
    ]) {
      expect(conf.split('\n')).toContain(line);
    }
  });

  it('caps packets just above the largest payload, among the global options', () => {
    const lines = renderMosquittoConf({
      port: 18883,
      host: '127.0.0.1',
      passwordFile: 'p',
      aclFile: 'a',
      maxQueuedMessages: 1,
    }).split('\n');
    const packet = lines.indexOf(`max_packet_size ${MQTT_MAX_PACKET_BYTES}`);
    expect(packet).toBeGreaterThan(-1);
    expect(packet).toBeLessThan(lines.indexOf('listener 18883 127.0.0.1'));
  });

  it('turns persistence on with a location when given one', () => {
    const conf = renderMosquittoConf({
      port: 1,
      host: 'h',
      passwordFile: 'p',
      aclFile: 'a',
      maxQueuedMessages: 1,
      persistenceDir: '/var/lib/mosquitto',
    });
    expect(conf).toContain(
      'persistence true\npersistence_location /var/lib/mosquitto/\nautosave_interval 60\n',
    );
  });
});

describe.skipIf(!isMosquittoAvailable())('writeMosquittoConfig', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'ffleet-mqconf-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('writes a hashed, private password file that never contains a token in clear', async () => {
    const r = await writeMosquittoConfig({
      dir,
      port: 18883,
      agents: [{ username: 'agent-1', password: 'agent-token-xyz' }],
      internal: { username: 'ffleet-cp', password: 'internal-token-xyz' },
    });
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    const passwd = await readFile(r.passwordFile, 'utf8');
    expect(passwd).toMatch(/^ffleet-cp:\$\d\$/m);
    expect(passwd).toMatch(/^agent-1:\$\d\$/m);
    expect(passwd).not.toContain('token-xyz');
    expect((await stat(r.passwordFile)).mode & 0o077).toBe(0);
    expect(await readFile(r.confPath, 'utf8')).toContain(`acl_file ${r.aclFile}`);
  });

  it('refuses an agent listed twice (Mosquitto would keep the last password line)', async () => {
    const r = await writeMosquittoConfig({
      dir,
      port: 1,
      agents: [
        { username: 'enc-1', password: 'x' },
        { username: 'enc-1', password: 'y' },
      ],
      internal: { username: 'ffleet-cp', password: 'z' },
    });
    expect(r).toEqual({ ok: false, error: 'agent name enc-1 is listed twice' });
  });

  it("says in the config's comment whether agents share the token, also for a fleet of one", async () => {
    for (const ownTokens of [true, false]) {
      const r = await writeMosquittoConfig({
        dir,
        port: 18883,
        agents: [{ username: 'agent-1', password: 'agent-token-xyz' }],
        internal: { username: 'ffleet-cp', password: 'internal-token-xyz' },
        ownTokens,
      });
      if (!r.ok) throw new Error(r.error);
      const conf = await readFile(r.confPath, 'utf8');
      expect(conf.includes('Each agent has a token of its own'), String(ownTokens)).toBe(ownTokens);
      expect(conf.includes('every agent presents the same token'), String(ownTokens)).toBe(!ownTokens);
    }
  });

  it('refuses an agent named like the control plane user', async () => {
    const r = await writeMosquittoConfig({
      dir,
      port: 1,
      agents: [{ username: 'ffleet-cp', password: 'x' }],
      internal: { username: 'ffleet-cp', password: 'y' },
    });
    expect(r).toMatchObject({ ok: false });
  });

  it.skipIf(!asRoot || uidOf('mosquitto') === null)(
    'written as root, hands the password file and the persistence to the account Mosquitto drops to',
    async () => {
      const persistence = join(dir, 'persist');
      const r = await writeMosquittoConfig({
        dir,
        port: 18883,
        agents: [{ username: 'agent-1', password: 't1' }],
        internal: { username: 'ffleet-cp', password: 't2' },
        persistenceDir: persistence,
      });
      expect(r.ok).toBe(true);
      if (!r.ok) return;
      const uid = uidOf('mosquitto');
      expect((await stat(r.passwordFile)).uid).toBe(uid);
      expect((await stat(r.passwordFile)).mode & 0o077).toBe(0);
      expect((await stat(persistence)).uid).toBe(uid);
      expect((await readFile(r.confPath, 'utf8')).split('\n')).toContain('user mosquitto');
    },
  );

  it.skipIf(!asRoot)('refuses an account that does not exist, naming it', async () => {
    const r = await writeMosquittoConfig({
      dir,
      port: 1,
      agents: [{ username: 'agent-1', password: 'x' }],
      internal: { username: 'ffleet-cp', password: 'y' },
      runAsUser: 'no-such-account-ffleet',
    });
    expect(r).toMatchObject({ ok: false, error: expect.stringContaining('"no-such-account-ffleet"') });
  });

  it.skipIf(!asRoot)(
    'a config written as root for another account starts Mosquitto and admits an agent',
    async () => {
      await chmod(dir, 0o755); // the account must reach its files
      const port = await findFreePort();
      const r = await writeMosquittoConfig({
        dir,
        port,
        agents: [{ username: 'agent-1', password: 'agent-secret' }],
        internal: { username: 'ffleet-cp', password: 'cp-secret' },
        persistenceDir: join(dir, 'persist'),
        runAsUser: 'nobody',
      });
      expect(r.ok).toBe(true);
      if (!r.ok) return;
      const broker = new MosquittoProcess({ confPath: r.confPath, port });
      const started = await broker.start();
      try {
        expect(started).toMatchObject({ ok: true });
        const client = await connectAsync(`mqtt://127.0.0.1:${port}`, {
          clientId: 'agent-1',
          username: 'agent-1',
          password: 'agent-secret',
          protocolVersion: 4,
          reconnectPeriod: 0,
        });
        await client.endAsync();
      } finally {
        await broker.stop();
      }
    },
  );
});
