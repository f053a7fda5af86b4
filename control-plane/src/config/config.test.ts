import { describe, expect, it } from 'vitest';
import { parseConfig } from './config.ts';

describe('parseConfig', () => {
  it('reads the defaults; empty values mean unset', () => {
    expect(parseConfig({ PORT: '', FFLEET_LOCAL_AGENT: 'yes' })).toMatchObject({
      port: 3000,
      host: '127.0.0.1',
      mqttPort: 1883,
      localAgent: true,
      leaseTtlMs: 30_000,
    });
  });

  it('names every invalid variable in one line, with the rule each broke', () => {
    const env = { PORT: '99999', FFLEET_LOCAL_AGENT: 'maybe', FFLEET_LEASE_TTL_MS: '10' };
    expect(() => parseConfig(env)).toThrow(
      expect.objectContaining({
        variable: 'PORT',
        message:
          'invalid configuration: PORT: must be at most 65535, got "99999"; FFLEET_LOCAL_AGENT: must be one of 0, 1, true, false, yes, no, on, off, got "maybe"; FFLEET_LEASE_TTL_MS: must be at least 1000, got "10"',
      }),
    );
  });

  it('reads numbers in decimal only; a blank value is unset', () => {
    expect(parseConfig({ PORT: ' ', MQTT_PORT: ' 1884 ' })).toMatchObject({ port: 3000, mqttPort: 1884 });
    // JavaScript would read these as 8080, 47000 and 1,024 (a blank PORT as 0: a random port).
    expect(() => parseConfig({ PORT: '0x1F90', MQTT_PORT: '4.7e4', FFLEET_BODY_LIMIT: '1e3' })).toThrow(
      'invalid configuration: PORT: must be a number, got "0x1F90"; MQTT_PORT: must be a number, got "4.7e4"; FFLEET_BODY_LIMIT: must be a number, got "1e3"',
    );
  });

  it('never repeats a secret or a URL in its error', () => {
    const env = { DATABASE_URL: 'mysql://app:pw@db/ffleet', FFLEET_AGENT_TOKEN: 'short' };
    const run = () => parseConfig(env);
    expect(run).toThrow('DATABASE_URL: must be a postgres:// or postgresql:// URL');
    expect(run).not.toThrow(/pw@|short/);
  });

  it('refuses a broker URL without a host or with a bad port before opening anything', () => {
    expect(() => parseConfig({ MQTT_URL: 'mqtt://u:pw@127.0.0.1:99999' })).toThrow(
      /^invalid configuration: MQTT_URL: must be a URL like mqtt:\/\/broker.local:1883/,
    );
    expect(() => parseConfig({ MQTT_URL: 'mqtt://user:pw@' })).not.toThrow(/pw/);
    expect(parseConfig({ MQTT_URL: 'mqtt://127.0.0.1:1883' }).mqttUrl).toBe('mqtt://127.0.0.1:1883');
  });

  it('takes tokens of any length and names the variables holding short ones (warned about at start)', () => {
    const short = parseConfig({ FFLEET_API_TOKENS: 'tokA, tokB', FFLEET_AGENT_TOKEN: 'agent' });
    expect(short).toMatchObject({ apiTokens: ['tokA', 'tokB'], agentToken: 'agent' });
    expect(short.shortTokens).toEqual(['FFLEET_API_TOKENS', 'FFLEET_AGENT_TOKEN']);
    const long = parseConfig({ FFLEET_API_TOKENS: 'a'.repeat(16), FFLEET_AGENT_TOKEN: 'b'.repeat(16) });
    expect(long.shortTokens).toEqual([]);
    expect(parseConfig({}).shortTokens).toEqual([]);
  });

  it('FFLEET_EXECUTION_RETENTION_DAYS: 30 days by default, 0 keeps delivery attempts forever', () => {
    expect(parseConfig({}).executionRetentionMs).toBe(30 * 86_400_000);
    expect(parseConfig({ FFLEET_EXECUTION_RETENTION_DAYS: '90' }).executionRetentionMs).toBe(90 * 86_400_000);
    expect(parseConfig({ FFLEET_EXECUTION_RETENTION_DAYS: '0' }).executionRetentionMs).toBe(
      Number.POSITIVE_INFINITY,
    );
    for (const bad of ['-1', '1.5', 'forever']) {
      expect(() => parseConfig({ FFLEET_EXECUTION_RETENTION_DAYS: bad }), bad).toThrow(
        /^invalid configuration: FFLEET_EXECUTION_RETENTION_DAYS: /,
      );
    }
  });

  it('FFLEET_AGENT_AUTH: shared by default, per-agent on request, anything else named', () => {
    expect(parseConfig({}).agentAuth).toBe('shared');
    expect(parseConfig({ FFLEET_AGENT_AUTH: 'per-agent' }).agentAuth).toBe('per-agent');
    expect(() => parseConfig({ FFLEET_AGENT_AUTH: 'peragent' })).toThrow(
      /^invalid configuration: FFLEET_AGENT_AUTH: /,
    );
  });
});
