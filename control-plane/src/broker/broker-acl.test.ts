import { agentTopic, MQTT_MAX_PAYLOAD_BYTES } from '@ffleet/shared';
import { describe, expect, it } from 'vitest';
import { checkAgentPublish } from './broker-acl.ts';

const publish = (topic: string, payload: Buffer | string = '{}', retain = false) => ({
  topic,
  payload,
  retain,
});

describe('checkAgentPublish', () => {
  it('accepts what an agent sends: its own topics, its status retained, payloads up to the limit', () => {
    for (const kind of ['status', 'hello', 'heartbeat', 'requests', 'events'] as const)
      expect(checkAgentPublish('enc-1', publish(agentTopic('enc-1', kind)))).toEqual({ ok: true });
    expect(checkAgentPublish('enc-1', publish(agentTopic('enc-1', 'status'), '', true))).toEqual({
      ok: true,
    });
    const largest = Buffer.alloc(MQTT_MAX_PAYLOAD_BYTES);
    expect(checkAgentPublish('enc-1', publish(agentTopic('enc-1', 'events'), largest))).toEqual({ ok: true });
  });

  it('refuses another agent’s topics, a payload over the limit, and a retained message outside status', () => {
    expect(checkAgentPublish('enc-1', publish(agentTopic('enc-2', 'events')))).toEqual({
      ok: false,
      reason: 'topic',
    });
    const over = Buffer.alloc(MQTT_MAX_PAYLOAD_BYTES + 1);
    expect(checkAgentPublish('enc-1', publish(agentTopic('enc-1', 'status'), over, true))).toEqual({
      ok: false,
      reason: 'too-large',
    });
    // Counted in bytes, not characters.
    const wide = 'é'.repeat(MQTT_MAX_PAYLOAD_BYTES / 2 + 1);
    expect(checkAgentPublish('enc-1', publish(agentTopic('enc-1', 'events'), wide))).toMatchObject({
      reason: 'too-large',
    });
    for (const kind of ['hello', 'heartbeat', 'requests', 'events'] as const)
      expect(checkAgentPublish('enc-1', publish(agentTopic('enc-1', kind), '{}', true))).toEqual({
        ok: false,
        reason: 'retained',
      });
  });
});
