import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { renderMosquittoAcl, renderMosquittoConf, writeMosquittoConfig } from './mosquitto-config.ts';
import { isMosquittoAvailable } from './mosquitto-process.ts';

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

  it('refuses an agent named like the control plane user', async () => {
    const r = await writeMosquittoConfig({
      dir,
      port: 1,
      agents: [{ username: 'ffleet-cp', password: 'x' }],
      internal: { username: 'ffleet-cp', password: 'y' },
    });
    expect(r).toMatchObject({ ok: false });
  });
});
