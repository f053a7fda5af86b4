/** Root of every ffleet MQTT topic. */
export const TOPIC_ROOT = 'ffleet/v1';
/** Protocol version announced in the birth message. */
export const PROTOCOL_VERSION = 1;

/**
 * The longest an agent waits between two attempts to reach the broker (its reconnect backoff's cap).
 * After the control plane's own outage, an agent may take this long to be heard again.
 */
export const AGENT_RECONNECT_MAX_MS = 10_000;

/**
 * The largest MQTT payload an agent may publish, in bytes (16 MiB). Brokers refuse a larger one (the
 * embedded broker disconnects the agent; see `docs/protocol.md`), so its memory stays bounded. The
 * largest message an agent sends on its own is a task report: a patch of task fields, which come from
 * API bodies of at most `FFLEET_BODY_LIMIT` (1 MiB by default; a command travels raw and resolved), plus
 * captured output of at most one 32 KiB batch and one 64 KiB line per step — a few MB at the very worst.
 */
export const MQTT_MAX_PAYLOAD_BYTES = 16 * 1024 * 1024;

/**
 * The largest payload an agent may publish on its `status` topic (its birth, retained, and its Last
 * Will), in bytes: 65,535, the most an MQTT 3.1.1 Will can carry (a two-byte length). A broker keeps a
 * retained message in memory until it is replaced, and a Will arrives in the CONNECT, before the client
 * has logged in; a birth is a few kB (at most 100 labels of 100 characters, the transcoder's encoders
 * and hwaccels).
 */
export const MQTT_MAX_STATUS_BYTES = 65_535;

export type AgentTopicKind = 'status' | 'hello' | 'heartbeat' | 'requests' | 'events' | 'inbox';

/**
 * The largest payload an agent may publish on a topic of `kind`: {@link MQTT_MAX_PAYLOAD_BYTES} for its
 * task reports (`events`, which carry captured output), {@link MQTT_MAX_STATUS_BYTES} for the rest,
 * small by design (a birth, the tasks it runs, a claim, one watched file). A 16 MiB array of empty
 * arrays on `requests` held the control plane's event loop for 1.8 s and 750 MB while it was parsed.
 */
export const agentPayloadLimit = (kind: AgentTopicKind): number =>
  kind === 'events' || kind === 'inbox' ? MQTT_MAX_PAYLOAD_BYTES : MQTT_MAX_STATUS_BYTES;

/** `ffleet/v1/agents/{agentId}/{kind}` */
export const agentTopic = (agentId: string, kind: AgentTopicKind): string =>
  `${TOPIC_ROOT}/agents/${agentId}/${kind}`;

/** Broadcast hint that claimable work exists (cp → agents, QoS 0). */
export const WORK_TOPIC = `${TOPIC_ROOT}/broadcast/work`;

/**
 * Broadcast by the control plane each time it (re)subscribes: agents republish their birth and hello
 * and resend unacknowledged reports. Closes the gap after a broker restart where an agent reconnects
 * before the control plane has subscribed again and its birth/hello went nowhere (QoS 1).
 */
export const RESYNC_TOPIC = `${TOPIC_ROOT}/broadcast/resync`;

/** Subscription the control plane uses for everything agents publish. */
export const AGENTS_WILDCARD = `${TOPIC_ROOT}/agents/+/+`;

/** Parse an agent topic into its id and kind, or null when it is not one. */
export function parseAgentTopic(topic: string): { agentId: string; kind: AgentTopicKind } | null {
  const parts = topic.split('/');
  if (parts.length !== 5 || `${parts[0]}/${parts[1]}` !== TOPIC_ROOT || parts[2] !== 'agents') return null;
  const kind = parts[4] as AgentTopicKind;
  if (!['status', 'hello', 'heartbeat', 'requests', 'events', 'inbox'].includes(kind)) return null;
  return { agentId: parts[3]!, kind };
}

/** Agent ids are MQTT client ids and topic levels: no wildcards, separators or spaces. */
export const AGENT_ID_RE = /^[A-Za-z0-9_.-]{1,100}$/;
