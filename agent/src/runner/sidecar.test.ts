// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${NAME} wildcards are literal text here, not template placeholders.
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { MAX_TEXT, Task } from '@ffleet/shared';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { makeStep, makeTask } from './fixtures/sample-task.ts';
import { buildPostSidecar, buildPreSidecar, validateReimport, writeSidecar } from './sidecar.ts';
import { MAX_REIMPORTED_METADATA_BYTES } from './sidecar-reimport.ts';

function preSidecar(): Task {
  const step = makeStep('/opt/pre.sh', '/tmp/side.json', true);
  step.scriptPath.resolved = '/opt/pre.sh';
  step.sidecarPath.resolved = '/tmp/side.json';
  step.startedAt = 1_700_000_000_500;
  return buildPreSidecar(
    makeTask({
      status: 'PRE_PROCESSING',
      preProcessing: step,
      postProcessing: makeStep('/opt/post.sh', ''),
      command: { raw: '-i ${INPUT_FILE} ${OUTPUT_FILE}', resolved: 'stale' },
      webhooks: [{ event: 'task.updated', url: 'http://127.0.0.1:9/hook' }],
      requires: ['gpu'],
    }),
  );
}

/** Parsed sidecar JSON as a script sees it: anything goes. */
// biome-ignore lint/suspicious/noExplicitAny: the tests poke arbitrary paths, as a script would.
type EditableJson = Record<string, any>;

/** The sidecar as a script would rewrite it: parse, edit, serialise. */
function edited(written: Task, edit: (json: EditableJson) => void): string {
  const json = JSON.parse(JSON.stringify(written));
  edit(json);
  return JSON.stringify(json);
}

describe('buildPreSidecar and buildPostSidecar', () => {
  it('builds the pre-processing snapshot: PRE_PROCESSING, nothing resolved, no post-processing', () => {
    const snapshot = preSidecar();
    expect(Task.parse(snapshot)).toEqual(snapshot);
    expect(snapshot.status).toBe('PRE_PROCESSING');
    expect([snapshot.command.resolved, snapshot.inputFile.resolved, snapshot.outputFile.resolved]).toEqual([
      '',
      '',
      '',
    ]);
    expect(snapshot.postProcessing).toBeNull();
    expect(snapshot.preProcessing?.sidecarPath.resolved).toBe('/tmp/side.json');
  });

  it('builds the post-processing snapshot with status RUNNING and the resolved values kept', () => {
    const task = makeTask({
      status: 'RUNNING',
      outputFile: { raw: '${INPUT_FILE_DIR}/o.mp4', resolved: '/m/o.mp4' },
    });
    const snapshot = buildPostSidecar(task);
    expect(snapshot.status).toBe('RUNNING');
    expect(snapshot.outputFile.resolved).toBe('/m/o.mp4');
    expect(snapshot).not.toBe(task);
  });
});

describe('writeSidecar', () => {
  let dir = '';
  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'ffleet-sidecar-'));
  });
  afterEach(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it('creates the directory and writes the snapshot as JSON readable by everyone', async () => {
    const file = path.join(dir, 'a', 'b', 'side.json');
    const snapshot = preSidecar();
    expect(await writeSidecar(file, snapshot)).toEqual({ ok: true });
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual(snapshot);
    expect(statSync(file).mode & 0o644).toBe(0o644);
  });

  it('returns a failure as a value when the path cannot be written', async () => {
    const blocker = path.join(dir, 'file');
    writeFileSync(blocker, 'x');
    const result = await writeSidecar(path.join(blocker, 'side.json'), preSidecar());
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.error).toContain(`failed to write sidecar ${blocker}/side.json`);
  });
});

describe('validateReimport', () => {
  const written = preSidecar();

  it('accepts the unchanged sidecar with no changes', () => {
    expect(validateReimport(written, JSON.stringify(written))).toEqual({ ok: true, changes: {} });
  });

  it('applies changes to name, priority, metadata, webhooks and the raw command, input and output', () => {
    const text = edited(written, (j) => {
      j.name = 'renamed';
      j.priority = 500;
      j.metadata = { analysis: { loudness: -23.5, tags: ['a', { b: null }] } };
      j.webhooks = [
        { event: 'task.created', url: 'https://example.com/a' },
        { event: 'task.deleted', url: 'http://10.0.0.2/b' },
      ];
      j.command.raw = '-i ${INPUT_FILE} -c:v libx265 ${OUTPUT_FILE}';
      j.inputFile.raw = '/media/other.mov';
      j.outputFile.raw = '/media/other.mkv';
    });
    expect(validateReimport(written, text)).toEqual({
      ok: true,
      changes: {
        name: 'renamed',
        priority: 500,
        metadata: { analysis: { loudness: -23.5, tags: ['a', { b: null }] } },
        webhooks: [
          { event: 'task.created', url: 'https://example.com/a' },
          { event: 'task.deleted', url: 'http://10.0.0.2/b' },
        ],
        command: { raw: '-i ${INPUT_FILE} -c:v libx265 ${OUTPUT_FILE}', resolved: '' },
        inputFile: { raw: '/media/other.mov', resolved: '' },
        outputFile: { raw: '/media/other.mkv', resolved: '' },
      },
    });
  });

  it('holds the raw texts, the name and metadata to what the API takes at creation', () => {
    const fails = (edit: (j: EditableJson) => void) => {
      const r = validateReimport(written, edited(written, edit));
      return r.ok ? 'accepted' : r.error;
    };
    for (const field of ['command', 'inputFile', 'outputFile'])
      expect(fails((j) => (j[field].raw = 'x'.repeat(MAX_TEXT + 1)))).toBe(
        `sidecar re-import failed at "${field}.raw": longer than ${MAX_TEXT} characters`,
      );
    expect(fails((j) => (j.command.raw = `-i \${INPUT_FILE} ${'x'.repeat(MAX_TEXT - 40)}`))).toBe('accepted');
    // Analysis results, but not a whole frame dump: every report of the task carries them.
    const blob = 'x'.repeat(MAX_REIMPORTED_METADATA_BYTES);
    expect(fails((j) => (j.metadata = { blob }))).toBe(
      `sidecar re-import failed at "metadata": is ${MAX_REIMPORTED_METADATA_BYTES + 11} bytes as JSON; a script may make it at most ${MAX_REIMPORTED_METADATA_BYTES} bytes`,
    );
    expect(fails((j) => (j.metadata = { blob: blob.slice(20) }))).toBe('accepted');
    // Metadata that came this large through the API may stay as large.
    const large = preSidecar();
    large.metadata = { blob: `${blob}yy` };
    expect(
      validateReimport(
        large,
        edited(large, (j) => (j.metadata.blob = `${blob}zz`)),
      ).ok,
    ).toBe(true);
    expect(
      validateReimport(
        large,
        edited(large, (j) => (j.metadata.blob = `${blob}zzz`)),
      ).ok,
    ).toBe(false);
  });

  it('reads a blank name as no name, as at creation: the input file name', () => {
    expect(
      validateReimport(
        written,
        edited(written, (j) => (j.name = '  ')),
      ),
    ).toEqual({
      ok: true,
      changes: { name: 'in.mp4' },
    });
    const noInput = edited(written, (j) => {
      j.name = '';
      j.inputFile.raw = '';
    });
    expect(validateReimport(written, noInput)).toEqual({
      ok: true,
      changes: { name: 'task', inputFile: { raw: '', resolved: '' } },
    });
  });

  it('allows emptying metadata and webhooks', () => {
    const result = validateReimport(
      written,
      edited(written, (j) => {
        j.metadata = {};
        j.webhooks = [];
      }),
    );
    expect(result).toEqual({ ok: true, changes: { metadata: {}, webhooks: [] } });
  });

  it.each<[string, (j: EditableJson) => void, string]>([
    ['an added top-level key', (j) => (j.extra = 1), '"extra": key was added'],
    ['an added nested key', (j) => (j.command.extra = 'x'), '"command.extra": key was added'],
    ['a removed key', (j) => delete j.priority, '"priority": key was removed'],
    [
      'a removed nested key',
      (j) => delete j.preProcessing.importSidecar,
      '"preProcessing.importSidecar": key was removed',
    ],
    ['a changed type', (j) => (j.priority = '5'), '"priority": changed type: expected number, found string'],
    [
      'object replaced by null',
      (j) => (j.preProcessing = null),
      '"preProcessing": changed type: expected object, found null',
    ],
    [
      'null replaced by an object',
      (j) => (j.postProcessing = {}),
      '"postProcessing": changed type: expected null, found object',
    ],
    ['a changed read-only value', (j) => (j.uuid = 'other'), '"uuid": read-only value was changed'],
    ['a changed status', (j) => (j.status = 'RUNNING'), '"status": read-only value was changed'],
    [
      'a changed resolved value',
      (j) => (j.command.resolved = 'x'),
      '"command.resolved": read-only value was changed',
    ],
    [
      'a changed step path',
      (j) => (j.preProcessing.scriptPath.raw = '/bin/x'),
      '"preProcessing.scriptPath.raw": read-only value was changed',
    ],
    ['an added list element', (j) => j.requires.push('cpu'), '"requires.1": element was added'],
    ['a removed list element', (j) => j.requires.pop(), '"requires.0": element was removed'],
    ['a changed list element', (j) => (j.requires[0] = 'cpu'), '"requires.0": read-only value was changed'],
    ['metadata that is not an object', (j) => (j.metadata = [1]), '"metadata": must be a JSON object'],
    ['webhooks that are not a list', (j) => (j.webhooks = {}), '"webhooks": must be a list of {event, url}'],
    ['a webhook with an extra key', (j) => (j.webhooks[0].secret = 's'), '"webhooks.0"'],
    ['a webhook with a bad URL', (j) => (j.webhooks[0].url = 'ftp://x'), '"webhooks.0.url"'],
    [
      'a webhook with a non-task event',
      (j) => (j.webhooks[0].event = 'preset.created'),
      '"webhooks.0.event"',
    ],
    [
      'a priority out of range',
      (j) => (j.priority = 5000),
      '"priority": must be an integer from -1000 to 1000',
    ],
    ['a fractional priority', (j) => (j.priority = 1.5), '"priority": must be an integer'],
  ])('rejects %s, naming the path', (_label, edit, message) => {
    const result = validateReimport(written, edited(written, edit));
    expect(result.ok).toBe(false);
    if (!result.ok) {
      expect(result.error).toContain('sidecar re-import failed at');
      expect(result.error).toContain(message);
    }
  });

  it('rejects an added __proto__ key, at the top and in metadata (it would vanish, not be stored)', () => {
    const text = JSON.stringify(written).replace('{', '{"__proto__":{"status":"DONE_SUCCESSFUL"},');
    expect(validateReimport(written, text)).toEqual({
      ok: false,
      error: 'sidecar re-import failed at "__proto__": "__proto__" is a reserved key',
    });
    const inMetadata = edited(written, (j) => (j.metadata = { a: 1 })).replace(
      '"metadata":{',
      '"metadata":{"__proto__":{"x":1},',
    );
    expect(validateReimport(written, inMetadata)).toEqual({
      ok: false,
      error: 'sidecar re-import failed at "metadata.__proto__": "__proto__" is a reserved key',
    });
  });

  // What the API refuses at creation (422) and the database cannot store; a script writes it with
  // JSON escapes, e.g. Python's json.dumps of a file name it could not decode ("\udcff").
  it.each<[string, (j: EditableJson) => void, string]>([
    [
      'an unpaired surrogate in a metadata value',
      (j) => (j.metadata = { file: 'clip-\udcff.mov' }),
      'sidecar re-import failed at "metadata.file": contains an unpaired UTF-16 surrogate',
    ],
    [
      'a NUL in a metadata key (shown escaped)',
      (j) => (j.metadata = { 'a\u0000b': 1 }),
      'sidecar re-import failed at "metadata.a\\u0000b": the key contains a NUL character',
    ],
    [
      'a NUL in the name',
      (j) => (j.name = 'x\u0000'),
      'sidecar re-import failed at "name": contains a NUL character',
    ],
    [
      'a high surrogate without its pair in the raw command',
      (j) => (j.command.raw = '-i in \ud83d out'),
      'sidecar re-import failed at "command.raw": contains an unpaired UTF-16 surrogate',
    ],
    [
      'metadata nested deeper than 64 levels',
      (j) => {
        let deep: unknown = 'bottom';
        for (let i = 0; i < 70; i++) deep = { d: deep };
        j.metadata = deep;
      },
      'nested deeper than 64 levels',
    ],
  ])('rejects %s', (_label, edit, message) => {
    const result = validateReimport(written, edited(written, edit));
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.error).toContain(message);
  });

  it('accepts characters outside the BMP (a surrogate pair) in metadata and the name', () => {
    const result = validateReimport(
      written,
      edited(written, (j) => {
        j.metadata = { emoji: '\ud83c\udfac take 2' };
        j.name = 'take \ud83c\udfac';
      }),
    );
    expect(result).toEqual({ ok: true, changes: { metadata: { emoji: '🎬 take 2' }, name: 'take 🎬' } });
  });

  it('rejects text that is not JSON and JSON of another shape', () => {
    expect(validateReimport(written, '{"name": ')).toMatchObject({ ok: false });
    const notJson = validateReimport(written, '');
    expect(!notJson.ok && notJson.error).toMatch(/^sidecar is not valid JSON/);
    expect(validateReimport(written, '[]')).toEqual({
      ok: false,
      error: 'sidecar re-import failed at "(root)": changed type: expected object, found array',
    });
  });
});
