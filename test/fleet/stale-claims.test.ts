/**
 * Claim answers that reach an agent twice or too late. MQTT delivers at least once: an answer whose
 * acknowledgement was lost with the connection comes again when the agent reconnects, possibly after
 * its run ended; and an agent that was frozen (SIGSTOP, a stalled VM) or cut off may read an answer
 * after its lease ran out and the task went to another agent. Neither may run the attempt (again):
 * with `-y` a second run truncates an output a finished task already wrote (soak QA saw both).
 */
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  CLUSTER_START_TIMEOUT_MS,
  clusterHooks,
  makeTestVideo,
  processesMatching,
  TestCluster,
  waitFor,
} from '../helpers/cluster.ts';
import { holdRelay } from '../helpers/hold-relay.ts';
import { ENCODE, md5, referenceEncode } from './support/fixtures.ts';

describe('claim answers delivered twice or too late', () => {
  let c: TestCluster;
  let clip: string;
  let reference: string;

  beforeAll(async () => {
    c = await TestCluster.start({ leaseTtlMs: 4_000, logLevel: 'info' });
    clip = await makeTestVideo(c.dir, 'media/stale-claims.mp4', 1);
    reference = referenceEncode(clip, `${clip}.reference.mp4`);
  }, CLUSTER_START_TIMEOUT_MS);

  clusterHooks(() => c, { stopAgents: true });

  const out = (name: string) => join(c.dir, 'out', name);
  const linesAbout = (taskId: string, msg: string) =>
    c.cpLines.filter((l) => l.includes(taskId) && l.includes(`"msg":"${msg}"`));

  it('does not run an attempt again when its answer comes back after the run ended', async () => {
    const target = out('answered-twice.mp4');
    const relay = await holdRelay(c.mqttUrl);
    try {
      // The task first, then its agent: the agent's first claim gets it, and that claim's answer is the one
      // held. (With the agent first, a claim it sent on its timer just before the task existed could be
      // answered with it before the hold began, under load: then nothing was held or delivered again.)
      const task = await c.api.createTask({
        command: ENCODE,
        inputFile: clip,
        outputFile: target,
        requires: [`agent:${c.agentName('answered-twice')}`],
      });
      const held = relay.holdAfterNext('"type":"claim"');
      await c.startLocalAgent({ name: 'answered-twice', env: { MQTT_URL: relay.url } });
      await held;
      // The agent hears the answer, but its acknowledgement (and its reports) never reach the broker.
      relay.holdUp();
      relay.release();
      await waitFor(() => linesAbout(task.id, 'task claimed').length === 1, 15_000, 'the run to start');
      await waitFor(
        () => {
          try {
            return statSync(target).size > 0 && processesMatching(target).length === 0;
          } catch {
            return false;
          }
        },
        30_000,
        'the run to end',
      );
      // The connection breaks: the broker delivers the unacknowledged answer again on reconnect.
      relay.drop();
      const done = await c.api.waitForTask(task.id, (t) => t.status.startsWith('DONE_'), 30_000);
      expect(done).toMatchObject({ status: 'DONE_SUCCESSFUL', attempt: 1 });
      await waitFor(
        () => linesAbout(task.id, 'claim answer for an attempt already started here: ignored').length > 0,
        15_000,
        'the answer delivered again to be dropped',
      );
      expect(linesAbout(task.id, 'task claimed')).toHaveLength(1);
      expect(processesMatching(target)).toEqual([]);
      expect(md5(target)).toBe(reference);
    } finally {
      await relay.close();
    }
  }, 90_000);

  it('hands back unstarted a claim answered after its lease ran out, leaving the new attempt alone', async () => {
    const target = out('answered-late.mp4');
    const relay = await holdRelay(c.mqttUrl);
    try {
      // The task first, then its agent (see the test above).
      const task = await c.api.createTask({
        command: ENCODE,
        inputFile: clip,
        outputFile: target,
        requires: ['stale-claims'],
      });
      const held = relay.holdAfterNext('"type":"claim"');
      const late = await c.startLocalAgent({
        name: 'answered-late',
        labels: ['stale-claims'],
        env: { MQTT_URL: relay.url },
      });
      await held;
      await c.api.waitForTask(task.id, (t) => t.status === 'RUNNING', 10_000);
      // The late agent gets nothing more; its lease runs out and another agent runs attempt 2.
      expect((await c.api.request('PATCH', `/api/v1/agents/${late.name}`, { paused: true })).status).toBe(
        200,
      );
      await c.startLocalAgent({ name: 'answered-late-other', labels: ['stale-claims'] });
      const done = await c.api.waitForTask(task.id, (t) => t.status.startsWith('DONE_'), 30_000);
      expect(done).toMatchObject({ status: 'DONE_SUCCESSFUL', attempt: 2 });
      expect(md5(target)).toBe(reference);
      const written = statSync(target).mtimeMs;
      // Now the first answer arrives, long after its lease.
      relay.release();
      await waitFor(
        () =>
          linesAbout(task.id, 'claim answered after its lease could have run out: handed back unstarted')
            .length > 0,
        15_000,
        'the late answer to be handed back',
      );
      await sleep(1_500);
      expect(processesMatching(target)).toEqual([]);
      expect(statSync(target).mtimeMs).toBe(written);
      expect(md5(target)).toBe(reference);
      expect(await c.api.getTask(task.id)).toMatchObject({ status: 'DONE_SUCCESSFUL', attempt: 2 });
    } finally {
      await relay.close();
    }
  }, 90_000);
});
