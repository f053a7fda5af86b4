// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${NAME} wildcards are literal text here, not template placeholders.
/**
 * Hostile input: broken sidecars and script paths from users, and garbage on the wire from an agent
 * that holds valid credentials. The control plane must drop and log what does not parse, keep serving,
 * and keep the honest agents working.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { agentPayloadLimit, agentTopic, WORK_TOPIC } from '@ffleet/shared';
import type { MqttClient } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FleetAgent } from '../../agent/src/fleet-agent.ts';
import { connectRaw, sampleBirth } from '../../control-plane/src/broker/test-brokers.ts';
import {
  CLUSTER_START_TIMEOUT_MS,
  clusterHooks,
  makeTestVideo,
  TestCluster,
  waitFor,
  writeScript,
} from '../helpers/cluster.ts';
import { ENCODE, reimportingStep } from './support/fixtures.ts';

let c: TestCluster;
let worker: FleetAgent;
let input: string;

beforeAll(async () => {
  c = await TestCluster.start();
  input = await makeTestVideo(c.dir, 'media/clip.mp4', 2);
  worker = await c.startLocalAgent({ name: 'worker', slots: 1 });
}, CLUSTER_START_TIMEOUT_MS);

clusterHooks(() => c);

const out = (name: string) => join(c.dir, 'out', name);

/** A raw MQTT client holding an agent's valid credentials. */
async function connectAsAgent(name: string): Promise<MqttClient> {
  const r = await connectRaw(c.mqttUrl, { username: name, password: c.agentToken });
  if (!r.ok) throw new Error(r.error);
  return r.client;
}

describe('hostile task definitions', () => {
  it('fails the task when the re-imported pre-processing sidecar is not JSON', async () => {
    const script = writeScript(c.dir, 'scripts/garble.sh', `printf 'not json {{' > "$SIDECAR_FILE"`);
    const task = await c.api.createTask({
      command: ENCODE,
      inputFile: input,
      outputFile: out('garbled.mp4'),
      preProcessing: reimportingStep(c.dir, script),
    });
    const done = await c.api.waitForTask(task.id);
    expect(done.status).toBe('DONE_ERROR');
    expect(done.error).toMatch(/pre-processing/);
    expect(done.error).toMatch(/not valid JSON/);
    expect(done.command.resolved).toBe('');
  });

  it('fails the task, naming the path, when the re-imported sidecar holds a string the database cannot store', async () => {
    // Python's json.dumps writes a file name it could not decode as "\udcff": jsonb refuses it.
    const edit = `const fs=require('fs'),f=process.env.SIDECAR_FILE,j=JSON.parse(fs.readFileSync(f,'utf8'));j.metadata={file:'clip-\\udcff.mov'};fs.writeFileSync(f,JSON.stringify(j))`;
    const script = writeScript(c.dir, 'scripts/surrogate.sh', `exec '${process.execPath}' -e "${edit}"`);
    const task = await c.api.createTask({
      command: ENCODE,
      inputFile: input,
      outputFile: out('surrogate.mp4'),
      metadata: { file: 'clip.mov' },
      preProcessing: reimportingStep(c.dir, script),
    });
    const done = await c.api.waitForTask(task.id);
    expect(done.status).toBe('DONE_ERROR');
    expect(done.error).toContain('"metadata.file": contains an unpaired UTF-16 surrogate');
    expect(done.metadata).toEqual({ file: 'clip.mov' });
    expect(done.command.resolved).toBe('');
  });

  it('fails the task when a script path does not exist, naming the path', async () => {
    const missing = join(c.dir, 'scripts', 'no-such-dir', 'missing-script.sh');
    const task = await c.api.createTask({
      command: ENCODE,
      inputFile: input,
      outputFile: out('missing-script.mp4'),
      postProcessing: { scriptPath: missing },
    });
    const done = await c.api.waitForTask(task.id);
    expect(done.status).toBe('DONE_ERROR');
    expect(done.error).toMatch(/post-processing/);
    expect(done.error).toContain(missing);
  });
});

describe('an agent without a working transcoder', () => {
  it('comes online, says why in its log and in the agents API, and claims nothing', async () => {
    const transcoder = join(c.dir, 'no-such-dir', 'ffmpeg');
    const agent = await c.startAgent({
      name: 'no-transcoder',
      waitOnline: false,
      env: { FFLEET_TRANSCODER: transcoder, LOG_LEVEL: 'info' },
    });
    await agent.waitForOutput(/no working transcoder/, 30_000);
    await waitFor(
      async () => (await c.api.getAgent(agent.label))?.status === 'online',
      15_000,
      'agent online',
    );
    const shown = await c.api.getAgent(agent.label);
    expect(shown).toMatchObject({ transcoder: null });
    expect(shown?.transcoderError).toContain(transcoder);
    // Only this agent could take it: it stays queued.
    const task = await c.api.createTask({
      command: ENCODE,
      inputFile: input,
      outputFile: out('no-transcoder.mp4'),
      requires: [`agent:${agent.label}`],
    });
    await new Promise((r) => setTimeout(r, 2_000));
    expect((await c.api.getTask(task.id)).status).toBe('QUEUED');
    await c.api.patch(`/api/v1/tasks/${task.id}/cancel`);
    await agent.terminate('SIGKILL');
  }, 60_000);
});

describe('garbage from an authenticated agent client', () => {
  let rogue: MqttClient | null = null;

  afterAll(async () => {
    await rogue?.endAsync(true);
  });

  it('drops and logs malformed payloads, keeps serving, and the other agents keep working', async () => {
    const name = c.agentName('rogue');
    rogue = await connectAsAgent(name);
    const huge = 'x'.repeat(2 * 1024 * 1024);
    const payloads: Array<string | Buffer> = [
      randomBytes(4096),
      Buffer.from([0xff, 0xfe, 0x00, 0x7b]),
      '',
      '{',
      'null',
      '[]',
      '42',
      '"online"',
      JSON.stringify({ state: 'online' }),
      JSON.stringify({ kind: 'update', taskId: 1, patch: 'x' }),
      JSON.stringify({ type: 'claim', requestId: 'r', max: 1_000_000 }),
      JSON.stringify({ type: 'claim', requestId: 'r', max: -1 }),
      JSON.stringify({ type: 'nope', requestId: huge }),
      JSON.stringify({ bootId: 'b', running: 'everything', ts: 'now' }),
      JSON.stringify({
        kind: 'log',
        taskId: huge,
        attempt: 1,
        leaseToken: 'x',
        seq: -5,
        step: 'evil',
        text: huge,
      }),
      `{"deep":${'['.repeat(10_000)}${']'.repeat(10_000)}}`,
    ];
    const kinds = ['status', 'hello', 'heartbeat', 'requests', 'events'] as const;
    const before = c.cpLines.length;
    // Only reports may be large: a larger payload elsewhere is refused by the embedded broker (which
    // closes the connection) or dropped unparsed by the control plane (broker-security and
    // control-plane-client tests), so here each topic gets what fits its limit.
    let sent = 0;
    for (const kind of kinds) {
      for (const p of payloads) {
        if (Buffer.byteLength(p) > agentPayloadLimit(kind)) continue;
        await rogue.publishAsync(agentTopic(name, kind), p, { qos: 1 });
        sent += 1;
      }
    }
    // Topics that are not its own (refused by the embedded broker's ACL; dropped by the agent otherwise).
    await rogue
      .publishAsync(agentTopic(worker.name, 'inbox'), '{"type":"task.cancel"', { qos: 0 })
      .catch(() => {});
    await rogue.publishAsync(WORK_TOPIC, randomBytes(64), { qos: 0 }).catch(() => {});

    // Every malformed message is logged (an empty status only clears a retained birth: not logged).
    const expected = sent - 1;
    const dropped = () =>
      c.cpLines.slice(before).filter((l) => l.includes('dropped malformed agent message'));
    await waitFor(() => dropped().length >= expected, 30_000, `${expected} drop warnings`);
    expect(dropped().every((l) => l.includes(name))).toBe(true);
    expect(c.cpLines.slice(before).some((l) => l.includes('"level":50'))).toBe(false);

    const t0 = Date.now();
    expect(await c.api.health()).toMatchObject({ status: 'ok' });
    expect(Date.now() - t0).toBeLessThan(2_000);
    expect(await c.api.getAgent(name)).toBeNull();

    const task = await c.api.createTask({
      command: ENCODE,
      inputFile: input,
      outputFile: out('after-garbage.mp4'),
    });
    const done = await c.api.waitForTask(task.id);
    expect(done).toMatchObject({ status: 'DONE_SUCCESSFUL', agent: { name: worker.name } });
  }, 90_000);

  it('records a birth holding strings the database cannot store, with U+FFFD in their place', async () => {
    // An encoder name with a NUL used to fail the insert: the agent was kept out, unannounced.
    const name = c.agentName('odd');
    const odd = await connectAsAgent(name);
    try {
      await odd.publishAsync(
        agentTopic(name, 'status'),
        JSON.stringify({
          ...sampleBirth(name),
          hostname: 'host-\udcff',
          transcoder: { path: '/opt/ff\udcffmpeg', version: '5.1' },
          encoders: ['libx264', 'odd\u0000enc'],
        }),
        { qos: 1 },
      );
      await waitFor(async () => (await c.api.getAgent(name)) !== null, 10_000, 'the odd birth recorded');
      expect(await c.api.getAgent(name)).toMatchObject({
        status: 'online',
        hostname: 'host-\uFFFD',
        transcoder: { path: '/opt/ff\uFFFDmpeg', version: '5.1' },
        encoders: ['libx264', 'odd\uFFFDenc'],
      });
    } finally {
      await odd.endAsync(true);
    }
  });
});

describe('garbage from an HTTP client', () => {
  it('answers a URL over 16 KB with a 431 problem, as any other error, and keeps serving', async () => {
    const r = await fetch(`${c.api.baseUrl}/api/v1/tasks?status=${'x'.repeat(20_000)}`);
    expect(r.status).toBe(431);
    expect(r.headers.get('content-type')).toBe('application/problem+json');
    expect(await r.json()).toMatchObject({ status: 431, code: 'HEADERS_TOO_LARGE' });
    expect((await fetch(`${c.api.baseUrl}/health`)).status).toBe(200);
  });
});
