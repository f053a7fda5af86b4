/**
 * A TCP relay in front of a broker, for tests that need to interfere with what travels between a
 * client and the broker: each accepted client connection gets its own connection to the broker, and
 * `wire(client, broker)` decides what passes. Socket errors are swallowed (a test drops connections on
 * purpose); drop() destroys every connection and keeps listening (clients reconnect through it);
 * close() destroys every socket and stops listening.
 */
import { createConnection, createServer, type Socket } from 'node:net';

export type TcpRelay = { url: string; drop(): void; close(): Promise<void> };

export async function tcpRelay(
  broker: { host?: string; port: number },
  wire: (client: Socket, broker: Socket) => void,
  opts: { allowHalfOpen?: boolean } = {},
): Promise<TcpRelay> {
  const sockets = new Set<Socket>();
  const server = createServer({ allowHalfOpen: opts.allowHalfOpen ?? false }, (client) => {
    const upstream = createConnection({ host: broker.host ?? '127.0.0.1', port: broker.port });
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => {});
    }
    wire(client, upstream);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const relayPort = typeof address === 'object' && address ? address.port : 0;
  return {
    url: `mqtt://127.0.0.1:${relayPort}`,
    drop: () => {
      for (const s of sockets) s.destroy();
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
