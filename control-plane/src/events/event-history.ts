import type { EventPayload } from '@ffleet/shared';
import type { EventBus } from './event-bus.ts';

/** One recorded event, as an SSE message: `id`, `event`, `data` (the payload's JSON). */
export type HistoryEntry = {
  /** Position in the history: 1, 2, 3… in publish order, never reused. */
  readonly seq: number;
  readonly id: string;
  readonly event: string;
  /** `JSON.stringify(payload)` at publish time, made once and shared by the history and every client. */
  readonly data: string;
};

export type EventHistoryOptions = {
  /** Most events held (default 10,000). */
  maxEvents?: number;
  /** Most serialized data held, in UTF-16 code units of `data` (≈ bytes for JSON; default 16 Mi). */
  maxBytes?: number;
};

export const HISTORY_MAX_EVENTS = 10_000;
export const HISTORY_MAX_BYTES = 16 * 1024 * 1024;

/**
 * The recent events of the bus, so an SSE client that reconnects with `Last-Event-ID` gets what it
 * missed (GET /api/v1/events). A ring of the last `maxEvents` events and at most `maxBytes` of their
 * JSON, whichever limit is hit first; the oldest go first. Process-wide: one per bus (createApp).
 *
 * SSE clients subscribe HERE rather than to the bus: the history serializes each event once and every
 * client writes that same string (each client used to `JSON.stringify` every event itself).
 *
 * Recording starts with the first subscriber (`start()`), not at construction. `JSON.stringify` of a
 * 1.1–1.3 kB task event costs ~3.6–4.3 µs on Node 20 (measured on the dev box, warm, 200k iterations),
 * and the bus carries several events per task on the API's hot path: ~15 µs of CPU per task, for
 * nothing when nobody uses the stream (the benches, most deployments). Nothing is lost by waiting:
 * a client can only hold an event id this history could resume from if it got it from this process's
 * stream, i.e. after the first client connected. Once started it records until `stop()`, also while
 * no client is connected — that is when a reconnecting client's events are emitted.
 *
 * Payloads are only read (serialized), never mutated or retained.
 */
export class EventHistory {
  readonly maxEvents: number;
  readonly maxBytes: number;
  readonly #bus: EventBus;
  /** Entry of seq `s` at `s % maxEvents`; held seqs are `[#first, #next)`, contiguous. */
  readonly #ring: (HistoryEntry | undefined)[];
  #first = 1;
  #next = 1;
  #bytes = 0;
  readonly #listeners = new Set<(entry: HistoryEntry) => void>();
  #unsubscribe: (() => void) | null = null;

  constructor(bus: EventBus, opts: EventHistoryOptions = {}) {
    this.#bus = bus;
    this.maxEvents = opts.maxEvents ?? HISTORY_MAX_EVENTS;
    this.maxBytes = opts.maxBytes ?? HISTORY_MAX_BYTES;
    if (!Number.isInteger(this.maxEvents) || this.maxEvents < 1)
      throw new RangeError('maxEvents must be ≥ 1');
    if (!(this.maxBytes >= 0)) throw new RangeError('maxBytes must be ≥ 0');
    this.#ring = new Array(this.maxEvents);
  }

  /** Start recording the bus (idempotent; `subscribe` calls it). */
  start(): void {
    if (this.#unsubscribe) return;
    this.#unsubscribe = this.#bus.subscribe((p) => this.#record(p));
  }

  /** Stop recording and forget everything held (subscribers stay, and get nothing until `start`). */
  stop(): void {
    this.#unsubscribe?.();
    this.#unsubscribe = null;
    this.#ring.fill(undefined);
    this.#first = this.#next;
    this.#bytes = 0;
  }

  get recording(): boolean {
    return this.#unsubscribe !== null;
  }

  /** Events held. */
  get size(): number {
    return this.#next - this.#first;
  }

  /** Serialized data held (the unit of `maxBytes`). */
  get bytes(): number {
    return this.#bytes;
  }

  /**
   * Get every event recorded from now on, in order, synchronously from `publish` (recording starts if
   * it had not). Returns the unsubscribe function.
   */
  subscribe(listener: (entry: HistoryEntry) => void): () => void {
    this.#listeners.add(listener);
    this.start();
    return () => {
      this.#listeners.delete(listener);
    };
  }

  /**
   * The events recorded after the one with this id, oldest first, keeping those `keep` accepts;
   * `undefined` when that id is not held (never recorded, or evicted).
   */
  after(id: string, keep?: (entry: HistoryEntry) => boolean): HistoryEntry[] | undefined {
    // Newest first: a reconnecting client is usually only a few events behind.
    for (let seq = this.#next - 1; seq >= this.#first; seq--) {
      if (this.#at(seq).id !== id) continue;
      const out: HistoryEntry[] = [];
      for (let s = seq + 1; s < this.#next; s++) {
        const e = this.#at(s);
        if (!keep || keep(e)) out.push(e);
      }
      return out;
    }
    return undefined;
  }

  #at(seq: number): HistoryEntry {
    return this.#ring[seq % this.maxEvents]!;
  }

  #record(p: EventPayload): void {
    const entry: HistoryEntry = { seq: this.#next, id: p.id, event: p.event, data: JSON.stringify(p) };
    if (this.size === this.maxEvents) this.#evictOldest();
    this.#ring[entry.seq % this.maxEvents] = entry;
    this.#next++;
    this.#bytes += entry.data.length;
    // An event larger than maxBytes on its own is evicted at once: still sent live, never replayed.
    while (this.#bytes > this.maxBytes && this.size > 0) this.#evictOldest();
    for (const listener of this.#listeners) listener(entry);
  }

  #evictOldest(): void {
    const i = this.#first % this.maxEvents;
    this.#bytes -= this.#ring[i]!.data.length;
    this.#ring[i] = undefined;
    this.#first++;
  }
}
