/**
 * Agent faults: agents killed, frozen, signalled or refused while they run tasks. Agents are child
 * processes so they can really die; the control plane runs in-process (restarts: restarts.test.ts).
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'drizzle-orm';
import { beforeAll, describe, expect, it } from 'vitest';
import { nativeSpawnStatus } from '../../agent/src/runner/native-spawn.ts';
import {
  CLUSTER_START_TIMEOUT_MS,
  clusterHooks,
  descendantPids,
  makeTestVideo,
  probeDurationSeconds,
  processesMatching,
  TestCluster,
  waitFor,
} from '../helpers/cluster.ts';
import { holdRelay } from '../helpers/hold-relay.ts';
import { ENCODE, isEncoding, isTranscoder, md5, REALTIME, referenceEncode } from './support/fixtures.ts';

describe('agent faults', () => {
  let c: TestCluster;
  let clip16: string;
  let clip4: string;
  /** md5 of each clip's undisturbed encode: a result touched by a stale agent would differ. */
  const reference: Record<string, string> = {};

  beforeAll(async () => {
    c = await TestCluster.start();
    [clip4, clip16] = await Promise.all([
      makeTestVideo(c.dir, 'media/clip4.mp4', 4),
      makeTestVideo(c.dir, 'media/clip16.mp4', 16),
    ]);
    for (const clip of [clip4, clip16]) reference[clip] = referenceEncode(clip, `${clip}.reference.mp4`);
  }, CLUSTER_START_TIMEOUT_MS);

  clusterHooks(() => c, { stopAgents: true });

  const out = (name: string) => join(c.dir, 'out', name);

  /** Two fresh agents; resolves with [the one running `taskId`, the other]. */
  async function twoAgentsAndRunner(
    prefix: string,
    taskBody: Record<string, unknown>,
    env?: Record<string, string>,
  ) {
    const agents = await Promise.all([
      c.startAgent({ name: `${prefix}-a`, env }),
      c.startAgent({ name: `${prefix}-b`, env }),
    ]);
    const task = await c.api.createTask(taskBody);
    const started = await c.api.waitForTask(task.id, isEncoding, 30_000);
    const runner = agents.find((a) => a.label === started.agent?.name)!;
    const other = agents.find((a) => a !== runner)!;
    expect(runner).toBeDefined();
    return { task: started, runner, other };
  }

  it('requeues the task of a SIGKILLed agent after its lease and completes it on another agent', async () => {
    const target = out('sigkill.mp4');
    const { task, runner, other } = await twoAgentsAndRunner('kill', {
      command: REALTIME,
      inputFile: clip4,
      outputFile: target,
    });
    expect(task.attempt).toBe(1);
    const transcoders = descendantPids(runner.pid).filter(isTranscoder);
    expect(transcoders.length).toBe(1);
    const killedAt = Date.now();
    // The agent alone: its transcoder must not outlive it, writing the output attempt 2 will own.
    process.kill(runner.pid, 'SIGKILL');
    if (nativeSpawnStatus().available)
      await waitFor(() => !transcoders.some(isTranscoder), 2_000, "the killed agent's transcoder gone");
    await runner.terminate('SIGKILL');

    const requeued = await c.api.waitForTask(task.id, (t) => t.attempt === 2, 30_000);
    // Not before the lease ran out (the lease is renewed until the kill).
    expect(Date.now() - killedAt).toBeGreaterThanOrEqual(c.leaseTtlMs - 500);
    expect(requeued.agent?.name).toBe(other.label);
    const done = await c.api.waitForTask(task.id, undefined, 60_000);
    expect(done).toMatchObject({
      status: 'DONE_SUCCESSFUL',
      attempt: 2,
      agent: { name: other.label },
      progress: 100,
    });
    expect(md5(target)).toBe(reference[clip4]);
    expect(processesMatching(target)).toEqual([]);
  }, 120_000);

  it('fences out an agent frozen past its lease: its late reports are rejected and its transcoder killed', async () => {
    const target = out('frozen.mp4');
    const { task, runner, other } = await twoAgentsAndRunner(
      'stop',
      { command: REALTIME, inputFile: clip16, outputFile: target },
      { LOG_LEVEL: 'info' },
    );
    const tree = runner.freeze();
    const staleTranscoders = tree.filter(isTranscoder);
    expect(staleTranscoders.length).toBe(1);

    const moved = await c.api.waitForTask(task.id, (t) => t.attempt === 2 && isEncoding(t), 30_000);
    expect(moved.agent?.name).toBe(other.label);
    runner.thaw(tree);
    const thawedAt = Date.now();
    // On its own it would run ~8 s more (-re catches up the frozen seconds, then reads in real time):
    // gone within 5 s means the agent was told to stop and killed it.
    await waitFor(() => staleTranscoders.every((p) => !isTranscoder(p)), 5_000, 'stale transcoder killed');
    expect(Date.now() - thawedAt).toBeLessThan(5_000);
    // Told by the control plane, which fenced its reports out (stale lease), not canceled by a user.
    await runner.waitForOutput(
      /"reason":"(lease lost|attempt 1 is no longer current)[^"]*","msg":"cancel"/,
      5_000,
    );

    const done = await c.api.waitForTask(task.id, undefined, 60_000);
    expect(done).toMatchObject({
      status: 'DONE_SUCCESSFUL',
      attempt: 2,
      agent: { name: other.label },
      error: '',
    });
    // The fenced-out agent must neither remove nor write into the current attempt's output.
    expect(existsSync(target)).toBe(true);
    expect(md5(target)).toBe(reference[clip16]);
    // The stale agent keeps running (it only lost that task) and leaves nothing behind.
    expect(runner.running).toBe(true);
    expect(processesMatching(target)).toEqual([]);
  }, 150_000);

  /**
   * A running task is deleted while `frozen` of its agent's processes are stopped; the control plane gives
   * up waiting after 3 s, and a new task writes the same path on the other agent and finishes. Then
   * the old run stops: it must not take the new task's file with it.
   */
  async function deleteWhileFrozen(prefix: string, freeze: 'agent' | 'transcoder') {
    const target = out(`${prefix}.mp4`);
    const { task, runner, other } = await twoAgentsAndRunner(
      prefix,
      { command: REALTIME, inputFile: clip16, outputFile: target },
      { LOG_LEVEL: 'info' },
    );
    const tree = freeze === 'agent' ? runner.freeze() : descendantPids(runner.pid).filter(isTranscoder);
    expect(tree.filter(isTranscoder)).toHaveLength(1);
    if (freeze === 'transcoder') for (const p of tree) process.kill(p, 'SIGSTOP');
    expect((await c.api.request('DELETE', `/api/v1/tasks/${task.id}`)).status).toBe(204);
    const next = await c.api.createTask({ command: ENCODE, inputFile: clip4, outputFile: target });
    const done = await c.api.waitForTask(next.id, undefined, 60_000);
    expect(done.status).toBe('DONE_SUCCESSFUL');
    // A frozen agent cannot take it; one whose transcoder alone is stopped kills that after 2.5 s and may.
    if (freeze === 'agent') expect(done.agent?.name).toBe(other.label);
    if (freeze === 'agent') {
      // The agent wakes first: what it does then is under test (the cancel it reads late kills its
      // transcoder at once, still stopped, and keeps the path). A whole box resumes at once, and its
      // transcoder may then write for the moment before it is killed (README: two writers on one
      // path); how much it writes in that moment (-re catching up the frozen seconds, up to the new
      // file's index at its end) is a race this test cannot time.
      runner.thaw([runner.pid]);
      await runner.waitForOutput(/"keepsOutput":true,"msg":"cancel"/, 10_000);
    }
    runner.thaw(tree);
    await waitFor(() => tree.filter(isTranscoder).length === 0, 10_000, 'old transcoder gone');
    await sleep(500);
    // Still the new task's 4 s encode. (Not byte for byte: the thawed transcoder may write into the file
    // for the moment before it is killed, as any writer left on a shared path can.)
    expect(existsSync(target)).toBe(true);
    expect(await probeDurationSeconds(target)).toBeCloseTo(4, 0);
    return runner;
  }

  it('keeps the output of the task that replaced a deleted one when the frozen agent reads the cancel late', async () => {
    await deleteWhileFrozen('late', 'agent');
  }, 120_000);

  it('keeps the output of the task that replaced a deleted one when the old transcoder stops late', async () => {
    await deleteWhileFrozen('slow-stop', 'transcoder');
  }, 120_000);

  it('lets an agent SIGTERMed once finish its running task before it exits, claiming nothing new', async () => {
    // A free slot while it drains: only the drain itself keeps it from claiming the later task.
    const agent = await c.startAgent({ name: 'drain', slots: 2, env: { LOG_LEVEL: 'info' } });
    const target = out('drain.mp4');
    const task = await c.api.createTask({ command: REALTIME, inputFile: clip4, outputFile: target });
    await c.api.waitForTask(task.id, isEncoding, 30_000);
    agent.signal('SIGTERM');
    await agent.waitForOutput(/running tasks finish first/, 10_000);
    // The fleet shows it draining (not online) while its task finishes.
    await waitFor(
      async () => (await c.api.getAgent(agent.label))?.status === 'draining',
      5_000,
      'agent draining',
    );
    expect((await c.api.getTask(task.id)).status).toBe('RUNNING');
    const later = await c.api.createTask({
      command: ENCODE,
      inputFile: clip4,
      outputFile: out('drain-later.mp4'),
    });

    const exit = await agent.exited;
    expect(exit).toEqual({ code: 0, signal: null });
    // Its result was delivered before it left (not parked in its outbox).
    const done = await c.api.getTask(task.id);
    expect(done).toMatchObject({ status: 'DONE_SUCCESSFUL', attempt: 1, agent: { name: agent.label } });
    expect(md5(target)).toBe(reference[clip4]);
    expect((await c.api.getTask(later.id)).status).toBe('QUEUED');
    // Its retained `offline` status left before it exited; the control plane applies it moments later.
    await waitFor(
      async () => (await c.api.getAgent(agent.label))?.status === 'offline',
      5_000,
      'agent offline',
    );
    await c.api.patch(`/api/v1/tasks/${later.id}/cancel`);
  }, 120_000);

  /**
   * An agent reachable through a relay that can hold its traffic, running a `seconds`-long real-time
   * encode of a task only it may take; `cutOff` makes the control plane stop hearing it until the
   * task's lease is given up (the task is `QUEUED` again), while the agent and its transcoder run on.
   */
  async function agentBehindRelay(name: string, slots: number, seconds: number, input: string) {
    const relay = await holdRelay(c.mqttUrl);
    const agent = await c.startLocalAgent({ name, slots, env: { MQTT_URL: relay.url } });
    const target = out(`${name}.mp4`);
    const task = await c.api.createTask({
      command: `-re -y -i \${INPUT_FILE} -t ${seconds} -c:v mpeg4 -q:v 10 \${OUTPUT_FILE}`,
      inputFile: input,
      outputFile: target,
      requires: [`agent:${agent.name}`],
    });
    await c.api.waitForTask(task.id, isEncoding, 30_000);
    const cutOff = async () => {
      relay.holdUp();
      await c.api.waitForTask(task.id, (t) => t.status === 'QUEUED', 15_000);
    };
    const runFinished = () =>
      waitFor(() => processesMatching(target).length === 0, 15_000, 'the run finished');
    const finished = () => c.api.waitForTask(task.id, (t) => t.status.startsWith('DONE_'), 60_000);
    return { relay, agent, target, task, cutOff, runFinished, finished };
  }

  it('stops the lost attempt it still runs before it is given the next attempt of that task', async () => {
    const { relay, agent, target, task, cutOff, finished } = await agentBehindRelay('reclaim', 2, 8, clip16);
    try {
      // Unheard, the agent (one slot free) also claims on its own task's work hint.
      await cutOff();
      await sleep(300);
      // Heard again, its heartbeat (attempt 1: stop it) and its claim are answered. The claim says the
      // agent still runs that task, so it is not handed attempt 2 while attempt 1 still writes the output.
      relay.holdDown();
      relay.releaseUp();
      await sleep(1_000);
      expect(await c.api.getTask(task.id)).toMatchObject({ status: 'QUEUED', attempt: 1 });
      // It reads both answers in one go, stops attempt 1 and claims again: attempt 2 runs.
      relay.release();
      await c.api.waitForTask(task.id, (t) => t.status === 'RUNNING' && t.attempt === 2, 15_000);
      expect(await finished()).toMatchObject({
        status: 'DONE_SUCCESSFUL',
        attempt: 2,
        agent: { name: agent.name },
      });
      expect(await probeDurationSeconds(target)).toBeCloseTo(8, 0);
    } finally {
      await relay.close();
    }
  }, 120_000);

  it.each([
    ['while the task still waits: not run twice', 1, 2],
    // Two slots: the agent hears its own requeued task's work hint while it still runs it, and claims.
    // That claim says which run it holds, so the task is not handed back to it as attempt 2 before the
    // run's result arrives.
    ['although its agent, a slot free, claimed meanwhile', 2, 4],
  ])(
    'takes the late success of a run cut off past its lease %s',
    async (label, slots, seconds) => {
      const name = `late-${slots}`;
      const { relay, agent, target, task, cutOff, runFinished, finished } = await agentBehindRelay(
        name,
        slots,
        seconds,
        clip4,
      );
      try {
        const running = await c.api.getTask(task.id);
        // A partition: the task is given up and queued again (no other agent may take it); the agent
        // finishes the run meanwhile, its result unheard.
        await cutOff();
        await runFinished();
        await sleep(300);
        relay.releaseUp();
        expect(await finished(), label).toMatchObject({
          status: 'DONE_SUCCESSFUL',
          attempt: 1,
          agent: { name: agent.name },
          startedAt: running.startedAt,
          outputFile: { resolved: target },
          error: '',
        });
        expect(await probeDurationSeconds(target)).toBeCloseTo(seconds, 0);
        // Its output is the task's, and the agent, free again, ran nothing more.
        expect(await c.api.taskLogs(task.id)).toContain('video:');
        await sleep(500);
        expect(await c.api.getTask(task.id)).toMatchObject({ status: 'DONE_SUCCESSFUL', attempt: 1 });
      } finally {
        await relay.close();
      }
    },
    120_000,
  );

  it('refuses the second of two agent processes sharing one name; the first keeps its name and its task', async () => {
    const first = await c.startAgent({ name: 'twin', slots: 1 });
    const target = out('twin.mp4');
    const task = await c.api.createTask({
      command: REALTIME,
      inputFile: clip4,
      outputFile: target,
      requires: [`agent:${first.label}`],
    });
    await c.api.waitForTask(task.id, isEncoding, 30_000);
    // Another box cloned with the same name (its own data directory).
    const second = await c.startAgent({
      name: 'twin',
      slots: 1,
      waitOnline: false,
      env: { FFLEET_DATA_DIR: join(c.dir, 'twin-clone'), LOG_LEVEL: 'info' },
    });
    expect(await second.exited).toEqual({ code: 2, signal: null });
    expect(second.output()).toMatch(
      /ffleet: another agent process named "[^"]+" \(on host [^)]+\) was connected first/,
    );
    expect(second.output()).toContain('FFLEET_AGENT_NAME');
    // The first one is still the agent of that name, online, and finishes the task in its first attempt:
    // the second one's hello (it runs nothing) does not hand the task to someone else before the second
    // is refused.
    expect(first.running).toBe(true);
    const done = await c.api.waitForTask(task.id, undefined, 60_000);
    expect(done, done.error).toMatchObject({
      status: 'DONE_SUCCESSFUL',
      agent: { name: first.label },
      attempt: 1,
    });
    expect(md5(target)).toBe(reference[clip4]);
    await waitFor(
      async () => (await c.api.getAgent(first.label))?.status === 'online',
      10_000,
      'first agent online',
    );
  }, 120_000);

  it('hands the running task back when an agent is SIGTERMed twice; another agent completes it', async () => {
    const target = out('handback.mp4');
    const { task, runner, other } = await twoAgentsAndRunner('hand', {
      command: REALTIME,
      inputFile: clip4,
      outputFile: target,
    });
    runner.signal('SIGTERM');
    await new Promise((r) => setTimeout(r, 300));
    runner.signal('SIGTERM');
    const exit = await runner.exited;
    expect(exit.code).toBe(0);
    // Handed back (not failed): the other agent runs it as the next attempt.
    const moved = await c.api.waitForTask(task.id, (t) => t.attempt === 2, 30_000);
    expect(moved.agent?.name).toBe(other.label);
    const done = await c.api.waitForTask(task.id, undefined, 60_000);
    expect(done).toMatchObject({ status: 'DONE_SUCCESSFUL', attempt: 2, agent: { name: other.label } });
    expect(md5(target)).toBe(reference[clip4]);
    expect(processesMatching(target)).toEqual([]);
    // Given back on purpose, not lost: the attempt did not count against the task's limit (3).
    const db = c.inProcess?.database;
    if (db) {
      const [row] = await db.rows<{ max_attempts: number }>(
        db.db,
        sql`SELECT max_attempts FROM tasks WHERE id = ${task.id}`,
      );
      expect(Number(row?.max_attempts)).toBe(4);
    }
  }, 120_000);

  it.skipIf(Boolean(process.env.MQTT_URL))(
    'refuses an agent with a wrong token: it logs the refusal and never appears',
    async () => {
      const agent = await c.startAgent({ name: 'intruder', token: 'not-the-agent-token', waitOnline: false });
      await agent.waitForOutput(/broker refused this agent/, 30_000);
      expect(await c.api.getAgent(agent.label)).toBeNull();
      const list = await c.api.get<Array<{ name: string }>>('/api/v1/agents');
      expect(list.body.map((a) => a.name)).not.toContain(agent.label);
      expect(agent.running).toBe(true); // It keeps retrying with backoff, it does not crash.
    },
    60_000,
  );
});
