import type { EventPayload } from '@ffleet/shared';
import { type Db, execRaw, type RawStatement } from '../db/client.ts';
import {
  type EmitOptions,
  EmittedEvents,
  eventsStatement,
  type PendingEvent,
  pendingEvent,
} from '../events/outbox.ts';

/** Events written by one statement at most (bounds its parameter count: 6 per event + 2 per direct URL). */
const MAX_ROWS = 256;

/**
 * The events of a group-commit transaction: emits without a `before` statement are held and written
 * together by `flush` (before the commit, so still in the same transaction: the outbox holds), up to
 * MAX_ROWS per statement. Every cycle of an agent (claim, RUNNING, DONE) emits three task.updated
 * events; written one statement each they were half of a group's statements. An emit that carries
 * a statement (a task insert) writes the held ones first, then itself, so the order stays.
 */
export class GroupEvents extends EmittedEvents {
  readonly #db: Db;
  #pending: PendingEvent[] = [];

  constructor(tx: Db, opts: { alone?: boolean } = {}) {
    super(tx, opts);
    this.#db = tx;
  }

  override async emitMany(list: readonly EmitOptions[], before?: RawStatement): Promise<EventPayload[]> {
    if (before) {
      await this.flush();
      return super.emitMany(list, before);
    }
    return list.map((opts) => {
      const item = pendingEvent(opts);
      this.#pending.push(item);
      this.items.push(item.payload);
      return item.payload;
    });
  }

  /** Write every held event (none when no webhook receives them: `needNoStatement`). */
  async flush(): Promise<void> {
    if (this.needNoStatement(this.#pending)) this.#pending = [];
    while (this.#pending.length) {
      const chunk = this.#pending.splice(0, MAX_ROWS);
      this.deliveries += await execRaw(this.#db, eventsStatement(chunk));
    }
  }
}
