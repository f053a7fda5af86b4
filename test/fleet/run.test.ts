// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${NAME} wildcards are literal text here, not template placeholders.
/**
 * End-to-end task runs through the REST API: a real control plane, real agents over MQTT, real ffmpeg.
 * One cluster for the file (in-process control plane and agents: these tests need no signals).
 */
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Task } from '@ffleet/shared';
import { beforeAll, describe, expect, it } from 'vitest';
import type { FleetAgent } from '../../agent/src/fleet-agent.ts';
import {
  CLUSTER_START_TIMEOUT_MS,
  clusterHooks,
  makeTestVideo,
  probeDurationSeconds,
  processesMatching,
  TestCluster,
  waitFor,
  writeScript,
} from '../helpers/cluster.ts';
import { ENCODE, reimportingStep } from './support/fixtures.ts';

let c: TestCluster;
let main: FleetAgent;
let input: string;
let longInput: string;

beforeAll(async () => {
  c = await TestCluster.start();
  [input, longInput] = await Promise.all([
    makeTestVideo(c.dir, 'media/clip.mp4', 2),
    makeTestVideo(c.dir, 'media/long.mp4', 30),
  ]);
  main = await c.startLocalAgent({ name: 'main', slots: 1 });
}, CLUSTER_START_TIMEOUT_MS);

clusterHooks(() => c);

const out = (name: string) => join(c.dir, 'out', name);

describe('a task submitted through the API', () => {
  it('succeeds with every field resolved, progress complete, the output written and the logs kept', async () => {
    const task = await c.api.createTask({
      name: 'full',
      command: ENCODE,
      inputFile: input,
      outputFile: '${INPUT_FILE_DIR}/${INPUT_FILE_BASENAME}-full.mp4',
      metadata: { show: 'demo' },
    });
    expect(task.status).toBe('QUEUED');
    const done = await c.api.waitForTask(task.id);

    const expectedOut = join(c.dir, 'media', 'clip-full.mp4');
    expect(done).toMatchObject({
      status: 'DONE_SUCCESSFUL',
      error: '',
      progress: 100,
      remaining: 0,
      attempt: 1,
      agent: { name: main.name },
      inputFile: { raw: input, resolved: input },
      outputFile: { resolved: expectedOut },
    });
    expect(done.command.raw).toBe(ENCODE);
    expect(done.command.resolved).toContain(input);
    expect(done.command.resolved).toContain(expectedOut);
    expect(done.command.resolved).not.toContain('${');
    expect(done.startedAt).toBeGreaterThan(0);
    expect(done.finishedAt).toBeGreaterThanOrEqual(done.startedAt);
    expect(existsSync(expectedOut)).toBe(true);
    expect(await probeDurationSeconds(expectedOut)).toBeCloseTo(2, 0);

    const logs = await c.api.taskLogs(task.id);
    expect(logs).toContain('[attempt 1 transcoder]');
    expect(logs).toMatch(/Input #0, mov,mp4/);
    expect(logs).toMatch(/Output #0, mp4/);
  });

  it('fails in pre-processing without running the transcoder, naming the step and exit code', async () => {
    const script = writeScript(c.dir, 'scripts/pre-fail.sh', 'echo "pre says no" >&2\nexit 3');
    const marker = out('pre-fail.mp4');
    const task = await c.api.createTask({
      command: ENCODE,
      inputFile: input,
      outputFile: marker,
      preProcessing: { scriptPath: script },
    });
    const done = await c.api.waitForTask(task.id);
    expect(done.status).toBe('DONE_ERROR');
    expect(done.error).toMatch(/pre-processing/);
    expect(done.error).toMatch(/\b3\b/);
    expect(done.preProcessing?.error).toBe(done.error);
    expect(done.preProcessing?.finishedAt).toBeGreaterThan(0);
    expect(existsSync(marker)).toBe(false);
    const logs = await c.api.taskLogs(task.id);
    expect(logs).toContain('pre says no');
    expect(logs).not.toContain('transcoder]');
  });

  it('fails when the re-imported sidecar has an added key, naming it', async () => {
    // The sidecar's top-level object gains a key: `{` at the very start of the file only.
    const script = writeScript(c.dir, 'scripts/add-key.sh', `sed -i '1s/^{/{"extra":1,/' "$SIDECAR_FILE"`);
    const task = await c.api.createTask({
      command: ENCODE,
      inputFile: input,
      outputFile: out('reimport.mp4'),
      preProcessing: reimportingStep(c.dir, script),
    });
    const done = await c.api.waitForTask(task.id);
    expect(done.status).toBe('DONE_ERROR');
    expect(done.error).toMatch(/extra/);
    expect(done.error).toMatch(/added/);
    expect(existsSync(out('reimport.mp4'))).toBe(false);
  });

  it('fails when the transcoder fails, and post-processing never runs', async () => {
    const marker = join(c.dir, 'markers', 'post-ran');
    const post = writeScript(c.dir, 'scripts/post-marker.sh', `mkdir -p ${c.dir}/markers && touch ${marker}`);
    const task = await c.api.createTask({
      command: ENCODE,
      inputFile: join(c.dir, 'media', 'does-not-exist.mp4'),
      outputFile: out('never.mp4'),
      postProcessing: { scriptPath: post },
    });
    const done = await c.api.waitForTask(task.id);
    expect(done.status).toBe('DONE_ERROR');
    expect(done.error).toMatch(/transcoder/);
    expect(done.error).toMatch(/does-not-exist/);
    expect(done.postProcessing?.startedAt).toBe(0);
    expect(existsSync(marker)).toBe(false);
  });

  it('fails in post-processing after the output was written', async () => {
    const post = writeScript(c.dir, 'scripts/post-fail.sh', 'echo "post says no" >&2\nexit 4');
    const task = await c.api.createTask({
      command: ENCODE,
      inputFile: input,
      outputFile: out('post-fail.mp4'),
      postProcessing: { scriptPath: post },
    });
    const done = await c.api.waitForTask(task.id);
    expect(done.status).toBe('DONE_ERROR');
    expect(done.error).toMatch(/post-processing/);
    expect(done.error).toMatch(/\b4\b/);
    expect(done.postProcessing?.error).toBe(done.error);
    expect(existsSync(out('post-fail.mp4'))).toBe(true);
  });
});

describe('scheduling', () => {
  it('runs queued tasks highest priority first, FIFO within a priority, on a one-slot agent', async () => {
    // The first task holds the only slot until the gate file appears, so the rest queue up behind it.
    const gate = join(c.dir, 'scripts', 'priority.gate');
    const hold = writeScript(c.dir, 'scripts/hold.sh', `while [ ! -f ${gate} ]; do sleep 0.05; done`);
    const blocker = await c.api.createTask({
      name: 'blocker',
      command: ENCODE,
      inputFile: input,
      outputFile: out('prio-blocker.mp4'),
      preProcessing: { scriptPath: hold },
    });
    await c.api.waitForTask(blocker.id, (t) => t.status === 'PRE_PROCESSING');
    const order: Array<[string, number]> = [
      ['low', -5],
      ['mid-1', 5],
      ['top', 10],
      ['mid-2', 5],
      ['zero', 0],
      ['mid-3', 5],
    ];
    const queued: Task[] = [];
    for (const [name, priority] of order) {
      queued.push(
        await c.api.createTask({
          name,
          priority,
          command: ENCODE,
          inputFile: input,
          outputFile: out(`prio-${name}.mp4`),
        }),
      );
    }
    writeFileSync(gate, '');
    const done = await Promise.all(queued.map((t) => c.api.waitForTask(t.id)));
    expect(done.every((t) => t.status === 'DONE_SUCCESSFUL')).toBe(true);
    const ran = [...done].sort((a, b) => a.startedAt - b.startedAt).map((t) => t.name);
    expect(ran).toEqual(['top', 'mid-1', 'mid-2', 'mid-3', 'zero', 'low']);
  });

  it('warns at start that an agent with 0 slots claims nothing', async () => {
    const idle = await c.startLocalAgent({ name: 'zero-slots', slots: 0 });
    try {
      const line = c.cpLines.find((l) => l.includes('FFLEET_AGENT_SLOTS is 0'));
      expect(line && JSON.parse(line)).toMatchObject({ level: 40, agent: idle.name });
    } finally {
      await idle.stop();
    }
  });

  it('routes a task that requires a label only to the agent that has it', async () => {
    const gpu = await c.startLocalAgent({ name: 'gpu', slots: 1, labels: ['gpu'] });
    try {
      const tasks = await Promise.all(
        [1, 2, 3].map((i) =>
          c.api.createTask({
            command: ENCODE,
            inputFile: input,
            outputFile: out(`gpu-${i}.mp4`),
            requires: ['gpu'],
          }),
        ),
      );
      const done = await Promise.all(tasks.map((t) => c.api.waitForTask(t.id)));
      for (const t of done) expect(t).toMatchObject({ status: 'DONE_SUCCESSFUL', agent: { name: gpu.name } });
    } finally {
      await gpu.stop();
    }
  });

  it('claims with the labels a PATCH gave the agent, not the ones it had before', async () => {
    const task = await c.api.createTask({
      command: ENCODE,
      inputFile: input,
      outputFile: out('relabeled.mp4'),
      requires: ['relabeled'],
    });
    // No agent offers it: the control plane says so in its log (once), and the task waits.
    const warned = () =>
      c.cpLines.filter((l) => l.includes('no known agent can run') && l.includes('["relabeled"]'));
    await waitFor(async () => warned().length > 0, 5_000, 'the unmet requirement logged');
    expect(JSON.parse(warned()[0]!)).toMatchObject({
      level: 40,
      requires: ['relabeled'],
      offeredByNoAgent: ['relabeled'],
    });
    // The agent has claimed (and so built its capability list) many times in this file by now.
    await new Promise((r) => setTimeout(r, 1_500));
    expect((await c.api.getTask(task.id)).status).toBe('QUEUED');
    const before = (await c.api.getAgent(main.name))!.labels;
    const patched = await c.api.patch(`/api/v1/agents/${main.name}`, { labels: [...before, 'relabeled'] });
    expect(patched.status).toBe(200);
    try {
      const done = await c.api.waitForTask(task.id);
      expect(done).toMatchObject({ status: 'DONE_SUCCESSFUL', agent: { name: main.name } });
      const again = await c.api.createTask({
        command: ENCODE,
        inputFile: input,
        outputFile: out('relabeled-2.mp4'),
        requires: ['relabeled'],
      });
      expect(await c.api.waitForTask(again.id)).toMatchObject({ status: 'DONE_SUCCESSFUL' });
      expect(warned()).toHaveLength(1);
    } finally {
      expect((await c.api.patch(`/api/v1/agents/${main.name}`, { labels: before })).status).toBe(200);
    }
  });

  it('gives a paused agent no new work until it is resumed', async () => {
    const paused = await c.api.patch<{ status: string; paused: boolean }>(`/api/v1/agents/${main.name}`, {
      paused: true,
    });
    expect(paused.status).toBe(200);
    expect(paused.body).toMatchObject({ status: 'draining', paused: true });
    const task = await c.api.createTask({ command: ENCODE, inputFile: input, outputFile: out('paused.mp4') });
    // The work hint reached the agent long before this: a claim would have happened by now.
    await new Promise((r) => setTimeout(r, 3_000));
    expect((await c.api.getTask(task.id)).status).toBe('QUEUED');
    expect((await c.api.patch(`/api/v1/agents/${main.name}`, { paused: false })).status).toBe(200);
    const done = await c.api.waitForTask(task.id);
    expect(done).toMatchObject({ status: 'DONE_SUCCESSFUL', agent: { name: main.name } });
  });
});

describe('cancel and restart', () => {
  /** A task whose ffmpeg is writing `name` in the output dir: -re reads the 30 s input in real time. */
  async function longEncode(name: string) {
    const target = out(name);
    const task = await c.api.createTask({
      command: `-re ${ENCODE}`,
      inputFile: longInput,
      outputFile: target,
    });
    const running = await c.api.waitForTask(task.id, (t) => t.status === 'RUNNING' && t.progress > 0, 30_000);
    await waitFor(() => existsSync(target) && processesMatching(target).length > 0, 10_000, 'ffmpeg writing');
    return { task, running, target };
  }

  it('cancels a running task: the transcoder is killed and the partial output removed', async () => {
    const { task, running, target } = await longEncode('cancel-running.mp4');
    // The resolved values the agent holds back at the start of a transcode ride on its first progress
    // report at the latest: a running task never shows progress without them.
    expect(running.command.resolved).toContain(target);
    expect(running.inputFile.resolved).toBe(longInput);
    expect(running.outputFile.resolved).toBe(target);

    const r = await c.api.patch<Task>(`/api/v1/tasks/${task.id}/cancel`);
    expect(r.status).toBe(200);
    // The answer waits (briefly) for the agent's kill: the client sees the final state.
    expect(r.body.status).toBe('DONE_CANCELED');
    const done = await c.api.waitForTask(task.id, undefined, 20_000);
    expect(done.status).toBe('DONE_CANCELED');
    expect(processesMatching(target)).toEqual([]);
    expect(existsSync(target)).toBe(false);
    expect((await c.api.patch(`/api/v1/tasks/${task.id}/cancel`)).status).toBe(409);
  });

  it('deletes a running task after cancelling it: the transcoder is gone and the partial output removed when it answers', async () => {
    const { task, target } = await longEncode('delete-running.mp4');
    const r = await c.api.request('DELETE', `/api/v1/tasks/${task.id}`);
    expect(r.status).toBe(204);
    // "cancels first if running, then deletes" (CONTRACT): done by the time the answer comes.
    expect(processesMatching(target)).toEqual([]);
    expect(existsSync(target)).toBe(false);
    expect((await c.api.request('GET', `/api/v1/tasks/${task.id}`)).status).toBe(404);
  });

  it('cancels a queued task at once', async () => {
    const task = await c.api.createTask({
      command: ENCODE,
      inputFile: input,
      outputFile: out('q.mp4'),
      requires: ['nobody-has-this'],
    });
    const r = await c.api.patch<Task>(`/api/v1/tasks/${task.id}/cancel`);
    expect(r.status).toBe(200);
    expect(r.body.status).toBe('DONE_CANCELED');
    expect((await c.api.getTask(task.id)).status).toBe('DONE_CANCELED');
  });

  it('restarts a finished task: it runs again as the next attempt', async () => {
    const target = out('restart.mp4');
    const task = await c.api.createTask({ command: ENCODE, inputFile: input, outputFile: target });
    const first = await c.api.waitForTask(task.id);
    expect(first).toMatchObject({ status: 'DONE_SUCCESSFUL', attempt: 1 });
    const r = await c.api.patch<Task>(`/api/v1/tasks/${task.id}/restart`);
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ status: 'QUEUED', progress: 0, finishedAt: 0 });
    const second = await c.api.waitForTask(task.id, (t) => t.attempt === 2 && t.status.startsWith('DONE_'));
    expect(second).toMatchObject({ status: 'DONE_SUCCESSFUL', attempt: 2, progress: 100 });
    expect(second.finishedAt).toBeGreaterThan(first.finishedAt);
    expect(await c.api.taskLogs(task.id)).toContain('[attempt 2 transcoder]');
  });
});
