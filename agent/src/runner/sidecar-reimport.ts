import { basename } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import {
  type DirectWebhook,
  escapeUnstorable,
  findUnsafeJson,
  MAX_TEXT,
  Priority,
  type Task,
  TaskDirectWebhook,
  type TaskPatch,
} from '@ffleet/shared';
import { z } from 'zod';

/** The task fields a pre-processing script may change through the sidecar, as a report patch. */
export type SidecarChanges = Pick<
  TaskPatch,
  'name' | 'priority' | 'metadata' | 'webhooks' | 'command' | 'inputFile' | 'outputFile'
>;

/** Result of {@link validateReimport}. */
export type ReimportResult = { ok: true; changes: SidecarChanges } | { ok: false; error: string };

/** Paths whose value may change (the type may not). */
const EDITABLE_VALUES = new Set(['name', 'priority', 'command.raw', 'inputFile.raw', 'outputFile.raw']);

/** Longest task name accepted, as at creation. */
const MAX_NAME = 1000;
/**
 * Most bytes of JSON a script may make `metadata` (more only if it was that large already): the API's
 * default body limit. The report of the change carries it (the broker takes at most 16 MiB per
 * message), and so does every event of the task after it (webhooks, the event stream).
 */
export const MAX_REIMPORTED_METADATA_BYTES = 1024 * 1024;
/** Most bytes a re-imported sidecar file may have (the largest message the broker takes). */
export const MAX_SIDECAR_BYTES = 16 * 1024 * 1024;
const EDITABLE_TEXTS = new Set(['command.raw', 'inputFile.raw', 'outputFile.raw']);
/** Most direct webhooks a task may carry, as at creation. */
const MAX_WEBHOOKS = 50;

const Metadata = z.record(z.string(), z.unknown());
const Webhooks = z.array(TaskDirectWebhook).max(MAX_WEBHOOKS);

class ReimportError extends Error {}

/**
 * Check a re-imported pre-processing sidecar against the snapshot that was written. The file must
 * be JSON with exactly the same keys and value types at every level, except inside `metadata` (any
 * object) and `webhooks` (any list of task webhooks `{event, url}`). Only `name`, `priority`,
 * `metadata`, `webhooks`, `command.raw`, `inputFile.raw` and `outputFile.raw` may change; any other
 * changed value, an added or removed key or a changed type fails with an error naming the path.
 * So does what the API would refuse at creation and the database cannot store: a NUL or an unpaired
 * UTF-16 surrogate in any string or key (a script's `"\udcff"` escape of an undecodable file name),
 * a `__proto__` key, nesting deeper than 64 levels. On success the changed fields come back as a
 * patch (`resolved` values stay `""` until resolution).
 */
export function validateReimport(written: Task, readText: string): ReimportResult {
  let read: unknown;
  try {
    read = JSON.parse(readText);
  } catch (err) {
    return { ok: false, error: `sidecar is not valid JSON: ${(err as Error).message}` };
  }
  const [unsafe] = findUnsafeJson(read);
  if (unsafe) return { ok: false, error: failure(unsafe.path, unsafe.message) };
  // Compare with what JSON actually holds for the snapshot (e.g. no `undefined` members).
  const expected: unknown = JSON.parse(JSON.stringify(written));
  try {
    compareValue(expected, read, []);
  } catch (err) {
    if (err instanceof ReimportError) return { ok: false, error: err.message };
    throw err;
  }
  return { ok: true, changes: collectChanges(written, read as Task) };
}

function compareValue(expected: unknown, actual: unknown, path: readonly string[]): void {
  const where = path.join('.');
  if (where === 'metadata') {
    checkSchema(Metadata, actual, path, 'must be a JSON object');
    const bytes = jsonBytes(actual);
    if (bytes > Math.max(MAX_REIMPORTED_METADATA_BYTES, jsonBytes(expected)))
      fail(
        path,
        `is ${bytes} bytes as JSON; a script may make it at most ${MAX_REIMPORTED_METADATA_BYTES} bytes`,
      );
    return;
  }
  if (where === 'webhooks') {
    checkSchema(Webhooks, actual, path, 'must be a list of {event, url}');
    return;
  }

  const expectedType = typeName(expected);
  const actualType = typeName(actual);
  if (expectedType !== actualType) fail(path, `changed type: expected ${expectedType}, found ${actualType}`);

  if (expectedType === 'object') {
    const e = expected as Record<string, unknown>;
    const a = actual as Record<string, unknown>;
    for (const key of Object.keys(e)) if (!Object.hasOwn(a, key)) fail([...path, key], 'key was removed');
    for (const key of Object.keys(a)) if (!Object.hasOwn(e, key)) fail([...path, key], 'key was added');
    for (const key of Object.keys(e)) compareValue(e[key], a[key], [...path, key]);
    return;
  }
  if (expectedType === 'array') {
    const e = expected as unknown[];
    const a = actual as unknown[];
    if (a.length > e.length) fail([...path, String(e.length)], 'element was added');
    if (a.length < e.length) fail([...path, String(a.length)], 'element was removed');
    for (const [i, item] of e.entries()) compareValue(item, a[i], [...path, String(i)]);
    return;
  }
  if (EDITABLE_VALUES.has(where)) checkEditable(where, actual, path);
  else if (!Object.is(expected, actual)) fail(path, 'read-only value was changed');
}

/** The limits the API sets at creation (the type is already checked). */
function checkEditable(where: string, value: unknown, path: readonly string[]): void {
  if (where === 'priority') checkSchema(Priority, value, path, 'must be an integer from -1000 to 1000');
  if (where === 'name' && (value as string).length > MAX_NAME)
    fail(path, `longer than ${MAX_NAME} characters`);
  if (EDITABLE_TEXTS.has(where) && (value as string).length > MAX_TEXT)
    fail(path, `longer than ${MAX_TEXT} characters`);
}

const jsonBytes = (value: unknown): number => Buffer.byteLength(JSON.stringify(value) ?? '');

function checkSchema(schema: z.ZodType, value: unknown, path: readonly string[], message: string): void {
  const result = schema.safeParse(value);
  if (result.success) return;
  const issue = result.error.issues[0];
  const issuePath = (issue?.path ?? []).map(String);
  fail([...path, ...issuePath], issuePath.length > 0 ? (issue?.message ?? message) : message);
}

function typeName(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  return typeof value;
}

function fail(path: readonly string[], reason: string): never {
  throw new ReimportError(failure(path.join('.'), reason));
}

/** The error's text; a key holding a NUL or a lone surrogate is shown escaped. */
function failure(path: string, reason: string): string {
  return `sidecar re-import failed at "${path ? escapeUnstorable(path) : '(root)'}": ${reason}`;
}

function collectChanges(written: Task, read: Task): SidecarChanges {
  const changes: SidecarChanges = {};
  // A blank name is no name, as at creation: the input's file name, else "task".
  const name = read.name.trim() === '' ? defaultName(read.inputFile.raw) : read.name;
  if (name !== written.name) changes.name = name;
  if (read.priority !== written.priority) changes.priority = read.priority;
  if (!isDeepStrictEqual(read.metadata, written.metadata)) changes.metadata = read.metadata;
  if (!isDeepStrictEqual(read.webhooks, written.webhooks))
    changes.webhooks = read.webhooks as DirectWebhook[];
  for (const field of ['command', 'inputFile', 'outputFile'] as const) {
    if (read[field].raw !== written[field].raw) changes[field] = { raw: read[field].raw, resolved: '' };
  }
  return changes;
}

const defaultName = (inputFile: string): string => basename(inputFile) || 'task';
