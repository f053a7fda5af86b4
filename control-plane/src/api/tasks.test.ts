// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${NAME} wildcards are literal request text.
import type { Task } from '@ffleet/shared';
import { eq } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import {
  errorPaths,
  eventRows,
  expectProblem,
  json,
  recordingFleet,
  UNKNOWN_ID,
  VALID,
} from '../../../test/api/support.ts';
import { useTestApp } from '../../../test/helpers/app.ts';
import { agents, presets, taskLogs, tasks } from '../db/schema.ts';
import { CANCEL_ANSWER_WAIT_MS, taskEventData } from '../services/tasks.ts';

describe('task routes', () => {
  const rec = recordingFleet();
  const t = useTestApp({ fleet: rec.fleet, receiveAllEvents: true });

  const create = async (body: unknown, status = 201) =>
    json(await t.call('POST', '/api/v1/tasks', body), status);
  const setRow = (id: string, patch: Partial<typeof tasks.$inferInsert>) =>
    t.db.db.update(tasks).set(patch).where(eq(tasks.id, id));

  describe('POST /api/v1/tasks', () => {
    it('refuses a preset whose stored requires holds a bare capability prefix (saved before it was refused)', async () => {
      const preset = await json(
        await t.call('POST', '/api/v1/presets', { name: 'old-gpu', command: '-i a b' }),
        201,
      );
      await t.db.db
        .update(presets)
        .set({ requires: ['gpu', 'encoder:'] })
        .where(eq(presets.id, preset.id));
      const p = await expectProblem(
        await t.call('POST', '/api/v1/tasks', { preset: preset.id }),
        422,
        'VALIDATION_FAILED',
      );
      expect(p.errors).toEqual([
        {
          path: 'preset',
          message:
            'the preset\'s requires holds "encoder:", which no agent can offer: fix the preset (PUT /api/v1/presets/{id})',
        },
      ]);
      // The task's own requires wins over the preset's.
      await create({ preset: preset.id, requires: ['gpu'] });
    });

    it('creates a queued task: 201, Location and the full task object', async () => {
      const before = Date.now();
      const res = await t.call('POST', '/api/v1/tasks', {
        ...VALID.task(),
        priority: 7,
        metadata: { a: { b: 1 } },
      });
      const task = await json(res, 201);
      expect(res.headers.get('location')).toBe(`/api/v1/tasks/${task.id}`);
      expect(task.uuid).toBe(task.id);
      expect(task).toMatchObject({
        name: 'clip.mov',
        command: { raw: '-i ${INPUT_FILE} -c:v libx264 ${OUTPUT_FILE}', resolved: '' },
        inputFile: { raw: '/media/in/clip.mov', resolved: '' },
        outputFile: { raw: '/media/out/clip.mp4', resolved: '' },
        metadata: { a: { b: 1 } },
        status: 'QUEUED',
        progress: 0,
        remaining: 0,
        error: '',
        priority: 7,
        source: 'api',
        preProcessing: null,
        postProcessing: null,
        startedAt: 0,
        finishedAt: 0,
        preset: null,
        batch: null,
        webhooks: [],
        requires: [],
        attempt: 0,
        agent: null,
      });
      // Timestamps are Unix milliseconds (CONTRACT.md).
      expect(task.createdAt).toBeGreaterThanOrEqual(before);
      expect(task.createdAt).toBeLessThanOrEqual(Date.now());
      expect(task.updatedAt).toBe(task.createdAt);
      expect(rec.calls.workAvailable).toBeGreaterThan(0);
    });

    it('names a task after the base name of inputFile, else "task"; an explicit name wins', async () => {
      expect((await create({ command: '-i a b', inputFile: '/in/dir/movie.final.mxf' })).name).toBe(
        'movie.final.mxf',
      );
      expect((await create({ command: '-i a b' })).name).toBe('task');
      expect((await create({ command: '-i a b', inputFile: '' })).name).toBe('task');
      expect((await create({ command: '-i a b', inputFile: '/in/x.mov', name: 'mine' })).name).toBe('mine');
      // A blank name is no name, as for the other text fields (a form's empty field).
      expect((await create({ command: '-i a b', inputFile: '/in/x.mov', name: '' })).name).toBe('x.mov');
      expect((await create({ command: '-i a b', name: '  ' })).name).toBe('task');
    });

    it('requires a command unless a preset gives one', async () => {
      const p = await expectProblem(
        await t.call('POST', '/api/v1/tasks', { inputFile: '/a' }),
        422,
        'VALIDATION_FAILED',
      );
      expect(errorPaths(p)).toEqual(['command']);
      await expectProblem(
        await t.call('POST', '/api/v1/tasks', { command: '   ' }),
        422,
        'VALIDATION_FAILED',
      );
    });

    it('merges a preset: fields given on the task win, processing steps are taken whole', async () => {
      const preset = await json(
        await t.call('POST', '/api/v1/presets', {
          name: 'merge',
          command: '-i ${INPUT_FILE} preset ${OUTPUT_FILE}',
          outputFile: '/out/${INPUT_FILE_BASENAME}.mp4',
          priority: 5,
          preProcessing: { scriptPath: '/bin/pre', sidecarPath: '/tmp/pre.json', importSidecar: true },
          postProcessing: { scriptPath: '/bin/post', sidecarPath: '/tmp/post.json' },
          requires: ['gpu'],
          webhooks: [
            { event: 'task.created', url: 'http://hooks.local/preset-task' },
            { event: 'preset.updated', url: 'http://hooks.local/preset-own' },
          ],
        }),
        201,
      );
      const fromPreset = await create({ preset: preset.id, inputFile: '/in/a.mov' });
      expect(fromPreset).toMatchObject({
        preset: preset.id,
        command: { raw: '-i ${INPUT_FILE} preset ${OUTPUT_FILE}' },
        outputFile: { raw: '/out/${INPUT_FILE_BASENAME}.mp4' },
        priority: 5,
        preProcessing: {
          scriptPath: { raw: '/bin/pre', resolved: '' },
          sidecarPath: { raw: '/tmp/pre.json', resolved: '' },
          importSidecar: true,
          startedAt: 0,
          finishedAt: 0,
          error: '',
        },
        postProcessing: {
          scriptPath: { raw: '/bin/post', resolved: '' },
          sidecarPath: { raw: '/tmp/post.json' },
        },
        requires: ['gpu'],
        // Only the preset's task.* webhooks are copied into the task.
        webhooks: [{ event: 'task.created', url: 'http://hooks.local/preset-task' }],
      });

      const overridden = await create({
        preset: preset.id,
        command: '-i ${INPUT_FILE} task ${OUTPUT_FILE}',
        outputFile: '/task/out.mkv',
        priority: 0,
        preProcessing: { scriptPath: '/bin/task-pre' },
        // `{}` defines a step that runs nothing (a `null` is not given: the preset's step, as in FFmate).
        postProcessing: {},
        requires: [],
        webhooks: [{ event: 'task.deleted', url: 'http://hooks.local/task' }],
      });
      expect(overridden).toMatchObject({
        command: { raw: '-i ${INPUT_FILE} task ${OUTPUT_FILE}' },
        outputFile: { raw: '/task/out.mkv' },
        priority: 0,
        // The task's step replaces the preset's whole: no sidecar or import inherited.
        preProcessing: {
          scriptPath: { raw: '/bin/task-pre' },
          sidecarPath: { raw: '' },
          importSidecar: false,
        },
        postProcessing: { scriptPath: { raw: '' }, sidecarPath: { raw: '' } },
        requires: [],
        webhooks: [
          { event: 'task.created', url: 'http://hooks.local/preset-task' },
          { event: 'task.deleted', url: 'http://hooks.local/task' },
        ],
      });

      // An empty string is "not given": the preset fills it (as FFmate's presets do).
      const blank = await create({ preset: preset.id, command: '', outputFile: ' ', inputFile: '/in/b.mov' });
      expect(blank).toMatchObject({
        command: { raw: '-i ${INPUT_FILE} preset ${OUTPUT_FILE}' },
        outputFile: { raw: '/out/${INPUT_FILE_BASENAME}.mp4' },
      });
    });

    it('rejects an unknown preset with 422 naming the field', async () => {
      for (const preset of [UNKNOWN_ID, 'not-a-uuid']) {
        const p = await expectProblem(
          await t.call('POST', '/api/v1/tasks', { preset }),
          422,
          'VALIDATION_FAILED',
        );
        expect(errorPaths(p)).toEqual(['preset']);
      }
    });

    it('accepts && chains only when later segments start with ${TRANSCODER} or ${FFMPEG}', async () => {
      await create({ command: '-i a b && ${TRANSCODER} -i b c' });
      await create({ command: '-i a b && ${FFMPEG} -i b c && ${TRANSCODER} -i c d' });
      // A quoted && is an argument, not a chain operator.
      await create({ command: '-metadata "title=a && b" -i a b' });
      for (const command of [
        '-i a b && -i b c',
        '-i a b && ffmpeg -i b c',
        '-i a b &&',
        '&& ${TRANSCODER} -i a b',
      ]) {
        const p = await expectProblem(
          await t.call('POST', '/api/v1/tasks', { command }),
          422,
          'VALIDATION_FAILED',
        );
        expect(errorPaths(p)).toEqual(['command']);
      }
    });

    it('limits direct webhooks to task.created, task.updated and task.deleted', async () => {
      const ok = await create({
        command: '-i a b',
        webhooks: ['task.created', 'task.updated', 'task.deleted'].map((event) => ({
          event,
          url: 'https://x.test/h',
        })),
      });
      expect(ok.webhooks).toHaveLength(3);
      for (const event of ['preset.created', 'batch.created', 'webhook.deleted', 'task.progress']) {
        const p = await expectProblem(
          await t.call('POST', '/api/v1/tasks', {
            command: '-i a b',
            webhooks: [{ event, url: 'https://x.test/h' }],
          }),
          422,
          'VALIDATION_FAILED',
        );
        expect(errorPaths(p)).toEqual(['webhooks.0.event']);
      }
      for (const url of ['ftp://x.test/h', '/relative', 'x.test/h', '']) {
        const p = await expectProblem(
          await t.call('POST', '/api/v1/tasks', {
            command: '-i a b',
            webhooks: [{ event: 'task.created', url }],
          }),
          422,
        );
        expect(errorPaths(p)).toEqual(['webhooks.0.url']);
      }
    });

    it('validates priority, metadata and requires', async () => {
      await create({ command: '-i a b', priority: -1000 });
      await create({ command: '-i a b', priority: 1000 });
      const cases: [unknown, string][] = [
        [{ priority: 1001 }, 'priority'],
        [{ priority: -1001 }, 'priority'],
        [{ priority: 1.5 }, 'priority'],
        [{ priority: '1' }, 'priority'],
        [{ metadata: [1, 2] }, 'metadata'],
        [{ metadata: 'x' }, 'metadata'],
        [{ requires: ['has space'] }, 'requires.0'],
        [{ preProcessing: { scriptPath: 1 } }, 'preProcessing.scriptPath'],
        [{ postProcessing: { importSidecar: true } }, 'postProcessing.importSidecar'],
        // Refused here rather than failing the task when it runs.
        [{ preProcessing: { scriptPath: "/bin/pre 'unterminated" } }, 'preProcessing.scriptPath'],
        [{ postProcessing: { scriptPath: '/bin/post "x' } }, 'postProcessing.scriptPath'],
        [{ preProcessing: { scriptPath: '/bin/pre', importSidecar: true } }, 'preProcessing.sidecarPath'],
        [
          { preProcessing: { scriptPath: '/bin/pre', sidecarPath: '  ', importSidecar: true } },
          'preProcessing.sidecarPath',
        ],
      ];
      for (const [extra, path] of cases) {
        const p = await expectProblem(
          await t.call('POST', '/api/v1/tasks', { command: '-i a b', ...(extra as object) }),
          422,
          'VALIDATION_FAILED',
        );
        expect(errorPaths(p), JSON.stringify(extra)).toEqual([path]);
      }
      // A sidecar to re-import, or none to import: both fine.
      await create({
        command: '-i a b',
        preProcessing: {
          scriptPath: "/bin/pre 'quoted arg'",
          sidecarPath: '/tmp/s.json',
          importSidecar: true,
        },
      });
      await create({ command: '-i a b', preProcessing: { scriptPath: '/bin/pre', importSidecar: false } });
    });
  });

  describe('GET /api/v1/tasks/{id}', () => {
    it('returns the task, and 404 TASK_NOT_FOUND for an unknown or malformed id', async () => {
      const task = await create(VALID.task());
      // With why it is not claimed (a read's live field; this app has no agent).
      expect(await json(await t.call('GET', `/api/v1/tasks/${task.id}`))).toEqual({
        ...task,
        waitingFor: 'no agent has connected yet',
      });
      await expectProblem(await t.call('GET', `/api/v1/tasks/${UNKNOWN_ID}`), 404, 'TASK_NOT_FOUND');
      await expectProblem(await t.call('GET', '/api/v1/tasks/not-a-uuid'), 404, 'TASK_NOT_FOUND');
    });
  });

  describe('DELETE /api/v1/tasks/{id}', () => {
    it('deletes with 204 and no body, emits task.deleted, and is 404 afterwards', async () => {
      const task = await create(VALID.task());
      const res = await t.call('DELETE', `/api/v1/tasks/${task.id}`);
      expect(res.status).toBe(204);
      expect(await res.text()).toBe('');
      await expectProblem(await t.call('GET', `/api/v1/tasks/${task.id}`), 404, 'TASK_NOT_FOUND');
      await expectProblem(await t.call('DELETE', `/api/v1/tasks/${task.id}`), 404, 'TASK_NOT_FOUND');
      const deleted = (await eventRows(t.db, 'task.deleted')).filter(
        (e) => e.payload.data.taskId === task.id,
      );
      expect(deleted).toHaveLength(1);
    });

    it('tells the agent to stop a running task before deleting it', async () => {
      const task = await create(VALID.task());
      await setRow(task.id, { status: 'RUNNING', agentId: UNKNOWN_ID, agentName: 'a1', attempt: 1 });
      expect((await t.call('DELETE', `/api/v1/tasks/${task.id}`)).status).toBe(204);
      expect(rec.calls.cancelRunning).toContain(task.id);
    });
  });

  describe('cancel', () => {
    it("answers a running task's cancel with its final state once its agent reports it, else as it is after a short wait", async () => {
      const AGENT_ID = '00000000-0000-4000-8000-0000000000a1';
      await t.db.db.insert(agents).values({
        id: AGENT_ID,
        name: 'a1',
        online: true,
        reportedSlots: 1,
        createdAt: 1,
        lastSeen: Date.now(),
        connectedAt: 1,
      });
      const task = await create(VALID.task());
      await setRow(task.id, { status: 'RUNNING', agentId: AGENT_ID, agentName: 'a1', attempt: 1 });
      // What the fleet emits when the agent's DONE_CANCELED report is applied (a stand-in for the agent).
      const reported = setTimeout(() => {
        const final: Task = { ...(task as Task), status: 'DONE_CANCELED', finishedAt: Date.now() };
        t.bus.publish({
          id: 'ev-1',
          event: 'task.updated',
          timestamp: new Date().toISOString(),
          data: taskEventData(final),
        });
      }, 200);
      try {
        const started = Date.now();
        const answered = await json(await t.call('PATCH', `/api/v1/tasks/${task.id}/cancel`));
        expect(answered.status).toBe('DONE_CANCELED');
        expect(Date.now() - started).toBeLessThan(CANCEL_ANSWER_WAIT_MS);
        expect(rec.calls.cancelRunning).toContain(task.id);
      } finally {
        clearTimeout(reported);
      }
      // No report (an agent that does not answer): the running task as it is, after the wait.
      const other = await create(VALID.task());
      await setRow(other.id, { status: 'RUNNING', agentId: AGENT_ID, agentName: 'a1', attempt: 1 });
      const started = Date.now();
      expect((await json(await t.call('PATCH', `/api/v1/tasks/${other.id}/cancel`))).status).toBe('RUNNING');
      expect(Date.now() - started).toBeGreaterThanOrEqual(CANCEL_ANSWER_WAIT_MS - 50);
      // Its agent offline: no wait, and the answer says what the cancel waits for (the lease).
      await t.db.db.update(agents).set({ online: false }).where(eq(agents.id, AGENT_ID));
      const asked = Date.now();
      const answer = await json(await t.call('PATCH', `/api/v1/tasks/${other.id}/cancel`));
      expect(Date.now() - asked).toBeLessThan(CANCEL_ANSWER_WAIT_MS / 2);
      expect(answer).toMatchObject({
        status: 'RUNNING',
        waitingFor: expect.stringMatching(
          /^its cancel: agent a1 is offline; the task is canceled when its lease/,
        ),
      });
    });

    it('moves a QUEUED task to DONE_CANCELED at once (PATCH and POST)', async () => {
      for (const method of ['PATCH', 'POST']) {
        const task = await create(VALID.task());
        const res = await t.call(method, `/api/v1/tasks/${task.id}/cancel`);
        const canceled = await json(res);
        expect(canceled.status).toBe('DONE_CANCELED');
        expect(canceled.finishedAt).toBeGreaterThan(0);
        expect((await json(await t.call('GET', `/api/v1/tasks/${task.id}`))).status).toBe('DONE_CANCELED');
        const updates = (await eventRows(t.db, 'task.updated')).filter(
          (e) => e.payload.data.taskId === task.id,
        );
        expect(updates.map((e) => e.payload.data.status)).toEqual(['DONE_CANCELED']);
      }
    });

    it('is 409 for a finished task and 404 for an unknown one', async () => {
      const task = await create(VALID.task());
      await t.call('PATCH', `/api/v1/tasks/${task.id}/cancel`);
      await expectProblem(await t.call('PATCH', `/api/v1/tasks/${task.id}/cancel`), 409, 'TASK_FINISHED');
      for (const status of ['DONE_SUCCESSFUL', 'DONE_ERROR'] as const) {
        const other = await create(VALID.task());
        await setRow(other.id, { status });
        await expectProblem(await t.call('PATCH', `/api/v1/tasks/${other.id}/cancel`), 409, 'TASK_FINISHED');
      }
      await expectProblem(await t.call('PATCH', `/api/v1/tasks/${UNKNOWN_ID}/cancel`), 404, 'TASK_NOT_FOUND');
    });

    it('asks the agent to stop a running task and keeps it running until the agent reports', async () => {
      const task = await create(VALID.task());
      await setRow(task.id, { status: 'RUNNING', agentId: UNKNOWN_ID, agentName: 'a1', attempt: 1 });
      const res = await json(await t.call('PATCH', `/api/v1/tasks/${task.id}/cancel`));
      expect(res.status).toBe('RUNNING');
      expect(rec.calls.cancelRunning).toContain(task.id);
    });
  });

  describe('restart', () => {
    it('is 409 unless the task is DONE_*', async () => {
      for (const status of ['QUEUED', 'PRE_PROCESSING', 'RUNNING'] as const) {
        const task = await create(VALID.task());
        await setRow(task.id, { status });
        await expectProblem(
          await t.call('PATCH', `/api/v1/tasks/${task.id}/restart`),
          409,
          'TASK_NOT_FINISHED',
        );
      }
      await expectProblem(await t.call('POST', `/api/v1/tasks/${UNKNOWN_ID}/restart`), 404, 'TASK_NOT_FOUND');
    });

    it('requeues a finished task with progress, resolved values, errors and step times cleared', async () => {
      for (const status of ['DONE_SUCCESSFUL', 'DONE_ERROR', 'DONE_CANCELED'] as const) {
        const task = await create({
          ...VALID.task(),
          preProcessing: { scriptPath: '/bin/pre ${INPUT_FILE}', sidecarPath: '/tmp/${UUID}.json' },
          postProcessing: { scriptPath: '/bin/post' },
        });
        const step = (raw: string) => ({
          scriptPath: { raw, resolved: `${raw} resolved` },
          sidecarPath: { raw: '/tmp/${UUID}.json', resolved: '/tmp/1.json' },
          importSidecar: false,
          startedAt: 111,
          finishedAt: 222,
          error: 'step failed',
        });
        await setRow(task.id, {
          status,
          progress: 57.5,
          remaining: 12,
          error: 'exit code 1',
          commandResolved: 'ffmpeg -i x y',
          inputResolved: '/media/in/clip.mov',
          outputResolved: '/media/out/clip.mp4',
          startedAt: 1000,
          finishedAt: 2000,
          preProcessing: step('/bin/pre ${INPUT_FILE}'),
          postProcessing: step('/bin/post'),
          agentId: UNKNOWN_ID,
          agentName: 'a1',
          attempt: 1,
        });
        const eventsBefore = (await eventRows(t.db, 'task.updated')).length;
        const workBefore = rec.calls.workAvailable;
        const res = await json(await t.call('PATCH', `/api/v1/tasks/${task.id}/restart`));
        const cleared = { startedAt: 0, finishedAt: 0, error: '' };
        expect(res).toMatchObject({
          status: 'QUEUED',
          progress: 0,
          remaining: 0,
          error: '',
          command: { raw: task.command.raw, resolved: '' },
          inputFile: { raw: task.inputFile.raw, resolved: '' },
          outputFile: { raw: task.outputFile.raw, resolved: '' },
          startedAt: 0,
          finishedAt: 0,
          agent: null,
          preProcessing: {
            scriptPath: { raw: '/bin/pre ${INPUT_FILE}', resolved: '' },
            sidecarPath: { raw: '/tmp/${UUID}.json', resolved: '' },
            ...cleared,
          },
          postProcessing: { scriptPath: { raw: '/bin/post', resolved: '' }, ...cleared },
        });
        const updates = await eventRows(t.db, 'task.updated');
        expect(updates).toHaveLength(eventsBefore + 1);
        expect(updates.at(-1)!.payload.data).toMatchObject({ taskId: task.id, status: 'QUEUED' });
        expect(rec.calls.workAvailable).toBeGreaterThan(workBefore);
      }
    });
  });

  it('hands the fleet the requires of the tasks it queues (a task, a preset, a batch, a restart)', async () => {
    rec.calls.queuedRequires.length = 0;
    const preset = await json(
      await t.call('POST', '/api/v1/presets', { ...VALID.preset(), requires: ['hdr'] }),
      201,
    );
    const task = await create({ ...VALID.task(), requires: ['gpu', 'encoder:hevc_nvenc'] });
    await create({ ...VALID.task(), preset: preset.id });
    await json(
      await t.call('POST', '/api/v1/batches', {
        tasks: [
          { ...VALID.task(), requires: ['nvme'] },
          { ...VALID.task(), preset: preset.id },
          VALID.task(),
        ],
      }),
      201,
    );
    await setRow(task.id, { status: 'DONE_ERROR', finishedAt: 2000 });
    await json(await t.call('PATCH', `/api/v1/tasks/${task.id}/restart`));
    expect(rec.calls.queuedRequires).toEqual([
      ['gpu', 'encoder:hevc_nvenc'],
      ['hdr'],
      ['nvme'],
      ['hdr'],
      ['gpu', 'encoder:hevc_nvenc'],
    ]);
  });

  describe('GET /api/v1/tasks/{id}/logs', () => {
    it('returns the captured output as text, oldest first, prefixed by attempt and step', async () => {
      const task = await create(VALID.task());
      const empty = await t.call('GET', `/api/v1/tasks/${task.id}/logs`);
      expect(empty.status).toBe(200);
      expect(empty.headers.get('content-type')).toMatch(/^text\/plain/);
      expect(await empty.text()).toBe('');
      await t.db.db.insert(taskLogs).values([
        { taskId: task.id, attempt: 1, step: 'pre', text: 'pre line 1\npre line 2\n', createdAt: 1 },
        { taskId: task.id, attempt: 1, step: 'transcode', text: 'frame=1\n', createdAt: 2 },
      ]);
      const text = await (await t.call('GET', `/api/v1/tasks/${task.id}/logs`)).text();
      expect(text).toBe(
        '[attempt 1 pre] pre line 1\n[attempt 1 pre] pre line 2\n[attempt 1 transcode] frame=1\n',
      );
      await expectProblem(await t.call('GET', `/api/v1/tasks/${UNKNOWN_ID}/logs`), 404, 'TASK_NOT_FOUND');
    });

    it('returns the last 256 KiB from a whole line, after a line saying how much came before', async () => {
      const task = await create(VALID.task());
      const lines = Array.from({ length: 4_000 }, (_, i) => `line ${i} ${'x'.repeat(80)}`);
      await t.db.db
        .insert(taskLogs)
        .values({ taskId: task.id, attempt: 1, step: 'pre', text: `${lines.join('\n')}\n`, createdAt: 1 });
      const text = await (await t.call('GET', `/api/v1/tasks/${task.id}/logs`)).text();
      const [marker, first, ...rest] = text.split('\n');
      const kept = rest.length; // first and the others, less the '' after the final newline
      const left = marker!.match(
        /^\[ffleet: (\d+) earlier lines \((\d+\.\d) KiB\) left out; whole lines of the last 256 KiB follow\]$/,
      );
      expect(left, marker).not.toBeNull();
      expect(Number(left![1])).toBe(4_000 - kept);
      expect(first).toBe(`[attempt 1 pre] ${lines[4_000 - kept]}`);
      expect(text.at(-1)).toBe('\n');
      expect(text.length - marker!.length - 1).toBeLessThanOrEqual(256 * 1024);
      expect(text.length - marker!.length - 1).toBeGreaterThan(256 * 1024 - 200);
    });
  });
});
