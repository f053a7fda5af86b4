import type { Logger } from 'pino';
import type { Database, Db } from '../db/client.ts';
import type { EventBus } from '../events/event-bus.ts';
import { EmittedEvents } from '../events/outbox.ts';

/** Hooks the fleet (scheduler) installs so API actions reach running work. */
export type FleetHooks = {
  /** A running task must stop on its agent (cancel/delete). */
  cancelRunning(task: {
    id: string;
    agentId: string | null;
    agentName: string | null;
    attempt: number;
  }): void;
  /**
   * Claimable work exists. `requires`: the requirement lists of the tasks just queued, so the fleet
   * can say when no agent it knows could ever run them.
   */
  workAvailable(requires?: Iterable<readonly string[]>): void;
  /** Watchfolder definitions changed: recompute assignments. */
  watchfoldersChanged(): void;
  /** An agent's operator settings changed. */
  agentChanged(agentId: string): void;
};

export const noFleet: FleetHooks = {
  cancelRunning: () => {},
  workAvailable: () => {},
  watchfoldersChanged: () => {},
  agentChanged: () => {},
};

export type ServiceContext = {
  database: Database;
  bus: EventBus;
  logger: Logger;
  fleet: FleetHooks;
  now: () => number;
  /** The agent this control plane runs in its own process (FFLEET_LOCAL_AGENT), if any. */
  localAgentName?: string;
};

/** Run `fn` in one transaction; events it emits are published on the bus after the commit. */
export async function transact<T>(
  ctx: ServiceContext,
  fn: (tx: Db, ev: EmittedEvents) => Promise<T>,
): Promise<T> {
  let emitted: EmittedEvents | undefined;
  const result = await ctx.database.db.transaction(async (tx) => {
    emitted = new EmittedEvents(tx as unknown as Db, { alone: ctx.database.singleConnection });
    return fn(tx as unknown as Db, emitted);
  });
  emitted?.publish(ctx.bus);
  return result;
}
