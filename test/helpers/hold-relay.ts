/**
 * A TCP relay in front of a broker that can hold what the broker sends to its clients: once armed
 * with `holdAfterNext(bytes)`, the next time a client sends those bytes everything coming back to the
 * clients is kept until `release()`. Used to stop time between "the control plane answered" and "the
 * agent heard it".
 */
import { createConnection, createServer, type Socket } from 'node:net';

export type HoldRelay = {
  url: string;
  /** Hold from the next time a client sends `bytes`; resolves when it did (the hold has started). */
  holdAfterNext(bytes: string): Promise<void>;
  /** Hold what the broker sends from now on. */
  holdDown(): void;
  /** Deliver what was held from the broker (in one write per client) and stop holding. */
  release(): void;
  /** Hold what the clients send to the broker from now on (their heartbeats, reports, claims). */
  holdUp(): void;
  /** Deliver what the clients sent meanwhile and stop holding it. */
  releaseUp(): void;
  close(): Promise<void>;
};

export async function holdRelay(brokerUrl: string): Promise<HoldRelay> {
  const { hostname, port } = new URL(brokerUrl);
  const sockets = new Set<Socket>();
  const releases: Array<() => void> = [];
  const releasesUp: Array<() => void> = [];
  let holding = false;
  let holdingUp = false;
  let armed: { bytes: string; onHeld: () => void } | null = null;

  const server = createServer((client) => {
    const upstream = createConnection({ host: hostname, port: Number(port) });
    sockets.add(client).add(upstream);
    const queue: Buffer[] = [];
    const queueUp: Buffer[] = [];
    const flush = () => {
      if (queue.length) client.write(Buffer.concat(queue.splice(0)));
    };
    releases.push(flush);
    releasesUp.push(() => {
      if (queueUp.length) upstream.write(Buffer.concat(queueUp.splice(0)));
    });
    client.on('data', (chunk: Buffer) => {
      if (armed && chunk.includes(armed.bytes)) {
        holding = true;
        armed.onHeld();
        armed = null;
      }
      if (holdingUp) queueUp.push(chunk);
      else upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (holding) queue.push(chunk);
      else client.write(chunk);
    });
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('close', end).on('error', end);
    upstream.on('close', end).on('error', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const relayPort = typeof address === 'object' && address ? address.port : 0;
  return {
    url: `mqtt://127.0.0.1:${relayPort}`,
    holdAfterNext(bytes) {
      return new Promise<void>((onHeld) => {
        armed = { bytes, onHeld };
      });
    },
    holdDown() {
      holding = true;
    },
    release() {
      holding = false;
      for (const flush of releases) flush();
    },
    holdUp() {
      holdingUp = true;
    },
    releaseUp() {
      holdingUp = false;
      for (const flush of releasesUp) flush();
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
