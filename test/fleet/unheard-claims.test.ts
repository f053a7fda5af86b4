/**
 * Claims a live agent never heard of (QA: a claim's transaction committed but its COMMIT reply was lost
 * in a PostgreSQL restart, so the control plane took the claim for failed and sent no answer): the
 * agent's heartbeats do not list the task, which goes back to the queue within a few of them, not at
 * its lease's end, and without using up an attempt. An answer that is only slow changes nothing. The
 * lease is long here, so that only the reconciliation (not a lease expiring) can move a task.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { eq } from 'drizzle-orm';
import { beforeAll, describe, expect, it } from 'vitest';
import { agents, tasks } from '../../control-plane/src/db/schema.ts';
import { claimTasksIn } from '../../control-plane/src/scheduler/claim.ts';
import { transact } from '../../control-plane/src/services/context.ts';
import {
  CLUSTER_START_TIMEOUT_MS,
  clusterHooks,
  makeTestVideo,
  TestCluster,
  waitFor,
} from '../helpers/cluster.ts';
import { holdRelay } from '../helpers/hold-relay.ts';
import { ENCODE } from './support/fixtures.ts';

const LEASE_TTL_MS = 60_000;

describe('claims an agent never heard of', () => {
  let c: TestCluster;
  let clip: string;

  beforeAll(async () => {
    c = await TestCluster.start({ leaseTtlMs: LEASE_TTL_MS });
    clip = await makeTestVideo(c.dir, 'media/unheard.mp4', 1);
  }, CLUSTER_START_TIMEOUT_MS);

  clusterHooks(() => c, { stopAgents: true });

  const out = (name: string) => join(c.dir, 'out', name);
  const warnings = (taskId: string) =>
    c.cpLines.filter(
      (l) => l.includes(taskId) && l.includes('"msg":"tasks claimed for the agent that it never'),
    );

  it('requeues a task claimed behind a live agent’s back within a few heartbeats, and its attempt does not count', async () => {
    const agent = await c.startLocalAgent({ name: 'unheard' });
    // Only a task this agent cannot claim itself (yet) is safe from its own claims meanwhile.
    const label = 'unheard-later';
    const task = await c.api.createTask({
      command: ENCODE,
      inputFile: clip,
      outputFile: out('unheard.mp4'),
      requires: [label],
    });
    // The claim commits as the agent's, but no answer is ever sent (a lost COMMIT reply).
    const cp = c.inProcess!;
    const [a] = await cp.database.db.select().from(agents).where(eq(agents.name, agent.name));
    const claimedAt = Date.now();
    const claimed = await transact(cp.ctx, (tx, ev) =>
      claimTasksIn(
        tx,
        ev,
        cp.ctx.now(),
        { id: a!.id, name: agent.name, capabilities: [label], slots: 1 },
        1,
        LEASE_TTL_MS,
      ),
    );
    expect(claimed.map((t) => t.task.id)).toEqual([task.id]);
    expect(await c.api.getTask(task.id)).toMatchObject({ status: 'RUNNING', attempt: 1 });
    // Back in the queue after the margin (5 s) and two heartbeats (0.5 s apart), long before the lease.
    const queued = await c.api.waitForTask(task.id, (t) => t.status === 'QUEUED', 20_000);
    expect(Date.now() - claimedAt).toBeLessThan(LEASE_TTL_MS / 3);
    expect(queued).toMatchObject({ attempt: 1, agent: null });
    expect(await c.api.taskLogs(task.id)).toContain(
      `[attempt 1 control-plane] attempt 1 went back to the queue: agent ${agent.name} never received it (its heartbeats do not list it: its claim's answer was lost); it does not count against the attempts`,
    );
    // Its limit grew by one: the task still has its three attempts that count (the API shows the
    // attempt number only).
    const [row] = await cp.database.db.select().from(tasks).where(eq(tasks.id, task.id));
    expect(row).toMatchObject({ attempt: 1, maxAttempts: 4 });
    await waitFor(() => warnings(task.id).length > 0, 5_000, 'the warning');
    expect(warnings(task.id)).toHaveLength(1);
    expect(warnings(task.id)[0]).toContain(agent.name);
    // The agent may now run it: it does, to its end.
    expect((await c.api.patch(`/api/v1/agents/${agent.name}`, { labels: [label] })).status).toBe(200);
    const done = await c.api.waitForTask(task.id, undefined, 60_000);
    expect(done).toMatchObject({ status: 'DONE_SUCCESSFUL', attempt: 2, agent: { name: agent.name } });
    expect(existsSync(out('unheard.mp4'))).toBe(true);
  }, 120_000);

  it('leaves alone a run whose claim was answered late, though many heartbeats came without it', async () => {
    const relay = await holdRelay(c.mqttUrl);
    try {
      // The task first, then its agent: the agent's first claim gets it, and what the broker sends the
      // agent from that claim on is held (a claim in flight before the hold could take the task unheld).
      const task = await c.api.createTask({
        command: ENCODE,
        inputFile: clip,
        outputFile: out('answered-late.mp4'),
        requires: ['answered-late'],
      });
      const held = relay.holdAfterNext('"type":"claim"');
      // Heartbeats every 100 ms: dozens arrive after the claim's commit and before the agent has the task.
      const agent = await c.startLocalAgent({
        name: 'answered-late',
        heartbeatMs: 100,
        labels: ['answered-late'],
        env: { MQTT_URL: relay.url },
      });
      await held;
      const running = await c.api.waitForTask(task.id, (t) => t.status === 'RUNNING', 10_000);
      // Held until 2.5 s after the claim: half the margin.
      await sleep(Math.max(0, running.startedAt + 2_500 - Date.now()));
      expect(await c.api.getTask(task.id)).toMatchObject({ status: 'RUNNING', attempt: 1 });
      relay.release();
      const done = await c.api.waitForTask(task.id, undefined, 60_000);
      expect(done).toMatchObject({ status: 'DONE_SUCCESSFUL', attempt: 1, agent: { name: agent.name } });
      expect(await c.api.taskLogs(task.id)).not.toContain('control-plane');
      expect(warnings(task.id)).toEqual([]);
    } finally {
      await relay.close();
    }
  }, 120_000);
});
