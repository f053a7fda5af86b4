import { describe, expect, it } from 'vitest';
import { lookupMetadataPath } from './metadata-path.ts';

const r = String.raw;

// gjson's SYNTAX.md example document, plus the shapes the rules below need. Parsed from JSON text
// like stored metadata, so `__proto__` is an own key here.
const METADATA: unknown = JSON.parse(`{
  "name": {"first": "Tom", "last": "Anderson"},
  "age": 37,
  "ratio": 1.5,
  "flag": false,
  "nothing": null,
  "children": ["Sara", "Alex", "Jack"],
  "fav.movie": "Deer Hunter",
  "friends": [
    {"first": "Dale", "last": "Murphy", "age": 44, "nets": ["ig", "fb", "tw"]},
    {"first": "Roger", "last": "Craig", "age": 68, "nets": ["fb", "tw"]},
    {"first": "Jane", "last": "Murphy", "age": 47, "nets": ["ig", "tw"]}
  ],
  "years": {"2024": "leap"},
  "back\\\\slash": "bs",
  "marks": {"q!": "bang", "q?": "question", "star*x": "starx"},
  "order": {"showB": "b", "showA": "a"},
  "nums": {"b": "letter", "10": "ten", "9": "nine"},
  "pick": {"a": [1], "aa": [2, 3]},
  "nulls": {"ka": {"x": null}, "kb": {"x": 1}},
  "mix": {"ma": "scalar", "mb": {"v": "deep"}},
  "emoji": {"\\ud83d\\ude00x": "smile"},
  "proto": {"__proto__": {"x": "own"}},
  "empty": [],
  "hashy": {"#": "key named #"},
  "sparse": [{"a": null}, {}, {"a": 2}, "str", 5],
  "matrix": [[1, 2], [3]],
  "shows": [
    {"title": "S1", "episodes": [{"title": "E1", "tags": ["x"]}, {"title": "E2", "tags": []}]},
    {"title": "S2", "episodes": [{"title": "E3"}]},
    {"title": "S3"}
  ],
  "a|b": "pipe",
  "@type": "Movie",
  "@this": "key named @this",
  "!draft": true,
  "[bracket": "b"
}`);

const lookup = (path: string) => lookupMetadataPath(METADATA, path);

describe('lookupMetadataPath: plain paths (as before)', () => {
  it.each([
    ['name.last', 'Anderson'],
    ['age', '37'],
    ['ratio', '1.5'],
    ['flag', 'false'],
    ['nothing', ''],
    ['children', '["Sara","Alex","Jack"]'],
    ['children.0', 'Sara'],
    ['friends.1', '{"first":"Roger","last":"Craig","age":68,"nets":["fb","tw"]}'],
    ['friends.1.first', 'Roger'],
    ['missing', ''],
    ['name.middle', ''],
    ['children.3', ''],
    ['children.x', ''],
    ['children.-1', ''],
    ['age.x', ''],
    ['name.first.length', ''],
    ['children.length', ''],
    ['', ''],
    ['.name', ''],
    ['name.', ''],
    // A digit-only component on an object is a key.
    ['years.2024', 'leap'],
    ['years.0', ''],
    // Own keys only.
    ['constructor', ''],
    ['name.toString', ''],
    ['name.hasOwnProperty', ''],
    ['name.__proto__', ''],
    ['constructor.name', ''],
    ['children.constructor', ''],
    ['proto.__proto__.x', 'own'],
  ])('%s → %j', (path, expected) => {
    expect(lookup(path)).toBe(expected);
  });

  it('gives "" without metadata', () => {
    expect(lookupMetadataPath(undefined, 'a')).toBe('');
    expect(lookupMetadataPath(null, 'a.#')).toBe('');
  });
});

describe('lookupMetadataPath: array indexes', () => {
  it.each([
    ['children.01', 'Alex'], // gjson reads any run of digits
    ['children.002', 'Jack'],
    ['children.99999999999999999999', ''],
    ['children.*', ''],
    ['children.?', ''],
    [r`children.\1`, ''], // an escaped component never indexes an array
  ])('%s → %j', (path, expected) => {
    expect(lookup(path)).toBe(expected);
  });
});

describe('lookupMetadataPath: escapes', () => {
  it.each([
    [r`fav\.movie`, 'Deer Hunter'],
    ['fav.movie', ''],
    [r`back\\slash`, 'bs'],
    [r`marks.q\?`, 'question'],
    [r`marks.star\*`, ''], // a literal star: there is no key `star*`
    [r`marks.\q\!`, 'bang'], // escaping an ordinary character gives that character
    [r`\#`, ''],
    [r`hashy.\#`, 'key named #'],
    [r`a\|b`, 'pipe'],
    [r`\@this`, 'key named @this'],
    [r`\[bracket`, 'b'],
    // A `\` ending the path is dropped.
    ['name.last\\', 'Anderson'],
    ['fav\\.movie\\', 'Deer Hunter'],
    ['children.1\\', ''],
    ['children.#\\', ''],
    ['\\', ''],
  ])('%s → %j', (path, expected) => {
    expect(lookup(path)).toBe(expected);
  });
});

describe('lookupMetadataPath: key patterns', () => {
  it.each([
    ['child*.2', 'Jack'],
    ['c?ildren.0', 'Sara'],
    ['na*.last', 'Anderson'],
    ['name.first*', 'Tom'], // `*` also matches nothing
    ['marks.star*', 'starx'],
    ['emoji.?x', 'smile'], // `?` is one code point, also outside the BMP
    // Keys are tried in code point order (FFmate's order), not in stored order.
    ['order.show?', 'a'],
    ['nums.*', 'ten'],
    ['marks.q?', 'bang'], // even when a key equals the pattern text
    // The first matching key through which the rest of the path resolves wins (gjson).
    ['pick.a*.0', '1'],
    ['pick.a*.1', '3'],
    ['mix.m*.v', 'deep'],
    ['nulls.k?.x', ''], // a found null ends the search
    // No match.
    ['name.z*', ''],
    ['x?y', ''],
    ['name.firs?.x', ''],
    // Patterns see own keys only.
    ['name.constructo?', ''],
    ['name.__proto*', ''],
    ['proto.__prot?__.x', 'own'],
  ])('%s → %j', (path, expected) => {
    expect(lookup(path)).toBe(expected);
  });
});

describe('lookupMetadataPath: # on arrays', () => {
  it.each([
    ['children.#', '3'],
    ['friends.#', '3'],
    ['empty.#', '0'],
    ['empty.#.x', '[]'],
    ['friends.#.first', '["Dale","Roger","Jane"]'],
    ['friends.#.age', '[44,68,47]'],
    ['friends.#.nets', '[["ig","fb","tw"],["fb","tw"],["ig","tw"]]'],
    ['friends.#.nets.#', '[3,2,2]'],
    ['friends.#.nets.0', '["ig","fb","ig"]'],
    ['friends.#.missing', '[]'],
    ['sparse.#.a', '[null,2]'], // elements without the path are left out, a found null stays
    ['matrix.#.#', '[2,1]'],
    ['matrix.#.0', '[1,3]'],
    ['shows.#.episodes.#.title', '[["E1","E2"],["E3"]]'],
    ['shows.#.episodes.#', '[2,1]'],
    ['shows.#.episodes.#.tags.#', '[[1,0],[]]'],
    ['shows.#.episodes.0.title', '["E1","E3"]'],
    ['shows.1.episodes.#.title', '["E3"]'],
    ['pick.a*.#', '1'],
    // `#` elsewhere.
    ['name.#', ''],
    ['age.#', ''],
    ['children.0.#', ''],
    ['nothing.#', ''],
    ['missing.#', ''],
    ['hashy.#', 'key named #'], // on an object `#` is a key, as in gjson
    ['children.#x', ''],
    ['children.#0', ''],
  ])('%s → %j', (path, expected) => {
    expect(lookup(path)).toBe(expected);
  });
});

describe('lookupMetadataPath: gjson syntax that resolves to ""', () => {
  it.each([
    // Pipes.
    ['children|0', ''],
    ['name|last', ''],
    ['friends.#.first|0', ''],
    ['a|b', ''],
    // Modifiers (other `@` names are keys).
    ['children.@reverse', ''],
    ['children.@reverse.0', ''],
    ['@this', ''],
    ['friends.#.@this', ''],
    ['name.@keys', ''],
    ['@type', 'Movie'],
    ['name.@first', ''],
    // Queries.
    ['friends.#(last=="Murphy").first', ''],
    ['friends.#(last=="Murphy")#.first', ''],
    ['friends.#(age>45)#', ''],
    ['children.#[0]', ''],
    // Multipaths.
    ['[name.first,age]', ''],
    ['name.[first]', ''],
    ['[bracket', ''],
    // JSON literals at the start of a lookup (other `!` names are keys).
    ['!true', ''],
    ['!"x"', ''],
    ['!1', ''],
    ['!NaN', ''],
    ['!true.x', ''],
    ['friends.#.!true', ''],
    ['!draft', 'true'],
    ['!', ''],
    // JSON lines.
    ['..0', ''],
    ['..#', ''],
    ['friends.#...first', ''],
  ])('%s → %j', (path, expected) => {
    expect(lookup(path)).toBe(expected);
  });
});
