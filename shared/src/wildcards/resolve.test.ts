// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${NAME} wildcards are literal text here, not template placeholders.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createWildcardContext, type WildcardContextOptions } from './context.ts';
import { resolveWildcards } from './resolve.ts';

const TASK_UUID = '6f1c2b7e-3d7a-4a5e-9c1b-2f8e4d6a7b90';
const RUN_UUID = '0b3c8a9e-1f2d-4e5a-8b7c-6d5e4f3a2b1c';
const V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

function options(overrides: Partial<WildcardContextOptions> = {}): WildcardContextOptions {
  return {
    task: {
      uuid: TASK_UUID,
      source: 'watchfolder',
      metadata: {
        title: 'My "Movie"; $(rm -rf /) `id`',
        count: 3,
        ratio: 1.5,
        flag: false,
        nothing: null,
        nested: { list: [{ c: 'deep' }, 'two'], empty: {} },
        ffleet: { watchfolder: { relativeDir: 'a b' } },
      },
    },
    transcoderPath: '/usr/bin/ffmpeg',
    // 2024-03-07 (a Thursday) 09:05:04.321 local time.
    now: new Date(2024, 2, 7, 9, 5, 4, 321),
    os: 'linux',
    arch: 'amd64',
    uuid: RUN_UUID,
    ...overrides,
  };
}

const ctx = createWildcardContext(options());
const resolve = (text: string) =>
  resolveWildcards(text, ctx, {
    inputFile: '/media/in/My Clip.final.mov',
    outputFile: '/media/out/clip.mp4',
    sidecarFile: '/tmp/side car.json',
  });

describe('resolveWildcards: paths', () => {
  it.each([
    ['${INPUT_FILE}', '/media/in/My Clip.final.mov'],
    ['${INPUT_FILE_BASE}', 'My Clip.final.mov'],
    ['${INPUT_FILE_BASENAME}', 'My Clip.final'],
    ['${INPUT_FILE_EXTENSION}', '.mov'],
    ['${INPUT_FILE_DIR}', '/media/in'],
    ['${OUTPUT_FILE}', '/media/out/clip.mp4'],
    ['${OUTPUT_FILE_BASE}', 'clip.mp4'],
    ['${OUTPUT_FILE_BASENAME}', 'clip'],
    ['${OUTPUT_FILE_EXTENSION}', '.mp4'],
    ['${OUTPUT_FILE_DIR}', '/media/out'],
    ['${SIDECAR_FILE}', '/tmp/side car.json'],
  ])('%s → %s', (wildcard, expected) => {
    expect(resolve(wildcard)).toBe(expected);
  });

  it('gives an empty extension for a file without one and empty values for an empty path', () => {
    expect(
      resolveWildcards('${INPUT_FILE_EXTENSION}|${INPUT_FILE_BASENAME}', ctx, { inputFile: '/a/README' }),
    ).toBe('|README');
    expect(
      resolveWildcards('[${OUTPUT_FILE}|${OUTPUT_FILE_DIR}|${OUTPUT_FILE_BASE}]', ctx, { outputFile: '' }),
    ).toBe('[||]');
  });

  it('leaves path wildcards as written while that path is not known yet', () => {
    expect(resolveWildcards('${INPUT_FILE}|${OUTPUT_FILE_DIR}|${SIDECAR_FILE}', ctx)).toBe(
      '${INPUT_FILE}|${OUTPUT_FILE_DIR}|${SIDECAR_FILE}',
    );
    expect(resolveWildcards('${INPUT_FILE_BASENAME}-${OUTPUT_FILE}', ctx, { inputFile: '/x/a.mov' })).toBe(
      'a-${OUTPUT_FILE}',
    );
  });
});

describe('resolveWildcards: date and time', () => {
  it.each([
    ['${DATE_YEAR}', '2024'],
    ['${DATE_SHORTYEAR}', '24'],
    ['${DATE_MONTH}', '03'],
    ['${DATE_DAY}', '07'],
    ['${DATE_WEEK}', '10'],
    ['${TIME_HOUR}', '09'],
    ['${TIME_MINUTE}', '05'],
    ['${TIME_SECOND}', '04'],
  ])('%s → %s', (wildcard, expected) => {
    expect(resolve(wildcard)).toBe(expected);
  });

  it.each([
    [new Date(2021, 0, 3, 12), '53'], // Sunday 3 Jan 2021 belongs to 2020-W53
    [new Date(2021, 0, 4, 12), '01'],
    [new Date(2024, 11, 30, 12), '01'], // Monday 30 Dec 2024 is 2025-W01
    [new Date(2023, 0, 1, 12), '52'], // Sunday 1 Jan 2023 is 2022-W52
    [new Date(2026, 11, 31, 12), '53'],
    [new Date(2005, 0, 1, 0, 0, 0), '53'],
  ])('DATE_WEEK of %s is the two-digit ISO week %s', (now, week) => {
    expect(resolveWildcards('${DATE_WEEK}', createWildcardContext(options({ now })))).toBe(week);
  });

  it('pads a short year to two digits', () => {
    const c = createWildcardContext(options({ now: new Date(2007, 5, 1) }));
    expect(resolveWildcards('${DATE_SHORTYEAR}', c)).toBe('07');
  });

  it('gives every timestamp unit of the same instant', () => {
    const now = new Date(2024, 2, 7, 9, 5, 4, 321);
    const ms = now.getTime();
    const c = createWildcardContext(options({ now, subMillisecondNanos: 654_987 }));
    expect(resolveWildcards('${TIMESTAMP_SECONDS}', c)).toBe(String(Math.floor(ms / 1000)));
    expect(resolveWildcards('${TIMESTAMP_MILLISECONDS}', c)).toBe(String(ms));
    expect(resolveWildcards('${TIMESTAMP_MICROSECONDS}', c)).toBe(`${ms}654`);
    expect(resolveWildcards('${TIMESTAMP_NANOSECONDS}', c)).toBe(`${ms}654987`);
    expect(resolve('${TIMESTAMP_NANOSECONDS}')).toBe(`${ms}000000`);
  });

  it('rejects an out-of-range sub-millisecond part (a caller bug)', () => {
    expect(() => createWildcardContext(options({ subMillisecondNanos: 1_000_000 }))).toThrow(RangeError);
  });

  describe('in the local time zone', () => {
    const savedTz = process.env.TZ;
    beforeEach(() => {
      process.env.TZ = 'Asia/Kolkata';
    });
    afterEach(() => {
      if (savedTz === undefined) delete process.env.TZ;
      else process.env.TZ = savedTz;
    });

    it('uses the agent local time, not UTC', () => {
      // 2024-12-31T20:00:00Z is 2025-01-01 01:30 in India (UTC+05:30).
      const c = createWildcardContext(options({ now: new Date(Date.UTC(2024, 11, 31, 20, 0, 0)) }));
      expect(
        resolveWildcards(
          '${DATE_YEAR}-${DATE_MONTH}-${DATE_DAY} ${TIME_HOUR}:${TIME_MINUTE} w${DATE_WEEK}',
          c,
        ),
      ).toBe('2025-01-01 01:30 w01');
    });
  });
});

describe('resolveWildcards: run and host values', () => {
  it.each([
    ['${SOURCE}', 'watchfolder'],
    ['${TRANSCODER}', '/usr/bin/ffmpeg'],
    ['${FFMPEG}', '/usr/bin/ffmpeg'],
    ['${TASK_UUID}', TASK_UUID],
    ['${UUID}', RUN_UUID],
    ['${OS_NAME}', 'linux'],
    ['${OS_ARCH}', 'amd64'],
  ])('%s → %s', (wildcard, expected) => {
    expect(resolve(wildcard)).toBe(expected);
  });

  it('generates one v4 ${UUID} per run, the same in every field of that run', () => {
    const c = createWildcardContext(options({ uuid: undefined }));
    const a = resolveWildcards('${UUID}', c);
    expect(a).toMatch(V4);
    expect(resolveWildcards('/tmp/${UUID}.json', c)).toBe(`/tmp/${a}.json`);
    expect(resolveWildcards('${UUID}', createWildcardContext(options({ uuid: undefined })))).not.toBe(a);
  });
});

describe('resolveWildcards: metadata', () => {
  it.each([
    ['${METADATA_title}', 'My "Movie"; $(rm -rf /) `id`'],
    ['${METADATA_count}', '3'],
    ['${METADATA_ratio}', '1.5'],
    ['${METADATA_flag}', 'false'],
    ['${METADATA_nothing}', ''],
    ['${METADATA_nested.list.0.c}', 'deep'],
    ['${METADATA_nested.list.1}', 'two'],
    ['${METADATA_nested.list}', '[{"c":"deep"},"two"]'],
    ['${METADATA_nested.empty}', '{}'],
    ['${METADATA_ffleet.watchfolder.relativeDir}', 'a b'],
    ['${METADATA_missing}', ''],
    ['${METADATA_nested.list.5}', ''],
    ['${METADATA_nested.list.x}', ''],
    ['${METADATA_title.length}', ''],
    ['${METADATA_constructor}', ''],
    ['${METADATA_}', ''],
  ])('%s → %j', (wildcard, expected) => {
    expect(resolve(wildcard)).toBe(expected);
  });

  const pathCtx = createWildcardContext(
    options({
      task: {
        uuid: TASK_UUID,
        source: 'api',
        metadata: {
          'fav.movie': 'Deer Hunter',
          'show.title': 'Pilot',
          '@type': 'Movie',
          friends: [{ first: 'Dale' }, { first: 'Jane' }],
        },
      },
    }),
  );

  it.each([
    ['${METADATA_fav\\.movie}', 'Deer Hunter'],
    ['${METADATA_show\\.title\\}', 'Pilot'], // a `\` ending the path is dropped
    ['${METADATA_friends.#}', '2'],
    ['${METADATA_friends.#.first}', '["Dale","Jane"]'],
    ['${METADATA_fri*.1.first}', 'Jane'],
    ['${METADATA_fav?movie}', 'Deer Hunter'],
    ['${METADATA_@type}', 'Movie'],
    ['${METADATA_friends|0}', ''],
    ['${METADATA_friends.#(first=="Jane").first}', ''],
    ['[${METADATA_friends.@reverse}]', '[]'],
  ])('passes gjson path syntax to the lookup: %s → %j', (wildcard, expected) => {
    expect(resolveWildcards(wildcard, pathCtx)).toBe(expected);
  });

  it('never re-scans a substituted value', () => {
    const c = createWildcardContext(
      options({ task: { uuid: TASK_UUID, source: 'api', metadata: { x: '${UUID}' } } }),
    );
    expect(resolveWildcards('${METADATA_x}', c)).toBe('${UUID}');
  });
});

describe('resolveWildcards: text handling', () => {
  it('leaves unknown names and malformed references as written', () => {
    expect(resolve('${NOPE} ${input_file} ${ UUID} $UUID ${UUID')).toBe(
      '${NOPE} ${input_file} ${ UUID} $UUID ${UUID',
    );
  });

  it('replaces several wildcards inside one string', () => {
    expect(resolve('${OUTPUT_FILE_DIR}/${INPUT_FILE_BASENAME}-${DATE_YEAR}${OUTPUT_FILE_EXTENSION}')).toBe(
      '/media/out/My Clip.final-2024.mp4',
    );
  });

  it('returns text without wildcards unchanged', () => {
    expect(resolve('-c:v libx264 -crf 23')).toBe('-c:v libx264 -crf 23');
  });
});
