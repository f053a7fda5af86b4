import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { claimAsNewAgent, eventRows, json, type ReportFields, VALID } from '../../../test/api/support.ts';
import { useTestApp } from '../../../test/helpers/app.ts';
import { claimTasksIn } from './claim.ts';
import { GroupCommit } from './group-commit.ts';
import { sweepExpiredLeases } from './leases.ts';

type App = ReturnType<typeof useTestApp>;

/** A new task claimed by a new agent, and a way to send its reports. */
async function claimedTaskIn(t: App) {
  const task = await json(await t.call('POST', '/api/v1/tasks', VALID.task()), 201);
  const { agent, claims, report } = await claimAsNewAgent(t, 1);
  const claim = claims[0];
  expect(claim?.task.id).toBe(task.id);
  const send = (r: ReportFields) => report(claim!, r);
  const logs = () =>
    t.db.rows<{ step: string; text: string; attempt: number }>(
      t.db.db,
      sql`SELECT step, text, attempt FROM task_logs WHERE task_id = ${task.id} ORDER BY id`,
    );
  const status = async () => (await json(await t.call('GET', `/api/v1/tasks/${task.id}`))).status as string;
  return { send, logs, status, taskId: task.id as string, agent };
}

describe('reports that carry logs', () => {
  const t = useTestApp();
  const claimedTask = () => claimedTaskIn(t);

  it('stores the lines an update carries, in order after earlier log reports', async () => {
    const { send, logs, status } = await claimedTask();
    await send({ kind: 'update', seq: 0, patch: { status: 'RUNNING', startedAt: Date.now() } });
    await send({ kind: 'log', seq: 1, step: 'transcoder', text: 'frame=1\n' });
    const outcome = await send({
      kind: 'update',
      seq: 2,
      patch: { status: 'DONE_SUCCESSFUL', progress: 100, finishedAt: Date.now() },
      logs: [
        { step: 'transcoder', text: 'frame=2\nvideo:1kB\n' },
        { step: 'post', text: '' },
        { step: 'agent', text: 'agent line\n' },
      ],
    });
    expect(outcome).toMatchObject({ kind: 'applied', status: 'DONE_SUCCESSFUL', finished: true });
    expect(await status()).toBe('DONE_SUCCESSFUL');
    expect(await logs()).toEqual([
      { step: 'transcoder', text: 'frame=1\n', attempt: 1 },
      { step: 'transcoder', text: 'frame=2\nvideo:1kB\n', attempt: 1 },
      { step: 'agent', text: 'agent line\n', attempt: 1 },
    ]);
    // The same report again (a replay from the agent's outbox) stores nothing twice.
    const again = await send({
      kind: 'update',
      seq: 2,
      patch: { status: 'DONE_SUCCESSFUL' },
      logs: [{ step: 'transcoder', text: 'frame=2\nvideo:1kB\n' }],
    });
    expect(again).toEqual({ kind: 'duplicate' });
    expect(await logs()).toHaveLength(3);
  });

  it('stores nothing from a stale attempt', async () => {
    const { send, logs } = await claimedTask();
    const outcome = await send({
      kind: 'update',
      seq: 0,
      leaseToken: 'not-the-lease',
      patch: { status: 'RUNNING' },
      logs: [{ step: 'transcoder', text: 'zombie output\n' }],
    });
    expect(outcome).toMatchObject({ kind: 'stale' });
    expect(await logs()).toEqual([]);
  });

  it('stores the output of an attempt lost with its agent when its late reports come, once per seq', async () => {
    const { send, logs, status, taskId } = await claimedTask();
    try {
      await send({ kind: 'update', seq: 0, patch: { status: 'RUNNING', startedAt: Date.now() } });
      // The agent is lost (its lease runs out): the task goes back to the queue.
      expect(await sweepExpiredLeases(t.ctx, { onlyIds: [taskId], reason: 'lease expired' })).toMatchObject({
        requeued: [taskId],
      });
      expect(await status()).toBe('QUEUED');
      // Its late reports (a box the broker refused until then) change nothing, but their output is kept.
      const late = await send({
        kind: 'update',
        seq: 1,
        patch: { status: 'QUEUED', deliberate: true },
        logs: [
          { step: 'transcoder', text: 'last lines\n' },
          { step: 'agent', text: 'handed back: the broker refuses this agent\n' },
        ],
      });
      expect(late).toMatchObject({ kind: 'stale' });
      expect(await status()).toBe('QUEUED');
      // A replay of the same report, a report under another lease token: nothing more.
      await send({
        kind: 'update',
        seq: 1,
        patch: { status: 'QUEUED' },
        logs: [{ step: 'agent', text: 'again\n' }],
      });
      await send({ kind: 'log', seq: 2, leaseToken: 'not-the-lease', step: 'transcoder', text: 'forged\n' });
      expect(await logs()).toEqual([
        // The sweep says why the attempt ended, which its agent could not.
        {
          step: 'control-plane',
          text: expect.stringMatching(
            /^attempt 1 went back to the queue: agent \S+ was lost \(lease expired\)$/,
          ),
          attempt: 1,
        },
        { step: 'transcoder', text: 'last lines\n', attempt: 1 },
        { step: 'agent', text: 'handed back: the broker refuses this agent\n', attempt: 1 },
      ]);
    } finally {
      // Out of the queue: the next tests claim the task they create.
      await t.call('PATCH', `/api/v1/tasks/${taskId}/cancel`);
    }
  });

  it('stores any text exactly, from log reports and updates, with the report that carries it', async () => {
    const { send, logs } = await claimedTask();
    // What an array literal would misread if it were not quoted and escaped.
    const hostile = [
      '{"a","b"}, NULL\n',
      'back\\slash \\" quote" \'single\'\n',
      'tab\tand ünïcödé, 🎬\r\n',
      '',
      'NULL',
    ];
    await send({ kind: 'log', seq: 0, step: 'pre', text: hostile[0]! });
    await send({
      kind: 'update',
      seq: 1,
      patch: { progress: 10, remaining: 3 },
      logs: [
        { step: 'transcoder', text: hostile[1]! },
        { step: 'transcoder', text: hostile[2]! },
        { step: 'agent', text: hostile[3]! },
      ],
    });
    await send({ kind: 'update', seq: 2, patch: { progress: 20, remaining: 2 } });
    await send({ kind: 'log', seq: 3, step: 'post', text: hostile[4]! });
    expect(await logs()).toEqual([
      { step: 'pre', text: hostile[0], attempt: 1 },
      { step: 'transcoder', text: hostile[1], attempt: 1 },
      { step: 'transcoder', text: hostile[2], attempt: 1 },
      { step: 'post', text: hostile[4], attempt: 1 },
    ]);
    // A replayed log report stores nothing twice.
    expect(await send({ kind: 'log', seq: 3, step: 'post', text: hostile[4]! })).toEqual({
      kind: 'duplicate',
    });
    expect(await logs()).toHaveLength(4);
  });

  it("keeps the current attempt's lines when its patch is refused or hands the task back", async () => {
    const refused = await claimedTask();
    await refused.send({ kind: 'update', seq: 0, patch: { status: 'RUNNING' } });
    const illegal = await refused.send({
      kind: 'update',
      seq: 1,
      patch: { status: 'PRE_PROCESSING' },
      logs: [{ step: 'agent', text: 'before the illegal move\n' }],
    });
    expect(illegal).toMatchObject({ kind: 'rejected' });
    expect(await refused.status()).toBe('RUNNING');
    expect((await refused.logs()).map((l) => l.text)).toEqual(['before the illegal move\n']);

    const handedBack = await claimedTask();
    const back = await handedBack.send({
      kind: 'update',
      seq: 0,
      patch: { status: 'QUEUED' },
      logs: [{ step: 'agent', text: 'shutting down\n' }],
    });
    expect(back).toMatchObject({ kind: 'applied', status: 'QUEUED' });
    expect(await handedBack.status()).toBe('QUEUED');
    expect((await handedBack.logs()).map((l) => l.text)).toEqual(['shutting down\n']);
  });
});

describe('a batch finished by agent reports', () => {
  const t = useTestApp({ receiveAllEvents: true });

  // Runs the group-end batch check as the database needs it: the count alone on PGlite (one
  // transaction at a time), locked and counted on PostgreSQL (CI's second pass).
  it('is DONE after its last task, with batch.finished exactly once, also when reports share a group', async () => {
    const batch = await json(
      await t.call('POST', '/api/v1/batches', { tasks: [VALID.task(), VALID.task(), VALID.task()] }),
      201,
    );
    const { now, claims, report } = await claimAsNewAgent(t, 3);
    expect(claims).toHaveLength(3);
    const finish = (i: number) =>
      report(claims[i]!, {
        seq: 0,
        kind: 'update',
        patch: { status: 'DONE_SUCCESSFUL', progress: 100, finishedAt: now },
      });
    const batchStatus = async () => (await json(await t.call('GET', `/api/v1/batches/${batch.id}`))).status;
    const finished = async () =>
      (await eventRows(t.db, 'batch.finished')).filter((e) => e.payload.data.id === batch.id);
    await finish(0);
    expect(await batchStatus()).toBe('RUNNING');
    // The last two in one group: only the second one leaves nothing open.
    await Promise.all([finish(1), finish(2)]);
    expect(await batchStatus()).toBe('DONE');
    expect(await finished()).toHaveLength(1);
  });
});

describe('reports from an agent whose clock is off', () => {
  const t = useTestApp();

  it("keeps the claim's startedAt and holds finishedAt between it and now", async () => {
    for (const skewMs of [-300_000, 300_000]) {
      const created = await json(await t.call('POST', '/api/v1/tasks', VALID.task()), 201);
      const { claims, report } = await claimAsNewAgent(t, 1);
      const claim = claims[0]!;
      expect(claim.task.id).toBe(created.id);
      const claimedAt = claim.task.startedAt;
      expect(claimedAt).toBeGreaterThanOrEqual(created.createdAt);
      // The agent stamps its own clock, `skewMs` off.
      await report(claim, {
        kind: 'update',
        seq: 0,
        patch: { status: 'RUNNING', startedAt: Date.now() + skewMs },
      });
      const running = await json(await t.call('GET', `/api/v1/tasks/${created.id}`));
      expect(running.startedAt, `skew ${skewMs}`).toBe(claimedAt);
      await report(claim, {
        kind: 'update',
        seq: 1,
        patch: { status: 'DONE_SUCCESSFUL', progress: 100, finishedAt: Date.now() + skewMs },
      });
      const done = await json(await t.call('GET', `/api/v1/tasks/${created.id}`));
      expect(done.startedAt).toBe(claimedAt);
      // Behind: it finished when it started at the earliest. Ahead: not later than when it was told.
      expect(done.finishedAt).toBeGreaterThanOrEqual(done.startedAt);
      expect(done.finishedAt).toBeLessThanOrEqual(Date.now());
      if (skewMs < 0) expect(done.finishedAt).toBe(claimedAt);
      expect(done.createdAt).toBeLessThanOrEqual(done.startedAt);
      expect(done.finishedAt).toBeLessThanOrEqual(done.updatedAt);
    }
  });
});

describe('hand-backs and the attempt limit', () => {
  const t = useTestApp();

  /** Claim the only queued task with a new agent and hand it back; its status afterwards. */
  async function claimAndHandBack(taskId: string, deliberate: boolean | undefined) {
    const { claims, report } = await claimAsNewAgent(t, 1);
    expect(claims.map((c) => c.task.id)).toEqual([taskId]);
    await report(claims[0]!, { kind: 'update', seq: 0, patch: { status: 'QUEUED', deliberate } });
    return json(await t.call('GET', `/api/v1/tasks/${taskId}`));
  }

  it('does not count an attempt a live agent gave back on purpose; a crashed one’s counts', async () => {
    const kept = await json(await t.call('POST', '/api/v1/tasks', VALID.task()), 201);
    // Four late claim answers (or forced stops) in a row: more than the limit, and never run.
    for (let i = 1; i <= 4; i++) {
      expect(await claimAndHandBack(kept.id, true)).toMatchObject({ status: 'QUEUED', attempt: i });
    }
    await t.call('PATCH', `/api/v1/tasks/${kept.id}/cancel`);

    const lost = await json(await t.call('POST', '/api/v1/tasks', VALID.task()), 201);
    for (let i = 1; i <= 2; i++) {
      expect(await claimAndHandBack(lost.id, undefined)).toMatchObject({ status: 'QUEUED', attempt: i });
    }
    const third = await claimAndHandBack(lost.id, undefined);
    expect(third).toMatchObject({ status: 'DONE_ERROR', attempt: 3 });
    expect(third.error).toMatch(/handed back by agent .* on attempt 3 of 3; giving up/);
  });
});

describe('a late success of an attempt lost with its agent', () => {
  const t = useTestApp({ receiveAllEvents: true });
  const claimedTask = () => claimedTaskIn(t);
  const resolved = {
    command: { raw: `-i \${INPUT_FILE} \${OUTPUT_FILE}`, resolved: '-i /media/in/clip.mov /media/out/x.mp4' },
    inputFile: { raw: '/media/in/clip.mov', resolved: '/media/in/clip.mov' },
    outputFile: { raw: `/media/out/\${INPUT_FILE_BASENAME}.mp4`, resolved: '/media/out/x.mp4' },
  };
  const success = (seq: number): ReportFields => ({
    kind: 'update',
    seq,
    patch: { status: 'DONE_SUCCESSFUL', progress: 100, remaining: 0, finishedAt: Date.now() },
    logs: [{ step: 'transcoder', text: 'video:1kB\n' }],
  });
  const task = async (id: string) => json(await t.call('GET', `/api/v1/tasks/${id}`));

  /** A claimed task that ran, then lost its agent: back in the queue. */
  async function lostRun() {
    const c = await claimedTask();
    await c.send({ kind: 'update', seq: 0, patch: { status: 'RUNNING', ...resolved } });
    const running = await task(c.taskId);
    await sweepExpiredLeases(t.ctx, { onlyIds: [c.taskId], reason: 'lease expired' });
    expect(await c.status()).toBe('QUEUED');
    return { ...c, running };
  }

  it('finishes the task when it is still queued: the run is not done twice', async () => {
    const { send, logs, taskId, running } = await lostRun();
    try {
      const queued = await task(taskId);
      expect(queued).toMatchObject({ agent: null, startedAt: 0, outputFile: { resolved: '' } });
      expect(await send(success(1))).toMatchObject({
        kind: 'applied',
        status: 'DONE_SUCCESSFUL',
        finished: true,
      });
      const done = await task(taskId);
      expect(done).toMatchObject({
        status: 'DONE_SUCCESSFUL',
        progress: 100,
        error: '',
        attempt: 1,
        agent: running.agent,
        startedAt: running.startedAt,
        command: resolved.command,
        inputFile: resolved.inputFile,
        outputFile: resolved.outputFile,
      });
      expect(done.finishedAt).toBeGreaterThanOrEqual(running.startedAt);
      expect(await logs()).toEqual([
        {
          step: 'control-plane',
          text: expect.stringContaining('attempt 1 went back to the queue'),
          attempt: 1,
        },
        { step: 'transcoder', text: 'video:1kB\n', attempt: 1 },
      ]);
      const updates = (await eventRows(t.db, 'task.updated')).filter((e) => e.payload.data.taskId === taskId);
      // (the report's event carries the claim's clock, earlier than the sweep's: compared as a list)
      const statuses = updates.map((e) => e.payload.data.status);
      expect(statuses.filter((x) => x === 'DONE_SUCCESSFUL')).toHaveLength(1);
      expect(statuses).toContain('QUEUED');
      // The outbox replaying it once more changes nothing.
      expect(await send(success(1))).toEqual({ kind: 'duplicate' });
      expect(await logs()).toHaveLength(2);
    } finally {
      await t.call('PATCH', `/api/v1/tasks/${taskId}/cancel`);
    }
  });

  it('is not overtaken by its agent claiming again while the agent still holds the run', async () => {
    const claimAgain = (agent: { id: string; name: string }, holding?: string[]) =>
      new GroupCommit(t.ctx).run((tx, ev) =>
        claimTasksIn(tx, ev, Date.now(), { ...agent, capabilities: [], holding }, 1, 60_000),
      );
    // Back from a freeze with a free slot, the agent claims before its runner reports the finished run:
    // the run it holds is not handed to it again, so its result still finds the task waiting.
    const a = await lostRun();
    try {
      expect(await claimAgain(a.agent, [a.taskId, 'not-a-uuid'])).toEqual([]);
      expect(await a.send(success(1))).toMatchObject({ kind: 'applied', status: 'DONE_SUCCESSFUL' });
    } finally {
      await t.call('PATCH', `/api/v1/tasks/${a.taskId}/cancel`);
    }
    // Without the list it would have been attempt 2, and the result refused.
    const b = await lostRun();
    try {
      expect((await claimAgain(b.agent)).map((c) => [c.task.id, c.attempt])).toEqual([[b.taskId, 2]]);
      expect(await b.send(success(1))).toMatchObject({ kind: 'stale' });
    } finally {
      await t.call('PATCH', `/api/v1/tasks/${b.taskId}/cancel`);
    }
  });

  it('changes nothing once another attempt runs, after a restart, or when the run failed', async () => {
    const a = await lostRun();
    const other = await claimAsNewAgent(t, 1);
    expect(other.claims[0]?.task.id).toBe(a.taskId);
    try {
      expect(await a.send(success(1))).toMatchObject({ kind: 'stale' });
      expect(await task(a.taskId)).toMatchObject({ status: 'RUNNING', attempt: 2 });
    } finally {
      await t.call('PATCH', `/api/v1/tasks/${a.taskId}/cancel`);
    }

    const b = await lostRun();
    await t.call('PATCH', `/api/v1/tasks/${b.taskId}/cancel`);
    await json(await t.call('PATCH', `/api/v1/tasks/${b.taskId}/restart`));
    try {
      expect(await b.send(success(1))).toMatchObject({ kind: 'stale' });
      expect(await b.status()).toBe('QUEUED');
    } finally {
      await t.call('PATCH', `/api/v1/tasks/${b.taskId}/cancel`);
    }

    const c = await lostRun();
    try {
      const failed: ReportFields = {
        kind: 'update',
        seq: 1,
        patch: { status: 'DONE_ERROR', error: 'transcoder exited with code 1', finishedAt: Date.now() },
      } as const;
      expect(await c.send(failed)).toMatchObject({ kind: 'stale' });
      expect(await c.status()).toBe('QUEUED');
    } finally {
      await t.call('PATCH', `/api/v1/tasks/${c.taskId}/cancel`);
    }
  });
});

describe('a sweep of tasks as they were read (sweepExpiredLeases unchanged)', () => {
  const t = useTestApp();

  it('leaves a task whose row moved on since it was read, and requeues one that did not', async () => {
    const { send, status, taskId } = await claimedTaskIn(t);
    const read = async () => {
      const [row] = await t.db.rows<{
        agent_id: string;
        attempt: number;
        lease_token: string;
        report_seq: number;
      }>(t.db.db, sql`SELECT agent_id, attempt, lease_token, report_seq FROM tasks WHERE id = ${taskId}`);
      return {
        id: taskId,
        agentId: row!.agent_id,
        attempt: row!.attempt,
        leaseToken: row!.lease_token,
        reportSeq: row!.report_seq,
      };
    };
    const before = await read();
    expect(before.reportSeq).toBe(-1);
    // A report reaches the row after it was read: the snapshot no longer holds.
    await send({ kind: 'update', seq: 0, patch: { status: 'RUNNING', startedAt: Date.now() } });
    const opts = { reason: 'never received', countsAttempt: false };
    expect(await sweepExpiredLeases(t.ctx, { ...opts, unchanged: [before] })).toEqual({
      requeued: [],
      failed: [],
      canceled: [],
    });
    expect(await status()).toBe('RUNNING');
    // Another agent's, or another attempt's: left alone too.
    const now = await read();
    expect(now.reportSeq).toBe(0);
    for (const other of [{ agentId: crypto.randomUUID() }, { attempt: now.attempt + 1 }]) {
      expect(await sweepExpiredLeases(t.ctx, { ...opts, unchanged: [{ ...now, ...other }] })).toMatchObject({
        requeued: [],
      });
    }
    expect(await status()).toBe('RUNNING');
    // As it is now: swept.
    expect(await sweepExpiredLeases(t.ctx, { ...opts, unchanged: [now] })).toMatchObject({
      requeued: [taskId],
    });
    expect(await status()).toBe('QUEUED');
  });
});
