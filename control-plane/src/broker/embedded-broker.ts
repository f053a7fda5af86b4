import { createServer, type Server, type Socket } from 'node:net';
import { AGENT_ID_RE, agentPayloadLimit } from '@ffleet/shared';
import { Aedes, type AedesPublishPacket, type AuthenticateError, type Client } from 'aedes';
import type { Logger } from 'pino';
import { AGENT_TOKEN_PREFIX, agentTokenFor } from '../agent-token.ts';
import { OncePer } from '../scheduler/once-per.ts';
import {
  agentPublishKind,
  checkAgentPublish,
  equalSecrets,
  mayAgentSubscribe,
  type PublishRefusal,
} from './broker-acl.ts';
import { capPacketSize, MQTT_MAX_CONNECT_PACKET_BYTES, MQTT_MAX_PACKET_BYTES } from './packet-size-cap.ts';

export interface EmbeddedBrokerOptions {
  /** TCP port; 0 picks a free one (see the result of `start()`). */
  port: number;
  /** Interface to bind; default all interfaces, so remote agents can connect. */
  host?: string;
  /** The fleet's agent token: an agent's own token is derived from it (agentTokenFor). */
  agentToken: string;
  /**
   * `shared` (default): an agent logs in with the fleet token or its own token; `per-agent`: with its
   * own token only, so a box's token cannot log in under another agent's name (FFLEET_AGENT_AUTH).
   */
  agentAuth?: 'shared' | 'per-agent';
  /**
   * The current generation of agents' own tokens, by name (agent_credentials; a name not in it is at 0):
   * only that generation's token logs the name in. Changed while running with setTokenGeneration.
   */
  tokenGenerations?: ReadonlyMap<string, number>;
  /** Username of the control plane's own client, which has all rights. */
  internalUser: string;
  internalToken: string;
  logger: Logger;
  /** Connections waiting to log in, in all and from one address (loopback exempt); default {@link MAX_PENDING_CONNECTIONS}, {@link MAX_PENDING_PER_ADDRESS}. */
  maxPending?: { total: number; perAddress: number };
}

/** What the control plane receives from agents: topic, payload, and whether it was a retained message. */
export type LocalMessageHandler = (topic: string, payload: Buffer, retained: boolean) => void;

/**
 * The embedded broker as the control plane in the same process uses it: subscriptions and publishes
 * straight on aedes, without an MQTT client connection (see {@link EmbeddedBroker.localLink}).
 */
export interface LocalBrokerLink {
  /**
   * Receive what is published on `topics` (MQTT filters), then the retained messages matching them (as
   * a new subscriber would). Resolves, once subscribed, with the function that ends the subscriptions.
   */
  subscribe(topics: readonly string[], onMessage: LocalMessageHandler): Promise<() => Promise<void>>;
  /** Publish as the broker itself (no ACL applies). Resolves once subscribers have it, as a PUBACK would. */
  publish(topic: string, payload: string, qos: 0 | 1): Promise<void>;
  /** Resolves when the broker stops: the link is dead from then on (publishes reject). */
  readonly closed: Promise<void>;
}

/** CONNACK return code 4: bad user name or password (MQTT 3.1.1 §3.2.2.3). */
const BAD_CREDENTIALS = 4;
/** A stuck subscriber must not stall delivery to everyone else (aedes' concurrency slots). */
const DRAIN_TIMEOUT_MS = 30_000;
/**
 * Connections that have not logged in yet, from one address and in all. Each may hold up to
 * MQTT_MAX_CONNECT_PACKET_BYTES and a file descriptor until CONNECT_TIMEOUT_MS, and anyone who reaches
 * the port can open them: 6,000 half-sent CONNECTs held 300 MB, 20,000 idle sockets every descriptor
 * the process had (the API then failed too). A fleet reconnecting at once (a broker restart) has one
 * pending connection per box, each for milliseconds. Loopback addresses have no limit of their own
 * (agents on the control plane's host, simulated fleets); the total applies to them too.
 */
export const MAX_PENDING_CONNECTIONS = 1_000;
export const MAX_PENDING_PER_ADDRESS = 16;
/** How long a connection may take to log in (aedes' default: 30 s). An agent sends CONNECT at once. */
const CONNECT_TIMEOUT_MS = 10_000;

/**
 * The MQTT broker built into the control plane (aedes over a plain TCP server) for single-host
 * installs. Authenticates agents by name + token (the fleet's, or the agent's own) and confines each to its own topics, to
 * payloads of at most `MQTT_MAX_PAYLOAD_BYTES` (`MQTT_MAX_STATUS_BYTES` on its status) and to retaining its `status` only; the internal user
 * (the control plane) may do anything. State is in memory: a restart drops sessions and
 * retained births, which agents restore by republishing on reconnect.
 */
export class EmbeddedBroker {
  private readonly opts: EmbeddedBrokerOptions;
  private readonly logger: Logger;
  private aedes: Aedes | null = null;
  private server: Server | null = null;
  private readonly sockets = new Set<Socket>();
  /** Refused logins are logged once a minute per user name, client id and reason (agents retry with backoff). */
  private readonly refusalsLogged = new OncePer(60_000);
  /** Clients that authenticated as the internal user (by object, since their client id is free). */
  private internalClients = new WeakSet<Client>();
  /**
   * Connections that have not logged in yet, with their address: they may send packets of at most
   * MQTT_MAX_CONNECT_PACKET_BYTES, and only so many of them may wait.
   */
  private readonly pending = new Map<Client, string>();
  private readonly pendingByAddress = new Map<string, number>();
  /**
   * Agents' clients that logged in with their own token (not the fleet's), with its generation: a newer
   * generation ends them (setTokenGeneration, and the `client` event for one registered just after).
   */
  private ownTokenClients = new WeakMap<Client, number>();
  /** See EmbeddedBrokerOptions.tokenGenerations. */
  private readonly generations: Map<string, number>;
  /** The packet size cap could not be installed, and that was logged (see capPacketSize). */
  private warnedUncapped = false;
  /** Ends the local links handed out since the last start (see localLink). */
  private readonly closeLinks = new Set<() => void>();

  constructor(opts: EmbeddedBrokerOptions) {
    this.opts = opts;
    this.logger = opts.logger.child({ component: 'broker' });
    this.generations = new Map(opts.tokenGenerations ?? []);
  }

  /** The generation of `agentName`'s own token that logs it in now. */
  tokenGeneration(agentName: string): number {
    return this.generations.get(agentName) ?? 0;
  }

  /**
   * From now on only `generation`'s own token logs `agentName` in (agentTokenFor), the ones before it are
   * revoked: a client of that name connected with an older own token is disconnected (its reconnect is
   * refused, code 4). One logged in with the fleet token (FFLEET_AGENT_AUTH=shared) stays. A generation
   * not above the current one changes nothing. Returns whether a client was disconnected.
   */
  setTokenGeneration(agentName: string, generation: number): boolean {
    // Never backwards: two rotations whose statements commit in one order may be told in the other.
    if (generation <= (this.generations.get(agentName) ?? 0)) return false;
    this.generations.set(agentName, generation);
    // aedes' registry of connected clients by id (not in its type definitions).
    const client = (this.aedes as unknown as { clients: Record<string, Client | undefined> } | null)?.clients[
      agentName
    ];
    return client !== undefined && this.closeIfRevoked(client);
  }

  /** Close an agent's client whose own token is of an older generation than its name's; true if closed. */
  private closeIfRevoked(client: Client): boolean {
    const had = this.ownTokenClients.get(client);
    const current = this.generations.get(client.id) ?? 0;
    if (had === undefined || had >= current) return false;
    this.logger.warn(
      { agent: client.id, generation: current },
      'agent disconnected: its own token was replaced (it logs in again only with the new one)',
    );
    client.close();
    return true;
  }

  /** Listen; resolves with the bound port. Rejects with a readable Error when the port is taken. */
  async start(): Promise<{ port: number }> {
    if (this.server) throw new Error('EmbeddedBroker already started');
    const aedes = await Aedes.createBroker({
      drainTimeout: DRAIN_TIMEOUT_MS,
      connectTimeout: CONNECT_TIMEOUT_MS,
    });
    this.internalClients = new WeakSet();
    this.ownTokenClients = new WeakMap();
    aedes.authenticate = (client, username, password, done) =>
      this.authenticate(client, username, password, done);
    aedes.authorizePublish = (client, packet, done) => {
      // client is null only for a Will left by a client that already went away; it was checked then.
      if (!client || this.internalClients.has(client)) return done(null);
      const verdict = checkAgentPublish(client.id, packet);
      if (verdict.ok) return done(null);
      this.logRefusedPublish(client.id, packet, verdict.reason);
      // An error, not a silent drop: aedes sends no PUBACK and closes the connection (MQTT 3.1.1 has no
      // refusal code), so the message is neither delivered nor retained, and the agent notices.
      done(new Error('publish not allowed'));
    };
    aedes.authorizeSubscribe = (client, sub, done) => {
      if (this.internalClients.has(client) || mayAgentSubscribe(client.id, sub.topic)) return done(null, sub);
      this.logger.warn({ agent: client.id, topic: sub.topic }, 'subscribe refused by ACL');
      // Negate (SUBACK 0x80) instead of erroring, which would drop the connection: same as Mosquitto.
      done(null, null);
    };
    // A login checked just before its name's token was replaced registers after the replacement closed
    // whatever was connected: checked again once registered.
    aedes.on('client', (client) => this.closeIfRevoked(client));
    aedes.on('clientError', (client, err) =>
      this.logger.debug({ client: client.id, err: err.message }, 'client error'),
    );
    aedes.on('connectionError', (client, err) =>
      this.logger.debug({ client: client.id, err: err.message }, 'connection error'),
    );

    const server = createServer((socket) => {
      const address = socket.remoteAddress ?? '';
      if (!this.admitPending(address)) {
        socket.destroy();
        return;
      }
      // MQTT packets are small: with Nagle's algorithm one waits for the ACK of the previous one, which
      // the peer's delayed ACK holds back up to 40 ms (a claim answer sent right after a PUBACK).
      socket.setNoDelay(true);
      this.sockets.add(socket);
      const client = aedes.handle(socket);
      this.pending.set(client, address);
      socket.once('close', () => {
        this.sockets.delete(socket);
        this.settlePending(client);
      });
      this.capPacketSize(client, socket);
    });
    const { port, host } = this.opts;
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen({ port, host }, () => {
          server.off('error', reject);
          resolve();
        });
      });
    } catch (err) {
      await new Promise<void>((resolve) => aedes.close(() => resolve()));
      throw describeListenError(err, port, host);
    }
    server.on('error', (err) => this.logger.error({ err: err.message }, 'broker server error'));
    this.aedes = aedes;
    this.server = server;
    const address = server.address();
    const bound = typeof address === 'object' && address ? address.port : port;
    this.logger.info(
      { port: bound, host: host ?? '0.0.0.0', agentAuth: this.opts.agentAuth ?? 'shared' },
      'embedded MQTT broker listening',
    );
    return { port: bound };
  }

  /**
   * The control plane's own link to this broker, for a control plane in the same process: it receives
   * agents' messages from aedes' in-process subscriptions and publishes through aedes directly. An
   * MQTT client connection (even over an in-memory stream) cost each message a packet written and
   * parsed on both sides, a PUBACK each way, and aedes' session bookkeeping for that client (500
   * simulated agents on PGlite: 1.7–1.9 → 1.4–1.6 ms of control-plane CPU per claim-and-finish cycle;
   * with two agents running short transcodes, within the run-to-run spread). The broker's guarantees stay: a QoS 1
   * publish of an agent is acknowledged to it after the control plane's handler has it (aedes waits for
   * every subscriber's callback), and the inbox messages go through the broker's own delivery (QoS,
   * offline queue) exactly as before. Only valid while the broker runs; the control plane stops with it.
   */
  localLink(): LocalBrokerLink {
    const aedes = this.aedes;
    if (!aedes) throw new Error('EmbeddedBroker is not running');
    let live = true;
    const closed = new Promise<void>((resolve) =>
      this.closeLinks.add(() => {
        live = false;
        resolve();
      }),
    );
    return {
      closed,
      subscribe: (topics, onMessage) => subscribeLocal(aedes, topics, onMessage),
      publish: (topic, payload, qos) =>
        new Promise<void>((resolve, reject) => {
          if (!live) return reject(new Error('the embedded MQTT broker has stopped'));
          aedes.publish(
            { cmd: 'publish', topic, payload: Buffer.from(payload), qos, retain: false, dup: false },
            (err) => (err ? reject(err) : resolve()),
          );
        }),
    };
  }

  /** Disconnect every client and close the listener. Idempotent; start() may be called again after. */
  async stop(): Promise<void> {
    const { aedes, server } = this;
    this.aedes = null;
    this.server = null;
    for (const close of this.closeLinks) close();
    this.closeLinks.clear();
    if (!server || !aedes) return;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    await new Promise<void>((resolve) => aedes.close(() => resolve()));
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
    this.pending.clear();
    this.pendingByAddress.clear();
    await closed;
    this.logger.info('embedded MQTT broker stopped');
  }

  /** Whether a new connection from `address` may wait to log in (else it is closed at once). */
  private admitPending(address: string): boolean {
    const fromAddress = this.pendingByAddress.get(address) ?? 0;
    const { total, perAddress } = this.opts.maxPending ?? {
      total: MAX_PENDING_CONNECTIONS,
      perAddress: MAX_PENDING_PER_ADDRESS,
    };
    if (this.pending.size < total && (fromAddress < perAddress || isLoopback(address))) {
      this.pendingByAddress.set(address, fromAddress + 1);
      return true;
    }
    if (this.refusalsLogged.due(`pending\u0000${address}`))
      this.logger.warn(
        { address, pending: this.pending.size, fromAddress },
        `connection closed: too many connections waiting to log in (at most ${perAddress} from one address, ${total} in all)`,
      );
    return false;
  }

  /** `client` logged in or went away: it no longer counts as waiting. */
  private settlePending(client: Client): void {
    const address = this.pending.get(client);
    if (address === undefined) return;
    this.pending.delete(client);
    const left = (this.pendingByAddress.get(address) ?? 1) - 1;
    if (left > 0) this.pendingByAddress.set(address, left);
    else this.pendingByAddress.delete(address);
  }

  /**
   * Close the connection at the first packet over MQTT_MAX_CONNECT_PACKET_BYTES before the client has
   * logged in, over MQTT_MAX_PACKET_BYTES after, unless it is the control plane's.
   */
  private capPacketSize(client: Client, socket: Socket): void {
    const limit = () => (this.pending.has(client) ? MQTT_MAX_CONNECT_PACKET_BYTES : MQTT_MAX_PACKET_BYTES);
    const capped = capPacketSize(client, {
      maxBytes: limit,
      exempt: () => this.internalClients.has(client),
      onOversized: ({ cmd, bytes, topic }) => {
        // client.id is null until the CONNECT has been read (so for an oversized CONNECT): told once a
        // minute per address then, as anyone reaching the port can send one after another.
        const who = client.id ?? `address ${socket.remoteAddress ?? ''}`;
        if (this.refusalsLogged.due(`oversized\u0000${who}`))
          this.logger.warn(
            { client: client.id, address: socket.remoteAddress, cmd, topic, bytes, limit: limit() },
            'connection closed: MQTT packet too large',
          );
        socket.destroy();
      },
    });
    if (capped || this.warnedUncapped) return;
    this.warnedUncapped = true;
    this.logger.warn(
      'this aedes offers no way to cap MQTT packet sizes: an oversized publish is refused only once received',
    );
  }

  /** Name the agent, the topic and the size; never the payload (an agent's reports carry task output). */
  private logRefusedPublish(
    agent: string,
    packet: { topic: string; payload: Buffer | string },
    reason: PublishRefusal,
  ): void {
    const { topic } = packet;
    switch (reason) {
      case 'topic':
        this.logger.warn({ agent, topic }, 'publish refused by ACL');
        return;
      case 'too-large':
        this.logger.warn(
          {
            agent,
            topic,
            bytes: Buffer.byteLength(packet.payload),
            limit: agentPayloadLimit(agentPublishKind(agent, topic) ?? 'events'),
          },
          'publish refused: payload too large',
        );
        return;
      case 'retained':
        this.logger.warn(
          { agent, topic, bytes: Buffer.byteLength(packet.payload) },
          'publish refused: only an agent’s status may be retained',
        );
        return;
    }
  }

  private authenticate(
    client: Client,
    username: string | undefined,
    password: Buffer | undefined,
    done: (error: AuthenticateError | null, success: boolean | null) => void,
  ): void {
    if (this.isAccepted(client, username, password)) {
      this.settlePending(client);
      done(null, true);
      return;
    }
    // Never log the password; the names are what an operator needs to find the misconfigured host. A box
    // retrying with backoff is told about once a minute, not at every attempt.
    const reason = this.refusalReason(client.id, username, password);
    if (this.refusalsLogged.due(`${username}\u0000${client.id}\u0000${reason}`))
      this.logger.warn({ client: client.id, username }, `connection refused: ${reason}`);
    const err = new Error('bad username or password') as AuthenticateError;
    err.returnCode = BAD_CREDENTIALS as AuthenticateError['returnCode'];
    done(err, null);
  }

  /** What an operator should know about a refused login (never the password itself). */
  private refusalReason(
    clientId: string | null,
    username: string | undefined,
    password: Buffer | undefined,
  ): string {
    const agentName =
      username !== undefined && username !== this.opts.internalUser && AGENT_ID_RE.test(username);
    if (!agentName) return 'bad credentials';
    if (clientId !== username)
      return `the client id ${JSON.stringify(clientId)} is not the user name ${JSON.stringify(username)}: an agent logs in with its name as both`;
    const current = this.generations.get(username) ?? 0;
    const command = `ffleet agent-token ${username}${current ? ` --generation ${current}` : ''}`;
    if (this.opts.agentAuth === 'per-agent' && equalSecrets(password, this.opts.agentToken))
      return `the fleet's agent token no longer logs agents in (FFLEET_AGENT_AUTH=per-agent); give this box its own token: ${command}`;
    const older = olderGeneration(this.opts.agentToken, username, password, current);
    if (older !== null)
      return `a revoked token: ${username}'s own token of generation ${older}, replaced by generation ${current} (POST /api/v1/agents/${username}/token)`;
    if (password?.subarray(0, AGENT_TOKEN_PREFIX.length).toString() === AGENT_TOKEN_PREFIX)
      return `bad credentials: an agent's own token, but not ${username}'s under this control plane's agent token (print it with ${command} where the control plane runs, with its FFLEET_AGENT_TOKEN or data dir)`;
    return 'bad credentials';
  }

  private isAccepted(client: Client, username: string | undefined, password: Buffer | undefined): boolean {
    const { internalUser, internalToken, agentToken } = this.opts;
    if (username === internalUser) {
      // The internal user name is reserved: it never authenticates with the agent token.
      if (!equalSecrets(password, internalToken)) return false;
      this.internalClients.add(client);
      return true;
    }
    if (username === undefined || !AGENT_ID_RE.test(username) || client.id !== username) return false;
    const generation = this.generations.get(username) ?? 0;
    if (equalSecrets(password, agentTokenFor(agentToken, username, generation))) {
      this.ownTokenClients.set(client, generation);
      return true;
    }
    return this.opts.agentAuth !== 'per-agent' && equalSecrets(password, agentToken);
  }
}

/** 127.0.0.0/8 and ::1, also as IPv4-mapped IPv6 addresses. */
export const isLoopback = (address: string): boolean =>
  address === '::1' || /^(?:::ffff:)?127\./.test(address);

/**
 * Newest generations looked at to name a revoked token in the log (older ones read as bad credentials): a
 * few HMACs per refused CONNECT, which anyone reaching the port can send.
 */
const REVOKED_LOOKBACK = 5;

/** The generation below `current` whose own token `password` is (looked back REVOKED_LOOKBACK), or null. */
function olderGeneration(
  fleetToken: string,
  name: string,
  password: Buffer | undefined,
  current: number,
): number | null {
  for (let g = current - 1; g >= Math.max(0, current - REVOKED_LOOKBACK); g--)
    if (equalSecrets(password, agentTokenFor(fleetToken, name, g))) return g;
  return null;
}

async function subscribeLocal(
  aedes: Aedes,
  topics: readonly string[],
  onMessage: LocalMessageHandler,
): Promise<() => Promise<void>> {
  // A live message is never "retained" for a subscriber that already exists (MQTT 3.1.1 §3.3.1.3).
  const deliver = (packet: AedesPublishPacket, done: () => void) => {
    try {
      onMessage(packet.topic, packet.payload as Buffer, false);
    } finally {
      done();
    }
  };
  await Promise.all(topics.map((t) => new Promise<void>((resolve) => aedes.subscribe(t, deliver, resolve))));
  const { persistence } = aedes as unknown as {
    persistence: {
      createRetainedStreamCombi(
        patterns: string[],
      ): AsyncIterable<{ topic: string; payload: Buffer | string }>;
    };
  };
  for await (const p of persistence.createRetainedStreamCombi([...topics]))
    onMessage(p.topic, Buffer.isBuffer(p.payload) ? p.payload : Buffer.from(p.payload), true);
  return () =>
    Promise.all(
      topics.map((t) => new Promise<void>((resolve) => aedes.unsubscribe(t, deliver, resolve))),
    ).then(() => undefined);
}

function describeListenError(err: unknown, port: number, host: string | undefined): Error {
  const code = (err as NodeJS.ErrnoException).code;
  const where = `${host ?? '0.0.0.0'}:${port}`;
  if (code === 'EADDRINUSE') {
    return new Error(
      `MQTT port ${port} is already in use (${where}). Set MQTT_PORT to a free port, ` +
        'or set MQTT_URL to use an external broker instead of the embedded one.',
    );
  }
  if (code === 'EACCES') {
    return new Error(
      `Not allowed to listen on MQTT port ${port} (${where}). Set MQTT_PORT to a port above 1024.`,
    );
  }
  return new Error(`Could not start the MQTT broker on ${where}: ${(err as Error).message}`);
}
