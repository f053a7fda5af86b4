import { MQTT_MAX_PAYLOAD_BYTES, MQTT_MAX_STATUS_BYTES } from '@ffleet/shared';
import type { Client } from 'aedes';

/**
 * The largest MQTT packet ffleet's brokers accept, in bytes: the largest payload plus room for the
 * rest of a PUBLISH — an ffleet topic (127 bytes at most: a 100-character agent id), its length, the
 * packet id, the fixed header, MQTT 5 properties should a client send any. The embedded broker compares
 * a packet's remaining length with it, Mosquitto the whole packet (`max_packet_size`): a few bytes
 * apart. So a payload slightly over the limit still gets through Mosquitto; the embedded broker
 * refuses it as a publish (see `checkAgentPublish`).
 */
export const MQTT_MAX_PACKET_BYTES = MQTT_MAX_PAYLOAD_BYTES + 4 * 1024;

/**
 * The largest packet the embedded broker reads from a client that has not logged in yet: a CONNECT,
 * whose Will (an agent's offline birth) is at most {@link MQTT_MAX_STATUS_BYTES}, plus its client id,
 * user name, token and Will topic. Anyone who can reach the port can send one, so it is read with a
 * small buffer: 16 MiB per connection let forty half-sent CONNECTs hold 640 MB of the control plane.
 */
export const MQTT_MAX_CONNECT_PACKET_BYTES = MQTT_MAX_STATUS_BYTES + 4 * 1024;

/** What the cap saw of a packet it refused (never any of its payload). */
export interface OversizedPacket {
  /** MQTT packet type (`publish`, `connect`, …). */
  cmd: string | undefined;
  /** Its remaining length as announced in its fixed header. */
  bytes: number;
  /** A PUBLISH's topic, when it arrived with the header (cut to {@link TOPIC_SHOWN_BYTES}). */
  topic: string | undefined;
}

/** Bytes of a topic written to the log at most: the client chooses it. */
const TOPIC_SHOWN_BYTES = 256;

/** The parts of mqtt-packet's parser (9.x) the cap reads; `parse` is its public entry point. */
interface ParserInternals {
  parse(buf: Buffer): number;
  packet: { cmd?: string; length: number };
  _list?: { length: number; readUInt16BE(offset: number): number; slice(start: number, end: number): Buffer };
}

export interface PacketSizeCapOptions {
  /** The cap, read at each packet (it may grow once the client has logged in). */
  maxBytes: () => number;
  /** Checked when a packet is too large: true lets it through (the control plane's own client). */
  exempt: () => boolean;
  /** Called once, for the first packet over the cap; the caller closes the connection. */
  onOversized: (packet: OversizedPacket) => void;
}

/**
 * Make aedes' parser of `client` stop at a packet that announces more than `opts.maxBytes`, as soon as
 * the packet's length has arrived. Left alone, the parser buffers every packet whole before anyone
 * sees it, whatever its size (up to MQTT's 256 MiB), and a CONNECT's Will arrives before the client
 * has authenticated: a check in `authorizePublish` alone leaves that memory to any client that can
 * reach the port. aedes 1.2 has no option for it and passes no options to mqtt-packet, so this wraps
 * the parser's `parse` on the client (aedes' `_parser`, reached after `aedes.handle`): one comparison
 * per read. Returns false, wrapping nothing, when the parser is not where this expects it (another
 * aedes): then only the publish check applies.
 */
export function capPacketSize(client: Client, opts: PacketSizeCapOptions): boolean {
  const parser = (client as unknown as { _parser?: Partial<ParserInternals> })._parser;
  if (!parser || typeof parser.parse !== 'function' || typeof parser.packet?.length !== 'number')
    return false;
  const target = parser as ParserInternals;
  const parse = target.parse.bind(target);
  let refused = false;
  target.parse = (buf) => {
    // Whatever still arrives on a connection being closed is not parsed (nor kept).
    if (refused) return 0;
    const left = parse(buf);
    // A packet still being read (its length known, its body not all here) stays in `packet`.
    const { cmd, length } = target.packet;
    if (length > opts.maxBytes() && !opts.exempt()) {
      refused = true;
      opts.onOversized({ cmd, bytes: length, topic: cmd === 'publish' ? peekTopic(target) : undefined });
    }
    return left;
  };
  return true;
}

/** The topic at the head of a PUBLISH's buffered body, when it is all there. */
function peekTopic(parser: ParserInternals): string | undefined {
  const list = parser._list;
  if (!list || typeof list.readUInt16BE !== 'function' || list.length < 2) return undefined;
  const size = list.readUInt16BE(0);
  if (list.length < 2 + size) return undefined;
  return list.slice(2, 2 + Math.min(size, TOPIC_SHOWN_BYTES)).toString('utf8');
}
