// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${NAME} wildcards are literal text here, not template placeholders.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { EventName } from '@ffleet/shared';
import { describe, expect, it } from 'vitest';
import { expectProblem, json } from '../../../test/api/support.ts';
import { useTestApp } from '../../../test/helpers/app.ts';
// @ts-expect-error plain-JS browser module (JSDoc-typed; dashboard.test.ts type-checks it), no declarations
import * as logic from './dashboard/logic.js';
// @ts-expect-error plain-JS browser module (JSDoc-typed; dashboard.test.ts type-checks it), no declarations
import * as manage from './dashboard/manage-logic.js';

const { parseHash, parseProblem, presetsHash } = logic;
const {
  editConflict,
  executionDetails,
  executionSummary,
  failureSummary,
  fieldItems,
  filterLabel,
  formatMs,
  listQuery,
  listStateLine,
  mergeEdit,
  pageToReload,
  parseDirectWebhooks,
  parseExtensions,
  parseInteger,
  parseList,
  parseMetadata,
  placeFieldErrors,
  presetBody,
  presetFields,
  presetHasAdvanced,
  presetNamesStale,
  presetsEmptyText,
  taskBody,
  WATCHFOLDER_DEFAULTS,
  WEBHOOK_EVENTS,
  watchfolderBody,
  watchfolderFields,
  watchfolderState,
  webhookBody,
  webhookFields,
} = manage;

type Fields = Record<string, string | boolean>;
type FieldError = { path: string; message: string };
type Placed = { byField: Map<string, string[]>; other: string[] };
const place = (
  errors: FieldError[],
  names: string[],
  itemsOf?: (n: string) => string[] | undefined,
): Placed => placeFieldErrors(errors, names, itemsOf);

const DIR = fileURLToPath(new URL('./dashboard/', import.meta.url));
const HTML = readFileSync(join(DIR, 'index.html'), 'utf8');

/** The field names of one form of the page, as the browser's formValues reads them. */
function formNames(id: string): string[] {
  const start = HTML.indexOf(`<form id="${id}"`);
  expect(start, id).toBeGreaterThan(0);
  const form = HTML.slice(start, HTML.indexOf('</form>', start));
  return [...form.matchAll(/<(?:input|select|textarea)\b[^>]*\sname="([^"]+)"/g)].map((m) => m[1]!);
}

describe('reading form fields', () => {
  it('lists: commas, spaces and new lines separate items; extensions lose their dots', () => {
    expect(parseList(' gpu, encoder:hevc_nvenc\n  fast ,,')).toEqual(['gpu', 'encoder:hevc_nvenc', 'fast']);
    expect(parseList('   ')).toEqual([]);
    expect(parseExtensions('.mov, MXF ..mp4 .')).toEqual(['mov', 'MXF', 'mp4']);
    expect(fieldItems('list', 'a, b')).toEqual(['a', 'b']);
    expect(fieldItems('lines', ' x y \n\n z w\r\n')).toEqual(['x y', 'z w']);
  });

  it('whole numbers: blank is unset; fractions, exponents and text are errors at the path', () => {
    expect(parseInteger('', 'priority')).toEqual({ ok: true, value: undefined });
    expect(parseInteger(' -12 ', 'priority')).toEqual({ ok: true, value: -12 });
    expect(parseInteger('+3', 'priority')).toEqual({ ok: true, value: 3 });
    for (const bad of ['1.5', '1e3', 'ten', '0x10', '--1']) {
      expect(parseInteger(bad, 'interval'), bad).toEqual({
        ok: false,
        error: { path: 'interval', message: 'must be a whole number' },
      });
    }
  });

  it('metadata: blank is unset; it must parse, and be an object', () => {
    expect(parseMetadata('  ')).toEqual({ ok: true, value: undefined });
    expect(parseMetadata('{"a": {"b": [1]}}')).toEqual({ ok: true, value: { a: { b: [1] } } });
    const broken = parseMetadata('{bad');
    expect(broken.ok).toBe(false);
    expect(broken.error.path).toBe('metadata');
    expect(broken.error.message).toMatch(/^is not valid JSON: /);
    for (const [text, what] of [
      ['[1]', 'an array'],
      ['null', 'null'],
      ['42', 'a number'],
      ['"x"', 'a string'],
      ['true', 'a boolean'],
    ]) {
      expect(parseMetadata(text!), text).toEqual({
        ok: false,
        error: { path: 'metadata', message: `must be a JSON object, like {"project": "x"}, not ${what}` },
      });
    }
  });

  it('direct webhooks: one "event URL" a line; a line that is not is an error at its item', () => {
    expect(parseDirectWebhooks('\n task.updated  http://127.0.0.1/a \n\ntask.deleted http://b/\n')).toEqual({
      ok: true,
      value: [
        { event: 'task.updated', url: 'http://127.0.0.1/a' },
        { event: 'task.deleted', url: 'http://b/' },
      ],
    });
    const r = parseDirectWebhooks('task.updated http://a/\n\ntask.deleted\nx y z');
    expect(r.ok).toBe(false);
    expect(r.errors.map((e: FieldError) => e.path)).toEqual(['webhooks.1', 'webhooks.2']);
  });
});

describe('request bodies', () => {
  it('a new task sends only what was filled in, trimmed', () => {
    expect(
      taskBody({ name: ' ', command: '', priority: '', metadata: '', requires: '', preset: '' }),
    ).toEqual({
      ok: true,
      body: {},
    });
    expect(
      taskBody({
        name: ' clip ',
        command: ' -i ${INPUT_FILE} ${OUTPUT_FILE}\n',
        inputFile: '/in/a.mov',
        outputFile: '/out/a.mp4',
        priority: '-5',
        requires: 'gpu, fast',
        metadata: '{"project": "x"}',
        preset: 'p-1',
      }),
    ).toEqual({
      ok: true,
      body: {
        name: 'clip',
        command: '-i ${INPUT_FILE} ${OUTPUT_FILE}',
        inputFile: '/in/a.mov',
        outputFile: '/out/a.mp4',
        priority: -5,
        requires: ['gpu', 'fast'],
        metadata: { project: 'x' },
        preset: 'p-1',
      },
    });
    // Every problem at once, not the first only.
    const bad = taskBody({ priority: 'high', metadata: '[]' });
    expect(bad.ok).toBe(false);
    expect(bad.errors.map((e: FieldError) => e.path)).toEqual(['priority', 'metadata']);
  });

  const presetForm: Fields = {
    name: ' H.264 ',
    description: 'web',
    command: '-i ${INPUT_FILE} ${OUTPUT_FILE}',
    outputFile: '/out/${INPUT_FILE_BASENAME}.mp4',
    priority: '3',
    requires: 'gpu',
    'preProcessing.scriptPath': '/bin/pre ${SIDECAR_FILE}',
    'preProcessing.sidecarPath': '/tmp/${TASK_UUID}.json',
    'preProcessing.importSidecar': true,
    'postProcessing.scriptPath': '',
    'postProcessing.sidecarPath': '',
    webhooks: 'task.updated http://127.0.0.1:9/hook',
  };

  it('a preset sends every field (a PUT replaces it whole); an empty step is null', () => {
    expect(presetBody(presetForm)).toEqual({
      ok: true,
      body: {
        name: 'H.264',
        description: 'web',
        command: '-i ${INPUT_FILE} ${OUTPUT_FILE}',
        outputFile: '/out/${INPUT_FILE_BASENAME}.mp4',
        priority: 3,
        requires: ['gpu'],
        preProcessing: {
          scriptPath: '/bin/pre ${SIDECAR_FILE}',
          sidecarPath: '/tmp/${TASK_UUID}.json',
          importSidecar: true,
        },
        postProcessing: null,
        webhooks: [{ event: 'task.updated', url: 'http://127.0.0.1:9/hook' }],
      },
    });
    const minimal = presetBody({ name: 'x', command: '-y' });
    expect(minimal).toEqual({
      ok: true,
      body: {
        name: 'x',
        description: '',
        command: '-y',
        outputFile: '',
        requires: [],
        preProcessing: null,
        postProcessing: null,
        webhooks: [],
      },
    });
    const bad = presetBody({ ...presetForm, priority: '1.5', webhooks: 'task.updated' });
    expect(bad.errors.map((e: FieldError) => e.path)).toEqual(['priority', 'webhooks.0']);
  });

  it("a preset's fields give back its body (edit without changes loses nothing)", () => {
    const built = presetBody(presetForm).body;
    const preset = {
      id: 'p',
      ...built,
      priority: 3,
      preProcessing: { ...built.preProcessing },
      postProcessing: { scriptPath: '/bin/post', sidecarPath: '' },
      createdAt: 1,
      updatedAt: 2,
    };
    const again = presetBody(presetFields(preset)).body;
    expect(again).toEqual({ ...built, postProcessing: { scriptPath: '/bin/post' } });
    expect(presetHasAdvanced(preset)).toBe(true);
    expect(presetHasAdvanced({ ...preset, preProcessing: null, postProcessing: null, webhooks: [] })).toBe(
      false,
    );
  });

  const wf = {
    id: 'w',
    name: 'in',
    description: '',
    path: '/media/in',
    preset: 'p',
    interval: 10,
    growthChecks: 3,
    suspended: false,
    filter: { extensions: { include: ['mov'], exclude: ['tmp'] } },
    agent: null as string | null,
    assignedAgent: { id: 'a', name: 'encode-01' },
    lastCheck: 5,
    error: '',
    createdAt: 1,
    updatedAt: 2,
  };

  it('a watchfolder: interval, growth checks and preset are required; an empty agent is any (null)', () => {
    expect(watchfolderBody({ ...watchfolderFields(wf), agent: ' ' })).toEqual({
      ok: true,
      body: {
        name: 'in',
        description: '',
        path: '/media/in',
        preset: 'p',
        interval: 10,
        growthChecks: 3,
        suspended: false,
        filter: { extensions: { include: ['mov'], exclude: ['tmp'] } },
        agent: null,
      },
    });
    expect(
      watchfolderBody({ ...watchfolderFields(wf), agent: 'encode-02', suspended: true }).body,
    ).toMatchObject({
      agent: 'encode-02',
      suspended: true,
    });
    const bad = watchfolderBody({ name: 'x', interval: '', growthChecks: 'two', preset: '' });
    expect(bad.errors).toEqual([
      { path: 'interval', message: 'is required' },
      { path: 'growthChecks', message: 'must be a whole number' },
      { path: 'preset', message: 'choose the preset its tasks are made from' },
    ]);
    expect(WATCHFOLDER_DEFAULTS).toEqual({ interval: '10', growthChecks: '3' });
  });

  it('a webhook: a blank secret is left out (kept), "remove" sends null, both at once is refused', () => {
    const w = {
      id: 'h',
      event: 'task.updated',
      url: 'http://x/',
      hasSecret: true,
      createdAt: 1,
      updatedAt: 1,
    };
    expect(webhookFields(w)).toEqual({
      event: 'task.updated',
      url: 'http://x/',
      secret: '',
      removeSecret: false,
    });
    expect(webhookBody(webhookFields(w))).toEqual({
      ok: true,
      body: { event: 'task.updated', url: 'http://x/' },
    });
    expect(webhookBody({ event: 'task.created', url: ' http://y/ ', secret: ' s ' }).body).toEqual({
      event: 'task.created',
      url: 'http://y/',
      secret: ' s ',
    });
    expect(webhookBody({ ...webhookFields(w), removeSecret: true }).body).toEqual({
      event: 'task.updated',
      url: 'http://x/',
      secret: null,
    });
    expect(webhookBody({ ...webhookFields(w), removeSecret: true, secret: 'new' }).errors).toEqual([
      { path: 'secret', message: 'type a new secret or remove it, not both' },
    ]);
  });

  it('offers exactly the API’s webhook events', () => {
    expect([...WEBHOOK_EVENTS]).toEqual(EventName.options);
  });
});

describe('field errors on a form', () => {
  const names = ['name', 'requires', 'webhooks', 'preProcessing.scriptPath', 'preProcessing', ''];

  it('go to the field of their path, or of its longest prefix; the rest are listed', () => {
    const { byField, other } = place(
      [
        { path: 'name', message: 'must not be blank' },
        { path: 'name', message: 'too short' },
        { path: 'requires.2', message: 'letters only' },
        { path: 'webhooks.0.url', message: 'must be an absolute http(s) URL' },
        { path: 'preProcessing.scriptPath', message: 'unterminated quote' },
        { path: 'preProcessing.sidecarPath', message: 'needed' },
        { path: 'metadata.x', message: 'cannot be stored' },
        { path: '', message: 'expected an object' },
        { path: 'nameX', message: 'unknown field' },
      ],
      names,
    );
    expect(Object.fromEntries(byField)).toEqual({
      name: ['must not be blank', 'too short'],
      requires: ['item 3: letters only'],
      webhooks: ['item 1, url: must be an absolute http(s) URL'],
      'preProcessing.scriptPath': ['unterminated quote'],
      preProcessing: ['sidecarPath: needed'],
    });
    expect(other).toEqual(['metadata.x: cannot be stored', 'expected an object', 'nameX: unknown field']);
  });

  it('name the item itself when the field’s items are known', () => {
    const items: Record<string, string[]> = {
      requires: ['gpu', 'bad!'],
      webhooks: ['nope.event http://127.0.0.1/x'],
    };
    const { byField } = place(
      [
        { path: 'requires.1', message: 'letters, digits and _ . : - / only' },
        { path: 'requires.7', message: 'out of range' },
        { path: 'webhooks.0.event', message: 'Invalid option' },
      ],
      names,
      (n) => items[n],
    );
    expect(Object.fromEntries(byField)).toEqual({
      requires: ['“bad!”: letters, digits and _ . : - / only', 'item 8: out of range'],
      webhooks: ['“nope.event http://127.0.0.1/x”, event: Invalid option'],
    });
  });

  it("reads the API's problem+json: detail, code and field errors; anything else gives none", () => {
    const body = JSON.stringify({
      type: 'https://ffleet.dev/problems/validation-failed',
      title: 'Unprocessable Content',
      status: 422,
      detail: 'the request body is invalid',
      code: 'VALIDATION_FAILED',
      errors: [{ path: 'command', message: 'required' }, { message: 'no path' }, { path: 'x' }, null],
    });
    expect(parseProblem(422, body)).toEqual({
      status: 422,
      detail: 'the request body is invalid',
      code: 'VALIDATION_FAILED',
      errors: [
        { path: 'command', message: 'required' },
        { path: '', message: 'no path' },
      ],
    });
    for (const text of ['', '<html>', '[1]', 'null', '"x"']) {
      expect(parseProblem(502, text), text).toEqual({ status: 502, detail: '', code: '', errors: [] });
    }
  });
});

describe('saving an edit when the item changed elsewhere meanwhile', () => {
  const opened: Fields = { name: 'web', command: '-i a', priority: '0', requires: '', flag: false };

  it('unchanged elsewhere: nothing to merge', () => {
    const mine = { ...opened, command: '-i mine' };
    expect(mergeEdit(opened, mine, opened)).toEqual({ values: mine, taken: [], clashes: [] });
  });

  it('takes what changed elsewhere where the operator left the field, keeps the operator’s own changes', () => {
    const mine = { ...opened, command: '-i mine', priority: '5' };
    const current = { ...opened, name: 'web-renamed', priority: '9', requires: 'gpu', flag: true };
    expect(mergeEdit(opened, mine, current)).toEqual({
      values: { ...mine, name: 'web-renamed', requires: 'gpu', flag: true },
      taken: ['name', 'requires', 'flag'],
      clashes: ['priority'], // both changed it, differently: the operator's value stays, marked
    });
    // Both made the same change: no clash.
    expect(mergeEdit(opened, { ...opened, priority: '9' }, { ...opened, priority: '9' }).clashes).toEqual([]);
  });

  it('says what changed, when, and that a second Save saves the form as it is', () => {
    const now = new Date(2026, 10, 24, 15, 30, 0).getTime();
    const at = new Date(2026, 10, 24, 15, 29, 58).getTime();
    const current = {
      ...opened,
      name: 'web-renamed',
      priority: '9',
      command: `-i ${'x'.repeat(200)}`,
      flag: true,
    };
    const out = editConflict(
      'preset',
      at,
      { taken: ['name', 'flag', 'command'], clashes: ['priority'] },
      current,
      now,
    );
    expect(out.summary).toBe(
      'Not saved: this preset was changed elsewhere since you opened it (at 15:29:58). The marked fields now show what changed; where you had changed a field too, your value is kept. Check the form, then Save again to save it as it is now, or Cancel.',
    );
    expect(out.errors).toEqual([
      { path: 'priority', message: 'changed elsewhere to “9”: Save again to replace it with yours' },
      { path: 'name', message: 'changed elsewhere: now “web-renamed”' },
      { path: 'flag', message: 'changed elsewhere: now on' },
      { path: 'command', message: `changed elsewhere: now “-i ${'x'.repeat(116)}…”` },
    ]);
    expect(editConflict('webhook', at, { taken: [], clashes: [] }, opened, now)).toEqual({
      summary:
        'Not saved: this webhook was changed elsewhere since you opened it (at 15:29:58). None of the values this form shows differ. Check the form, then Save again to save it as it is now, or Cancel.',
      errors: [],
    });
    expect(editConflict('preset', at, { taken: ['requires'], clashes: [] }, opened, now).errors).toEqual([
      { path: 'requires', message: 'changed elsewhere: now empty' },
    ]);
  });
});

describe('a form whose request got no answer', () => {
  it('a create may have happened: check the list before sending again (the task form: unchanged is safe)', () => {
    expect(
      failureSummary(0, 'the control plane cannot be reached', {
        noun: 'task',
        creating: true,
        idempotent: true,
      }),
    ).toBe(
      'No answer from the control plane (the connection failed or dropped): the task may have been created. Check the list before sending again (sent again without a change, it is not created twice).',
    );
    expect(failureSummary(0, '', { noun: 'preset', creating: true })).toBe(
      'No answer from the control plane (the connection failed or dropped): the preset may have been created. Check the list before sending again.',
    );
    expect(failureSummary(0, '', { noun: 'preset', creating: false })).toBe(
      'No answer from the control plane (the connection failed or dropped): the change may have been saved. Check the list before sending it again.',
    );
  });

  it('an answer is a refusal, with its status', () => {
    expect(failureSummary(422, 'invalid preset', { noun: 'preset', creating: true })).toBe(
      'Refused (HTTP 422): invalid preset',
    );
  });
});

describe('lists', () => {
  it('list queries carry the page and the filters that are set', () => {
    expect(listQuery(0, 50)).toBe('page=0&perPage=50');
    expect(listQuery(2, 50, { webhook: 'abc', success: '', event: 'task.created' })).toBe(
      'page=2&perPage=50&webhook=abc&event=task.created',
    );
  });

  it('the presets table without rows says whether a name filter left them out', () => {
    expect(presetsEmptyText('')).toBe('No presets yet.');
    expect(presetsEmptyText('  ')).toBe('No presets yet.');
    expect(presetsEmptyText(' h264 ')).toBe('No preset’s name contains “h264”.');
    // The page's own text is the one without a filter.
    expect(HTML).toMatch(/<p id="presets-empty"[^>]*>No presets yet\.<\/p>/);
  });

  it('a page that came back empty (rows deleted) moves to the last page with rows', () => {
    expect(pageToReload(0, 50, 0, 0)).toBeNull();
    expect(pageToReload(3, 50, 200, 10)).toBeNull();
    expect(pageToReload(3, 50, 120, 0)).toBe(2);
    expect(pageToReload(3, 50, 100, 0)).toBe(1);
    expect(pageToReload(3, 50, 0, 0)).toBe(0);
  });

  it('preset names for the watchfolders table: loaded again when unknown, old, or a preset was saved', () => {
    const known = new Map([['p1', {}]]);
    const now = 1_000_000;
    expect(presetNamesStale(['p1'], known, now - 1000, now, 4000)).toBe(false);
    expect(presetNamesStale(['p1', 'p2'], known, now - 1000, now, 4000)).toBe(true); // p2 not known yet
    expect(presetNamesStale(['p1'], known, now - 4000, now, 4000)).toBe(true); // a rename elsewhere shows
    expect(presetNamesStale([], known, 0, now, 4000)).toBe(true); // never loaded, or a preset saved here
  });

  it('the line beside a list: a note of an action stays a while before the refresh time', () => {
    const now = new Date(2026, 10, 24, 15, 30, 0).getTime();
    expect(listStateLine(now, null, now)).toBe('refreshed 15:30:00');
    const note = {
      text: 'redelivery of task.updated queued 15:29:59; its attempts appear here',
      until: now + 1,
    };
    expect(listStateLine(now, note, now)).toBe(
      'redelivery of task.updated queued 15:29:59; its attempts appear here · refreshed 15:30:00',
    );
    expect(listStateLine(now, { ...note, until: now }, now)).toBe('refreshed 15:30:00');
  });

  it("a watchfolder's state and filter in words", () => {
    expect(watchfolderState({ suspended: true, error: 'x', lastCheck: 1 })).toEqual({
      label: 'suspended',
      tone: 'warn',
    });
    expect(watchfolderState({ suspended: false, error: 'EACCES', lastCheck: 1 })).toEqual({
      label: 'error',
      tone: 'bad',
    });
    expect(watchfolderState({ suspended: false, error: '', lastCheck: 0 })).toEqual({
      label: 'not scanned yet',
      tone: 'idle',
    });
    expect(watchfolderState({ suspended: false, error: '', lastCheck: 9 })).toEqual({
      label: 'watching',
      tone: 'ok',
    });
    expect(filterLabel({ extensions: { include: [], exclude: [] } })).toBe('all files');
    expect(filterLabel({ extensions: { include: ['mov', 'mxf'], exclude: [] } })).toBe('mov, mxf');
    expect(filterLabel({ extensions: { include: [], exclude: ['tmp'] } })).toBe('all but tmp');
    expect(filterLabel({ extensions: { include: ['mov'], exclude: ['tmp'] } })).toBe('mov; not tmp');
  });
});

describe('delivery attempts', () => {
  const exec = {
    id: 'x',
    deliveryId: 'd',
    webhook: 'h',
    source: 'global',
    event: 'task.updated',
    url: 'http://127.0.0.1:9/hook',
    attempt: 2,
    request: {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'webhook-id': 'e1' },
      body: '{"id":"e1","event":"task.updated"}',
    },
    response: { status: 500, headers: { 'content-type': 'text/plain' }, body: '<b>down</b>' },
    error: 'HTTP 500',
    success: false,
    durationMs: 1234,
    createdAt: 1,
  };

  it('durations', () => {
    expect([0, 85.4, 999, 1000, 1234, 9999, 10_000, 65_000, -1, Number.NaN].map(formatMs)).toEqual([
      '0 ms',
      '85 ms',
      '999 ms',
      '1.0 s',
      '1.2 s',
      '9.9 s',
      '10s',
      '1m 05s',
      '—',
      '—',
    ]);
  });

  it('a row: the response status, the duration and the result with its error', () => {
    expect(executionSummary(exec)).toEqual({
      response: 'HTTP 500',
      duration: '1.2 s',
      result: 'failed',
      error: 'HTTP 500',
    });
    expect(executionSummary({ ...exec, response: null, error: 'timeout after 10000 ms' })).toEqual({
      response: 'no response',
      duration: '1.2 s',
      result: 'failed',
      error: 'timeout after 10000 ms',
    });
    expect(executionSummary({ ...exec, error: '' }).error).toBe('HTTP 500');
    expect(executionSummary({ ...exec, response: null, error: '' }).error).toBe('failed');
    expect(
      executionSummary({ ...exec, success: true, error: '', response: { ...exec.response, status: 204 } }),
    ).toEqual({
      response: 'HTTP 204',
      duration: '1.2 s',
      result: 'delivered',
      error: '',
    });
  });

  it('details: the request, then the response or the error, bodies pretty-printed when JSON', () => {
    expect(executionDetails(exec)).toBe(
      [
        'POST http://127.0.0.1:9/hook',
        'content-type: application/json',
        'webhook-id: e1',
        '',
        '{\n  "id": "e1",\n  "event": "task.updated"\n}',
        '',
        '→ HTTP 500 after 1.2 s',
        'content-type: text/plain',
        '',
        '<b>down</b>',
        '',
        'error: HTTP 500',
      ].join('\n'),
    );
    const noResponse = executionDetails({
      ...exec,
      response: null,
      error: 'ECONNREFUSED',
      request: { ...exec.request, body: '' },
    });
    expect(noResponse).toContain('(empty body)');
    expect(noResponse.endsWith('→ no response after 1.2 s\n\nerror: ECONNREFUSED')).toBe(true);
  });
});

describe('the bodies the forms build are the ones the API takes', () => {
  const t = useTestApp();

  it('preset: create, then an edit without changes gives back the same preset', async () => {
    const built = presetBody({
      name: 'web',
      description: 'for the site',
      command: '-i ${INPUT_FILE} -c:v libx264 ${OUTPUT_FILE}',
      outputFile: '/out/${INPUT_FILE_BASENAME}.mp4',
      priority: '4',
      requires: 'gpu, encoder:libx264',
      'preProcessing.scriptPath': '/bin/pre.sh ${SIDECAR_FILE}',
      'preProcessing.sidecarPath': '/tmp/${TASK_UUID}.json',
      'preProcessing.importSidecar': true,
      'postProcessing.scriptPath': '/bin/post.sh',
      'postProcessing.sidecarPath': '',
      webhooks: 'task.updated http://127.0.0.1:9/a\npreset.updated http://127.0.0.1:9/b',
    });
    expect(built.ok).toBe(true);
    const created = await json(await t.call('POST', '/api/v1/presets', built.body), 201);
    const again = presetBody(presetFields(created));
    const updated = await json(await t.call('PUT', `/api/v1/presets/${created.id}`, again.body));
    const { updatedAt: _a, ...before } = created;
    const { updatedAt: _b, ...after } = updated;
    expect(after).toEqual(before);
    expect(after.postProcessing).toEqual({ scriptPath: '/bin/post.sh', sidecarPath: '' });

    // A task from it: empty fields take the preset's values.
    const task = await json(
      await t.call(
        'POST',
        '/api/v1/tasks',
        taskBody({ preset: created.id, inputFile: '/in/a.mov', name: '' }).body,
      ),
      201,
    );
    expect(task).toMatchObject({
      name: 'a.mov',
      priority: 4,
      requires: ['gpu', 'encoder:libx264'],
      preset: created.id,
    });
    expect(task.command.raw).toBe(created.command);
  });

  it('an edit made elsewhere moves updatedAt (PUT, PATCH); merged, the next PUT keeps it and the operator’s change', async () => {
    const created = await json(
      await t.call('POST', '/api/v1/presets', { name: 'p-merge', command: '-i a' }),
      201,
    );
    const opened = presetFields(created);
    await new Promise((r) => setTimeout(r, 5)); // updatedAt is in ms
    // Another client changes the description while the form is open.
    const elsewhere = await json(
      await t.call('PUT', `/api/v1/presets/${created.id}`, {
        name: 'p-merge',
        command: '-i a',
        description: 'theirs',
      }),
    );
    expect(elsewhere.updatedAt).not.toBe(created.updatedAt);
    const current = await json(await t.call('GET', `/api/v1/presets/${created.id}`));
    const mine = { ...opened, command: '-i mine' };
    const merge = mergeEdit(opened, mine, presetFields(current));
    expect(merge).toMatchObject({ taken: ['description'], clashes: [] });
    const saved = await json(
      await t.call('PUT', `/api/v1/presets/${created.id}`, presetBody(merge.values).body),
    );
    expect(saved).toMatchObject({ description: 'theirs', command: '-i mine' });

    const preset = await json(await t.call('POST', '/api/v1/presets', { name: 'p-wf', command: '-y' }), 201);
    const wf = await json(
      await t.call('POST', '/api/v1/watchfolders', {
        name: 'wf-merge',
        path: '/media/in',
        preset: preset.id,
        interval: 10,
        growthChecks: 3,
      }),
      201,
    );
    await new Promise((r) => setTimeout(r, 5));
    const suspended = await json(await t.call('PATCH', `/api/v1/watchfolders/${wf.id}`, { suspended: true }));
    expect(suspended.updatedAt).not.toBe(wf.updatedAt);
    expect(
      mergeEdit(watchfolderFields(wf), watchfolderFields(wf), watchfolderFields(suspended)),
    ).toMatchObject({
      taken: ['suspended'],
      values: { suspended: true },
    });
  });

  it('the presets name filter, as the address keeps it, lists the presets whose name contains it (any case, literally)', async () => {
    for (const name of ['H264 web', 'h264-proxy', 'ProRes 422', '50%_off', '50 percent'])
      await json(await t.call('POST', '/api/v1/presets', { name, command: '-y' }), 201);
    /** The names the presets tab lists for the filter in the address `hash`. */
    const listed = async (hash: string) => {
      const { name } = parseHash(hash, ['tasks', 'presets']);
      const res = await t.call('GET', `/api/v1/presets?${listQuery(0, 50, { name })}`);
      const items: { name: string }[] = await json(res);
      expect(res.headers.get('x-total')).toBe(String(items.length));
      return items.map((p) => p.name).sort();
    };
    expect(await listed(`#${presetsHash(' h264 ')}`)).toEqual(['H264 web', 'h264-proxy']);
    expect(await listed(`#${presetsHash('PRORES')}`)).toEqual(['ProRes 422']);
    expect(await listed(`#${presetsHash('50%_')}`)).toEqual(['50%_off']);
    expect(await listed(`#${presetsHash('nothing like it')}`)).toEqual([]);
    expect((await listed('#presets')).length).toBeGreaterThanOrEqual(5);
  });

  it('watchfolder: create, suspend and resume keep its definition', async () => {
    const preset = await json(await t.call('POST', '/api/v1/presets', { name: 'p', command: '-y' }), 201);
    const built = watchfolderBody({
      ...WATCHFOLDER_DEFAULTS,
      name: 'in',
      description: '',
      path: '/media/in/',
      preset: preset.id,
      'filter.extensions.include': '.mov, mxf',
      'filter.extensions.exclude': '',
      agent: 'encode-01',
      suspended: false,
    });
    const created = await json(await t.call('POST', '/api/v1/watchfolders', built.body), 201);
    expect(created).toMatchObject({ path: '/media/in', interval: 10, growthChecks: 3, agent: 'encode-01' });
    const suspended = await json(
      await t.call('PATCH', `/api/v1/watchfolders/${created.id}`, { suspended: true }),
    );
    expect(suspended).toEqual({ ...created, suspended: true, updatedAt: suspended.updatedAt });
    const edited = await json(
      await t.call(
        'PUT',
        `/api/v1/watchfolders/${created.id}`,
        watchfolderBody(watchfolderFields(suspended)).body,
      ),
    );
    expect(edited).toEqual({ ...suspended, updatedAt: edited.updatedAt });
  });

  it('webhook: an edit keeps the secret, "remove" removes it', async () => {
    const created = await json(
      await t.call(
        'POST',
        '/api/v1/webhooks',
        webhookBody({ event: 'task.created', url: 'http://127.0.0.1:9/h', secret: 's' }).body,
      ),
      201,
    );
    expect(created.hasSecret).toBe(true);
    const kept = await json(
      await t.call('PUT', `/api/v1/webhooks/${created.id}`, webhookBody(webhookFields(created)).body),
    );
    expect(kept.hasSecret).toBe(true);
    const removed = await json(
      await t.call(
        'PUT',
        `/api/v1/webhooks/${created.id}`,
        webhookBody({ ...webhookFields(created), removeSecret: true }).body,
      ),
    );
    expect(removed.hasSecret).toBe(false);
  });

  it("every field error the API gives for a form's body lands on one of that form's fields", async () => {
    const cases: [string, string, unknown][] = [
      [
        'presets-form',
        '/api/v1/presets',
        {
          ...presetBody({
            name: ' ',
            command: '',
            priority: '5000',
            requires: 'bad!',
            webhooks: 'nope http://127.0.0.1/\ntask.updated ftp://x',
            'preProcessing.scriptPath': 'unterminated "quote',
            'preProcessing.importSidecar': true,
            'postProcessing.scriptPath': 'also "bad',
          }).body,
        },
      ],
      [
        'task-form',
        '/api/v1/tasks',
        taskBody({
          command: 'a "b',
          priority: '-5000',
          requires: 'x y!',
          preset: 'nope',
          name: 'x'.repeat(1001),
        }).body,
      ],
      [
        'watchfolders-form',
        '/api/v1/watchfolders',
        watchfolderBody({
          name: '',
          path: 'relative',
          preset: 'x'.repeat(101),
          interval: '0',
          growthChecks: '0',
          'filter.extensions.include': 'a/b',
          'filter.extensions.exclude': 'c\\d',
          agent: 'x'.repeat(201),
        }).body,
      ],
      [
        'webhooks-form',
        '/api/v1/webhooks',
        webhookBody({ event: 'nope', url: 'ftp://x', secret: 'x'.repeat(501) }).body,
      ],
    ];
    for (const [form, path, body] of cases) {
      const problem = await expectProblem(await t.call('POST', path, body), 422);
      const names = formNames(form);
      const { byField, other } = place(problem.errors ?? [], names);
      expect(other, `${form}: ${JSON.stringify(problem.errors)}`).toEqual([]);
      expect(byField.size, form).toBeGreaterThanOrEqual(3);
    }
  });
});
