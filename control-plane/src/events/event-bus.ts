import { EventEmitter } from 'node:events';
import type { EventPayload } from '@ffleet/shared';

/** In-process fan-out of committed events (SSE clients, the work hint, the webhook dispatcher wake-up). */
export class EventBus {
  readonly #emitter = new EventEmitter();

  constructor() {
    // One listener per SSE client; the default of 10 would warn at the 11th browser tab.
    this.#emitter.setMaxListeners(0);
  }

  publish(payload: EventPayload): void {
    this.#emitter.emit('event', payload);
  }

  subscribe(listener: (payload: EventPayload) => void): () => void {
    this.#emitter.on('event', listener);
    return () => this.#emitter.off('event', listener);
  }

  /** A commit wrote webhook deliveries (the dispatcher's wake-up; most events write none). */
  deliveriesWritten(): void {
    this.#emitter.emit('deliveries');
  }

  onDeliveries(listener: () => void): () => void {
    this.#emitter.on('deliveries', listener);
    return () => this.#emitter.off('deliveries', listener);
  }
}
