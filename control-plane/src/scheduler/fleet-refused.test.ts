import { describe, expect, it } from 'vitest';
import { sampleBirth } from '../broker/test-brokers.ts';
import { useTestFleets } from './fake-mqtt.ts';

describe('two agent processes under one name', () => {
  const startFleet = useTestFleets();

  it('refuses each announcement of the later one, and logs it as an error once', async () => {
    const { mqtt, records } = await startFleet();
    const birth = (bootId: string, hostname: string) =>
      mqtt.birth('twin', { ...sampleBirth('twin'), bootId, hostname });
    // Both are heard (births alternate as each reconnects): the later one is refused...
    await birth('first', 'box-a');
    await birth('second', 'box-b');
    await birth('first', 'box-a');
    // ...and refused again at each announcement until it has left.
    for (let i = 0; i < 3; i++) await birth('second', 'box-b');
    const refusals = mqtt.sent.filter((s) => s.message.type === 'refused');
    expect(refusals.map((s) => (s.message as { bootId?: string }).bootId)).toEqual(Array(4).fill('second'));
    const logged = records.filter(
      (r) => r.msg === 'two agent processes share one name: the later one is refused',
    );
    expect(logged.map((r) => r.level)).toEqual([50]);
  });
});
