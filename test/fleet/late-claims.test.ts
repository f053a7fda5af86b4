/**
 * Stops that meet a claim in flight: the control plane has granted an agent's claim (the task shows
 * RUNNING) but the agent has not heard the answer yet when it is told to stop. A relay holds the
 * broker's answers to the agent. The lease is long here, so that only the agent's own handling (not a
 * lease expiring) can move the task, however loaded the machine. Also here, for its relay and long lease:
 * a run whose end meets a full disk on the agent and a dropped connection.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  CLUSTER_START_TIMEOUT_MS,
  clusterHooks,
  externalDatabaseUrl,
  makeTestVideo,
  processesMatching,
  TestCluster,
  waitFor,
  writeScript,
} from '../helpers/cluster.ts';
import { databaseOutage } from '../helpers/db.ts';
import { holdRelay } from '../helpers/hold-relay.ts';
import { canMountTmpfs, mountSmallTmpfs, type SmallTmpfs } from '../helpers/small-tmpfs.ts';
import { ENCODE, md5, referenceEncode } from './support/fixtures.ts';

describe('stops meeting a claim in flight', () => {
  let c: TestCluster;
  let clip4: string;
  let reference: string;

  beforeAll(async () => {
    c = await TestCluster.start({ leaseTtlMs: 60_000 });
    clip4 = await makeTestVideo(c.dir, 'media/clip4.mp4', 4);
    reference = referenceEncode(clip4, `${clip4}.reference.mp4`);
  }, CLUSTER_START_TIMEOUT_MS);

  clusterHooks(() => c, { stopAgents: true });

  const out = (name: string) => join(c.dir, 'out', name);

  /**
   * An agent whose claim the control plane has granted (the task shows RUNNING) but whose answer it has
   * not heard yet, stopped in that window: the relay holds everything the broker sends the agent from
   * its claim on, until released.
   */
  async function agentWithAnswerHeld(name: string, target: string) {
    const relay = await holdRelay(c.mqttUrl);
    // The task first, then its agent: the agent's first claim gets it, and everything the broker sends
    // the agent from that claim on is held. (With the agent first, a claim still in flight when the hold
    // was armed — its start-up claim, or the one it sends again right after that one's answer — could be
    // answered with the task unheld, under load: it then ran to its end before the stop.)
    const task = await c.api.createTask({
      command: ENCODE,
      inputFile: clip4,
      outputFile: target,
      requires: [`agent:${c.agentName(name)}`],
    });
    const held = relay.holdAfterNext('"type":"claim"');
    const agent = await c.startLocalAgent({ name, slots: 1, env: { MQTT_URL: relay.url } });
    await held;
    await c.api.waitForTask(task.id, (t) => t.status === 'RUNNING', 10_000);
    return { relay, agent, task };
  }

  it('runs the task of a claim answered after its first SIGTERM, and leaves only once it is done', async () => {
    const target = out('late-claim.mp4');
    const { relay, agent, task } = await agentWithAnswerHeld('late-claim', target);
    try {
      let drained = false;
      const drain = agent.drain().then(() => {
        drained = true;
      });
      await sleep(500);
      // Leaving now would strand the task, RUNNING on the control plane, until its lease expired.
      expect(drained).toBe(false);
      relay.release();
      await drain;
      await agent.stop();
      const done = await c.api.waitForTask(task.id, (t) => t.status.startsWith('DONE_'), 15_000);
      expect(done).toMatchObject({
        status: 'DONE_SUCCESSFUL',
        attempt: 1,
        agent: { name: agent.name },
      });
      expect(md5(target)).toBe(reference);
    } finally {
      await relay.close();
    }
  }, 60_000);

  it('hands back at once the task of a claim answered during a forced stop, starting nothing', async () => {
    const target = out('late-claim-forced.mp4');
    const { relay, agent, task } = await agentWithAnswerHeld('late-claim-forced', target);
    try {
      const stopped = agent.stop({ flushMs: 2_000 });
      await sleep(300);
      relay.release();
      await stopped;
      // Handed back by the agent: only the lease (a minute) would otherwise requeue it.
      const queued = await c.api.waitForTask(task.id, (t) => t.status === 'QUEUED', 15_000);
      expect(queued.attempt).toBe(1);
      expect(existsSync(target)).toBe(false);
      expect(processesMatching(target)).toEqual([]);
      // The attempt's logs say why it went back.
      expect(await c.api.taskLogs(task.id)).toContain('handed back: the agent was told to stop now');
    } finally {
      await relay.close();
      await c.api.patch(`/api/v1/tasks/${task.id}/cancel`);
    }
  }, 60_000);

  it("requeues at once the task an agent's killed process was running when a new process starts on its outbox", async () => {
    const target = out('stranded.mp4');
    const clip8 = await makeTestVideo(c.dir, 'media/clip8.mp4', 8);
    const relay = await holdRelay(c.mqttUrl);
    const first = await c.startAgent({ name: 'stranded', env: { MQTT_URL: relay.url } });
    try {
      const task = await c.api.createTask({
        command: `-re ${ENCODE}`,
        inputFile: clip8,
        outputFile: target,
        requires: [`agent:${c.agentName('stranded')}`],
      });
      await c.api.waitForTask(task.id, (t) => t.status === 'RUNNING' && t.progress > 0, 20_000);
      // What the agent sends stops reaching the broker: its next progress reports stay in its outbox,
      // never applied (the relay drops them with the connection).
      relay.holdUp();
      await sleep(2_000);
      await first.terminate('SIGKILL');
      relay.drop();
      // A new process of the agent (systemd restarts it) on the same data dir: it replays the dead one's
      // reports, whose lease renewals kept the task RUNNING for the whole lease (a minute here).
      const killedAt = Date.now();
      await c.startAgent({ name: 'stranded' });
      const again = await c.api.waitForTask(task.id, (t) => t.attempt === 2, 20_000);
      expect(Date.now() - killedAt).toBeLessThan(20_000);
      expect(again.agent?.name).toBe(c.agentName('stranded'));
      // Attempt 1's logs say why it went back.
      expect(await c.api.taskLogs(task.id)).toContain(
        'handed back: the process of this agent that ran it ended without finishing it (killed or crashed)',
      );
      // Attempt 2 runs on the new process; nothing more to see in it.
      await c.api.patch(`/api/v1/tasks/${task.id}/cancel`);
      await c.api.waitForTask(task.id, (t) => t.status === 'DONE_CANCELED', 20_000);
    } finally {
      await relay.close();
    }
  }, 120_000);

  it('runs once, on the restarted process, a task granted to an agent killed before it heard the answer', async () => {
    const relay = await holdRelay(c.mqttUrl);
    // The task first, then its agent (see agentWithAnswerHeld).
    const task = await c.api.createTask({
      command: ENCODE,
      inputFile: clip4,
      outputFile: out('rebooted.mp4'),
      requires: [`agent:${c.agentName('rebooted')}`],
    });
    const held = relay.holdAfterNext('"type":"claim"');
    const first = await c.startAgent({ name: 'rebooted', env: { MQTT_URL: relay.url } });
    try {
      await held;
      await c.api.waitForTask(task.id, (t) => t.status === 'RUNNING', 10_000);
      // Killed before the answer reached it: the task is RUNNING on the control plane and nothing on the
      // box knows of it. The broker still holds the answer, unacknowledged, in the agent's session; a new
      // process of the agent (systemd restarts it) resumes that session and gets it. The task runs there,
      // as the attempt it was granted, once, without waiting out the minute's lease.
      await first.terminate('SIGKILL');
      relay.drop();
      const killedAt = Date.now();
      await c.startAgent({ name: 'rebooted' });
      const done = await c.api.waitForTask(task.id, (t) => t.status.startsWith('DONE_'), 30_000);
      expect(Date.now() - killedAt).toBeLessThan(30_000);
      expect(done).toMatchObject({ status: 'DONE_SUCCESSFUL', attempt: 1 });
      expect(done.agent?.name).toBe(c.agentName('rebooted'));
      expect(md5(out('rebooted.mp4'))).toBe(reference);
      expect((await c.api.taskLogs(task.id)).match(/transcoder: \$ /g)).toHaveLength(1);
    } finally {
      await relay.close();
    }
  }, 120_000);

  /**
   * A task on agent `name` (its data dir on a small tmpfs, `disk`) whose run ends while that disk is
   * full: `cutOff` runs while the pre-processing script does (the disk just filled), and this resolves once
   * the run has ended and the agent has logged a report its disk refused.
   */
  async function runEndingOnFullDisk(
    name: string,
    disk: SmallTmpfs,
    env: Record<string, string>,
    cutOff: () => Promise<void> | void,
  ) {
    const target = out(`${name}.mp4`);
    const started = join(c.dir, `${name}-pre-started`);
    const pre = writeScript(c.dir, `scripts/${name}-pre.sh`, `touch ${started}\nsleep 2`);
    const agent = await c.startAgent({ name, env: { ...env, FFLEET_DATA_DIR: disk.dir } });
    const task = await c.api.createTask({
      // A long comment: ffmpeg prints it, so the run's final report (carrying the transcoder's output)
      // needs pages of the full disk that it cannot have.
      command: `-y -i \${INPUT_FILE} -c:v mpeg4 -q:v 10 -metadata comment=${'x'.repeat(10_000)} \${OUTPUT_FILE}`,
      inputFile: clip4,
      outputFile: target,
      preProcessing: { scriptPath: pre },
      requires: [`agent:${c.agentName(name)}`],
    });
    await waitFor(() => existsSync(started), 20_000, 'the pre-processing script started');
    disk.fill();
    await cutOff();
    await waitFor(
      () => existsSync(target) && processesMatching(target).length === 0,
      20_000,
      'the run ended',
    );
    await agent.waitUntil(() => agent.output().includes('outbox write failed'), 10_000, 'a refused report');
    return { agent, task };
  }

  it.runIf(canMountTmpfs)(
    'finishes on its first attempt a task whose final report met a full disk and a dropped connection',
    async () => {
      const disk = mountSmallTmpfs('1m');
      const relay = await holdRelay(c.mqttUrl);
      try {
        // What the agent sends stops reaching the broker: the final report cannot be stored, and its send
        // is lost with the connection.
        const { agent, task } = await runEndingOnFullDisk('full-disk', disk, { MQTT_URL: relay.url }, () =>
          relay.holdUp(),
        );
        await sleep(500);
        relay.drop();
        // Reconnected: the report comes from the agent's memory (mqtt.js sends an unacknowledged publish
        // again; the outbox keeps its own copy for the case where the broker took it and the control plane
        // could not apply it, below). Nothing runs twice, nothing waits for the lease.
        const done = await c.api.waitForTask(task.id, (t) => t.status.startsWith('DONE_'), 30_000);
        expect(done).toMatchObject({ status: 'DONE_SUCCESSFUL', attempt: 1 });
        expect((await c.api.taskLogs(task.id)).match(/transcoder: \$ /g)).toHaveLength(1);
        disk.free();
        await agent.terminate('SIGTERM');
      } finally {
        await relay.close();
        await c.stopAgents();
        disk.remove();
      }
    },
    120_000,
  );

  // The services pass: the database is on a server whose connections the test can refuse.
  it.runIf(canMountTmpfs && externalDatabaseUrl() !== undefined)(
    'finishes on its first attempt a task whose final report met a full disk while the control plane could not apply it',
    async () => {
      const disk = mountSmallTmpfs('1m');
      const outage = databaseOutage(c.serverDatabase!);
      try {
        // The control plane loses its database: the final report reaches it (the broker acknowledges it)
        // but cannot be applied.
        const { agent, task } = await runEndingOnFullDisk('full-disk-db', disk, {}, () => outage.begin());
        await sleep(1_000);
        await outage.end();
        // The agent sends what was not acknowledged again (every 10 s), from memory. Before, the report was
        // gone: the task stayed PRE_PROCESSING for its lease (a minute here) and then ran again as attempt 2.
        const done = await c.api.waitForTask(task.id, (t) => t.status.startsWith('DONE_'), 40_000);
        expect(done).toMatchObject({ status: 'DONE_SUCCESSFUL', attempt: 1 });
        disk.free();
        await agent.terminate('SIGTERM');
      } finally {
        await outage.close();
        await c.stopAgents();
        disk.remove();
      }
    },
    120_000,
  );
});
