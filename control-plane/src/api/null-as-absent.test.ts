// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${NAME} wildcards are literal request text.
import { BatchCreate, PresetCreate, TaskCreate, WatchfolderCreate } from '@ffleet/shared';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { errorPaths, expectProblem, json, VALID } from '../../../test/api/support.ts';
import { useTestApp } from '../../../test/helpers/app.ts';
import { withoutNullOptionals } from './null-as-absent.ts';

describe('withoutNullOptionals', () => {
  const schema = z.strictObject({
    optional: z.string().optional(),
    nullable: z.string().nullable().optional(),
    required: z.string(),
    defaulted: z.number().default(3),
    nested: z.strictObject({ inner: z.array(z.string()).optional() }).optional(),
    list: z.array(z.strictObject({ x: z.number().optional(), y: z.string() })).optional(),
    free: z.record(z.string(), z.unknown()).optional(),
    piped: z.string().optional().pipe(z.string().min(1).optional()),
  });

  it('leaves out a null where the field may be absent but not null, at any depth', () => {
    const input = {
      optional: null,
      nullable: null,
      required: null,
      defaulted: null,
      nested: { inner: null },
      list: [{ x: null, y: 'a' }, { y: 'b' }],
      free: { keep: null },
      piped: null,
    };
    expect(withoutNullOptionals(schema, input)).toEqual({
      nullable: null, // the schema takes null: it means something there
      required: null, // the schema reports it
      nested: {},
      list: [{ y: 'a' }, { y: 'b' }],
      free: { keep: null }, // free-form data is the client's
    });
    // the input is not modified
    expect(input.optional).toBeNull();
    expect(input.nested.inner).toBeNull();
    expect(input.list[0]).toEqual({ x: null, y: 'a' });
  });

  it('returns the same value when nothing changes, and leaves other shapes alone', () => {
    const v = { required: 'r', list: [{ y: 'a' }], nested: { inner: ['a'] } };
    expect(withoutNullOptionals(schema, v)).toBe(v);
    expect(withoutNullOptionals(schema, 'text')).toBe('text');
    expect(withoutNullOptionals(schema, [1, 2])).toEqual([1, 2]);
    // an unknown field is not touched: the schema refuses it
    expect(withoutNullOptionals(schema, { required: 'r', other: null })).toEqual({
      required: 'r',
      other: null,
    });
  });

  it('reads the API schemas as FFmate clients send them', () => {
    expect(withoutNullOptionals(TaskCreate, { command: 'c', preset: null, priority: null })).toEqual({
      command: 'c',
    });
    // a step's null is its absence too: the preset's step applies
    expect(withoutNullOptionals(TaskCreate, { command: 'c', preProcessing: null })).toEqual({
      command: 'c',
    });
    expect(
      withoutNullOptionals(BatchCreate, { name: null, tasks: [{ command: 'c', metadata: null }] }),
    ).toEqual({ tasks: [{ command: 'c' }] });
    expect(
      withoutNullOptionals(WatchfolderCreate, {
        filter: { extensions: { exclude: ['tmp'], include: null } },
        agent: null,
      }),
    ).toEqual({ filter: { extensions: { exclude: ['tmp'] } }, agent: null });
    expect(withoutNullOptionals(PresetCreate, { name: 'p', command: null })).toEqual({
      name: 'p',
      command: null,
    });
  });
});

describe('null on an optional field in a create or replace body (FFmate clients)', () => {
  const t = useTestApp();
  const post = async (path: string, body: object, status = 201) =>
    json(await t.call('POST', `/api/v1/${path}`, body), status);

  it('POST /tasks and /batches: null reads as left out, metadata keeps its nulls', async () => {
    const task = await post('tasks', {
      ...VALID.task(),
      name: null,
      preset: null,
      priority: null,
      metadata: { reel: null },
      preProcessing: null,
      postProcessing: null,
      webhooks: null,
      requires: null,
    });
    expect(task).toMatchObject({
      priority: 0,
      preset: null,
      metadata: { reel: null },
      preProcessing: null,
      postProcessing: null,
      webhooks: [],
      requires: [],
    });
    const batch = await post('batches', { name: null, tasks: [{ ...VALID.task(), metadata: null }] });
    expect(batch.tasks).toHaveLength(1);
  });

  it("a task's null or empty preset is none, and its null steps are the preset's (FFmate)", async () => {
    const preset = await post('presets', {
      ...VALID.preset(),
      preProcessing: { scriptPath: '/bin/pre' },
      postProcessing: { scriptPath: '/bin/post' },
    });
    type Step = { scriptPath: { raw: string } } | null;
    const step = (task: Record<string, unknown>, key: string) => (task[key] as Step)?.scriptPath.raw ?? null;
    for (const steps of [{}, { preProcessing: null, postProcessing: null }]) {
      const task = await post('tasks', { ...VALID.task(), preset: preset.id, ...steps });
      expect([step(task, 'preProcessing'), step(task, 'postProcessing')]).toEqual(['/bin/pre', '/bin/post']);
    }
    // `{}` is a step that runs nothing: a task can still do without its preset's step.
    const without = await post('tasks', { ...VALID.task(), preset: preset.id, preProcessing: {} });
    expect([step(without, 'preProcessing'), step(without, 'postProcessing')]).toEqual(['', '/bin/post']);
    for (const blank of ['', '  ', null]) {
      const task = await post('tasks', { ...VALID.task(), preset: blank });
      expect(task.preset).toBeNull();
      const batch = await post('batches', { tasks: [{ ...VALID.task(), preset: blank }] });
      expect(batch.tasks).toHaveLength(1);
    }
    const none = await expectProblem(
      await t.call('POST', '/api/v1/tasks', { inputFile: '/a', preset: '' }),
      422,
      'VALIDATION_FAILED',
    );
    expect(errorPaths(none)).toEqual(['command']);
  });

  it('a required field that is null is still refused, naming it', async () => {
    const p = await expectProblem(
      await t.call('POST', '/api/v1/tasks', { inputFile: '/a', command: null }),
      422,
      'VALIDATION_FAILED',
    );
    expect(errorPaths(p)).toEqual(['command']);
    const q = await expectProblem(
      await t.call('POST', '/api/v1/presets', { ...VALID.preset(), command: null }),
      422,
      'VALIDATION_FAILED',
    );
    expect(q.errors).toEqual([{ path: 'command', message: 'must be a string' }]);
  });

  it('presets, watchfolders and webhooks: on POST and PUT; a watchfolder round trip from FFmate', async () => {
    const preset = await post('presets', {
      ...VALID.preset(),
      description: null,
      outputFile: null,
      priority: null,
      webhooks: null,
      requires: null,
    });
    expect(preset).toMatchObject({ description: '', outputFile: '', priority: 0, webhooks: [] });
    const replaced = await json(
      await t.call('PUT', `/api/v1/presets/${preset.id}`, { ...VALID.preset(), outputFile: null }),
    );
    expect(replaced.outputFile).toBe('');

    // FFmate's own GET answer: `"include": null`, `"filter": null` when unset, read-only fields beside
    const wf = await post('watchfolders', {
      ...VALID.watchfolder(preset.id),
      description: null,
      suspended: null,
      filter: { extensions: { exclude: ['tmp'], include: null } },
    });
    expect(wf.filter).toEqual({ extensions: { include: [], exclude: ['tmp'] } });
    expect(wf.suspended).toBe(false);
    const put = await json(
      await t.call('PUT', `/api/v1/watchfolders/${wf.id}`, { ...wf, filter: null, agent: null }),
    );
    expect(put.filter).toEqual({ extensions: { include: [], exclude: [] } });
    expect(put.agent).toBeNull();

    const hook = await post('webhooks', { ...VALID.webhook(), secret: null });
    expect(hook.hasSecret).toBe(false);
  });

  it('PATCH keeps null strict: it is not read as "unchanged"', async () => {
    const preset = await post('presets', VALID.preset());
    const wf = await post('watchfolders', VALID.watchfolder(preset.id));
    const p = await expectProblem(
      await t.call('PATCH', `/api/v1/watchfolders/${wf.id}`, { suspended: null }),
      422,
      'VALIDATION_FAILED',
    );
    expect(errorPaths(p)).toEqual(['suspended']);
  });
});
