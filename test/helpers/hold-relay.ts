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
  /** Deliver what was held and stop holding. */
  release(): void;
  close(): Promise<void>;
};

export async function holdRelay(brokerUrl: string): Promise<HoldRelay> {
  const { hostname, port } = new URL(brokerUrl);
  const sockets = new Set<Socket>();
  const releases: Array<() => void> = [];
  let holding = false;
  let armed: { bytes: string; onHeld: () => void } | null = null;

  const server = createServer((client) => {
    const upstream = createConnection({ host: hostname, port: Number(port) });
    sockets.add(client).add(upstream);
    const queue: Buffer[] = [];
    const flush = () => {
      for (const chunk of queue.splice(0)) client.write(chunk);
    };
    releases.push(flush);
    client.on('data', (chunk: Buffer) => {
      if (armed && chunk.includes(armed.bytes)) {
        holding = true;
        armed.onHeld();
        armed = null;
      }
      upstream.write(chunk);
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
    release() {
      holding = false;
      for (const flush of releases) flush();
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
