import type { InboxMessage } from '@ffleet/shared';

/** Inbox messages that answer an agent request, matched by `requestId`. */
export type RequestReply = Extract<InboxMessage, { type: 'request.result' | 'claim.result' }>;

export type AwaitResult = { ok: true; reply: RequestReply } | { ok: false; error: 'timeout' | 'stopped' };

/** A reply that arrives before anyone waits for it is kept this long (by count), then forgotten. */
const UNCLAIMED_LIMIT = 256;

interface Waiter {
  resolve: (r: AwaitResult) => void;
  timer: NodeJS.Timeout;
}

/** Matches request replies from the inbox to callers waiting for them. */
export class RequestWaiters {
  private readonly waiting = new Map<string, Waiter[]>();
  /** Replies nobody waited for yet (a reply can beat the caller to `wait`); oldest first. */
  private readonly unclaimed = new Map<string, RequestReply>();
  private closed = false;

  /** Resolve with the reply to `requestId`, or `timeout` after `timeoutMs`. */
  wait(requestId: string, timeoutMs: number): Promise<AwaitResult> {
    if (this.closed) return Promise.resolve({ ok: false, error: 'stopped' });
    const early = this.unclaimed.get(requestId);
    if (early) {
      this.unclaimed.delete(requestId);
      return Promise.resolve({ ok: true, reply: early });
    }
    return new Promise((resolve) => {
      const waiter: Waiter = {
        resolve,
        timer: setTimeout(() => {
          this.remove(requestId, waiter);
          resolve({ ok: false, error: 'timeout' });
        }, timeoutMs),
      };
      const list = this.waiting.get(requestId) ?? [];
      list.push(waiter);
      this.waiting.set(requestId, list);
    });
  }

  /** Hand a reply to its waiters, or keep it for a caller that has not started waiting yet. */
  deliver(reply: RequestReply): void {
    const list = this.waiting.get(reply.requestId);
    if (!list) {
      this.unclaimed.set(reply.requestId, reply);
      if (this.unclaimed.size > UNCLAIMED_LIMIT) {
        const oldest = this.unclaimed.keys().next().value;
        if (oldest !== undefined) this.unclaimed.delete(oldest);
      }
      return;
    }
    this.waiting.delete(reply.requestId);
    for (const w of list) {
      clearTimeout(w.timer);
      w.resolve({ ok: true, reply });
    }
  }

  /** Resolve every waiter with `stopped`. */
  close(): void {
    this.closed = true;
    for (const list of this.waiting.values()) {
      for (const w of list) {
        clearTimeout(w.timer);
        w.resolve({ ok: false, error: 'stopped' });
      }
    }
    this.waiting.clear();
    this.unclaimed.clear();
  }

  private remove(requestId: string, waiter: Waiter): void {
    const list = this.waiting.get(requestId)?.filter((w) => w !== waiter);
    if (list?.length) this.waiting.set(requestId, list);
    else this.waiting.delete(requestId);
  }
}
