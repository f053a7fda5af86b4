/**
 * A minimal client for ffleet's `GET /api/v1/events` SSE stream, for benches that need the moment an
 * event left the control plane (the stream writes after the transaction that caused it committed).
 */

/** One SSE message: its event name, parsed JSON data, and the wall-clock ms it arrived here. */
export type SseEvent = {
  event: string;
  data: { event: string; data: Record<string, unknown> };
  receivedAt: number;
};

export class SseClient {
  readonly #url: string;
  readonly #onEvent: (e: SseEvent) => void;
  #abort: AbortController | null = null;
  #reading: Promise<void> | null = null;

  constructor(url: string, onEvent: (e: SseEvent) => void) {
    this.#url = url;
    this.#onEvent = onEvent;
  }

  /** Connect; resolves once the server's `ready` message arrived (so no later event is missed). */
  async start(): Promise<void> {
    if (this.#abort) return;
    this.#abort = new AbortController();
    const res = await fetch(this.#url, {
      signal: this.#abort.signal,
      headers: { accept: 'text/event-stream' },
    });
    if (!res.ok || !res.body) throw new Error(`SSE ${this.#url} → ${res.status}`);
    let ready!: () => void;
    const isReady = new Promise<void>((r) => {
      ready = r;
    });
    this.#reading = this.#read(res.body, ready).catch((err: unknown) => {
      if ((err as Error).name !== 'AbortError') console.error('SSE stream failed:', err);
    });
    await isReady;
  }

  async #read(body: ReadableStream<Uint8Array>, ready: () => void): Promise<void> {
    const decoder = new TextDecoder();
    let buf = '';
    for await (const chunk of body) {
      const receivedAt = performance.timeOrigin + performance.now();
      buf += decoder.decode(chunk, { stream: true });
      let end = buf.indexOf('\n\n');
      while (end >= 0) {
        const block = buf.slice(0, end);
        buf = buf.slice(end + 2);
        end = buf.indexOf('\n\n');
        let event = 'message';
        const data: string[] = [];
        for (const line of block.split('\n')) {
          if (line.startsWith('event:')) event = line.slice(6).trim();
          else if (line.startsWith('data:')) data.push(line.slice(5).trimStart());
        }
        if (event === 'ready') {
          ready();
          continue;
        }
        if (data.length === 0) continue; // keepalive comment
        this.#onEvent({ event, data: JSON.parse(data.join('\n')) as SseEvent['data'], receivedAt });
      }
    }
  }

  /** Close the stream; idempotent. */
  async stop(): Promise<void> {
    this.#abort?.abort();
    await this.#reading;
  }
}
