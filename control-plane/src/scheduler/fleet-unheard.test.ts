/**
 * Tasks claimed for a live agent that never heard of them (the claim's COMMIT reply or its answer was
 * lost): two heartbeats that leave such a task out, well after its claim, send it back to the queue
 * without using up an attempt. Heartbeats that list it, or leave it out one at a time, or a claim
 * whose answer left late, never do. The agent side is played here; test/fleet/unheard-claims.test.ts
 * runs real agents.
 */
import { type RunningTask, TaskCreate } from '@ffleet/shared';
import { eq } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { waitFor } from '../../../test/fleet/support/media.ts';
import { sampleBirth } from '../broker/test-brokers.ts';
import { tasks } from '../db/schema.ts';
import { createTask, getTaskLogs } from '../services/tasks.ts';
import { useTestFleets } from './fake-mqtt.ts';
import { sweepExpiredLeases } from './leases.ts';

/** The margin's floor here (5 s in production); heartbeats come every HEARTBEAT_MS. */
const MARGIN_MS = 400;
const HEARTBEAT_MS = 50;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const poll = (check: () => Promise<boolean>, timeoutMs: number, what: string) =>
  waitFor(check, timeoutMs, what, 20);

describe('tasks a live agent never received', () => {
  const startFleet = useTestFleets();

  /** A fleet hearing `a1` (process boot-1), which has claimed one task (long lease: 60 s). */
  async function claimedByA1() {
    const t = await startFleet({ leaseTtlMs: 60_000, unheardAfterMs: MARGIN_MS });
    await t.mqtt.birth('a1', { ...sampleBirth('a1'), bootId: 'boot-1' });
    await t.mqtt.hello('a1', { bootId: 'boot-1', running: [], ts: Date.now() });
    const task = await createTask(
      t.ctx,
      TaskCreate.parse({ command: '-i /in.mov /o.mp4', inputFile: '/in.mov', outputFile: '/o.mp4' }),
    );
    const row = async () => (await t.database.db.select().from(tasks).where(eq(tasks.id, task.id)))[0]!;
    const claim = async (requestId: string) => {
      await t.mqtt.request('a1', { type: 'claim', requestId, max: 1 });
      await poll(
        async () =>
          t.mqtt.sent.some((s) => s.message.type === 'claim.result' && s.message.requestId === requestId),
        5_000,
        `the answer to ${requestId}`,
      );
      const r = await row();
      expect(r.status).toBe('RUNNING');
      return { taskId: r.id, attempt: r.attempt, leaseToken: r.leaseToken! } satisfies RunningTask;
    };
    /** a1's heartbeats, one every HEARTBEAT_MS, for `ms`; `listed(i)`: what the i-th one lists. */
    const heartbeats = async (ms: number, listed: (i: number) => RunningTask[] = () => []) => {
      const until = Date.now() + ms;
      for (let i = 0; Date.now() < until; i++) {
        await t.mqtt.heartbeat('a1', { bootId: 'boot-1', freeSlots: 1, running: listed(i), ts: Date.now() });
        await sleep(HEARTBEAT_MS);
      }
    };
    const warned = () => t.records.filter((r) => r.level === 40 && /never received/.test(r.msg));
    return { ...t, task, row, claim, heartbeats, warned };
  }

  it('requeues a task its heartbeats leave out, as an attempt that does not count, and says why', async () => {
    const { claim, heartbeats, row, task, ctx, mqtt, warned } = await claimedByA1();
    // The agent never heard the answer (its COMMIT reply lost, the control plane would have sent none).
    const lost = await claim('c1');
    const claimedAt = (await row()).startedAt;
    let requeuedAt = 0;
    const watch = poll(
      async () => {
        requeuedAt = Date.now();
        return (await row()).status === 'QUEUED';
      },
      5_000,
      'requeued',
    );
    await heartbeats(MARGIN_MS * 5);
    await watch;
    // Not before the margin (and the second heartbeat after it); well before the lease.
    expect(requeuedAt - claimedAt).toBeGreaterThanOrEqual(MARGIN_MS);
    expect(await row()).toMatchObject({ attempt: 1, maxAttempts: 4, agentId: null, leaseToken: null });
    expect(await getTaskLogs(ctx, task.id)).toContain(
      "[attempt 1 control-plane] attempt 1 went back to the queue: agent a1 never received it (its heartbeats do not list it: its claim's answer was lost); it does not count against the attempts",
    );
    // One warning naming the agent and the task; a cancel after it in case the answer was only late.
    await poll(async () => warned().length > 0, 2_000, 'the warning');
    expect(warned()).toMatchObject([{ agent: 'a1', bootId: 'boot-1', requeued: [task.id], canceled: [] }]);
    expect(mqtt.sent.filter((s) => s.message.type === 'task.cancel').map((s) => s.message)).toMatchObject([
      { type: 'task.cancel', taskId: task.id, attempt: lost.attempt },
    ]);
    // The next claim runs it as attempt 2 of (still) three that count.
    expect(await claim('c2')).toMatchObject({ attempt: 2 });
    expect(warned()).toHaveLength(1);
  }, 20_000);

  it('leaves alone a task that only every other heartbeat leaves out', async () => {
    const { claim, heartbeats, row, warned } = await claimedByA1();
    const run = await claim('c1');
    await heartbeats(MARGIN_MS * 4, (i) => (i % 2 ? [run] : []));
    expect(await row()).toMatchObject({ status: 'RUNNING', attempt: 1, maxAttempts: 3 });
    expect(warned()).toEqual([]);
    // Two in a row do (the same test, so this one was not passing for want of a check).
    await heartbeats(MARGIN_MS * 2);
    await poll(async () => (await row()).status === 'QUEUED', 5_000, 'requeued');
  }, 20_000);

  it('never requeues what the heartbeats list: a run, a result not acknowledged yet, an older attempt still stopping', async () => {
    const { claim, heartbeats, row, warned, ctx, mqtt } = await claimedByA1();
    const first = await claim('c1');
    // Listed all along (a run, then its result waiting for its ack: the agent lists both alike).
    await heartbeats(MARGIN_MS * 3, () => [first]);
    expect(await row()).toMatchObject({ status: 'RUNNING', attempt: 1 });
    // Its lease given up, the task is claimed again by a1, which still lists the first attempt while it
    // stops it (it starts the new one only then): the new attempt is the agent's, though unlisted.
    await sweepExpiredLeases(ctx, { onlyIds: [first.taskId] });
    const second = await claim('c2');
    expect(second.attempt).toBe(2);
    await heartbeats(MARGIN_MS * 3, () => [first]);
    expect(await row()).toMatchObject({ status: 'RUNNING', attempt: 2, leaseToken: second.leaseToken });
    expect(warned()).toEqual([]);
    // (The first attempt's listing is answered with its cancel, as before.)
    expect(mqtt.sent.some((s) => s.message.type === 'task.cancel' && s.message.attempt === 1)).toBe(true);
  }, 20_000);

  it('counts the margin from the answer of a claim whose commit waited, not from its statement', async () => {
    const { claim, heartbeats, row, warned, ctx } = await claimedByA1();
    // The claim's statement runs "1.5 s ago" (after the hello); its commit (the events published after
    // it) brings the clock back: the answer leaves now, well over the margin after the task's started_at.
    await sleep(2_000);
    const realNow = ctx.now;
    ctx.now = () => Date.now() - 1_500;
    const unsubscribe = ctx.bus.subscribe(() => {
      ctx.now = realNow;
    });
    const run = await claim('c1');
    unsubscribe();
    ctx.now = realNow;
    expect(Date.now() - (await row()).startedAt).toBeGreaterThan(1_400);
    // Heartbeats sent before the agent read the answer leave it out for a while; then it is listed.
    await heartbeats(MARGIN_MS / 2);
    await heartbeats(MARGIN_MS * 3, () => [run]);
    expect(await row()).toMatchObject({ status: 'RUNNING', attempt: 1, maxAttempts: 3 });
    expect(warned()).toEqual([]);
  }, 20_000);

  it('leaves an attempt its agent has reported on to its lease', async () => {
    const { claim, heartbeats, row, warned, mqtt } = await claimedByA1();
    const run = await claim('c1');
    await mqtt.report('a1', { kind: 'log', ...run, seq: 0, step: 'agent', text: 'started\n' });
    await poll(async () => (await row()).reportSeq === 0, 5_000, 'the report applied');
    await heartbeats(MARGIN_MS * 3);
    expect(await row()).toMatchObject({ status: 'RUNNING', attempt: 1 });
    expect(warned()).toEqual([]);
  }, 20_000);
});
