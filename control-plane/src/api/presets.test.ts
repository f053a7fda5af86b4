// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${NAME} wildcards are literal request text.
import { describe, expect, it } from 'vitest';
import {
  countRows,
  errorPaths,
  eventRows,
  expectProblem,
  json,
  readList,
  UNKNOWN_ID,
  VALID,
} from '../../../test/api/support.ts';
import { useTestApp } from '../../../test/helpers/app.ts';

describe('preset routes', () => {
  const t = useTestApp({ receiveAllEvents: true });

  const full = {
    name: 'h264-1080p',
    description: 'web mezzanine',
    command: '-i ${INPUT_FILE} -c:v libx264 ${OUTPUT_FILE} && ${TRANSCODER} -i ${OUTPUT_FILE} -f null -',
    outputFile: '/out/${INPUT_FILE_BASENAME}.mp4',
    priority: 10,
    preProcessing: { scriptPath: '/bin/pre', sidecarPath: '/tmp/s.json', importSidecar: true },
    postProcessing: { scriptPath: '/bin/post', sidecarPath: '/tmp/p.json' },
    webhooks: [
      { event: 'preset.updated', url: 'http://hooks.test/p' },
      { event: 'task.created', url: 'http://hooks.test/t' },
    ],
    requires: ['gpu', 'encoder:hevc_nvenc'],
  };

  it('creates a preset: 201, Location and every field (plain strings, not raw/resolved)', async () => {
    const res = await t.call('POST', '/api/v1/presets', full);
    const p = await json(res, 201);
    expect(res.headers.get('location')).toBe(`/api/v1/presets/${p.id}`);
    expect(p).toEqual({ ...full, id: p.id, uuid: p.id, createdAt: p.createdAt, updatedAt: p.createdAt });
    expect(p.createdAt).toBeGreaterThan(1_600_000_000_000);
  });

  it('fills defaults for optional fields', async () => {
    const p = await json(await t.call('POST', '/api/v1/presets', { name: 'min', command: '-i a b' }), 201);
    expect(p).toMatchObject({
      description: '',
      outputFile: '',
      priority: 0,
      preProcessing: null,
      postProcessing: null,
      webhooks: [],
      requires: [],
    });
  });

  it('validates the body with 422 naming the field', async () => {
    const cases: [object, string][] = [
      [{ command: '-i a b' }, 'name'],
      [{ name: 'x' }, 'command'],
      [{ name: '', command: '-i a b' }, 'name'],
      [{ name: '  ', command: '-i a b' }, 'name'],
      [{ name: 'x', command: '-i a b && -i c d' }, 'command'],
      [{ name: 'x', command: '-i a b', priority: 2000 }, 'priority'],
      [
        { name: 'x', command: '-i a b', webhooks: [{ event: 'batch.created', url: 'http://h.test' }] },
        'webhooks.0.event',
      ],
      [
        { name: 'x', command: '-i a b', webhooks: [{ event: 'preset.created', url: 'mailto:a@b' }] },
        'webhooks.0.url',
      ],
      [{ name: 'x', command: '-i a b', bogus: true }, 'bogus'],
    ];
    const before = await countRows(t.db);
    for (const [body, path] of cases) {
      const p = await expectProblem(await t.call('POST', '/api/v1/presets', body), 422, 'VALIDATION_FAILED');
      expect(errorPaths(p), JSON.stringify(body)).toEqual([path]);
    }
    expect(await countRows(t.db)).toEqual(before);
  });

  it('gets and lists presets with X-Total; unknown ids are 404', async () => {
    const p = await json(await t.call('POST', '/api/v1/presets', VALID.preset()), 201);
    expect(await json(await t.call('GET', `/api/v1/presets/${p.id}`))).toEqual(p);
    const all = await readList(await t.call('GET', '/api/v1/presets'));
    expect(all.total).toBe(all.items.length);
    expect(all.items[0]).toEqual(p);
    await expectProblem(await t.call('GET', `/api/v1/presets/${UNKNOWN_ID}`), 404, 'PRESET_NOT_FOUND');
    await expectProblem(await t.call('GET', '/api/v1/presets/abc'), 404, 'PRESET_NOT_FOUND');
  });

  it('filters the list by ?name= (contains, any case, % _ \\ literal, trimmed, blank = all) with X-Total and pages', async () => {
    const tag = `flt${Date.now().toString(36)}`;
    const names = [
      `Zeta 50% OFF ${tag}`,
      `zeta 50 off ${tag}`,
      `a_b ${tag}`,
      `axb ${tag}`,
      `back\\slash ${tag}`,
      `backslash ${tag}`,
    ];
    for (const name of names)
      await json(await t.call('POST', '/api/v1/presets', { ...VALID.preset(), name }), 201);
    const byName = async (text: string, paging = '') => {
      const l = await readList<{ name: string }>(
        await t.call('GET', `/api/v1/presets?name=${encodeURIComponent(text)}${paging}`),
      );
      return { total: l.total, names: l.items.map((p) => p.name) };
    };
    // Any case, surrounding blanks ignored; in the order of the unfiltered list (newest first).
    const unfiltered = (await readList<{ name: string }>(await t.call('GET', '/api/v1/presets'))).items
      .map((p) => p.name)
      .filter((n) => n.endsWith(tag));
    expect([...unfiltered].sort()).toEqual([...names].sort());
    const mine = await byName(tag.toUpperCase());
    expect(mine.total).toBe(6);
    expect(mine.names.sort()).toEqual([...names].sort());
    expect(await byName(`  ${tag}\t`)).toEqual(await byName(tag));
    // LIKE's wildcards and escape character are plain text: `%` does not match "any text", `_` not
    // "any character", and a backslash does not make the next character literal.
    expect(await byName(`50% off ${tag}`)).toEqual({ total: 1, names: [names[0]] });
    expect(await byName(`a_b ${tag}`)).toEqual({ total: 1, names: [names[2]] });
    expect(await byName(`back\\s`)).toEqual({ total: 1, names: [names[4]] });
    expect(await byName(`zeta 50 off ${tag}`)).toEqual({ total: 1, names: [names[1]] });
    // X-Total counts every match, the page holds its part of them.
    const ordered = (await byName(tag)).names;
    expect(ordered).toEqual(unfiltered);
    expect(await byName(tag, '&perPage=2&page=1')).toEqual({ total: 6, names: ordered.slice(2, 4) });
    expect(await byName(`nothing-is-called-this-${tag}`)).toEqual({ total: 0, names: [] });
    // A blank text filters nothing.
    const all = await readList(await t.call('GET', '/api/v1/presets'));
    for (const blank of ['', '   ']) expect((await byName(blank)).total).toBe(all.total);
    expect(all.total).toBeGreaterThan(6);
    // No preset name is longer than 200 characters: a longer text is a mistake, named.
    expect((await byName(`${'x'.repeat(199)}é`)).total).toBe(0);
    const long = await expectProblem(
      await t.call('GET', `/api/v1/presets?name=${'x'.repeat(201)}`),
      400,
      'INVALID_QUERY',
    );
    expect(long.errors).toEqual([{ path: 'name', message: 'must be at most 200 characters' }]);
    // Given twice, it is not searched for as "a,b".
    const twice = await expectProblem(
      await t.call('GET', '/api/v1/presets?name=a&name=b'),
      400,
      'INVALID_QUERY',
    );
    expect(twice.errors).toEqual([{ path: 'name', message: 'is given 2 times; it takes one value' }]);
  });

  it('PUT replaces the whole definition, ignores echoed read-only fields and emits preset.updated', async () => {
    const p = await json(await t.call('POST', '/api/v1/presets', full), 201);
    // A client may send back the object it read: id/uuid/createdAt/updatedAt are ignored, not 422.
    const res = await t.call('PUT', `/api/v1/presets/${p.id}`, {
      id: UNKNOWN_ID,
      uuid: UNKNOWN_ID,
      createdAt: 1,
      updatedAt: 2,
      name: 'renamed',
      command: '-i a b',
    });
    const updated = await json(res);
    expect(updated).toMatchObject({
      id: p.id,
      name: 'renamed',
      command: '-i a b',
      description: '',
      outputFile: '',
      priority: 0,
      preProcessing: null,
      postProcessing: null,
      webhooks: [],
      requires: [],
      createdAt: p.createdAt,
    });
    expect(updated.updatedAt).toBeGreaterThanOrEqual(p.updatedAt);
    expect(await json(await t.call('GET', `/api/v1/presets/${p.id}`))).toEqual(updated);
    const ev = (await eventRows(t.db, 'preset.updated')).filter((e) => e.payload.data.id === p.id);
    expect(ev).toHaveLength(1);
    expect(ev[0]!.payload.data).toEqual(updated);
    await expectProblem(
      await t.call('PUT', `/api/v1/presets/${UNKNOWN_ID}`, VALID.preset()),
      404,
      'PRESET_NOT_FOUND',
    );
    await expectProblem(
      await t.call('PUT', `/api/v1/presets/${p.id}`, { name: 'x' }),
      422,
      'VALIDATION_FAILED',
    );
  });

  it('deletes with 204; a preset used by a watchfolder is 409 PRESET_IN_USE until the watchfolder is gone', async () => {
    const p = await json(await t.call('POST', '/api/v1/presets', VALID.preset()), 201);
    const wf = await json(
      await t.call('POST', '/api/v1/watchfolders', { ...VALID.watchfolder(p.id), name: 'uses-it' }),
      201,
    );
    const conflict = await expectProblem(
      await t.call('DELETE', `/api/v1/presets/${p.id}`),
      409,
      'PRESET_IN_USE',
    );
    expect(conflict.detail).toBe(`preset ${p.id} is used by 1 watchfolder(s): "uses-it"`);
    expect((await t.call('GET', `/api/v1/presets/${p.id}`)).status).toBe(200);
    // Many users: five named, and how many more.
    const more = [];
    for (let i = 0; i < 7; i++) {
      more.push(
        await json(
          await t.call('POST', '/api/v1/watchfolders', {
            ...VALID.watchfolder(p.id),
            name: `uses-it-${i}`,
            path: `/srv/w${i}`,
          }),
          201,
        ),
      );
    }
    const many = await expectProblem(await t.call('DELETE', `/api/v1/presets/${p.id}`), 409, 'PRESET_IN_USE');
    expect(many.detail).toBe(
      `preset ${p.id} is used by 8 watchfolder(s): "uses-it", "uses-it-0", "uses-it-1", "uses-it-2", "uses-it-3" and 3 more`,
    );
    for (const w of more) expect((await t.call('DELETE', `/api/v1/watchfolders/${w.id}`)).status).toBe(204);
    expect((await t.call('DELETE', `/api/v1/watchfolders/${wf.id}`)).status).toBe(204);
    const res = await t.call('DELETE', `/api/v1/presets/${p.id}`);
    expect(res.status).toBe(204);
    expect(await res.text()).toBe('');
    await expectProblem(await t.call('GET', `/api/v1/presets/${p.id}`), 404, 'PRESET_NOT_FOUND');
    await expectProblem(await t.call('DELETE', `/api/v1/presets/${p.id}`), 404, 'PRESET_NOT_FOUND');
    expect((await eventRows(t.db, 'preset.deleted')).filter((e) => e.payload.data.id === p.id)).toHaveLength(
      1,
    );
  });

  it('keeps tasks created from a deleted preset readable', async () => {
    const p = await json(await t.call('POST', '/api/v1/presets', VALID.preset()), 201);
    const task = await json(await t.call('POST', '/api/v1/tasks', { preset: p.id }), 201);
    expect((await t.call('DELETE', `/api/v1/presets/${p.id}`)).status).toBe(204);
    expect((await json(await t.call('GET', `/api/v1/tasks/${task.id}`))).preset).toBe(p.id);
  });
});
