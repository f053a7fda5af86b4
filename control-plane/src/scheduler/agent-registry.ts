import { randomUUID } from 'node:crypto';
import type { AgentBirth } from '@ffleet/shared';
import { and, eq, lt, sql } from 'drizzle-orm';
import type { Db } from '../db/client.ts';
import type { AgentRow } from '../db/mappers.ts';
import { agents } from '../db/schema.ts';

/** Record an agent's birth (online) or will (offline). The name is the identity: same name, same record. */
export async function recordBirth(db: Db, name: string, birth: AgentBirth, now: number): Promise<AgentRow> {
  if (birth.state === 'offline') {
    // A will from an older connection (other bootId) must not mark the live session offline.
    const [row] = await db
      .update(agents)
      .set({ online: false, shuttingDown: false, lastSeen: now })
      .where(and(eq(agents.name, name), eq(agents.bootId, birth.bootId)))
      .returning();
    if (row) return row;
    const [cur] = await db.select().from(agents).where(eq(agents.name, name));
    if (cur) return cur;
  }
  const fields = {
    online: birth.state === 'online',
    bootId: birth.bootId,
    version: birth.version,
    protocol: birth.protocol,
    hostname: birth.hostname,
    os: birth.os,
    arch: birth.arch,
    transcoder: birth.transcoder,
    transcoderError: birth.transcoderError ?? '',
    encoders: birth.encoders,
    hwaccels: birth.hwaccels,
    reportedLabels: birth.labels,
    reportedSlots: birth.slots,
    shuttingDown: birth.state === 'online' && birth.draining === true,
    lastSeen: now,
  };
  // A birth republished on the same connection (after the transcoder probe, when a drain starts) keeps
  // the time the agent connected; a new process or a return from offline starts it again.
  const connectedAt =
    birth.state === 'online'
      ? {
          connectedAt: sql`CASE WHEN ${agents.online} AND ${agents.bootId} = ${birth.bootId}
            THEN ${agents.connectedAt} ELSE ${now}::bigint END`,
        }
      : {};
  const [row] = await db
    .insert(agents)
    .values({
      id: randomUUID(),
      name,
      createdAt: now,
      ...fields,
      ...(birth.state === 'online' ? { connectedAt: now } : {}),
    })
    .onConflictDoUpdate({ target: agents.name, set: { ...fields, ...connectedAt } })
    .returning();
  return row!;
}

export async function getAgentByName(db: Db, name: string): Promise<AgentRow | null> {
  const [r] = await db.select().from(agents).where(eq(agents.name, name));
  return r ?? null;
}

export async function touchAgent(db: Db, name: string, now: number): Promise<void> {
  await db.update(agents).set({ lastSeen: now, online: true }).where(eq(agents.name, name));
}

/** At start-up nobody is known to be online until it says so (no stale `online` after a restart). */
export async function markAllOffline(db: Db): Promise<void> {
  await db.update(agents).set({ online: false }).where(eq(agents.online, true));
}

/** Agents silent for longer than `silentMs` are offline even if their will never arrived (partition). */
export async function markSilentOffline(db: Db, now: number, silentMs: number): Promise<string[]> {
  const rows = await db
    .update(agents)
    .set({ online: false })
    .where(and(eq(agents.online, true), lt(agents.lastSeen, now - silentMs)))
    .returning({ id: agents.id });
  return rows.map((r) => r.id);
}

/**
 * Agents that may scan watchfolders: online and not shutting down (an agent draining after SIGTERM has
 * stopped scanning). A paused agent still scans: pausing stops claims only.
 */
export const watchCandidates = (db: Db) =>
  db
    .select()
    .from(agents)
    .where(and(eq(agents.online, true), eq(agents.shuttingDown, false)))
    .orderBy(sql`${agents.name}`);
