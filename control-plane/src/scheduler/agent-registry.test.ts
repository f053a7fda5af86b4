import type { AgentBirth } from '@ffleet/shared';
import { describe, expect, it } from 'vitest';
import { useTestApp } from '../../../test/helpers/app.ts';
import { dbKinds } from '../../../test/helpers/db-kinds.ts';
import { sampleBirth } from '../broker/test-brokers.ts';
import { toAgent } from '../db/mappers.ts';
import { recordBirth, watchCandidates } from './agent-registry.ts';

const birth = (name: string, over: Partial<AgentBirth> = {}): AgentBirth => ({
  ...sampleBirth(name),
  ...over,
});

describe.each(dbKinds)('agent births on %s', (kind) => {
  const t = useTestApp({ kind });

  it('shows an agent that is shutting down as draining, off the watchfolder candidates, until it leaves', async () => {
    const db = t.db.db;
    const name = `drain-${kind}`;
    const up = await recordBirth(db, name, birth(name), 1_000);
    expect(toAgent(up, []).status).toBe('online');
    expect((await watchCandidates(db)).map((a) => a.name)).toContain(name);

    // The same connection republishes its birth when the drain starts: draining, same connectedAt.
    const draining = await recordBirth(db, name, birth(name, { draining: true }), 2_000);
    expect(toAgent(draining, [])).toMatchObject({ status: 'draining', paused: false, connectedAt: 1_000 });
    expect(draining.lastSeen).toBe(2_000);
    expect((await watchCandidates(db)).map((a) => a.name)).not.toContain(name);

    // Its will: offline, and no longer shutting down.
    const gone = await recordBirth(db, name, birth(name, { state: 'offline', draining: true }), 3_000);
    expect(toAgent(gone, []).status).toBe('offline');
    expect(gone.shuttingDown).toBe(false);

    // The next process is online again, connected now.
    const back = await recordBirth(db, name, birth(name, { bootId: 'boot-2' }), 4_000);
    expect(toAgent(back, [])).toMatchObject({ status: 'online', connectedAt: 4_000 });
    expect((await watchCandidates(db)).map((a) => a.name)).toContain(name);
  });

  it('starts connectedAt again for a new process that connects before the old one was seen leaving', async () => {
    const db = t.db.db;
    const name = `restart-${kind}`;
    await recordBirth(db, name, birth(name), 1_000);
    const again = await recordBirth(db, name, birth(name, { bootId: 'boot-2' }), 5_000);
    expect(again.connectedAt).toBe(5_000);
  });
});
