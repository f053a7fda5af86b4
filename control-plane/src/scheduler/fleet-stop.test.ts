import type { AgentRequest } from '@ffleet/shared';
import { afterEach, describe, expect, it } from 'vitest';
import { openTestDatabase } from '../../../test/helpers/db.ts';
import { type LogRecord, sampleBirth, waitFor } from '../broker/test-brokers.ts';
import type { Database } from '../db/client.ts';
import { startTestFleet } from './fake-mqtt.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Step = { prop: PropertyKey; args?: unknown[] };

/**
 * A stand-in for `database.db` that records the statement built on it and runs it on `real()` only
 * once `gate` opened: a database that is slow (or never answers) for that one statement.
 */
function heldDb(real: () => unknown, gate: Promise<void>): unknown {
  const make = (steps: Step[]): unknown =>
    new Proxy(() => {}, {
      get: (_t, prop) =>
        prop === 'then'
          ? (resolve: (v: unknown) => void, reject: (e: unknown) => void) =>
              gate.then(() => replay(real(), steps)).then(resolve, reject)
          : make([...steps, { prop }]),
      apply: (_t, _this, args: unknown[]) => {
        const last = steps.at(-1);
        return make(last ? [...steps.slice(0, -1), { ...last, args }] : steps);
      },
    });
  return make([]);
}

async function replay(root: unknown, steps: Step[]): Promise<unknown> {
  let obj = root as Record<PropertyKey, unknown>;
  for (const s of steps) {
    const value = obj[s.prop];
    obj = (s.args ? (value as (...a: unknown[]) => unknown).apply(obj, s.args) : value) as typeof obj;
  }
  return await obj;
}

/**
 * The fleet's view of the test database: every statement it starts reads `database.db` (counted), and
 * `holdNext()` makes the next one wait until `release()`.
 */
function watchedDatabase(real: Database) {
  let touches = 0;
  let next: { gate: Promise<void>; open: () => void } | null = null;
  let release: (() => void) | null = null;
  const database: Database = Object.create(real);
  Object.defineProperty(database, 'db', {
    get: () => {
      touches += 1;
      if (!next) return real.db;
      const { gate } = next;
      next = null;
      return heldDb(() => real.db, gate);
    },
  });
  return {
    database,
    touches: () => touches,
    holdNext: () => {
      let open!: () => void;
      const gate = new Promise<void>((r) => {
        open = r;
      });
      next = { gate, open };
      release = open;
    },
    release: () => release?.(),
  };
}

const errors = (records: LogRecord[]) => records.filter((r) => r.level >= 50).map((r) => r.msg);

describe('Fleet.stop()', () => {
  const cleanups: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  async function startFleet(opts: { stopWaitMs?: number } = {}) {
    const real = await openTestDatabase();
    let closed = false;
    const closeDatabase = async () => {
      closed = true;
      await real.drop();
    };
    cleanups.push(async () => {
      if (!closed) await closeDatabase();
    });
    const db = watchedDatabase(real);
    const { fleet, mqtt, records } = await startTestFleet(db.database, opts);
    cleanups.push(() => fleet.stop());
    return { fleet, mqtt, db, records, closeDatabase };
  }

  const watchFile = (requestId: string): AgentRequest => ({
    type: 'watch.file',
    requestId,
    watchfolderId: '00000000-0000-4000-8000-000000000000',
    relativePath: 'a.mov',
    size: 10,
    mtimeMs: 1,
  });

  it('starts no database work for agent messages that arrive after it was called', async () => {
    const { fleet, mqtt, db, records } = await startFleet();
    await mqtt.birth('agent-0', sampleBirth('agent-0'));
    await fleet.stop();
    const touched = db.touches();
    // What the MQTT client still delivers between the fleet's stop and its own (the control plane
    // stops them in that order), e.g. the local agent's offline birth during a forced shutdown.
    await mqtt.birth('agent-0', { ...sampleBirth('agent-0'), state: 'offline' });
    await mqtt.birth('agent-1', sampleBirth('agent-1'));
    await mqtt.hello('agent-0', { bootId: 'boot-1', running: [], ts: 2 });
    const running = [{ taskId: 't1', attempt: 1, leaseToken: 'lease' }];
    await mqtt.heartbeat('agent-0', { bootId: 'boot-1', freeSlots: 1, running, ts: 2 });
    await mqtt.request('agent-0', { type: 'claim', requestId: 'c1', max: 1 });
    await mqtt.request('agent-0', watchFile('w1'));
    await mqtt.request('agent-0', {
      type: 'watch.state',
      requestId: 's1',
      watchfolderId: '00000000-0000-4000-8000-000000000000',
      lastCheck: 1,
      error: '',
    });
    await mqtt.report('agent-0', {
      kind: 'log',
      taskId: 't1',
      attempt: 1,
      leaseToken: 'lease',
      seq: 0,
      step: 'transcoder',
      text: 'x',
    });
    fleet.watchfoldersChanged();
    await fleet.assignWatchfolders();
    await sleep(50);
    expect(db.touches()).toBe(touched);
    expect(errors(records)).toEqual([]);
  });

  /** stop() while a held query runs: it must wait for that query, and end once it is released. */
  async function stopAroundHeldQuery(
    fleet: Awaited<ReturnType<typeof startFleet>>['fleet'],
    db: Awaited<ReturnType<typeof startFleet>>['db'],
  ): Promise<void> {
    let stopped = false;
    const stop = fleet.stop().then(() => {
      stopped = true;
    });
    await sleep(50);
    expect(stopped).toBe(false);
    db.release();
    await stop;
  }

  it('waits for a birth being handled, which starts no further database work', async () => {
    const { fleet, mqtt, db, records } = await startFleet();
    const before = db.touches();
    db.holdNext();
    const birth = mqtt.birth('agent-0', sampleBirth('agent-0'));
    await waitFor(() => db.touches() === before + 1, 'the birth to reach the database');
    await stopAroundHeldQuery(fleet, db);
    await birth;
    await sleep(50);
    // Only the statement that was running: no config read, no watchfolder assignment after it.
    expect(db.touches()).toBe(before + 1);
    expect(errors(records)).toEqual([]);
  });

  it("waits for a watch.file request's agent lookup, and writes nothing for it", async () => {
    const { fleet, mqtt, db, records } = await startFleet();
    await mqtt.birth('agent-0', sampleBirth('agent-0'));
    // Offline in the fleet's cache: the next lookup of this agent reads the database.
    await mqtt.birth('agent-0', { ...sampleBirth('agent-0'), state: 'offline' });
    const before = db.touches();
    db.holdNext();
    const request = mqtt.request('agent-0', watchFile('w1'));
    await waitFor(() => db.touches() > before, 'the lookup');
    await stopAroundHeldQuery(fleet, db);
    await request;
    const touched = db.touches();
    await sleep(50);
    expect(db.touches()).toBe(touched);
    expect(errors(records)).toEqual([]);
  });

  it('waits at most stopWaitMs, and work failing later on the closed database is no error', async () => {
    const { fleet, mqtt, db, records, closeDatabase } = await startFleet({ stopWaitMs: 200 });
    const before = db.touches();
    db.holdNext();
    const birth = mqtt.birth('agent-0', sampleBirth('agent-0'));
    await waitFor(() => db.touches() === before + 1, 'the birth to reach the database');
    const outcome = await Promise.race([
      fleet.stop().then(() => 'stopped'),
      sleep(3_000).then(() => 'still waiting'),
    ]);
    expect(outcome).toBe('stopped');
    expect(records.filter((r) => r.level === 40).map((r) => r.msg)).toEqual([
      'fleet work still running at stop; not waiting for it any longer',
    ]);
    // The control plane closes the database next; the held statement then fails on it.
    await closeDatabase();
    db.release();
    await birth;
    await sleep(50);
    expect(errors(records)).toEqual([]);
    // It did fail (the statement ran on the closed database): logged at debug.
    expect(records.some((r) => r.level === 20 && r.err)).toBe(true);
  });
});
