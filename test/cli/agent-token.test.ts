/**
 * Agents' own tokens (FFLEET_AGENT_AUTH=per-agent): `ffleet agent-token <name>` prints the token that
 * logs in that name and no other, and a control plane in per-agent mode lets in agents holding their
 * own token (its local agent too) and nobody presenting the fleet token or another agent's.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentTokenFor } from '../../control-plane/src/agent-token.ts';
import { ApiClient } from '../fleet/support/api-client.ts';
import { ENCODE, isEncoding, REALTIME } from '../fleet/support/fixtures.ts';
import {
  type ChildProcessHandle,
  findFreePort,
  inheritedEnv,
  processesMatching,
  REPO_ROOT,
  spawnFfleet,
} from '../fleet/support/processes.ts';
import { makeTestVideo, waitFor } from '../helpers/cluster.ts';
import { seedPgliteDir } from '../helpers/db.ts';

const dir = mkdtempSync(join(tmpdir(), 'ffleet-agent-token-cli-'));
const procs: ChildProcessHandle[] = [];
afterAll(async () => {
  await Promise.all(procs.map((p) => p.terminate('SIGKILL')));
  rmSync(dir, { recursive: true, force: true });
});

function agentToken(args: string[], env: Record<string, string> = {}) {
  const base = inheritedEnv();
  const r = spawnSync(process.execPath, [join(REPO_ROOT, 'bin/ffleet.js'), 'agent-token', ...args], {
    cwd: REPO_ROOT,
    env: { ...base, ...env },
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr.trim() };
}

describe('ffleet agent-token', () => {
  it("prints an agent's token from the control plane's data dir or FFLEET_AGENT_TOKEN", () => {
    const data = join(dir, 'data-print');
    mkdirSync(data, { recursive: true });
    writeFileSync(join(data, 'agent-token'), 'kept-fleet-token\n', { mode: 0o600 });
    expect(agentToken(['encode-01'], { FFLEET_DATA_DIR: data })).toEqual({
      code: 0,
      stdout: `${agentTokenFor('kept-fleet-token', 'encode-01')}\n`,
      stderr: '',
    });
    expect(
      agentToken(['encode-01'], { FFLEET_DATA_DIR: data, FFLEET_AGENT_TOKEN: 'set-fleet-token' }),
    ).toMatchObject({ code: 0, stdout: `${agentTokenFor('set-fleet-token', 'encode-01')}\n` });
    // A valid name may start with '-': it is the name, not an option.
    expect(agentToken(['-odd.name_'], { FFLEET_AGENT_TOKEN: 'set-fleet-token' })).toMatchObject({
      code: 0,
      stdout: `${agentTokenFor('set-fleet-token', '-odd.name_')}\n`,
    });
    // A later generation (after POST /api/v1/agents/{id}/token), either side of the name.
    for (const args of [
      ['encode-01', '--generation', '3'],
      ['--generation=3', 'encode-01'],
    ])
      expect(agentToken(args, { FFLEET_AGENT_TOKEN: 'set-fleet-token' }), args.join(' ')).toMatchObject({
        code: 0,
        stdout: `${agentTokenFor('set-fleet-token', 'encode-01', 3)}\n`,
      });
    // As the README runs it: `npm run -s agent-token -- <name>` prints the token alone.
    const base = inheritedEnv();
    const npm = spawnSync('npm', ['run', '-s', 'agent-token', '--', 'encode-02'], {
      cwd: REPO_ROOT,
      env: { ...base, FFLEET_AGENT_TOKEN: 'set-fleet-token' },
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect({ code: npm.status, stdout: npm.stdout }).toEqual({
      code: 0,
      stdout: `${agentTokenFor('set-fleet-token', 'encode-02')}\n`,
    });
  }, 120_000);

  it('refuses a bad name, a missing name or no fleet token: one line, exit code 2, no token printed', () => {
    const empty = join(dir, 'data-empty');
    const cases: Array<[string[], Record<string, string>, RegExp]> = [
      [
        ['a b'],
        { FFLEET_AGENT_TOKEN: 'x' },
        /^ffleet: invalid configuration: agent name "a b": use 1-100 letters/,
      ],
      [[], { FFLEET_AGENT_TOKEN: 'x' }, /^ffleet: missing required argument 'name'$/],
      [
        ['encode-01', '--generation', '-1'],
        { FFLEET_AGENT_TOKEN: 'x' },
        /^ffleet: invalid configuration: --generation: must be a whole number from 0, got "-1"$/,
      ],
      [
        ['encode-01', '--generation', '1.5'],
        { FFLEET_AGENT_TOKEN: 'x' },
        /^ffleet: invalid configuration: --generation: must be a whole number from 0, got "1.5"$/,
      ],
      [
        ['encode-01'],
        { FFLEET_DATA_DIR: empty },
        /^ffleet: invalid configuration: FFLEET_AGENT_TOKEN: not set, and .*data-empty\/agent-token: not found; run this where the control plane runs/,
      ],
    ];
    for (const [args, env, line] of cases) {
      const r = agentToken(args, env);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr.split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(line);
    }
  }, 120_000);
});

describe('FFLEET_AGENT_AUTH=per-agent end to end', () => {
  let env: Record<string, string>;
  let api: ApiClient;
  let mqttUrl: string;
  let cp: ChildProcessHandle;

  beforeAll(async () => {
    const port = await findFreePort();
    const mqttPort = await findFreePort();
    mqttUrl = `mqtt://127.0.0.1:${mqttPort}`;
    env = {
      FFLEET_DATA_DIR: join(dir, 'data'),
      PORT: String(port),
      MQTT_PORT: String(mqttPort),
      FFLEET_AGENT_AUTH: 'per-agent',
      FFLEET_AGENT_NAME: 'local-box',
      LOG_LEVEL: 'info',
    };
    api = new ApiClient(`http://127.0.0.1:${port}`);
    await seedPgliteDir(join(env.FFLEET_DATA_DIR!, 'pglite')); // not a first start's test
    cp = spawnFfleet('start', env, 'all-in-one');
    procs.push(cp);
    await cp.waitUntil(async () => (await api.health()) !== null, 90_000, '/health');
  }, 120_000);

  const agent = (name: string, token: string) => {
    const p = spawnFfleet(
      'agent',
      {
        FFLEET_DATA_DIR: join(dir, `box-${name}`),
        FFLEET_AGENT_NAME: name,
        FFLEET_AGENT_TOKEN: token,
        MQTT_URL: mqttUrl,
        LOG_LEVEL: 'info',
      },
      name,
    );
    procs.push(p);
    return p;
  };
  const online = async (name: string) => (await api.getAgent(name))?.status === 'online';

  it("lets in its local agent and a box holding its own token, which runs the work meant for it; refuses the fleet token and another agent's", async () => {
    await waitFor(() => online('local-box'), 60_000, 'the local agent online');

    const printed = agentToken(['encode-01'], { FFLEET_DATA_DIR: env.FFLEET_DATA_DIR! });
    expect(printed.code).toBe(0);
    const own = printed.stdout.trim();
    const box = agent('encode-01', own);
    await box.waitUntil(() => online('encode-01'), 60_000, 'encode-01 online');

    const input = await makeTestVideo(join(dir, 'media'), 'in.mp4', 1);
    const task = await api.createTask({
      command: ENCODE,
      inputFile: input,
      outputFile: join(dir, 'out', 'in.mp4'),
      requires: ['agent:encode-01'],
    });
    expect(await api.waitForTask(task.id, undefined, 60_000)).toMatchObject({
      status: 'DONE_SUCCESSFUL',
      agent: { name: 'encode-01' },
    });

    // encode-01's token under another name, and the fleet token itself: refused at the broker.
    const fleetToken = readFileSync(join(env.FFLEET_DATA_DIR!, 'agent-token'), 'utf8').trim();
    const impostor = agent('encode-02', own);
    const withFleetToken = agent('encode-03', fleetToken);
    for (const p of [impostor, withFleetToken])
      await p.waitForOutput(/broker refused this agent: check the agent name and token/, 60_000);
    await cp.waitForOutput(
      /the fleet's agent token no longer logs agents in .*ffleet agent-token encode-03/,
      10_000,
    );
    expect(await api.getAgent('encode-02')).toBeNull();
    expect(await api.getAgent('encode-03')).toBeNull();
    // The real encode-01 was not disturbed by the impostor presenting its token.
    expect(await online('encode-01')).toBe(true);
    // No token in any log.
    for (const p of [cp, box, impostor, withFleetToken]) {
      expect(p.output()).not.toContain(fleetToken);
      expect(p.output()).not.toContain(own);
    }
  }, 240_000);
});

/** SIGTERM ends it within seconds, cleanly (not after waiting for a control plane that cannot hear it). */
async function expectQuickExit(p: ChildProcessHandle): Promise<void> {
  const t0 = Date.now();
  p.signal('SIGTERM');
  expect(await p.exited).toEqual({ code: 0, signal: null });
  expect(Date.now() - t0).toBeLessThan(10_000);
}

describe('an agent the broker stops letting in while it runs a task', () => {
  /**
   * A control plane in shared mode (lease `leaseMs`), a box on the fleet's token running a `-re` task
   * that only it may run, then the control plane restarted with FFLEET_AGENT_AUTH=per-agent.
   */
  async function switchUnderRunningTask(name: string, leaseMs: number) {
    const data = join(dir, `data-${name}`);
    await seedPgliteDir(join(data, 'pglite'));
    const port = await findFreePort();
    const mqttPort = await findFreePort();
    const cpEnv = {
      FFLEET_DATA_DIR: data,
      PORT: String(port),
      MQTT_PORT: String(mqttPort),
      FFLEET_LEASE_TTL_MS: String(leaseMs),
      LOG_LEVEL: 'info',
    };
    const api = new ApiClient(`http://127.0.0.1:${port}`);
    const startCp = async (extra: Record<string, string>) => {
      const p = spawnFfleet('control-plane', { ...cpEnv, ...extra }, 'control plane');
      procs.push(p);
      await p.waitUntil(async () => (await api.health()) !== null, 90_000, '/health');
      return p;
    };
    const cp = await startCp({});
    const fleetToken = readFileSync(join(data, 'agent-token'), 'utf8').trim();
    const startBox = (token: string) => {
      const p = spawnFfleet(
        'agent',
        {
          FFLEET_DATA_DIR: join(dir, `box-${name}`),
          FFLEET_AGENT_NAME: name,
          FFLEET_AGENT_TOKEN: token,
          FFLEET_HEARTBEAT_MS: '2000',
          MQTT_URL: `mqtt://127.0.0.1:${mqttPort}`,
          LOG_LEVEL: 'info',
        },
        name,
      );
      procs.push(p);
      return p;
    };
    const box = startBox(fleetToken);
    await box.waitUntil(async () => (await api.getAgent(name))?.status === 'online', 60_000, 'online');
    const input = await makeTestVideo(join(dir, 'media'), 'long.mp4', 30);
    const output = join(dir, 'out', `${name}.mp4`);
    const task = await api.createTask({
      command: REALTIME,
      inputFile: input,
      outputFile: output,
      requires: [`agent:${name}`],
    });
    await api.waitForTask(task.id, isEncoding, 60_000);
    expect(processesMatching(output)).toHaveLength(1);
    // The operator switches to per-agent before giving this box its own token.
    await cp.terminate();
    await startCp({ FFLEET_AGENT_AUTH: 'per-agent' });
    return { api, box, startBox, fleetToken, task, output };
  }

  it('hands the task back before its lease can run out, so it never writes beside the attempt that replaces it', async () => {
    const { api, box, startBox, fleetToken, task, output } = await switchUnderRunningTask('enc-old', 8000);
    await box.waitForOutput(
      /the broker keeps refusing this agent while it runs tasks: .*handing them back now/,
      30_000,
    );
    await waitFor(() => processesMatching(output).length === 0, 5_000, 'the transcoder gone');
    // The control plane has not handed the task on yet: the lease had not run out when the box stopped.
    const meanwhile = await api.getTask(task.id);
    expect(meanwhile).toMatchObject({ status: 'RUNNING', attempt: 1 });
    expect(existsSync(output)).toBe(true); // partial output kept: the path is the next attempt's
    expect(box.running).toBe(true); // it keeps retrying with backoff
    // Stopped, it does not wait for a control plane that cannot hear it (30 s for an unreachable one).
    await expectQuickExit(box);
    expect(box.output()).toMatch(
      /the broker refuses this agent, so the control plane cannot get the last reports/,
    );
    expect(box.output()).not.toContain(fleetToken);

    // The operator gives the box its own token, quickly: its hand-back reaches the control plane while the
    // lease still holds, and the task goes back to the queue and runs again (a cancel would have ended it).
    const own = startBox(agentTokenFor(fleetToken, 'enc-old'));
    const next = await api.waitForTask(
      task.id,
      (t) => t.attempt === 2 || t.status.startsWith('DONE_'),
      60_000,
    );
    expect(next).toMatchObject({ attempt: 2, agent: { name: 'enc-old' } });
    expect(['RUNNING', 'DONE_SUCCESSFUL']).toContain(next.status);
    await api.request('PATCH', `/api/v1/tasks/${task.id}/cancel`);
    await own.terminate();
  }, 240_000);

  it('stopped while refused, hands its running task back at once instead of waiting for it', async () => {
    // A 30 s lease: the box would otherwise run on for ~25 s before handing the task back.
    const { box, output } = await switchUnderRunningTask('enc-term', 30_000);
    await box.waitForOutput(/broker refused this agent/, 30_000);
    expect(processesMatching(output)).toHaveLength(1);
    await expectQuickExit(box);
    expect(box.output()).toMatch(
      /the broker refuses this agent, so its tasks cannot finish for the control plane/,
    );
    expect(processesMatching(output)).toEqual([]);
    expect(existsSync(output)).toBe(true);
  }, 240_000);
});
