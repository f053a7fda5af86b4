/**
 * Test support (not used in production): real brokers for transport tests, so each suite can run the
 * same scenarios against the embedded aedes broker and against a private Mosquitto.
 */

import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { connect, createServer, type Socket } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { type AgentBirth, PROTOCOL_VERSION } from '@ffleet/shared';
import { connectAsync, type ErrorWithReasonCode, type MqttClient } from 'mqtt';
import pino from 'pino';
import { EmbeddedBroker, type LocalBrokerLink } from './embedded-broker.ts';
import { writeMosquittoConfig } from './mosquitto-config.ts';
import { isMosquittoAvailable, MosquittoProcess } from './mosquitto-process.ts';

export interface TestBroker {
  kind: 'aedes' | 'mosquitto';
  url: string;
  port: number;
  agentToken: string;
  internalUser: string;
  internalToken: string;
  /** Stop the broker (all sessions and retained messages are lost: both run without persistence). */
  stop(): Promise<void>;
  /** Start it again on the same port. */
  start(): Promise<void>;
  /** Stop it and remove its files. Idempotent. */
  dispose(): Promise<void>;
  /** aedes only: the running broker's link for a control plane in the same process. */
  localLink?: () => LocalBrokerLink;
}

/** Agent names a test may use; Mosquitto needs every user in its password file up front. */
export const TEST_AGENT_NAMES = Array.from({ length: 32 }, (_, i) => `agent-${i}`);
const AGENT_TOKEN = 'agent-secret-token';
const INTERNAL_USER = 'ffleet-control-plane';
const INTERNAL_TOKEN = 'internal-secret-token';

/** A TCP port that was free a moment ago. */
export function findFreePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const addr = s.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      s.close(() => resolve(port));
    });
  });
}

export async function startAedesTestBroker(): Promise<TestBroker> {
  const make = (port: number) =>
    new EmbeddedBroker({
      port,
      host: '127.0.0.1',
      agentToken: AGENT_TOKEN,
      internalUser: INTERNAL_USER,
      internalToken: INTERNAL_TOKEN,
      logger: pino({ level: 'silent' }),
    });
  let broker = make(0);
  const { port } = await broker.start();
  return {
    kind: 'aedes',
    url: `mqtt://127.0.0.1:${port}`,
    port,
    agentToken: AGENT_TOKEN,
    internalUser: INTERNAL_USER,
    internalToken: INTERNAL_TOKEN,
    stop: () => broker.stop(),
    start: async () => {
      broker = make(port);
      await broker.start();
    },
    dispose: () => broker.stop(),
    localLink: () => broker.localLink(),
  };
}

export async function startMosquittoTestBroker(): Promise<TestBroker> {
  const dir = await mkdtemp(join(tmpdir(), 'ffleet-mosquitto-'));
  const port = await findFreePort();
  const written = await writeMosquittoConfig({
    dir,
    port,
    agents: TEST_AGENT_NAMES.map((username) => ({ username, password: AGENT_TOKEN })),
    internal: { username: INTERNAL_USER, password: INTERNAL_TOKEN },
    // Under root, Mosquitto would drop to `mosquitto`, which cannot read our private temp dir.
    runAsUser: process.getuid?.() === 0 ? userInfo().username : undefined,
  });
  let proc: MosquittoProcess | null = null;
  const start = async () => {
    if (!written.ok) throw new Error(written.error);
    proc = new MosquittoProcess({ confPath: written.confPath, port });
    const r = await proc.start();
    if (!r.ok) throw new Error(r.error);
  };
  try {
    await start();
  } catch (err) {
    // The caller never gets a handle to dispose of, so clean up here.
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
  const stop = async () => {
    await proc?.stop();
  };
  return {
    kind: 'mosquitto',
    url: `mqtt://127.0.0.1:${port}`,
    port,
    agentToken: AGENT_TOKEN,
    internalUser: INTERNAL_USER,
    internalToken: INTERNAL_TOKEN,
    stop,
    start,
    dispose: async () => {
      await stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** The brokers every transport suite runs against: aedes always, Mosquitto when installed. */
export const TEST_BROKER_KINDS: Array<{ kind: TestBroker['kind']; start: () => Promise<TestBroker> }> = [
  { kind: 'aedes', start: startAedesTestBroker },
  ...(isMosquittoAvailable() ? [{ kind: 'mosquitto' as const, start: startMosquittoTestBroker }] : []),
];

/** Resolve once `check()` is true; reject after `timeoutMs` with `what` in the message. */
export async function waitFor(check: () => boolean, what: string, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

export interface LogRecord {
  level: number;
  msg: string;
  [field: string]: unknown;
}

/** A pino logger whose records land in an array the test can inspect. */
export function captureLogger(level: pino.Level = 'debug'): { logger: pino.Logger; records: LogRecord[] } {
  const records: LogRecord[] = [];
  const stream = new Writable({
    write(chunk, _enc, cb) {
      records.push(JSON.parse(String(chunk)) as LogRecord);
      cb();
    },
  });
  return { logger: pino({ level }, stream), records };
}

export type RawConnectResult =
  | { ok: true; client: MqttClient }
  | { ok: false; code: number | undefined; error: string };

/** A plain mqtt.js client (no reconnects) for poking at the broker directly. */
export async function connectRaw(
  url: string,
  opts: {
    username: string;
    password: string;
    clientId?: string;
    clean?: boolean;
    will?: { topic: string; payload: Buffer; retain: boolean };
  },
): Promise<RawConnectResult> {
  try {
    const client = await connectAsync(url, {
      username: opts.username,
      password: opts.password,
      clientId: opts.clientId ?? opts.username,
      clean: opts.clean ?? true,
      ...(opts.will ? { will: { ...opts.will, qos: 1 as const } } : {}),
      protocolVersion: 4,
      reconnectPeriod: 0,
      connectTimeout: 5_000,
    });
    return { ok: true, client };
  } catch (err) {
    return { ok: false, code: (err as ErrorWithReasonCode).code, error: (err as Error).message };
  }
}

/**
 * A bare TCP connection logged in as `username` (MQTT 3.1.1 CONNECT written by hand, CONNACK 0 awaited),
 * for writing packets no MQTT client library would send.
 */
export async function connectSocket(port: number, username: string, password: string): Promise<Socket> {
  const text = (s: string) => {
    const b = Buffer.from(s);
    return Buffer.concat([u16(b.length), b]);
  };
  // Protocol name and level 4, flags: user name + password + clean session; keep-alive 60 s.
  const body = Buffer.concat([
    text('MQTT'),
    Buffer.from([4, 0xc2, 0, 60]),
    text(username),
    text(username),
    text(password),
  ]);
  const socket = connect({ port, host: '127.0.0.1' });
  socket.on('error', () => {}); // a refused write after the broker hung up is what tests look for
  await once(socket, 'connect');
  socket.write(Buffer.concat([Buffer.from([0x10]), remainingLength(body.length), body]));
  const [connack] = (await once(socket, 'data')) as [Buffer];
  if (connack[0] !== 0x20 || connack[3] !== 0) {
    socket.destroy();
    throw new Error(`CONNECT of ${username} refused: ${connack.toString('hex')}`);
  }
  return socket;
}

/**
 * Write a QoS 0 PUBLISH on `topic` announcing `announced` bytes (the MQTT maximum unless given), then
 * zeros, until the broker closes the connection or `sendAtMost` bytes are written. `closed` says whether
 * it closed (waiting up to 5 s after the last write); `sent` counts what was written before.
 */
export async function streamOversizedPublish(
  socket: Socket,
  topic: string,
  sendAtMost: number,
  announced = 268_435_455,
): Promise<{ closed: boolean; sent: number }> {
  const name = Buffer.from(topic);
  const head = Buffer.concat([Buffer.from([0x30]), remainingLength(announced), u16(name.length), name]);
  return streamAfter(socket, head, sendAtMost, 1024 * 1024);
}

/**
 * Open a connection to `port` and write a CONNECT announcing `announced` bytes, then zeros in 16 KiB
 * writes, as {@link streamOversizedPublish} does: a client that never logs in.
 */
export async function streamOversizedConnect(
  port: number,
  announced: number,
  sendAtMost: number,
): Promise<{ closed: boolean; sent: number }> {
  const socket = connect({ port, host: '127.0.0.1' });
  socket.on('error', () => {}); // a refused write after the broker hung up is what tests look for
  await once(socket, 'connect');
  const head = Buffer.concat([Buffer.from([0x10]), remainingLength(announced)]);
  return streamAfter(socket, head, sendAtMost, 16 * 1024);
}

async function streamAfter(
  socket: Socket,
  head: Buffer,
  sendAtMost: number,
  chunkBytes: number,
): Promise<{ closed: boolean; sent: number }> {
  let closed = socket.destroyed;
  const gone = new Promise<void>((resolve) => socket.once('close', () => resolve())).then(() => {
    closed = true;
  });
  socket.write(head);
  const chunk = Buffer.alloc(chunkBytes);
  let sent = 0;
  while (!closed && sent < sendAtMost) {
    const more = socket.write(chunk);
    sent += chunk.length;
    if (!more) await Promise.race([once(socket, 'drain').catch(() => {}), gone]);
  }
  await Promise.race([gone, new Promise((r) => setTimeout(r, 5_000))]);
  socket.destroy();
  return { closed, sent };
}

/** An MQTT 3.1.1 QoS 1 PUBLISH packet, for tests that write to a broker's or a client's socket directly. */
export function qos1PublishPacket(topic: string, payload: string, packetId: number): Buffer {
  const t = Buffer.from(topic);
  const body = Buffer.concat([u16(t.length), t, u16(packetId), Buffer.from(payload)]);
  return Buffer.concat([Buffer.from([0x32]), remainingLength(body.length), body]);
}

function u16(n: number): Buffer {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(n);
  return b;
}

/** MQTT's variable byte integer. */
function remainingLength(n: number): Buffer {
  const bytes: number[] = [];
  do {
    let byte = n % 128;
    n = Math.floor(n / 128);
    if (n > 0) byte |= 0x80;
    bytes.push(byte);
  } while (n > 0);
  return Buffer.from(bytes);
}

/** A valid online birth for `name` (an agent with ffmpeg and libx264, two slots). */
export function sampleBirth(name: string): AgentBirth {
  return {
    state: 'online',
    bootId: 'boot-1',
    name,
    version: '0.1.0',
    protocol: PROTOCOL_VERSION,
    hostname: 'host',
    os: 'linux',
    arch: 'x64',
    transcoder: { path: '/usr/bin/ffmpeg', version: '5.1' },
    encoders: ['libx264'],
    hwaccels: [],
    labels: [],
    slots: 2,
    ts: 1,
  };
}
