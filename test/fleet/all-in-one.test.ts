/**
 * `npm start` as a user runs it: `ffleet start` with nothing configured but free ports and a data dir —
 * embedded PGlite, embedded broker and the local agent in one process. One POST transcodes a file; a
 * restart keeps the task and its result.
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTestVideo, waitFor } from '../helpers/cluster.ts';
import { openTestDatabase } from '../helpers/db.ts';
import { ApiClient } from './support/api-client.ts';
import { repeatedKeys } from './support/log-lines.ts';
import { type ChildProcessHandle, findFreePort, spawnFfleet } from './support/processes.ts';

describe('all-in-one (ffleet start)', () => {
  let dir: string;
  let env: Record<string, string>;
  let api: ApiClient;
  let proc: ChildProcessHandle | undefined;

  const start = async () => {
    proc = spawnFfleet('start', env, 'all-in-one');
    await waitFor(() => api.health(), 90_000, 'all-in-one /health').catch((err) => {
      throw new Error(`${(err as Error).message}\n${proc?.output().slice(-4000)}`);
    });
  };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ffleet-all-in-one-'));
    const port = await findFreePort();
    env = {
      FFLEET_DATA_DIR: join(dir, 'data'),
      PORT: String(port),
      MQTT_PORT: String(await findFreePort()),
      HOST: '127.0.0.1',
      LOG_LEVEL: 'info',
    };
    api = new ApiClient(`http://127.0.0.1:${port}`);
  });

  afterAll(async () => {
    await proc?.terminate();
    rmSync(dir, { recursive: true, force: true });
  });

  it('transcodes a posted file with its local agent, and keeps the task across a restart', async () => {
    const input = await makeTestVideo(join(dir, 'media'), 'in.mp4', 1);
    const output = join(dir, 'out', 'sub', 'in-small.mp4');
    await start();
    const local = await waitFor(
      async () => {
        const r = await api.get<Array<{ name: string; status: string }>>('/api/v1/agents');
        return r.body.find((a) => a.status === 'online');
      },
      30_000,
      'the local agent online',
    );

    const task = await api.createTask({
      command: '-i ${INPUT_FILE} -vf scale=160:-2 -c:v mpeg4 ${OUTPUT_FILE}',
      inputFile: input,
      outputFile: output,
    });
    const done = await api.waitForTask(task.id, undefined, 60_000);
    expect(done).toMatchObject({
      status: 'DONE_SUCCESSFUL',
      progress: 100,
      attempt: 1,
      agent: { name: local.name },
      outputFile: { resolved: output },
    });
    expect(existsSync(output)).toBe(true);
    expect(await api.taskLogs(task.id)).toContain('in.mp4');

    // The start line tells the operator where the dashboard and the API reference are.
    expect(proc?.output()).toMatch(
      /"dashboard":"http:\/\/127\.0\.0\.1:\d+\/ui","docs":"http:\/\/127\.0\.0\.1:\d+\/api\/v1\/docs","msg":"ffleet is ready"/,
    );
    await proc?.terminate();
    expect(await proc?.exited).toEqual({ code: 0, signal: null });
    // Every log line of the run (control plane and local agent: session, runner, outbox…) names each key
    // once; the lines checked include the agent's parts, which bind their own `component`.
    const lines = (proc?.output() ?? '').split('\n').filter((l) => l.startsWith('{'));
    for (const component of ['agent', 'session', 'runner', 'fleet', 'broker'])
      expect(
        lines.some((l) => l.includes(`"component":"${component}"`)),
        component,
      ).toBe(true);
    for (const line of lines) expect(repeatedKeys(line), line).toEqual([]);
    await start();
    expect(await api.getTask(task.id)).toMatchObject({ status: 'DONE_SUCCESSFUL', progress: 100 });
  }, 180_000);

  it('stops with one clear line, not a stack trace, when its agent cannot keep its outbox', async () => {
    // A file where the agent's state directory would be.
    const data = join(dir, 'bad-data');
    mkdirSync(data, { recursive: true });
    writeFileSync(join(data, 'agent-blocked'), 'not a directory');
    const cases = [
      spawnFfleet(
        'agent',
        {
          ...env,
          FFLEET_DATA_DIR: data,
          FFLEET_AGENT_NAME: 'blocked',
          FFLEET_AGENT_TOKEN: 'a-test-agent-token',
          MQTT_URL: 'mqtt://127.0.0.1:1',
        },
        'agent',
      ),
      // Its own ports: the first test leaves its all-in-one running.
      spawnFfleet(
        'start',
        {
          ...env,
          PORT: String(await findFreePort()),
          MQTT_PORT: String(await findFreePort()),
          FFLEET_DATA_DIR: data,
          FFLEET_AGENT_NAME: 'blocked',
        },
        'start',
      ),
    ];
    try {
      for (const p of cases) {
        expect(await p.exited).toEqual({ code: 1, signal: null });
        const text = p.output();
        expect(text).toMatch(
          /^ffleet: agent failed to start: ENOTDIR: not a directory, mkdir '.*agent-blocked\/outbox'$/m,
        );
        expect(text).not.toMatch(/^\s+at /m);
      }
    } finally {
      // A failed expectation above must not leave the other case running (it outlived a CI run once).
      await Promise.all(cases.map((p) => (p.running ? p.terminate('SIGKILL') : undefined)));
    }
  }, 120_000);

  it('refuses a second process on its data dir before touching the database or the outbox', async () => {
    // The first test's all-in-one is still running on env's data dir.
    if (!proc?.running) await start();
    const before = await api.get<unknown[]>('/api/v1/tasks');
    const local = (await api.get<Array<{ name: string }>>('/api/v1/agents')).body[0]!;
    const cases = [
      spawnFfleet(
        'start',
        { ...env, PORT: String(await findFreePort()), MQTT_PORT: String(await findFreePort()) },
        'second start',
      ),
      // An agent named as the local one, on the same data dir: the same outbox.
      spawnFfleet(
        'agent',
        {
          ...env,
          FFLEET_AGENT_NAME: local.name,
          FFLEET_AGENT_TOKEN: 'a-test-agent-token',
          MQTT_URL: 'mqtt://127.0.0.1:1',
        },
        'second agent',
      ),
    ];
    try {
      const [second, agent] = cases as [ChildProcessHandle, ChildProcessHandle];
      expect(await second.exited).toEqual({ code: 2, signal: null });
      expect(second.output()).toMatch(
        new RegExp(`^ffleet: the embedded database in .*/pglite is in use by process ${proc!.pid} \\(`, 'm'),
      );
      expect(second.output()).not.toContain('database ready');
      expect(await agent.exited).toEqual({ code: 2, signal: null });
      expect(agent.output()).toMatch(
        new RegExp(
          `^ffleet: agent failed to start: the outbox .*/agent-${local.name}/outbox is in use by process ${proc!.pid} `,
          'm',
        ),
      );
    } finally {
      await Promise.all(cases.map((p) => (p.running ? p.terminate('SIGKILL') : undefined)));
    }
    // The first one goes on, its data whole.
    expect((await api.get<unknown[]>('/api/v1/tasks')).body).toEqual(before.body);
  }, 120_000);

  it('on PostgreSQL too, refuses a second process on its data dir before it touches the shared database', async () => {
    const pg = await openTestDatabase('postgres');
    const pgDir = mkdtempSync(join(tmpdir(), 'ffleet-all-in-one-pg-'));
    const port = await findFreePort();
    const envPg = {
      ...env,
      FFLEET_DATA_DIR: join(pgDir, 'data'),
      PORT: String(port),
      MQTT_PORT: String(await findFreePort()),
      DATABASE_URL: pg.url!,
    };
    const first = spawnFfleet('start', envPg, 'all-in-one on PostgreSQL');
    const apiPg = new ApiClient(`http://127.0.0.1:${port}`);
    const agents = async () => (await apiPg.get<Array<{ status: string }>>('/api/v1/agents')).body;
    try {
      await waitFor(
        async () => (await agents().catch(() => []))[0]?.status === 'online',
        90_000,
        'its agent',
      );
      const second = spawnFfleet(
        'start',
        { ...envPg, PORT: String(await findFreePort()), MQTT_PORT: String(await findFreePort()) },
        'second start on PostgreSQL',
      );
      expect(await second.exited).toEqual({ code: 2, signal: null });
      expect(second.output()).toMatch(
        new RegExp(`^ffleet: the data dir .*data is in use by process ${first.pid} \\(`, 'm'),
      );
      // Its start had marked every agent offline in the shared database before its local agent found
      // the outbox taken; the running one's agent then showed offline for good.
      expect(second.output()).not.toContain('database ready');
      expect((await agents()).map((a) => a.status)).toEqual(['online']);
    } finally {
      await first.terminate();
      await pg.drop();
      rmSync(pgDir, { recursive: true, force: true });
    }
  }, 150_000);
});
