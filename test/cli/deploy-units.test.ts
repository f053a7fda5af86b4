// The systemd units in deploy/systemd: what they promise operators depends on a few directives.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { agentTokenFor } from '../../control-plane/src/agent-token.ts';
import { isMosquittoAvailable, MosquittoProcess } from '../../control-plane/src/broker/mosquitto-process.ts';
import { connectRaw, findFreePort } from '../../control-plane/src/broker/test-brokers.ts';

const UNITS = join(import.meta.dirname, '../../deploy/systemd');
const directives = (file: string): Map<string, string> =>
  new Map(
    readFileSync(join(UNITS, file), 'utf8')
      .split('\n')
      .filter((l) => /^[A-Za-z]+=/.test(l))
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
  );
const hasSystemdAnalyze = (() => {
  try {
    execFileSync('systemd-analyze', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();

describe('deploy/systemd units', () => {
  for (const [file, command] of [
    ['ffleet-agent.service', 'agent'],
    ['ffleet-control-plane.service', 'control-plane'],
  ] as const) {
    it(`${file}: SIGTERM reaches the ffleet process alone, exit code 2 is not restarted, it runs \`ffleet ${command}\``, () => {
      const d = directives(file);
      // The default KillMode (control-group) sends SIGTERM to every process of the unit: the agent's
      // ffmpeg and scripts would be aborted at once instead of finishing while the agent drains.
      expect(d.get('KillMode')).toBe('mixed');
      expect(d.get('KillSignal')).toBe('SIGTERM');
      expect(d.get('RestartPreventExitStatus')).toBe('2');
      const exec = d.get('ExecStart')?.split(' ') ?? [];
      expect(exec.at(-2)).toBe('bin/ffleet.js');
      expect(exec.at(-1)).toBe(command);
      expect(existsSync(join(UNITS, '../..', 'bin/ffleet.js'))).toBe(true);
    });
  }

  it.skipIf(!hasSystemdAnalyze)('systemd-analyze verify accepts both units', () => {
    // Throws (non-zero exit) on an unknown directive or a bad value.
    execFileSync(
      'systemd-analyze',
      ['verify', '--man=no', 'ffleet-agent.service', 'ffleet-control-plane.service'],
      {
        cwd: UNITS,
        stdio: 'pipe',
      },
    );
  });
});

describe('deploy/mosquitto/generate-config.ts', () => {
  const generate = (args: string[]) => {
    const r = spawnSync(
      process.execPath,
      ['--import', 'tsx', join(import.meta.dirname, '../../deploy/mosquitto/generate-config.ts'), ...args],
      {
        encoding: 'utf8',
        env: {
          ...process.env,
          FFLEET_AGENT_TOKEN: 'agent-token-1',
          FFLEET_MQTT_INTERNAL_TOKEN: 'internal-1',
        },
        timeout: 60_000,
      },
    );
    return { code: r.status, stderr: r.stderr.trim() };
  };

  it('refuses a bad port or an unknown option with a line and its usage, exit code 2, writing nothing', () => {
    const dir = mkdtempSync(join(tmpdir(), 'ffleet-mosq-gen-'));
    try {
      for (const port of ['abc', '99999', '0', '1.5']) {
        const r = generate(['--dir', dir, '--agents', 'enc-1', '--port', port]);
        expect(r.code, port).toBe(2);
        expect(r.stderr.split('\n')[0]).toBe(
          `generate-config: --port must be a whole number from 1 to 65535, got "${port}"`,
        );
      }
      const bogus = generate(['--dir', dir, '--agents', 'enc-1', '--bogus']);
      expect(bogus.code).toBe(2);
      expect(bogus.stderr).toMatch(/^generate-config: Unknown option '--bogus'.*\nusage: /s);
      expect(readdirSync(dir)).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);

  it.skipIf(!isMosquittoAvailable())(
    '--per-agent-tokens: Mosquitto lets each agent in with its own token only (ffleet agent-token)',
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'ffleet-mosq-own-'));
      const port = await findFreePort();
      const mosquitto = new MosquittoProcess({ confPath: join(dir, 'mosquitto.conf'), port });
      try {
        const args = ['--dir', dir, '--agents', 'enc-1,enc-2', '--port', String(port), '--per-agent-tokens'];
        // Under root, Mosquitto would drop to `mosquitto`, which cannot read a private temp dir.
        if (process.getuid?.() === 0) args.push('--run-as', userInfo().username);
        expect(generate(args)).toMatchObject({ code: 0 });
        expect(readFileSync(join(dir, 'mosquitto.conf'), 'utf8')).toContain(
          'Each agent has a token of its own',
        );
        const passwd = readFileSync(join(dir, 'passwd'), 'utf8');
        expect(passwd).not.toContain('agent-token-1');
        expect(passwd).not.toContain(agentTokenFor('agent-token-1', 'enc-1'));
        const started = await mosquitto.start();
        expect(started).toEqual({ ok: true });
        const url = `mqtt://127.0.0.1:${port}`;
        const login = async (username: string, password: string) => {
          const r = await connectRaw(url, { username, password });
          if (r.ok) await r.client.endAsync(true);
          return r.ok;
        };
        expect(await login('enc-1', agentTokenFor('agent-token-1', 'enc-1'))).toBe(true);
        expect(await login('enc-2', agentTokenFor('agent-token-1', 'enc-2'))).toBe(true);
        expect(await login('enc-2', agentTokenFor('agent-token-1', 'enc-1'))).toBe(false);
        expect(await login('enc-1', 'agent-token-1')).toBe(false);
        expect(await login('ffleet-control-plane', 'internal-1')).toBe(true);
      } finally {
        await mosquitto.stop();
        rmSync(dir, { recursive: true, force: true });
      }
    },
    120_000,
  );
});
