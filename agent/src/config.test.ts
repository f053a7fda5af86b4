import { describe, expect, it } from 'vitest';
import { parseAgentConfig } from './config.ts';

const base = { FFLEET_AGENT_TOKEN: 'secret-token-1', FFLEET_AGENT_NAME: 'box-a' };

describe('parseAgentConfig', () => {
  it('reads a valid environment; empty values mean unset', () => {
    const env = { ...base, FFLEET_AGENT_SLOTS: '4', FFLEET_AGENT_LABELS: 'gpu, fast', LOG_LEVEL: '' };
    expect(parseAgentConfig(env)).toMatchObject({
      name: 'box-a',
      slots: 4,
      labels: ['gpu', 'fast'],
      logLevel: 'info',
    });
  });

  it('names every invalid variable in one line, with the rule each broke', () => {
    const env = { ...base, FFLEET_AGENT_SLOTS: 'abc', FFLEET_HEARTBEAT_MS: '5.5', LOG_LEVEL: 'loud' };
    expect(() => parseAgentConfig(env)).toThrow(
      expect.objectContaining({
        variable: 'FFLEET_AGENT_SLOTS',
        message:
          'invalid configuration: FFLEET_AGENT_SLOTS: must be a number, got "abc"; FFLEET_HEARTBEAT_MS: must be a whole number, got "5.5"; LOG_LEVEL: must be one of fatal, error, warn, info, debug, trace, silent, got "loud"',
      }),
    );
  });

  it('refuses a label that claims a capability the agent offers itself', () => {
    for (const label of ['agent:encode-01', 'encoder:h264_nvenc', 'hwaccel:cuda', 'os:windows', 'arch:arm64'])
      expect(() => parseAgentConfig({ ...base, FFLEET_AGENT_LABELS: `gpu,${label}` }), label).toThrow(
        expect.objectContaining({
          variable: 'FFLEET_AGENT_LABELS',
          message: expect.stringContaining(`"${label}"`),
        }),
      );
    expect(parseAgentConfig({ ...base, FFLEET_AGENT_LABELS: 'gpu,site:paris' }).labels).toEqual([
      'gpu',
      'site:paris',
    ]);
  });

  it('refuses more than 100 labels, as PATCH /agents/{id} does', () => {
    const many = (n: number) => Array.from({ length: n }, (_, i) => `l${i}`).join(',');
    expect(parseAgentConfig({ ...base, FFLEET_AGENT_LABELS: many(100) }).labels).toHaveLength(100);
    expect(() => parseAgentConfig({ ...base, FFLEET_AGENT_LABELS: many(101) })).toThrow(
      expect.objectContaining({
        variable: 'FFLEET_AGENT_LABELS',
        message: expect.stringContaining('101 labels, more than the 100 an agent may have'),
      }),
    );
  });

  it('refuses a label given twice', () => {
    expect(() => parseAgentConfig({ ...base, FFLEET_AGENT_LABELS: 'gpu, fast,gpu' })).toThrow(
      expect.objectContaining({
        variable: 'FFLEET_AGENT_LABELS',
        message: expect.stringContaining('"gpu" is given twice'),
      }),
    );
  });

  it('reads numbers in decimal only; a blank value is unset', () => {
    expect(parseAgentConfig({ ...base, FFLEET_AGENT_SLOTS: ' ' }).slots).toBe(2);
    expect(() =>
      parseAgentConfig({ ...base, FFLEET_AGENT_SLOTS: '0x4', FFLEET_HEARTBEAT_MS: '2e3' }),
    ).toThrow(
      'invalid configuration: FFLEET_AGENT_SLOTS: must be a number, got "0x4"; FFLEET_HEARTBEAT_MS: must be a number, got "2e3"',
    );
  });

  it('never repeats a broker URL (it may hold a password) in its error', () => {
    const run = () => parseAgentConfig({ FFLEET_AGENT_TOKEN: 'short', MQTT_URL: 'http://user:pw@broker' });
    expect(run).toThrow('MQTT_URL: must be an mqtt://, mqtts://, tcp://, ws:// or wss:// URL');
    expect(run).not.toThrow(/short|pw@/);
  });

  it('refuses a broker URL the MQTT client would misread: no host, a bad port', () => {
    const problem = (url: string) => () => parseAgentConfig({ FFLEET_AGENT_TOKEN: 'x', MQTT_URL: url });
    // mqtt.js reads these as the broker on localhost, or fails only once running.
    expect(problem('mqtt://enc:pw@')).toThrow(
      /^invalid configuration: MQTT_URL: must be a URL like mqtt:\/\/broker.local:1883 \(it does not parse/,
    );
    expect(problem('mqtt://enc:pw@')).not.toThrow(/pw/);
    expect(problem('mqtt://:18921')).toThrow('MQTT_URL: must be a URL like');
    expect(problem('mqtt://127.0.0.1:99999')).toThrow('MQTT_URL: must be a URL like');
    expect(problem('mqtt://127.0.0.1:0')).toThrow('MQTT_URL: port must be 1 to 65535');
    expect(problem('mqtt:broker')).toThrow(
      'MQTT_URL: must be a URL like mqtt://broker.local:1883 (a scheme, then //',
    );
    expect(problem('ws:127.0.0.1:18931')).toThrow('MQTT_URL: must be a URL like');
    for (const ok of [
      'mqtt://broker.local',
      'mqtts://u:p@b:8883',
      'ws://[::1]:8080/mqtt',
      'tcp://10.0.0.2:1883',
    ])
      expect(parseAgentConfig({ FFLEET_AGENT_TOKEN: 'x', MQTT_URL: ok }).mqttUrl).toBe(ok);
  });

  it('takes a token of any length (a short one is warned about at start)', () => {
    expect(parseAgentConfig({ FFLEET_AGENT_TOKEN: 's3' }).token).toBe('s3');
  });
});
