import { sql } from 'drizzle-orm';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  countRows,
  errorPaths,
  eventRows,
  expectProblem,
  json,
  readList,
  recordingFleet,
  UNKNOWN_ID,
  VALID,
} from '../../../test/api/support.ts';
import { useTestApp } from '../../../test/helpers/app.ts';
import { postgresAvailable } from '../../../test/helpers/db.ts';
import { normalizeStoredFolderPaths } from '../services/watchfolders.ts';

const PG = await postgresAvailable();

describe('watchfolder routes', () => {
  let preset = '';
  const rec = recordingFleet();
  const t = useTestApp({ fleet: rec.fleet, receiveAllEvents: true });
  beforeAll(async () => {
    preset = (await json(await t.call('POST', '/api/v1/presets', VALID.preset()), 201)).id;
  });

  const create = async (body: object) => json(await t.call('POST', '/api/v1/watchfolders', body), 201);

  it('creates a watchfolder: 201, Location, defaults and read-only live state', async () => {
    const changed = rec.calls.watchfoldersChanged;
    const res = await t.call('POST', '/api/v1/watchfolders', {
      ...VALID.watchfolder(preset),
      name: 'incoming',
    });
    const wf = await json(res, 201);
    expect(res.headers.get('location')).toBe(`/api/v1/watchfolders/${wf.id}`);
    expect(wf).toEqual({
      id: wf.id,
      uuid: wf.id,
      name: 'incoming',
      description: '',
      interval: 5,
      growthChecks: 3,
      preset,
      path: '/srv/watch/in',
      suspended: false,
      filter: { extensions: { include: [], exclude: [] } },
      agent: null,
      assignedAgent: null,
      lastCheck: 0,
      error: '',
      createdAt: wf.createdAt,
      updatedAt: wf.createdAt,
    });
    expect(rec.calls.watchfoldersChanged).toBe(changed + 1);
    const ev = (await eventRows(t.db, 'watchfolder.created')).filter((e) => e.payload.data.id === wf.id);
    expect(ev.map((e) => e.payload.data)).toEqual([wf]);
  });

  it('validates: absolute path, existing preset, interval and growthChecks >= 1 (422 naming the field)', async () => {
    const base = VALID.watchfolder(preset);
    const cases: [object, string][] = [
      [{ path: 'relative/dir' }, 'path'],
      [{ path: './in' }, 'path'],
      [{ path: '' }, 'path'],
      [{ preset: UNKNOWN_ID }, 'preset'],
      [{ preset: 'not-a-uuid' }, 'preset'],
      [{ interval: 0 }, 'interval'],
      [{ interval: -5 }, 'interval'],
      [{ interval: 1.5 }, 'interval'],
      [{ growthChecks: 0 }, 'growthChecks'],
      [{ growthChecks: '3' }, 'growthChecks'],
      [{ name: '' }, 'name'],
      [{ name: ' \t' }, 'name'],
      [{ suspended: 'yes' }, 'suspended'],
      [{ filter: { extensions: { include: ['.mov'] } } }, 'filter.extensions.include.0'],
      [{ filter: { extensions: { include: 'mov' } } }, 'filter.extensions.include'],
    ];
    const before = await countRows(t.db);
    for (const [over, path] of cases) {
      const p = await expectProblem(
        await t.call('POST', '/api/v1/watchfolders', { ...base, ...over }),
        422,
        'VALIDATION_FAILED',
      );
      expect(errorPaths(p), JSON.stringify(over)).toEqual([path]);
    }
    for (const missing of ['name', 'interval', 'growthChecks', 'preset', 'path']) {
      const body: Record<string, unknown> = { ...base };
      delete body[missing];
      const p = await expectProblem(await t.call('POST', '/api/v1/watchfolders', body), 422);
      expect(errorPaths(p)).toEqual([missing]);
    }
    expect(await countRows(t.db)).toEqual(before);
    // Boundaries that are valid.
    await create({ ...base, interval: 1, growthChecks: 1, path: '/' });
  });

  it('keeps names unique: a duplicate on create or rename is 409 WATCHFOLDER_NAME_TAKEN', async () => {
    const a = await create({ ...VALID.watchfolder(preset), name: 'dup-a' });
    await create({ ...VALID.watchfolder(preset), name: 'dup-b' });
    const before = await countRows(t.db);
    const taken = await expectProblem(
      await t.call('POST', '/api/v1/watchfolders', { ...VALID.watchfolder(preset), name: 'dup-a' }),
      409,
      'WATCHFOLDER_NAME_TAKEN',
    );
    // The field it is about, so that a form marks it.
    expect(taken.errors).toEqual([{ path: 'name', message: 'another watchfolder has this name' }]);
    await expectProblem(
      await t.call('PUT', `/api/v1/watchfolders/${a.id}`, { ...VALID.watchfolder(preset), name: 'dup-b' }),
      409,
      'WATCHFOLDER_NAME_TAKEN',
    );
    expect(await countRows(t.db)).toEqual(before);
    // Keeping its own name is not a clash.
    await json(
      await t.call('PUT', `/api/v1/watchfolders/${a.id}`, { ...VALID.watchfolder(preset), name: 'dup-a' }),
    );
  });

  it('stores the path normalised: one folder has one spelling', async () => {
    const spellings = ['/media/in/', '/media//in', '/media/x/../in/.', '/media/in'];
    for (const [i, path] of spellings.entries()) {
      const wf = await create({ ...VALID.watchfolder(preset), name: `spelled-${i}`, path });
      expect(wf.path).toBe('/media/in');
      const put = await json(
        await t.call('PUT', `/api/v1/watchfolders/${wf.id}`, {
          ...VALID.watchfolder(preset),
          name: `spelled-${i}`,
          path: `${path}/sub/`,
        }),
      );
      expect(put.path).toBe('/media/in/sub');
    }
    // Stored as given by an earlier release: normalised at start.
    const old = await create({ ...VALID.watchfolder(preset), name: 'spelled-old' });
    await t.db.rows(
      t.ctx.database.db,
      sql`UPDATE watchfolders SET path = '/media//old/in/' WHERE id = ${old.id}`,
    );
    expect(await normalizeStoredFolderPaths(t.ctx.database.db)).toBe(1);
    expect((await json(await t.call('GET', `/api/v1/watchfolders/${old.id}`))).path).toBe('/media/old/in');
    expect(await normalizeStoredFolderPaths(t.ctx.database.db)).toBe(0);
    const win = await create({ ...VALID.watchfolder(preset), name: 'spelled-win', path: 'D:/media/in/' });
    expect(win.path).toBe('D:\\media\\in');
  });

  it('lets exactly one of several concurrent creates with one name win; the others are 409', async () => {
    const body = { ...VALID.watchfolder(preset), name: 'raced' };
    const results = await Promise.all(
      Array.from({ length: 5 }, () => t.call('POST', '/api/v1/watchfolders', body)),
    );
    expect(results.map((r) => r.status).sort()).toEqual([201, 409, 409, 409, 409]);
    for (const r of results.filter((x) => x.status === 409))
      await expectProblem(r, 409, 'WATCHFOLDER_NAME_TAKEN');
  });

  it('gets and lists watchfolders with X-Total; unknown ids are 404', async () => {
    const wf = await create(VALID.watchfolder(preset));
    expect(await json(await t.call('GET', `/api/v1/watchfolders/${wf.id}`))).toEqual(wf);
    const all = await readList(await t.call('GET', '/api/v1/watchfolders'));
    expect(all.total).toBe(all.items.length);
    expect(all.items[0]).toEqual(wf);
    const one = await readList(await t.call('GET', '/api/v1/watchfolders?perPage=1&page=1'));
    expect(one).toEqual({ items: [all.items[1]], total: all.total });
    await expectProblem(
      await t.call('GET', `/api/v1/watchfolders/${UNKNOWN_ID}`),
      404,
      'WATCHFOLDER_NOT_FOUND',
    );
    await expectProblem(await t.call('GET', '/api/v1/watchfolders/zzz'), 404, 'WATCHFOLDER_NOT_FOUND');
  });

  it('PUT replaces the definition (omitted fields reset), ignores read-only fields and emits watchfolder.updated', async () => {
    const wf = await create({
      ...VALID.watchfolder(preset),
      description: 'd',
      suspended: true,
      filter: { extensions: { include: ['mov'], exclude: ['tmp'] } },
      agent: 'node-1',
    });
    const changed = rec.calls.watchfoldersChanged;
    const { name } = wf;
    // Echoing the object read from GET is fine: response-only fields are ignored.
    const updated = await json(
      await t.call('PUT', `/api/v1/watchfolders/${wf.id}`, {
        ...wf,
        id: UNKNOWN_ID,
        assignedAgent: { id: UNKNOWN_ID, name: 'x' },
        lastCheck: 5,
        error: 'bogus',
        description: undefined,
        filter: undefined,
        agent: undefined,
        suspended: undefined,
        interval: 60,
        name,
      }),
    );
    expect(updated).toMatchObject({
      id: wf.id,
      name,
      description: '',
      interval: 60,
      suspended: false,
      filter: { extensions: { include: [], exclude: [] } },
      agent: null,
      assignedAgent: null,
      lastCheck: 0,
      error: '',
      createdAt: wf.createdAt,
    });
    expect(rec.calls.watchfoldersChanged).toBe(changed + 1);
    expect(await json(await t.call('GET', `/api/v1/watchfolders/${wf.id}`))).toEqual(updated);
    const ev = (await eventRows(t.db, 'watchfolder.updated')).filter((e) => e.payload.data.id === wf.id);
    expect(ev.map((e) => e.payload.data)).toEqual([updated]);

    // Suspending is a PUT too, and also emits watchfolder.updated.
    const suspended = await json(
      await t.call('PUT', `/api/v1/watchfolders/${wf.id}`, {
        ...VALID.watchfolder(preset),
        name,
        suspended: true,
      }),
    );
    expect(suspended.suspended).toBe(true);
    await expectProblem(
      await t.call('PUT', `/api/v1/watchfolders/${UNKNOWN_ID}`, VALID.watchfolder(preset)),
      404,
      'WATCHFOLDER_NOT_FOUND',
    );
    await expectProblem(
      await t.call('PUT', `/api/v1/watchfolders/${wf.id}`, {
        ...VALID.watchfolder(preset),
        preset: UNKNOWN_ID,
      }),
      422,
    );
  });

  it('PATCH changes the fields given and keeps the rest (a suspend does not undo an edit made meanwhile)', async () => {
    const wf = await create({
      ...VALID.watchfolder(preset),
      name: 'patched',
      description: 'd',
      filter: { extensions: { include: ['mov'], exclude: ['tmp'] } },
      agent: 'node-1',
    });
    const changed = rec.calls.watchfoldersChanged;
    // Another client's edit, then a suspend based on the older copy: both stay.
    await json(await t.call('PUT', `/api/v1/watchfolders/${wf.id}`, { ...wf, interval: 42 }));
    const suspended = await json(await t.call('PATCH', `/api/v1/watchfolders/${wf.id}`, { suspended: true }));
    expect(suspended).toEqual({ ...wf, interval: 42, suspended: true, updatedAt: suspended.updatedAt });
    expect(rec.calls.watchfoldersChanged).toBe(changed + 2);
    const ev = (await eventRows(t.db, 'watchfolder.updated')).filter((e) => e.payload.data.id === wf.id);
    expect(ev.at(-1)?.payload.data).toEqual(suspended);

    // `filter` is replaced whole; `agent: null` unpins; response-only fields are ignored.
    const more = await json(
      await t.call('PATCH', `/api/v1/watchfolders/${wf.id}`, {
        filter: { extensions: { exclude: ['part'] } },
        agent: null,
        lastCheck: 5,
      }),
    );
    expect(more).toMatchObject({
      name: 'patched',
      description: 'd',
      interval: 42,
      suspended: true,
      filter: { extensions: { include: [], exclude: ['part'] } },
      agent: null,
    });
    expect(await json(await t.call('GET', `/api/v1/watchfolders/${wf.id}`))).toEqual(more);

    // Each field is validated as on create; a taken name is 409; unknown ids 404.
    await create({ ...VALID.watchfolder(preset), name: 'patched-taken' });
    const taken = await expectProblem(
      await t.call('PATCH', `/api/v1/watchfolders/${wf.id}`, { name: 'patched-taken' }),
      409,
      'WATCHFOLDER_NAME_TAKEN',
    );
    expect(taken.detail).toContain('"patched-taken"');
    const invalid = await expectProblem(
      await t.call('PATCH', `/api/v1/watchfolders/${wf.id}`, { interval: 0, nope: 1 }),
      422,
    );
    expect(errorPaths(invalid)).toEqual(expect.arrayContaining(['interval', 'nope']));
    await expectProblem(await t.call('PATCH', `/api/v1/watchfolders/${wf.id}`, { preset: UNKNOWN_ID }), 422);
    await expectProblem(
      await t.call('PATCH', `/api/v1/watchfolders/${UNKNOWN_ID}`, { suspended: false }),
      404,
      'WATCHFOLDER_NOT_FOUND',
    );
    expect(await json(await t.call('GET', `/api/v1/watchfolders/${wf.id}`))).toEqual(more);
  });

  it('deletes with 204 and emits watchfolder.deleted; deleting again is 404', async () => {
    const wf = await create(VALID.watchfolder(preset));
    const res = await t.call('DELETE', `/api/v1/watchfolders/${wf.id}`);
    expect(res.status).toBe(204);
    expect(await res.text()).toBe('');
    await expectProblem(await t.call('GET', `/api/v1/watchfolders/${wf.id}`), 404, 'WATCHFOLDER_NOT_FOUND');
    await expectProblem(
      await t.call('DELETE', `/api/v1/watchfolders/${wf.id}`),
      404,
      'WATCHFOLDER_NOT_FOUND',
    );
    const ev = (await eventRows(t.db, 'watchfolder.deleted')).filter((e) => e.payload.data.id === wf.id);
    expect(ev).toHaveLength(1);
  });
});

// Concurrent transactions exist only on PostgreSQL (PGlite runs one at a time).
describe.skipIf(!PG)('a preset deleted while a watchfolder is created or moved onto it (PostgreSQL)', () => {
  const pg = useTestApp({ kind: 'postgres' });
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  /** Runs `request` while another transaction holds the preset's row as deletePreset does, then deletes it. */
  async function racingDelete(presetId: string, request: () => Promise<Response>): Promise<Response> {
    let answer: Promise<Response> | undefined;
    await pg.ctx.database.db.transaction(async (tx) => {
      await tx.execute(sql`select id from presets where id = ${presetId} for update`);
      answer = request();
      await sleep(300);
      await tx.execute(sql`delete from presets where id = ${presetId}`);
    });
    return answer!;
  }

  it('waits for the delete and refuses the preset that is gone (422), leaving no watchfolder on it', async () => {
    const p1 = (await json(await pg.call('POST', '/api/v1/presets', { ...VALID.preset(), name: 'p1' }), 201))
      .id;
    const res = await racingDelete(p1, () =>
      pg.call('POST', '/api/v1/watchfolders', { ...VALID.watchfolder(p1), name: 'racing' }),
    );
    await expectProblem(res, 422, 'VALIDATION_FAILED');
    const all = await json(await pg.call('GET', '/api/v1/watchfolders?perPage=1000'), 200);
    expect((all as { preset: string }[]).filter((w) => w.preset === p1)).toEqual([]);

    const p2 = (await json(await pg.call('POST', '/api/v1/presets', { ...VALID.preset(), name: 'p2' }), 201))
      .id;
    const p3 = (await json(await pg.call('POST', '/api/v1/presets', { ...VALID.preset(), name: 'p3' }), 201))
      .id;
    const wf = await json(
      await pg.call('POST', '/api/v1/watchfolders', { ...VALID.watchfolder(p2), name: 'moving' }),
      201,
    );
    const moved = await racingDelete(p3, () =>
      pg.call('PATCH', `/api/v1/watchfolders/${wf.id}`, { preset: p3 }),
    );
    await expectProblem(moved, 422, 'VALIDATION_FAILED');
    expect((await json(await pg.call('GET', `/api/v1/watchfolders/${wf.id}`), 200)).preset).toBe(p2);
  });
});
