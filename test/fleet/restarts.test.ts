/**
 * Control-plane restarts while tasks run: the control plane is a child process (and with it the
 * embedded broker), stopped and started again on the same ports and data dir.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  type ChildProcessHandle,
  CLUSTER_START_TIMEOUT_MS,
  clusterHooks,
  makeTestVideo,
  processesMatching,
  TestCluster,
  waitFor,
} from '../helpers/cluster.ts';
import { isEncoding, md5, REALTIME, referenceEncode } from './support/fixtures.ts';

describe('control-plane restarts', () => {
  let c: TestCluster;
  let clip4: string;
  let clip20: string;
  let agent: ChildProcessHandle;
  const reference: Record<string, string> = {};

  beforeAll(async () => {
    // Longer than the agents' longest reconnect backoff (10 s): leases are about restarts here, not loss.
    c = await TestCluster.start({ controlPlane: 'child', leaseTtlMs: 12_000 });
    [clip4, clip20] = await Promise.all([
      makeTestVideo(c.dir, 'media/clip4.mp4', 4),
      makeTestVideo(c.dir, 'media/clip20.mp4', 20),
    ]);
    for (const clip of [clip4, clip20]) reference[clip] = referenceEncode(clip, `${clip}.reference.mp4`);
    agent = await c.startAgent({ name: 'steady', slots: 1, env: { LOG_LEVEL: 'info' } });
  }, CLUSTER_START_TIMEOUT_MS);

  clusterHooks(() => c);

  const out = (name: string) => join(c.dir, 'out', name);

  it('completes a task running across a control-plane restart, on the same attempt', async () => {
    const target = out('cp-restart.mp4');
    const task = await c.api.createTask({ command: REALTIME, inputFile: clip20, outputFile: target });
    await c.api.waitForTask(task.id, isEncoding, 30_000);
    await c.stopControlPlane('SIGTERM');
    // Down for longer than the lease TTL: the leases in the database expire meanwhile.
    await new Promise((r) => setTimeout(r, c.leaseTtlMs + 1_000));
    expect(processesMatching(target).length).toBe(1);
    await c.startControlPlane();

    const done = await c.api.waitForTask(task.id, undefined, 60_000);
    expect(done).toMatchObject({
      status: 'DONE_SUCCESSFUL',
      attempt: 1,
      agent: { name: agent.label },
      progress: 100,
      remaining: 0,
    });
    expect(md5(target)).toBe(reference[clip20]);
    const logs = await c.api.taskLogs(task.id);
    // The transcoder's first and last lines: output produced before and after the restart arrived.
    expect(logs).toMatch(/Output #0, mp4/);
    expect(logs).toMatch(/muxing overhead/);
    expect(logs).not.toContain('[attempt 2');
    expect((await c.api.getAgent(agent.label))?.status).toBe('online');
  }, 180_000);

  it.skipIf(Boolean(process.env.MQTT_URL))(
    'loses nothing when the embedded broker dies with the control plane while a task finishes',
    async () => {
      const target = out('broker-restart.mp4');
      const task = await c.api.createTask({ command: REALTIME, inputFile: clip4, outputFile: target });
      await c.api.waitForTask(task.id, isEncoding, 30_000);
      await c.stopControlPlane('SIGKILL');
      // The task ends while nobody listens: its last reports wait in the agent's outbox.
      await waitFor(
        () => existsSync(target) && processesMatching(target).length === 0,
        30_000,
        'encode finished',
      );
      await c.startControlPlane();

      const done = await c.api.waitForTask(task.id, undefined, 60_000);
      expect(done).toMatchObject({
        status: 'DONE_SUCCESSFUL',
        attempt: 1,
        agent: { name: agent.label },
        progress: 100,
      });
      expect(done.finishedAt).toBeGreaterThan(0);
      expect(md5(target)).toBe(reference[clip4]);
      const logs = await c.api.taskLogs(task.id);
      expect(logs).toMatch(/Output #0, mp4/);
      expect(logs).toMatch(/muxing overhead/);
    },
    180_000,
  );

  it('an agent drained while the control plane is down waits for it to take the results, then leaves', async () => {
    const drained = await c.startAgent({ name: 'drain-down', slots: 1, env: { LOG_LEVEL: 'info' } });
    const target = out('drain-down.mp4');
    const task = await c.api.createTask({
      command: REALTIME,
      inputFile: clip4,
      outputFile: target,
      requires: [`agent:${drained.label}`],
    });
    await c.api.waitForTask(task.id, isEncoding, 30_000);
    await c.stopControlPlane('SIGTERM');
    drained.signal('SIGTERM');
    await waitFor(
      () => existsSync(target) && processesMatching(target).length === 0,
      30_000,
      'encode finished',
    );
    await new Promise((r) => setTimeout(r, 1_000));
    // Its task done, its result not taken by anyone yet: it waits (up to 30 s) rather than leave it on disk.
    expect(drained.running).toBe(true);
    await c.startControlPlane();
    expect(await drained.exited).toEqual({ code: 0, signal: null });
    // The result arrived: no other attempt re-runs the transcode after the lease.
    expect(await c.api.getTask(task.id)).toMatchObject({
      status: 'DONE_SUCCESSFUL',
      attempt: 1,
      agent: { name: drained.label },
    });
    expect(md5(target)).toBe(reference[clip4]);
  }, 120_000);
});
