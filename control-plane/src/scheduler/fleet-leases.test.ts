/**
 * Leases across the control plane's own absences: a stall (it did not run) and a reconnect (it could
 * not hear the agents). Neither may requeue a healthy agent's task, and a lost lease still expires.
 */
import { TaskCreate } from '@ffleet/shared';
import { eq } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { databaseOutage, defaultDbKind } from '../../../test/helpers/db.ts';
import { sampleBirth } from '../broker/test-brokers.ts';
import { tasks } from '../db/schema.ts';
import { CANCEL_ANSWER_WAIT_MS, cancelTask, createTask, getTask, getTaskLogs } from '../services/tasks.ts';
import { withWaitingFor } from '../services/waiting-for.ts';
import { useTestFleets } from './fake-mqtt.ts';
import { resumeGraceMs } from './fleet.ts';

const LEASE_TTL_MS = 1_000; // sweeps every 100 ms

async function poll(check: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('leases across the control plane’s own absences', () => {
  const startFleet = useTestFleets();

  /** A fleet hearing one agent, `a1`, which has claimed one task. */
  async function fleetWithClaimedTask(leaseTtlMs = LEASE_TTL_MS) {
    const { mqtt, ctx, records, database } = await startFleet({ leaseTtlMs });
    await mqtt.birth('a1', sampleBirth('a1'));
    const task = await createTask(
      ctx,
      TaskCreate.parse({
        command: '-i /in.mov /o.mp4',
        inputFile: '/in.mov',
        outputFile: '/o.mp4',
      }),
    );
    await mqtt.request('a1', { type: 'claim', requestId: 'c1', max: 1 });
    const row = async () => (await database.db.select().from(tasks).where(eq(tasks.id, task.id)))[0]!;
    await poll(async () => (await row()).status === 'RUNNING', 5_000, 'claimed');
    return { mqtt, records, row, task, database, ctx };
  }

  it('answers every report of a lost lease with a cancel, and logs them once', async () => {
    const { mqtt, records, task } = await fleetWithClaimedTask();
    // An outbox replaying a long run's reports of an attempt that lost its lease.
    for (let seq = 0; seq < 5; seq++) {
      await mqtt.report('a1', {
        kind: 'update',
        taskId: task.id,
        attempt: 1,
        leaseToken: 'a-lease-given-away',
        seq,
        patch: { progress: seq },
      });
    }
    const cancels = () => mqtt.sent.filter((s) => s.agent === 'a1' && s.message.type === 'task.cancel');
    // Waited for, not slept on: a fixed 100 ms was too short for a slow box under load.
    await poll(async () => cancels().length >= 5, 5_000, 'five cancels');
    await new Promise((r) => setTimeout(r, 100));
    expect(cancels()).toHaveLength(5);
    const warned = records.filter((r) => r.msg === 'stale report; telling the agent to stop');
    expect(warned.map((r) => r.level)).toEqual([40]);
  });

  it('says what a running task’s cancel waits for, and how it ended when its agent never confirmed it', async () => {
    // Longer than a cancel waits for its agent's answer (CANCEL_ANSWER_WAIT_MS).
    const leaseTtlMs = CANCEL_ANSWER_WAIT_MS + 3_000;
    const { mqtt, row, task, ctx } = await fleetWithClaimedTask(leaseTtlMs);
    const waitingFor = async () => (await withWaitingFor(ctx, [await getTask(ctx, task.id)]))[0]!.waitingFor;
    const [asked] = await withWaitingFor(ctx, [await cancelTask(ctx, task.id)]);
    expect(asked).toMatchObject({
      status: 'RUNNING',
      waitingFor: 'its cancel: agent a1 is stopping the run',
    });
    // The agent goes (its Last Will) without confirming: only the lease can end the task now.
    await mqtt.birth('a1', { ...sampleBirth('a1'), state: 'offline' });
    await poll(async () => /is offline/.test((await waitingFor()) ?? ''), 5_000, 'agent offline');
    // Asked again: answered at once, there is no agent to wait for.
    const askedAt = Date.now();
    const [again] = await withWaitingFor(ctx, [await cancelTask(ctx, task.id)]);
    expect(Date.now() - askedAt).toBeLessThan(CANCEL_ANSWER_WAIT_MS / 2);
    expect(again?.waitingFor).toMatch(/^its cancel: agent a1 is offline;/);
    expect(await waitingFor()).toMatch(
      /^its cancel: agent a1 is offline; the task is canceled when its lease runs out \(in [0-3] s\), or as soon as the agent reports back$/,
    );
    await poll(async () => (await row()).status === 'DONE_CANCELED', leaseTtlMs + 5_000, 'canceled');
    expect(await waitingFor()).toBeUndefined();
    expect(await getTaskLogs(ctx, task.id)).toContain(
      'canceled without agent a1, which did not confirm the stop (lease expired); if its run is still going, the agent stops it when it is back in touch, and any partial output stays',
    );
  }, 30_000);

  it('sends the cancel a report calls for before its ack, so an ack alone says the attempt is current', async () => {
    const { mqtt, task, database } = await fleetWithClaimedTask();
    const claimed = mqtt.sent.find((s) => s.message.type === 'claim.result')?.message;
    const leaseToken = claimed?.type === 'claim.result' ? claimed.tasks[0]!.leaseToken : '';
    /** What the fleet sends a1 in answer to one (empty) log report, once its ack is among it. */
    const answers = async (seq: number, token: string) => {
      const from = mqtt.sent.length;
      const report = { kind: 'log' as const, taskId: task.id, attempt: 1, leaseToken: token, seq };
      await mqtt.report('a1', { ...report, step: 'agent', text: '' });
      const sent = () => mqtt.sent.slice(from).filter((s) => s.agent === 'a1');
      await poll(async () => sent().some((s) => s.message.type === 'ack'), 5_000, `the ack of ${seq}`);
      return sent().map((s) =>
        s.message.type === 'task.cancel' ? `cancel: ${s.message.reason}` : s.message.type,
      );
    };
    expect(await answers(1, leaseToken)).toEqual(['ack']);
    // A stale report (a lease given away): its cancel first.
    expect(await answers(2, 'a-lease-given-away')).toEqual([
      'cancel: attempt 1 is no longer current (task is on attempt 1, RUNNING)',
      'ack',
    ]);
    // A current report of a task an operator canceled: the repeated cancel first too.
    await database.db.update(tasks).set({ cancelRequested: true }).where(eq(tasks.id, task.id));
    expect(await answers(3, leaseToken)).toEqual(['cancel: canceled', 'ack']);
  });

  it('expires no lease for the time the control plane itself did not run, and still expires lost ones', async () => {
    const { records, row } = await fleetWithClaimedTask();
    // The control plane does not run for longer than the lease (a SIGSTOP, a paused VM); the agent kept
    // heartbeating, but Node runs the overdue sweep before it reads what queued up meanwhile.
    const until = Date.now() + LEASE_TTL_MS * 1.6;
    while (Date.now() < until) {
      // blocked
    }
    await new Promise((r) => setTimeout(r, 50));
    expect(await row()).toMatchObject({ status: 'RUNNING', attempt: 1 });
    expect((await row()).leaseExpiresAt).toBeGreaterThan(Date.now() + LEASE_TTL_MS / 2);
    expect(records.some((r) => r.level === 40 && /did not run for a while/.test(r.msg))).toBe(true);
    // Nothing heard from the agent after that: its lease runs out and the task is requeued.
    await poll(async () => (await row()).status === 'QUEUED', LEASE_TTL_MS + 5_000, 'requeued');
    expect((await row()).attempt).toBe(1);
  }, 20_000);

  // The services pass only: an outage is made by refusing connections to the test's database (and
  // postgres.js takes its 5 s end() timeout to close a pool the server cut).
  it.runIf(defaultDbKind() === 'postgres')(
    'expires no lease for the time the database was unavailable, and logs the outage once',
    async () => {
      const { mqtt, records, row, database, task } = await fleetWithClaimedTask();
      const outage = databaseOutage(database);
      const leaseToken = (await row()).leaseToken ?? '';
      try {
        await outage.begin();
        const before = records.length;
        // Longer than the lease: the agent's renewals meanwhile could not be stored.
        await new Promise((r) => setTimeout(r, LEASE_TTL_MS));
        // What an agent sends meanwhile fails quietly (its outbox sends it again).
        await mqtt
          .report('a1', {
            kind: 'update',
            taskId: task.id,
            attempt: 1,
            leaseToken,
            seq: 0,
            patch: { progress: 5 },
          })
          .catch(() => {});
        await new Promise((r) => setTimeout(r, LEASE_TTL_MS));
        // The outage, logged once, is all that was logged at warn or above while it lasted.
        expect(
          records
            .slice(before)
            .filter((r) => r.level >= 40)
            .map((r) => r.msg),
        ).toEqual([expect.stringMatching(/^the database is unavailable: tasks/)]);
        await outage.end();
        await poll(
          async () => records.some((r) => /the database is back/.test(r.msg)),
          5_000,
          'the database back',
        );
        expect(await row()).toMatchObject({ status: 'RUNNING', attempt: 1 });
        expect((await row()).leaseExpiresAt).toBeGreaterThan(Date.now() + LEASE_TTL_MS / 2);
        expect(records.filter((r) => /the database is unavailable: tasks/.test(r.msg))).toHaveLength(1);
        expect(records.filter((r) => r.msg === 'sweep failed')).toEqual([]);
        // Nothing heard from the agent after that: its lease runs out and the task is requeued.
        await poll(async () => (await row()).status === 'QUEUED', LEASE_TTL_MS + 5_000, 'requeued');
      } finally {
        await outage.close();
      }
    },
    30_000,
  );

  it('gives running leases no less than an agent’s reconnect backoff after connecting', async () => {
    const { mqtt, row } = await fleetWithClaimedTask();
    expect(resumeGraceMs(LEASE_TTL_MS)).toBeGreaterThanOrEqual(15_000);
    expect(resumeGraceMs(60_000)).toBe(60_000);
    mqtt.emit('connection', false);
    mqtt.emit('connection', true);
    await poll(async () => (await row()).leaseExpiresAt > Date.now() + 10_000, 5_000, 'leases extended');
    // Past the lease TTL, well within the grace: still the agent's.
    await new Promise((r) => setTimeout(r, LEASE_TTL_MS * 1.5));
    expect(await row()).toMatchObject({ status: 'RUNNING', attempt: 1 });
  }, 20_000);
});
