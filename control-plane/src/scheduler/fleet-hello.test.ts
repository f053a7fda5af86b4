/**
 * A hello that does not list the tasks the agent's previous process held: requeued at once when the
 * new process is that one's restart on its box (it killed what was left), left to their leases when
 * it is another process under the same name (a cloned box while the first is frozen or cut off).
 */
import { TaskCreate } from '@ffleet/shared';
import { eq } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { sampleBirth } from '../broker/test-brokers.ts';
import { taskLogs, tasks } from '../db/schema.ts';
import { createTask } from '../services/tasks.ts';
import { startTestFleet, useTestFleets } from './fake-mqtt.ts';

const GRACE_MS = 200;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function poll(check: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

describe('a hello from a new process of an agent', () => {
  const startFleet = useTestFleets();

  /** `a1` (process boot-1) has claimed a task and heartbeats; the lease is long (30 s). */
  async function claimedByBoot1() {
    const t = await startFleet({ helloGraceMs: GRACE_MS });
    await t.mqtt.birth('a1', { ...sampleBirth('a1'), bootId: 'boot-1' });
    const task = await createTask(
      t.ctx,
      TaskCreate.parse({ command: '-i /in.mov /o.mp4', inputFile: '/in.mov', outputFile: '/o.mp4' }),
    );
    await t.mqtt.request('a1', { type: 'claim', requestId: 'c1', max: 1 });
    const row = async () => (await t.database.db.select().from(tasks).where(eq(tasks.id, task.id)))[0]!;
    await poll(async () => (await row()).status === 'RUNNING', 5_000, 'claimed');
    const { leaseToken } = await row();
    await t.mqtt.heartbeat('a1', {
      bootId: 'boot-1',
      freeSlots: 1,
      running: [{ taskId: task.id, attempt: 1, leaseToken: leaseToken! }],
      ts: 2,
    });
    /** boot-2 connects under the name and says hello, running nothing. */
    const secondProcess = async (previousBootId?: string) => {
      await t.mqtt.birth('a1', { ...sampleBirth('a1'), bootId: 'boot-2' });
      await t.mqtt.hello('a1', {
        bootId: 'boot-2',
        ...(previousBootId ? { previousBootId } : {}),
        running: [],
        ts: 3,
      });
    };
    return { ...t, task, row, secondProcess };
  }

  it('leaves the tasks of the process before to their leases when it is not that one’s restart', async () => {
    const { row, secondProcess, records } = await claimedByBoot1();
    await secondProcess(); // a cloned box: its own data dir, no previous process there
    await sleep(GRACE_MS * 4);
    expect(await row()).toMatchObject({ status: 'RUNNING', attempt: 1 });
    expect(records.some((r) => /wait for their leases/.test(r.msg))).toBe(true);
    // A data dir that held a process other than the one that ran the task says nothing either.
    await secondProcess('boot-0');
    await sleep(GRACE_MS * 4);
    expect(await row()).toMatchObject({ status: 'RUNNING', attempt: 1 });
  });

  it('also after the control plane restarted in between (it reads the process before from the database)', async () => {
    const first = await claimedByBoot1();
    await first.fleet.stop();
    const again = await startTestFleet(first.database, { helloGraceMs: GRACE_MS });
    again.mqtt.emit('connection', true);
    try {
      await again.mqtt.birth('a1', { ...sampleBirth('a1'), bootId: 'boot-2' });
      await again.mqtt.hello('a1', { bootId: 'boot-2', running: [], ts: 3 });
      await sleep(GRACE_MS * 4);
      expect(await first.row()).toMatchObject({ status: 'RUNNING', attempt: 1 });
      // boot-1 comes back (thawed): it held the name first, so boot-2 is the one refused.
      await again.mqtt.birth('a1', { ...sampleBirth('a1'), bootId: 'boot-1' });
      const refused = again.mqtt.sent.filter((m) => m.message.type === 'refused').map((m) => m.message);
      expect(refused).toMatchObject([{ bootId: 'boot-2' }]);
    } finally {
      await again.fleet.stop();
    }
  });

  it('requeues them after the grace when it is the restart of that process on its box', async () => {
    const { row, secondProcess, task, database } = await claimedByBoot1();
    await secondProcess('boot-1');
    await poll(async () => (await row()).status === 'QUEUED', 5_000, 'requeued');
    expect((await row()).attempt).toBe(1);
    // The task's log says why attempt 1 ended: its agent could not.
    const lines = await database.db
      .select({ step: taskLogs.step, text: taskLogs.text, attempt: taskLogs.attempt })
      .from(taskLogs)
      .where(eq(taskLogs.taskId, task.id));
    expect(lines).toEqual([
      {
        step: 'control-plane',
        attempt: 1,
        text: 'attempt 1 went back to the queue: agent a1 was lost (its process restarted without it)',
      },
    ]);
  });

  it('leaves a task whose lease was renewed during the grace (a heartbeat that lists it) to its lease', async () => {
    const { row, secondProcess, task, mqtt } = await claimedByBoot1();
    await secondProcess('boot-1');
    const { leaseToken, leaseExpiresAt } = await row();
    // Within the grace, the first process is back after all and says it runs the task.
    await sleep(20);
    await mqtt.heartbeat('a1', {
      bootId: 'boot-1',
      freeSlots: 0,
      running: [{ taskId: task.id, attempt: 1, leaseToken: leaseToken! }],
      ts: 4,
    });
    await poll(async () => (await row()).leaseExpiresAt !== leaseExpiresAt, 5_000, 'lease renewed');
    await sleep(GRACE_MS * 3);
    expect(await row()).toMatchObject({ status: 'RUNNING', attempt: 1, leaseToken });
  });
});
