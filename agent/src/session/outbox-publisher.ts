import { MQTT_MAX_PAYLOAD_BYTES } from '@ffleet/shared';
import type { Logger } from 'pino';
import type { Outbox, PutResult } from '../outbox/outbox.ts';

/** Publishes one message at QoS 1 on the current connection. */
export type PublishFn = (topic: string, payload: string, key: string) => void;

interface PendingSend {
  key: string;
  topic: string;
  payload: string;
  done: boolean;
  stored: boolean;
  /** Never stored nor resent (e.g. a claim): published in call order, or dropped while offline. */
  transient: boolean;
}

/**
 * Sends messages that must survive outages: each goes to the outbox, and leaves it only through
 * `acknowledge`. While connected, a message is published at once, in the order `send` was called,
 * while its write (fsync) runs: waiting for the disk first only delayed every report (a task's final
 * report, and the claim queued behind it, by 10–50 ms on a busy disk) and made nothing safer: a crash
 * before the write lands loses the entry either way, and the control plane ignores a seq it already
 * applied if the stored copy is replayed later. While offline, sends wait for their write and go out
 * in call order once online (the fsyncs run concurrently, so a later put can finish first and waits
 * for its predecessors). Replays and resends follow outbox order, so the control plane sees each
 * task's seqs in order.
 */
export class OutboxPublisher {
  private readonly outbox: Outbox;
  private readonly logger: Logger;
  private readonly publish: PublishFn;
  private readonly pending: PendingSend[] = [];
  /** Keys still in `pending` (a count, since a key may be sent twice). */
  private readonly pendingKeys = new Map<string, number>();
  private readonly sentAt = new Map<string, number>();
  /** When the newest entry the control plane acknowledged was (last) sent; see `resendStale`. */
  private newestAckedSentAt = 0;
  private lastAckAt = 0;
  private online = false;
  /** Counts disconnects (see `send`). */
  private epoch = 0;

  constructor(opts: { outbox: Outbox; logger: Logger; publish: PublishFn }) {
    this.outbox = opts.outbox;
    this.logger = opts.logger;
    this.publish = opts.publish;
  }

  /**
   * Store and publish; resolves once stored. `ok: false` means not on disk: the outbox keeps it in
   * memory (see outbox.ts, "Unsaved entries"), so it is replayed and resent like a stored entry until
   * acknowledged, and lost only if this process ends first.
   */
  async send(key: string, topic: string, payload: string): Promise<PutResult> {
    const writing = this.store(key, topic, payload);
    if (this.online && this.pending.length === 0) {
      const epoch = this.epoch;
      this.emit(key, topic, payload);
      const result = await writing;
      // The connection dropped and came back while it was written: that reconnect's replay ran before
      // it was on disk, so it was not part of it.
      if (result.ok && epoch !== this.epoch && this.online && this.outbox.has(key))
        this.emit(key, topic, payload);
      return result;
    }
    const p: PendingSend = { key, topic, payload, done: false, stored: false, transient: false };
    this.pending.push(p);
    this.pendingKeys.set(key, (this.pendingKeys.get(key) ?? 0) + 1);
    const result = await writing;
    p.done = true;
    p.stored = result.ok;
    this.drain();
    return result;
  }

  private async store(key: string, topic: string, payload: string): Promise<PutResult> {
    try {
      return await this.outbox.put(key, topic, payload);
    } catch (err) {
      return { ok: false, error: (err as Error).message };
    }
  }

  /**
   * Publish without storing, in call order behind earlier sends (a claim made as a run ends must not
   * overtake that run's final report). False when offline: nothing is sent.
   */
  sendTransient(key: string, topic: string, payload: string): boolean {
    if (!this.online) return false;
    this.pending.push({ key, topic, payload, done: true, stored: false, transient: true });
    this.pendingKeys.set(key, (this.pendingKeys.get(key) ?? 0) + 1);
    this.drain();
    return true;
  }

  /**
   * Mark the connection usable and replay every stored entry not already queued behind a pending
   * put (those go out through the queue, in order). Returns how many were replayed.
   */
  goOnline(): number {
    const n = this.replay((key) => !this.pendingKeys.has(key));
    this.online = true;
    this.drain();
    return n;
  }

  goOffline(): void {
    if (this.online) this.epoch += 1;
    this.online = false;
  }

  /**
   * Publish again what was sent more than `olderThanMs` ago and is still unacknowledged. The control
   * plane handles an agent's messages in order, so while it keeps acknowledging, only entries sent
   * before the newest acknowledged one can have been lost; later ones are just queued behind a backlog
   * there (a burst of watch.file requests), and resending them would only deepen it. When it has
   * acknowledged nothing for `olderThanMs`, everything stale goes again; `all` skips that reasoning
   * (the control plane restarted: whatever it had not acknowledged may be lost).
   */
  resendStale(olderThanMs: number, opts: { all?: boolean } = {}): number {
    if (!this.online) return 0;
    const cutoff = Date.now() - olderThanMs;
    const flowing = !opts.all && this.lastAckAt >= cutoff;
    return this.replay((key) => {
      if (this.pendingKeys.has(key)) return false;
      const at = this.sentAt.get(key) ?? 0;
      return at < cutoff && (!flowing || at < this.newestAckedSentAt);
    });
  }

  /** The control plane has it: forget the entry. */
  acknowledge(key: string): void {
    const at = this.sentAt.get(key);
    if (at !== undefined) {
      this.newestAckedSentAt = Math.max(this.newestAckedSentAt, at);
      this.lastAckAt = Date.now();
    }
    this.sentAt.delete(key);
    this.outbox
      .ack(key)
      .catch((err: Error) => this.logger.warn({ key, err: err.message }, 'outbox ack failed'));
  }

  /** Publish finished puts from the head of the queue, so they leave in call order. */
  private drain(): void {
    while (this.pending[0]?.done) {
      const p = this.pending.shift()!;
      const left = (this.pendingKeys.get(p.key) ?? 1) - 1;
      if (left > 0) this.pendingKeys.set(p.key, left);
      else this.pendingKeys.delete(p.key);
      // Offline: goOnline replays it from the outbox (which keeps even an entry the disk refused).
      if (!this.online) continue;
      if (p.transient) {
        this.publish(p.topic, p.payload, p.key);
        continue;
      }
      if (p.stored && !this.outbox.has(p.key)) continue;
      this.emit(p.key, p.topic, p.payload);
    }
  }

  private replay(include: (key: string) => boolean): number {
    let n = 0;
    for (const e of this.outbox.list()) {
      if (!include(e.key)) continue;
      if (Buffer.byteLength(e.payload) > MQTT_MAX_PAYLOAD_BYTES) {
        // Stored by an older agent: no broker takes it, and resending it would cut this agent off at
        // every reconnect. Reports are slimmed before they are stored now (oversized-report.ts).
        this.logger.error(
          { key: e.key, topic: e.topic, bytes: Buffer.byteLength(e.payload), limit: MQTT_MAX_PAYLOAD_BYTES },
          'dropping an outbox entry larger than the broker takes',
        );
        this.acknowledge(e.key);
        continue;
      }
      this.emit(e.key, e.topic, e.payload);
      n++;
    }
    return n;
  }

  private emit(key: string, topic: string, payload: string): void {
    this.sentAt.set(key, Date.now());
    this.publish(topic, payload, key);
  }
}
