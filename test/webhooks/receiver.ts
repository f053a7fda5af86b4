import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One request as the receiver saw it. */
export type Received = {
  /** Date.now() when the request body had fully arrived. */
  at: number;
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  /** 1-based arrival number. */
  n: number;
};

/** Decides each response; may be async, may never answer (a hanging receiver). */
export type Respond = (req: Received, res: ServerResponse) => void | Promise<void>;

const ok: Respond = (_req, res) => {
  res.writeHead(200, { 'content-type': 'text/plain' });
  res.end('ok');
};

/** A real HTTP webhook receiver on a loopback port 0; records every request. */
export class TestReceiver {
  readonly received: Received[] = [];
  respond: Respond;
  #waiters: { count: number; resolve: () => void }[] = [];
  #open = 0;
  /** Highest number of requests being answered at the same time. */
  maxConcurrent = 0;

  private constructor(
    private readonly server: Server,
    respond: Respond,
  ) {
    this.respond = respond;
  }

  /** Base URL, e.g. `http://127.0.0.1:41234`. */
  get url(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  static async start(respond: Respond = ok): Promise<TestReceiver> {
    const server = createServer();
    const r = new TestReceiver(server, respond);
    server.on('request', (req, res) => {
      const chunks: Buffer[] = [];
      r.#open++;
      r.maxConcurrent = Math.max(r.maxConcurrent, r.#open);
      res.on('close', () => r.#open--);
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const rec: Received = {
          at: Date.now(),
          path: req.url ?? '/',
          headers: req.headers,
          body: Buffer.concat(chunks).toString('utf8'),
          n: r.received.length + 1,
        };
        r.received.push(rec);
        const met = r.#waiters.filter((w) => r.received.length >= w.count);
        r.#waiters = r.#waiters.filter((w) => r.received.length < w.count);
        for (const w of met) w.resolve();
        Promise.resolve(r.respond(rec, res)).catch(() => res.destroy());
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return r;
  }

  /** Resolves once `count` requests have arrived; rejects after `timeoutMs`. */
  waitFor(count: number, timeoutMs = 10_000): Promise<void> {
    if (this.received.length >= count) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const t = setTimeout(
        () => reject(new Error(`receiver got ${this.received.length} of ${count} requests`)),
        timeoutMs,
      );
      this.#waiters.push({
        count,
        resolve: () => {
          clearTimeout(t);
          resolve();
        },
      });
    });
  }

  /** Close the server and drop every open (e.g. hanging) connection. */
  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

/** Answer with `status` for the first responses in `statuses`, then 200. */
export const statusSequence =
  (...statuses: number[]): Respond =>
  (req, res) => {
    res.writeHead(statuses[req.n - 1] ?? 200, { 'content-type': 'text/plain' });
    res.end(`attempt ${req.n}`);
  };
