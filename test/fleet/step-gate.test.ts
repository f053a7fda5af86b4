/**
 * A run's next step after its agent was out of touch (frozen, cut off from the broker) long enough for
 * the lease to have run out: the step that was running ended meanwhile, and the next one must not start
 * before the control plane says the attempt is still this agent's (fleet-agent.ts #beforeStep). Else
 * an attempt the control plane gave away starts its transcoder beside the attempt that now owns the
 * output, before it reads the cancel.
 *
 * Every transcoder start goes through a wrapper that notes which agent process started it, and on
 * which output, in a journal.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  CLUSTER_START_TIMEOUT_MS,
  clusterHooks,
  descendantPids,
  makeTestVideo,
  processesMatching,
  TestCluster,
  waitFor,
  writeScript,
} from '../helpers/cluster.ts';
import { holdRelay } from '../helpers/hold-relay.ts';
import { ENCODE, md5, referenceEncode } from './support/fixtures.ts';

/** A transcoder wrapper for the agents of `c`, and the agents that started it on `output`, in order. */
function journaledTranscoder(c: TestCluster) {
  const journal = join(c.dir, 'transcoder-starts.log');
  // The run mark (FFLEET_AGENT_RUN, orphans.ts) begins with the name of the agent that runs the step.
  const path = writeScript(
    c.dir,
    'bin/ffmpeg-journaled',
    `echo "\${FFLEET_AGENT_RUN%%:*} $*" >> ${journal}\nexec ffmpeg "$@"`,
  );
  const startsOn = (output: string): string[] =>
    (existsSync(journal) ? readFileSync(journal, 'utf8') : '')
      .split('\n')
      .filter((l) => l.includes(output))
      .map((l) => l.split(' ')[0]!);
  return { path, startsOn };
}

describe('the step gate of an agent frozen past its lease', () => {
  let c: TestCluster;
  let clip: string;
  let reference: string;

  beforeAll(async () => {
    c = await TestCluster.start();
    clip = await makeTestVideo(c.dir, 'media/gate.mp4', 2);
    reference = referenceEncode(clip, `${clip}.reference.mp4`);
  }, CLUSTER_START_TIMEOUT_MS);

  clusterHooks(() => c, { stopAgents: true });

  it('does not start the transcoder of the attempt the control plane gave away while it was stopped', async () => {
    const transcoder = journaledTranscoder(c);
    const env = { FFLEET_TRANSCODER: transcoder.path, LOG_LEVEL: 'info' };
    const agents = await Promise.all([
      c.startAgent({ name: 'gate-a', env }),
      c.startAgent({ name: 'gate-b', env }),
    ]);
    const target = join(c.dir, 'out', 'gate.mp4');
    // A few seconds of pre-processing: the first attempt's script ends while its agent is stopped.
    const pre = writeScript(c.dir, 'scripts/slow-pre.sh', 'sleep 2');
    const task = await c.api.createTask({
      command: ENCODE,
      inputFile: clip,
      outputFile: target,
      preProcessing: { scriptPath: pre },
    });
    const started = await c.api.waitForTask(task.id, (t) => t.status === 'PRE_PROCESSING', 30_000);
    const runner = agents.find((a) => a.label === started.agent?.name)!;
    const other = agents.find((a) => a !== runner)!;
    expect(runner).toBeDefined();
    // The agent process alone: its script runs on (a process group of its own) and ends.
    expect(processesMatching(pre).length).toBeGreaterThan(0);
    process.kill(runner.pid, 'SIGSTOP');
    try {
      // The lease runs out (3 s), and the other agent runs the task as attempt 2 to its end.
      const done = await c.api.waitForTask(task.id, (t) => t.status.startsWith('DONE_'), 60_000);
      expect(done).toMatchObject({ status: 'DONE_SUCCESSFUL', attempt: 2, agent: { name: other.label } });
      // (Ended, it stays a zombie until its agent runs again: gone from the command lines.)
      await waitFor(() => processesMatching(pre).length === 0, 10_000, "the stopped agent's script to end");
      expect(transcoder.startsOn(target)).toEqual([other.label]);
    } finally {
      process.kill(runner.pid, 'SIGCONT');
    }
    // Back, the agent finds its script ended: the run's next step is the transcoder.
    await runner.waitForOutput(/"attempt":1,"status":"DONE_CANCELED","msg":"task finished"/, 20_000);
    // The attempt's end is where a transcoder it started would be killed: it must not have started.
    expect(transcoder.startsOn(target)).toEqual([other.label]);
    expect(runner.output()).toMatch(
      /"step":"transcoder".*"msg":"this agent was out of touch long enough for the lease to have run out: the step waits until the control plane confirms the attempt"/,
    );
    expect(runner.output()).toMatch(
      /"step":"transcoder".*"msg":"the control plane gave the task to another attempt while this agent was out of touch: the step is not started"/,
    );
    // The task, its output and the agent: as attempt 2 left them.
    expect(await c.api.getTask(task.id)).toMatchObject({
      status: 'DONE_SUCCESSFUL',
      attempt: 2,
      agent: { name: other.label },
      error: '',
    });
    expect(md5(target)).toBe(reference);
    expect(runner.running).toBe(true);
    expect(processesMatching(target)).toEqual([]);
    expect(descendantPids(runner.pid)).toEqual([]);
  }, 120_000);

  it('does not start it either when the agent is cut off without knowing it (a silent partition)', async () => {
    const transcoder = journaledTranscoder(c);
    const env = { FFLEET_TRANSCODER: transcoder.path, LOG_LEVEL: 'info' };
    const relay = await holdRelay(c.mqttUrl);
    try {
      const cut = await c.startAgent({ name: 'silent-a', env: { ...env, MQTT_URL: relay.url } });
      const other = await c.startAgent({ name: 'silent-b', env });
      await c.api.patch(`/api/v1/agents/${other.label}`, { paused: true });
      const target = join(c.dir, 'out', 'silent.mp4');
      const pre = writeScript(c.dir, 'scripts/silent-pre.sh', 'sleep 3');
      const task = await c.api.createTask({
        command: ENCODE,
        inputFile: clip,
        outputFile: target,
        preProcessing: { scriptPath: pre },
      });
      await c.api.waitForTask(
        task.id,
        (t) => t.status === 'PRE_PROCESSING' && t.agent?.name === cut.label,
        30_000,
      );
      // Nothing passes any more, either way, and nothing closes: the agent's MQTT client notices only at
      // its keepalive (30 s, and up to half as long again). Meanwhile its lease runs out (3 s).
      relay.holdUp();
      relay.holdDown();
      await c.api.patch(`/api/v1/agents/${other.label}`, { paused: false });
      const done = await c.api.waitForTask(task.id, (t) => t.status.startsWith('DONE_'), 60_000);
      expect(done).toMatchObject({ status: 'DONE_SUCCESSFUL', attempt: 2, agent: { name: other.label } });
      // The cut-off agent's script ended seconds ago: its transcoder waits for the control plane's word.
      expect(transcoder.startsOn(target)).toEqual([other.label]);
      relay.releaseUp();
      relay.release();
      await cut.waitForOutput(/"attempt":1,"status":"DONE_CANCELED","msg":"task finished"/, 20_000);
      expect(transcoder.startsOn(target)).toEqual([other.label]);
      expect(cut.output()).toMatch(
        /"step":"transcoder".*"msg":"the control plane gave the task to another attempt while this agent was out of touch: the step is not started"/,
      );
      expect(md5(target)).toBe(reference);
      expect(processesMatching(target)).toEqual([]);
    } finally {
      await relay.close();
    }
  }, 120_000);
});

describe('the step gate of an agent cut off for a while, its lease still held', () => {
  // Long enough for a cut-off past the gate's threshold (half of it) to leave the lease standing.
  const LEASE_TTL_MS = 10_000;
  let c: TestCluster;
  let clip: string;

  beforeAll(async () => {
    c = await TestCluster.start({ leaseTtlMs: LEASE_TTL_MS, logLevel: 'info' });
    clip = await makeTestVideo(c.dir, 'media/cut-off.mp4', 1);
  }, CLUSTER_START_TIMEOUT_MS);

  clusterHooks(() => c, { stopAgents: true });

  /**
   * Agent `name` (in this process, behind a relay) runs a task whose pre-processing script ends when told;
   * its connection breaks and its reconnect is held (for less than the 10 s the agent waits for an answer
   * to its CONNECT), and the script ends past the gate's threshold (5 s) into the cut-off.
   */
  async function cutOffWhilePreProcessing(name: string) {
    const transcoder = journaledTranscoder(c);
    const relay = await holdRelay(c.mqttUrl);
    const agent = await c.startLocalAgent({
      name,
      env: { MQTT_URL: relay.url, FFLEET_TRANSCODER: transcoder.path },
    });
    const target = join(c.dir, 'out', `${name}.mp4`);
    const go = join(c.dir, `${name}-pre-may-end`);
    const pre = writeScript(c.dir, `scripts/${name}-pre.sh`, `while [ ! -f ${go} ]; do sleep 0.05; done`);
    const task = await c.api.createTask({
      command: ENCODE,
      inputFile: clip,
      outputFile: target,
      preProcessing: { scriptPath: pre },
      requires: [`agent:${agent.name}`],
    });
    await c.api.waitForTask(task.id, (t) => t.status === 'PRE_PROCESSING', 30_000);
    relay.drop();
    relay.holdUp();
    relay.holdDown();
    const cutOffAt = Date.now();
    await sleep(LEASE_TTL_MS / 2 + 500);
    writeFileSync(go, '');
    await waitFor(() => processesMatching(pre).length === 0, 5_000, 'the script to end');
    return { agent, task, target, transcoder, relay, cutOffAt };
  }

  it('waits while the control plane cannot be reached, then starts the step once it confirms the attempt', async () => {
    const { agent, task, target, transcoder, relay, cutOffAt } = await cutOffWhilePreProcessing('cut-off');
    try {
      // Time enough for a transcoder to start, as it would without the gate: none may, while cut off.
      await sleep(1_000);
      expect(Date.now() - cutOffAt).toBeLessThan(LEASE_TTL_MS - 2_000);
      expect(transcoder.startsOn(target)).toEqual([]);
      const agentLines = () => c.cpLines.filter((l) => l.includes(`"taskId":"${task.id}"`));
      expect(
        agentLines().some(
          (l) =>
            l.includes('"step":"transcoder"') && l.includes('"msg":"this agent was out of touch long enough'),
        ),
      ).toBe(true);
      relay.releaseUp();
      relay.release();
      const done = await c.api.waitForTask(task.id, (t) => t.status.startsWith('DONE_'), 30_000);
      expect(done).toMatchObject({ status: 'DONE_SUCCESSFUL', attempt: 1, agent: { name: agent.name } });
      expect(transcoder.startsOn(target)).toEqual([agent.name]);
      expect(
        agentLines().some((l) =>
          l.includes('"msg":"the control plane confirmed the attempt: the step starts"'),
        ),
      ).toBe(true);
      expect(processesMatching(target)).toEqual([]);
    } finally {
      await relay.close();
    }
  }, 120_000);

  it('hands the task back when the agent is stopping and the control plane stays out of reach', async () => {
    const { agent, task, target, transcoder, relay } = await cutOffWhilePreProcessing('cut-off-drain');
    try {
      // The run waits at its gate; a first SIGTERM lets running tasks finish, and this one cannot: before,
      // the drain waited for the control plane as long as it was out of reach.
      const drainedAt = Date.now();
      await agent.drain({ gateWaitMs: 1_000 });
      expect(Date.now() - drainedAt).toBeLessThan(5_000);
      expect(transcoder.startsOn(target)).toEqual([]);
      relay.releaseUp();
      relay.release();
      // The hand-back reaches the control plane once the agent is back in touch.
      await waitFor(
        async () =>
          (await c.api.taskLogs(task.id)).includes(
            'handed back: the agent is stopping and the control plane could not confirm the attempt before the next step',
          ),
        20_000,
        'the hand-back in the task logs',
      );
      expect((await c.api.getTask(task.id)).status).toBe('QUEUED');
      await c.api.patch(`/api/v1/tasks/${task.id}/cancel`);
    } finally {
      await relay.close();
    }
  }, 120_000);
});
