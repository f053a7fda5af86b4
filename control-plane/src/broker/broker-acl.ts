import { createHash, timingSafeEqual } from 'node:crypto';
import { AGENT_ID_RE, type AgentTopicKind, agentPayloadLimit, agentTopic, TOPIC_ROOT } from '@ffleet/shared';

/** The topic kinds an agent may publish on under its own id. */
export const AGENT_PUBLISH_KINDS: readonly AgentTopicKind[] = [
  'status',
  'hello',
  'heartbeat',
  'requests',
  'events',
];

/** Agents may subscribe to anything below this prefix (hints the control plane sends to all). */
export const BROADCAST_PREFIX = `${TOPIC_ROOT}/broadcast/`;

/**
 * Compare two secrets in constant time. Both sides are hashed first so neither the length nor the
 * position of the first differing byte leaks through timing.
 */
export function equalSecrets(given: string | Buffer | undefined, expected: string): boolean {
  if (given === undefined) return false;
  const a = createHash('sha256').update(given).digest();
  const b = createHash('sha256').update(expected).digest();
  return timingSafeEqual(a, b);
}

const PUBLISH_KINDS = new Set<string>(AGENT_PUBLISH_KINDS);
const AGENTS_PREFIX = agentTopic('', 'status').slice(0, -'/status'.length);

/** The kind of `topic` when it is one `agentId` may publish on (`<root>/agents/<agentId>/<kind>`), else null. */
export function agentPublishKind(agentId: string, topic: string): AgentTopicKind | null {
  const own = `${AGENTS_PREFIX}${agentId}/`;
  if (!topic.startsWith(own) || !AGENT_ID_RE.test(agentId)) return null;
  const kind = topic.slice(own.length);
  return PUBLISH_KINDS.has(kind) ? (kind as AgentTopicKind) : null;
}

/** True when `agentId` may publish on `topic` (checked per message). */
export const mayAgentPublish = (agentId: string, topic: string): boolean =>
  agentPublishKind(agentId, topic) !== null;

/** Why the broker refuses an agent's publish: not its topic, too large, retained outside its status. */
export type PublishRefusal = 'topic' | 'too-large' | 'retained';
export type AgentPublishVerdict = { ok: true } | { ok: false; reason: PublishRefusal };

/**
 * Check one publish of `agentId` (its Will included): its own topics only, a payload of at most
 * `agentPayloadLimit` (16 MiB on `events`, 65,535 bytes elsewhere), and the retain flag on
 * its own `status` only. PROTOCOL retains the birth alone; a broker keeps every retained message in
 * memory for good, so a retained report or request would be a way to fill it (and would replay to every
 * control plane that subscribes); the birth itself is a few kB.
 */
export function checkAgentPublish(
  agentId: string,
  packet: { topic: string; payload: Buffer | string; retain: boolean },
): AgentPublishVerdict {
  const kind = agentPublishKind(agentId, packet.topic);
  if (kind === null) return { ok: false, reason: 'topic' };
  if (Buffer.byteLength(packet.payload) > agentPayloadLimit(kind)) return { ok: false, reason: 'too-large' };
  if (packet.retain && kind !== 'status') return { ok: false, reason: 'retained' };
  return { ok: true };
}

/**
 * True when `agentId` may subscribe with `filter`: its own inbox, or any filter that starts with the
 * literal broadcast prefix (such a filter can only ever match broadcast topics).
 */
export function mayAgentSubscribe(agentId: string, filter: string): boolean {
  if (!AGENT_ID_RE.test(agentId)) return false;
  if (filter === agentTopic(agentId, 'inbox')) return true;
  return filter.startsWith(BROADCAST_PREFIX);
}
