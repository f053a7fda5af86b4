// The systemd units in deploy/systemd: what they promise operators depends on a few directives.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

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
});
