import { and, eq, sql } from 'drizzle-orm';
import { ConflictError } from '../api/errors.ts';
import type { Db } from '../db/client.ts';
import { idempotencyKeys } from '../db/schema.ts';

/**
 * `bodyHash` is of the body as read (http.ts `canonical`); `rawBodyHash`, of the body as sent, still
 * matches a key stored before bodies were compared as read (within its retention after an upgrade).
 */
export type IdempotencyRequest = { route: string; key: string; bodyHash: string; rawBodyHash?: string };
export type StoredResponse = { status: number; body: unknown; location: string | null };

/** Thrown inside the transaction to roll it back and answer with the first response instead. */
export class ReplayResponse extends Error {
  constructor(readonly stored: StoredResponse) {
    super('idempotent replay');
  }
}

/**
 * Claim the key inside the creating transaction. The unique index makes a concurrent duplicate wait
 * for the first transaction and then see its committed row, so one key never creates twice.
 */
export async function claimIdempotencyKey(tx: Db, req: IdempotencyRequest, now: number): Promise<void> {
  const inserted = await tx
    .insert(idempotencyKeys)
    .values({
      route: req.route,
      key: req.key,
      bodyHash: req.bodyHash,
      status: 0,
      response: sql`'null'::jsonb`,
      createdAt: now,
    })
    .onConflictDoNothing()
    .returning({ key: idempotencyKeys.key });
  if (inserted.length) return;
  const [row] = await tx
    .select()
    .from(idempotencyKeys)
    .where(and(eq(idempotencyKeys.route, req.route), eq(idempotencyKeys.key, req.key)));
  if (!row || (row.bodyHash !== req.bodyHash && row.bodyHash !== req.rawBodyHash)) {
    throw new ConflictError(
      'IDEMPOTENCY_KEY_REUSED',
      'this Idempotency-Key was already used with a different body',
    );
  }
  // Stored as JSON text (a jsonb string), so the replay has the first answer's key order; a jsonb
  // object (a key stored before) comes back with its keys in the database's order.
  const body = typeof row.response === 'string' ? (JSON.parse(row.response) as unknown) : row.response;
  throw new ReplayResponse({ status: row.status, body, location: row.location });
}

export async function storeIdempotentResponse(
  tx: Db,
  req: IdempotencyRequest,
  res: StoredResponse,
): Promise<void> {
  await tx
    .update(idempotencyKeys)
    .set({ status: res.status, response: JSON.stringify(res.body), location: res.location })
    .where(and(eq(idempotencyKeys.route, req.route), eq(idempotencyKeys.key, req.key)));
}
