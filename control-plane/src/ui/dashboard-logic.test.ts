import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AgentTokenIssued, LOG_LEVELS as API_LOG_LEVELS, EventName, TaskStatus } from '@ffleet/shared';
import { afterAll, describe, expect, it } from 'vitest';
import { expectProblem, json } from '../../../test/api/support.ts';
import { useTestApp } from '../../../test/helpers/app.ts';
import { startLocalControlPlane } from '../../../test/helpers/control-plane.ts';
import type { RunningControlPlane } from '../control-plane.ts';
// @ts-expect-error plain-JS browser module (JSDoc-typed; dashboard.test.ts type-checks it), no declarations
import * as logic from './dashboard/logic.js';

const {
  agentState,
  agentTokenPath,
  agentTokenQuestion,
  agentTokenView,
  formatAgo,
  formatDuration,
  formatTime,
  isDoneStatus,
  isOpenStatus,
  LOG_LEVEL_PATH,
  LOG_LEVELS,
  logLevelBody,
  logLevelNote,
  logLevelQuestion,
  mergeTaskEvent,
  newestFirst,
  pageLabel,
  parseHash,
  parseTaskEvent,
  percent,
  PRESET_EVENTS,
  PRESET_NAME_FILTER_MAX,
  presetsHash,
  problemMessage,
  progressView,
  readLogLevel,
  reconnectDelay,
  SseParser,
  statusClass,
  statusLabel,
  TASK_EVENTS,
  TASK_STATUSES,
  taskListQuery,
  tasksHash,
} = logic;

type Msg = { event: string; data: string; id: string };
type Task = {
  id: string;
  name: string;
  status: string;
  progress: number;
  remaining: number;
  error: string;
  waitingFor?: string;
  attempt: number;
  agent: { id: string; name: string } | null;
  createdAt: number;
  startedAt: number;
  finishedAt: number;
  updatedAt: number;
};
type View = { tasks: Task[]; total: number; statuses: string[]; page: number; perPage: number };
type Merge = { view: View; resync: boolean };
const merge = (view: View, event: string, task: Task): Merge => mergeTaskEvent(view, event, task);

/** Feed `chunks` to one parser; every message dispatched, in order. */
function parse(chunks: (string | Uint8Array)[], parser = new SseParser()): Msg[] {
  return chunks.flatMap((c) => parser.push(c) as Msg[]);
}

/** `text` cut into pieces at every given offset. */
function cut(text: string, at: number[]): string[] {
  const out: string[] = [];
  let from = 0;
  for (const i of at) {
    out.push(text.slice(from, i));
    from = i;
  }
  out.push(text.slice(from));
  return out;
}

describe('SseParser', () => {
  // What events-stream.ts writes (hono's writeSSE: event, data lines, id; keep-alive comments).
  const STREAM =
    'event: ready\ndata: {}\n\n' +
    ': keepalive\n\n' +
    'event: task.updated\ndata: {"id":"e1","n":1}\nid: e1\n\n' +
    'event: task.deleted\ndata: {"id":"e2"}\nid: e2\n\n';
  const EXPECTED: Msg[] = [
    { event: 'ready', data: '{}', id: '' },
    { event: 'task.updated', data: '{"id":"e1","n":1}', id: 'e1' },
    { event: 'task.deleted', data: '{"id":"e2"}', id: 'e2' },
  ];

  it('parses the server stream whole and split at every single offset', () => {
    expect(parse([STREAM])).toEqual(EXPECTED);
    for (let i = 0; i <= STREAM.length; i++) expect(parse(cut(STREAM, [i])), `cut at ${i}`).toEqual(EXPECTED);
    expect(parse([...STREAM])).toEqual(EXPECTED); // one character at a time
  });

  it('accepts CRLF and CR line ends, also with a CRLF split between two chunks', () => {
    for (const eol of ['\r\n', '\r']) {
      const text = STREAM.replaceAll('\n', eol);
      expect(parse([text]), JSON.stringify(eol)).toEqual(EXPECTED);
      for (let i = 0; i <= text.length; i++) expect(parse(cut(text, [i])), `cut at ${i}`).toEqual(EXPECTED);
      for (let i = 0; i + 7 <= text.length; i += 3) expect(parse(cut(text, [i, i + 7]))).toEqual(EXPECTED);
    }
    // A CR at the end of a chunk ends the line at once: the message is not held for the next chunk.
    const p = new SseParser();
    expect(p.push('data: now\r\r')).toEqual([{ event: 'message', data: 'now', id: '' }]);
    expect(p.push('\ndata: next\r\n\r\n')).toEqual([{ event: 'message', data: 'next', id: '' }]);
  });

  it('joins multi-line data with \\n and keeps empty data lines', () => {
    expect(parse(['data: one\ndata:two\ndata\ndata:  four\n\n'])).toEqual([
      { event: 'message', data: 'one\ntwo\n\n four', id: '' },
    ]);
    expect(parse(['data\n\n'])).toEqual([{ event: 'message', data: '', id: '' }]);
  });

  it('skips comments and messages without data; a field without a colon has an empty value', () => {
    expect(parse([':hi\n\n: keepalive\n\nevent: x\n\nid: 7\n\nretry: 10\n\nfoo: bar\n\n'])).toEqual([]);
    // the `event: x` above did not leak into the next message
    expect(parse(['event: x\n\ndata: y\n\n'])).toEqual([{ event: 'message', data: 'y', id: '' }]);
    expect(parse(['event\ndata: y\n\n'])).toEqual([{ event: 'message', data: 'y', id: '' }]);
  });

  it('keeps the last event id across messages and a reset; ignores an id with NUL', () => {
    const p = new SseParser();
    expect(parse(['id: a\ndata: 1\n\n', 'data: 2\n\n', 'id: b\u0000\ndata: 3\n\n'], p)).toEqual([
      { event: 'message', data: '1', id: 'a' },
      { event: 'message', data: '2', id: 'a' },
      { event: 'message', data: '3', id: 'a' },
    ]);
    expect(p.lastEventId).toBe('a');
    p.push('id: c\n\n'); // an id alone dispatches nothing but is kept
    expect(p.lastEventId).toBe('c');
    p.reset();
    expect(p.lastEventId).toBe('c');
    p.push('id\n\n'); // an empty id clears it, as EventSource does
    expect(p.lastEventId).toBe('');
  });

  it('takes retry only when it is all digits', () => {
    const p = new SseParser();
    p.push('retry: 2500\n\n');
    expect(p.retry).toBe(2500);
    p.push('retry: 1e3\n\nretry: -5\n\nretry:\n\nretry: 12 s\n\n');
    expect(p.retry).toBe(2500);
    p.push('retry:700\n');
    expect(p.retry).toBe(700);
  });

  it('drops a message cut off by the end of the connection (reset), and strips one leading BOM', () => {
    const p = new SseParser();
    expect(p.push('\uFEFFdata: a\n\ndata: half')).toEqual([{ event: 'message', data: 'a', id: '' }]);
    p.reset();
    expect(p.push('\uFEFFdata: b\n\n')).toEqual([{ event: 'message', data: 'b', id: '' }]);
    expect(p.push('\uFEFFdata: c\n\n')).toEqual([]); // a BOM later on is part of a field name
  });

  it('decodes UTF-8 bytes split inside a character', () => {
    const bytes = new TextEncoder().encode('data: {"name":"Ünïcødé 🎬"}\n\n');
    const emoji = bytes.indexOf(0xf0);
    for (const at of [9, 10, emoji + 1, emoji + 2, emoji + 3]) {
      expect(parse([bytes.subarray(0, at), bytes.subarray(at)]), `cut at ${at}`).toEqual([
        { event: 'message', data: '{"name":"Ünïcødé 🎬"}', id: '' },
      ]);
    }
  });
});

describe('parseTaskEvent', () => {
  const task = { id: 't1', status: 'QUEUED' };
  it('takes the task snapshot of a task event', () => {
    const data = JSON.stringify({ id: 'e', event: 'task.created', data: { taskId: 't1', task } });
    expect(parseTaskEvent({ event: 'task.created', data, id: 'e' })).toEqual({ event: 'task.created', task });
  });
  it('ignores other events and malformed data', () => {
    const data = JSON.stringify({ data: { task } });
    expect(parseTaskEvent({ event: 'ready', data: '{}', id: '' })).toBeNull();
    expect(parseTaskEvent({ event: 'batch.created', data, id: '' })).toBeNull();
    expect(parseTaskEvent({ event: 'task.updated', data: '{not json', id: '' })).toBeNull();
    expect(parseTaskEvent({ event: 'task.updated', data: '{"data":{}}', id: '' })).toBeNull();
    expect(parseTaskEvent({ event: 'task.updated', data: 'null', id: '' })).toBeNull();
    expect(parseTaskEvent({ event: 'task.updated', data: '{"data":{"task":{"id":5}}}', id: '' })).toBeNull();
  });
});

describe('mergeTaskEvent', () => {
  let seq = 0;
  const task = (over: Partial<Task> = {}): Task => ({
    id: `00000000-0000-4000-8000-${String(++seq).padStart(12, '0')}`,
    name: `task ${seq}`,
    status: 'QUEUED',
    progress: 0,
    remaining: -1,
    error: '',
    attempt: 1,
    agent: null,
    createdAt: 1_000 + seq,
    startedAt: 0,
    finishedAt: 0,
    updatedAt: 1_000 + seq,
    ...over,
  });
  /** A page of `tasks` (sorted here), `total` matching tasks. */
  const view = (tasks: Task[], over: Partial<View> = {}): View => ({
    tasks: [...tasks].sort(newestFirst),
    total: tasks.length,
    statuses: [],
    page: 0,
    perPage: 3,
    ...over,
  });
  const ids = (m: Merge) => m.view.tasks.map((t) => t.name);

  it('keeps a queued task’s waitingFor when an event (which never carries it) replaces the row', () => {
    const a = task({ waitingFor: 'no agent offers gpu (its requires): connect one that has it' });
    const again = merge(view([a]), 'task.updated', {
      ...a,
      updatedAt: a.updatedAt + 1,
      waitingFor: undefined,
    });
    expect(again.view.tasks[0]?.waitingFor).toBe(a.waitingFor);
    // Claimed: it no longer waits.
    const claimed = merge(view([a]), 'task.updated', {
      ...a,
      status: 'RUNNING',
      updatedAt: a.updatedAt + 1,
      waitingFor: undefined,
    });
    expect(claimed.view.tasks[0]?.waitingFor).toBeUndefined();
  });

  it('keeps what a running task’s cancel waits for through its progress events, not past its end', () => {
    const a = task({
      status: 'RUNNING',
      waitingFor: 'its cancel: agent enc-1 is stopping the run',
    });
    const progressed = merge(view([a]), 'task.updated', {
      ...a,
      progress: 40,
      updatedAt: a.updatedAt + 1,
      waitingFor: undefined,
    });
    expect(progressed.view.tasks[0]).toMatchObject({ progress: 40, waitingFor: a.waitingFor });
    const canceled = merge(view([a]), 'task.updated', {
      ...a,
      status: 'DONE_CANCELED',
      updatedAt: a.updatedAt + 1,
      waitingFor: undefined,
    });
    expect(canceled.view.tasks[0]?.waitingFor).toBeUndefined();
  });

  it('adds a created task at the top of the first page, keeping the page size', () => {
    const [a, b] = [task(), task()];
    const m = merge(view([a!, b!]), 'task.created', task({ name: 'new' }));
    expect(ids(m)).toEqual(['new', b!.name, a!.name]);
    expect(m).toMatchObject({ resync: false, view: { total: 3 } });
    const full = merge(m.view, 'task.created', task({ name: 'newer' }));
    expect(ids(full)).toEqual(['newer', 'new', b!.name]);
    expect(full.view.total).toBe(4);
  });

  it('counts a created task on a later page and asks to reload (every row moves down)', () => {
    const v = view([task(), task(), task()], { page: 1, total: 6 });
    const m = merge(v, 'task.created', task());
    expect(m.view.tasks).toEqual(v.tasks);
    expect(m).toMatchObject({ resync: true, view: { total: 7 } });
  });

  it('ignores a created task the filter excludes, and treats one already shown as an update', () => {
    const v = view([task({ status: 'RUNNING' })], { statuses: ['RUNNING'] });
    expect(merge(v, 'task.created', task())).toEqual({ view: v, resync: false });
    const shown = { ...v.tasks[0]!, progress: 50, updatedAt: v.tasks[0]!.updatedAt + 1 };
    const m = merge(v, 'task.created', shown);
    expect(m.view.tasks).toEqual([shown]);
    expect(m.view.total).toBe(1);
  });

  it('replaces a row with a newer (or equal) snapshot and ignores an older one', () => {
    const a = task({ status: 'RUNNING', progress: 10, updatedAt: 5_000 });
    const v = view([task(), a, task()]);
    const newer = merge(v, 'task.updated', { ...a, progress: 60, remaining: 12, updatedAt: 6_000 });
    expect(newer.view.tasks.find((t) => t.id === a.id)).toMatchObject({ progress: 60, remaining: 12 });
    expect(newer.view.tasks.map((t) => t.id)).toEqual(v.tasks.map((t) => t.id)); // same place
    expect(newer).toMatchObject({ resync: false, view: { total: 3 } });
    const older = merge(newer.view, 'task.updated', { ...a, progress: 30, updatedAt: 5_500 });
    expect(older.view).toBe(newer.view);
    const same = merge(newer.view, 'task.updated', { ...a, progress: 61, updatedAt: 6_000 });
    expect(same.view.tasks.find((t) => t.id === a.id)?.progress).toBe(61);
  });

  it('removes a deleted row; asks to reload when a row of the next page moves in', () => {
    const [a, b, c] = [task(), task(), task()];
    const m = merge(view([a!, b!, c!]), 'task.deleted', b!);
    expect(ids(m)).toEqual([c!.name, a!.name]);
    expect(m).toMatchObject({ resync: false, view: { total: 2 } });
    const more = merge(view([a!, b!, c!], { total: 10 }), 'task.deleted', b!);
    expect(more).toMatchObject({ resync: true, view: { total: 9 } });
  });

  it('asks to reload for a deleted task it does not show (on another page, or gone already)', () => {
    const v = view([task(), task()]);
    expect(merge(v, 'task.deleted', task())).toEqual({ view: v, resync: true });
    const filtered = view([task({ status: 'RUNNING' })], { statuses: ['RUNNING'] });
    expect(merge(filtered, 'task.deleted', task({ status: 'DONE_CANCELED' }))).toEqual({
      view: filtered,
      resync: false,
    });
  });

  it('drops a row that leaves the status filter', () => {
    const a = task({ status: 'RUNNING' });
    const b = task({ status: 'QUEUED' });
    const v = view([a, b], { statuses: ['QUEUED', 'RUNNING'] });
    const m = merge(v, 'task.updated', { ...a, status: 'DONE_SUCCESSFUL', updatedAt: a.updatedAt + 1 });
    expect(ids(m)).toEqual([b.name]);
    expect(m).toMatchObject({ resync: false, view: { total: 1 } });
  });

  it('adds a task that enters the filter where the API would list it', () => {
    const [a, b, c] = [task({ status: 'RUNNING' }), task(), task({ status: 'RUNNING' })];
    const v = view([a!, c!], { statuses: ['RUNNING'] });
    const m = merge(v, 'task.updated', { ...b!, status: 'RUNNING', updatedAt: b!.updatedAt + 1 });
    expect(ids(m)).toEqual([c!.name, b!.name, a!.name]);
    expect(m).toMatchObject({ resync: false, view: { total: 3 } });
  });

  it('filtered: a change it cannot place on this page asks to reload', () => {
    const rows = [task({ status: 'RUNNING' }), task({ status: 'RUNNING' }), task({ status: 'RUNNING' })];
    const v = view(rows, { statuses: ['RUNNING'], total: 5 });
    const older = task({ status: 'RUNNING', createdAt: 1 }); // sorts after this full page
    expect(merge(v, 'task.updated', older)).toEqual({ view: v, resync: true });
    // Left the filter, or changed without ever matching it: only a reload can tell.
    expect(merge(v, 'task.updated', task({ status: 'DONE_ERROR' }))).toEqual({ view: v, resync: true });
  });

  it('unfiltered: an update of a task on another page changes nothing', () => {
    const v = view([task(), task(), task()], { total: 9 });
    const other = task({ createdAt: 1, status: 'RUNNING', progress: 40 });
    expect(merge(v, 'task.updated', other)).toEqual({ view: v, resync: false });
    const newer = view([task(), task(), task()], { page: 1, total: 9 });
    expect(merge(newer, 'task.updated', task({ status: 'RUNNING' }))).toEqual({ view: newer, resync: false });
  });

  it('orders like the API: createdAt, then id, descending', () => {
    const x = task({ createdAt: 5, id: 'b' });
    const y = task({ createdAt: 5, id: 'a' });
    const z = task({ createdAt: 9 });
    expect([y, x, z].sort(newestFirst)).toEqual([z, x, y]);
  });

  it('builds the list query', () => {
    expect(taskListQuery({ page: 2, perPage: 50, statuses: [] })).toBe('page=2&perPage=50');
    expect(taskListQuery({ page: 0, perPage: 50, statuses: ['QUEUED', 'RUNNING'] })).toBe(
      'page=0&perPage=50&status=QUEUED%2CRUNNING',
    );
  });
});

describe('the address keeps the tab, and the tasks tab its filter and page', () => {
  const TABS = ['tasks', 'presets', 'watchfolders', 'webhooks'];

  it('reads the tab, the status filter and the page (1-based in the address)', () => {
    expect(parseHash('#tasks?status=QUEUED,PRE_PROCESSING,RUNNING&page=3', TABS)).toEqual({
      tab: 'tasks',
      statuses: ['QUEUED', 'PRE_PROCESSING', 'RUNNING'],
      page: 2,
      name: '',
    });
    expect(parseHash('#presets', TABS)).toEqual({ tab: 'presets', statuses: [], page: 0, name: '' });
    expect(parseHash('', TABS)).toEqual({ tab: 'tasks', statuses: [], page: 0, name: '' });
    expect(parseHash('webhooks', TABS).tab).toBe('webhooks');
    expect(parseHash('#nope?page=2', TABS)).toEqual({ tab: 'tasks', statuses: [], page: 1, name: '' });
  });

  it('leaves out unknown statuses (and repeats) and pages that are no whole number ≥ 1', () => {
    expect(parseHash('#tasks?status=RUNNING,bogus,RUNNING,running', TABS).statuses).toEqual(['RUNNING']);
    for (const page of ['0', '-1', '1.5', 'x', '', '1e3', '99999999'])
      expect(parseHash(`#tasks?page=${page}`, TABS).page, page).toBe(0);
    expect(parseHash('#tasks?page=1', TABS).page).toBe(0);
  });

  it('writes the hash of the tasks tab, and reads it back', () => {
    expect(tasksHash({ statuses: [], page: 0 })).toBe('tasks');
    expect(tasksHash({ statuses: ['DONE_ERROR'], page: 0 })).toBe('tasks?status=DONE_ERROR');
    expect(tasksHash({ statuses: [], page: 4 })).toBe('tasks?page=5');
    const q = { statuses: ['DONE_SUCCESSFUL', 'DONE_ERROR', 'DONE_CANCELED'], page: 1 };
    expect(tasksHash(q)).toBe('tasks?status=DONE_SUCCESSFUL,DONE_ERROR,DONE_CANCELED&page=2');
    expect(parseHash(`#${tasksHash(q)}`, TABS)).toEqual({ tab: 'tasks', ...q, name: '' });
  });

  it("the presets tab keeps its name filter: any text survives the address, trimmed, at most the API's 200", () => {
    expect(presetsHash('')).toBe('presets');
    expect(presetsHash('   ')).toBe('presets');
    expect(presetsHash(' h264 ')).toBe('presets?name=h264');
    expect(parseHash('#presets?name=h264', TABS)).toEqual({
      tab: 'presets',
      statuses: [],
      page: 0,
      name: 'h264',
    });
    for (const name of ['web 1080p', '50%_off', 'a&b=c#d', 'x+y', 'ä/ö?ü', '\\server']) {
      const hash = presetsHash(name);
      expect(hash.slice('presets?name='.length), name).not.toMatch(/[\s#&]/); // one parameter, encoded
      expect(parseHash(`#${hash}`, TABS), name).toMatchObject({ tab: 'presets', name });
    }
    expect(parseHash('#presets?name=%20%20gpu%20', TABS).name).toBe('gpu');
    expect(parseHash(`#presets?name=${'x'.repeat(300)}`, TABS).name).toBe('x'.repeat(PRESET_NAME_FILTER_MAX));
    expect(PRESET_NAME_FILTER_MAX).toBe(200);
  });
});

describe('formatting', () => {
  it('durations', () => {
    expect(formatDuration(0)).toBe('0s');
    expect(formatDuration(42.4)).toBe('42s');
    expect(formatDuration(59.6)).toBe('1m 00s');
    expect(formatDuration(185)).toBe('3m 05s');
    expect(formatDuration(3720)).toBe('1h 02m');
    expect(formatDuration(2 * 86400 + 3 * 3600 + 59)).toBe('2d 03h');
    for (const unknown of [-1, Number.NaN, Number.POSITIVE_INFINITY])
      expect(formatDuration(unknown)).toBe('—');
  });

  it('times, in local time', () => {
    const now = new Date(2026, 10, 24, 15, 30, 0).getTime();
    expect(formatTime(new Date(2026, 10, 24, 9, 5, 7).getTime(), now)).toBe('09:05:07');
    expect(formatTime(new Date(2026, 10, 23, 23, 59, 59).getTime(), now)).toBe('2026-11-23 23:59');
    expect(formatTime(new Date(2025, 0, 2, 3, 4, 5).getTime(), now)).toBe('2025-01-02 03:04');
    expect(formatTime(0, now)).toBe('—');
  });

  it('ages', () => {
    const now = Date.UTC(2026, 10, 24);
    expect(formatAgo(0, now)).toBe('never');
    expect(formatAgo(now - 500, now)).toBe('just now');
    expect(formatAgo(now + 3000, now)).toBe('just now'); // a clock ahead of ours
    expect(formatAgo(now - 12_000, now)).toBe('12s ago');
    expect(formatAgo(now - 5 * 60_000, now)).toBe('5m ago');
    expect(formatAgo(now - 3 * 3_600_000, now)).toBe('3h ago');
    expect(formatAgo(now - 4 * 86_400_000, now)).toBe('4d ago');
  });

  it('percentages and the pager', () => {
    expect([percent(-3), percent(0), percent(99.9), percent(100), percent(140), percent(Number.NaN)]).toEqual(
      [0, 0, 99, 100, 100, 0],
    );
    expect(pageLabel({ page: 0, perPage: 50, total: 123, count: 50 })).toBe('1–50 of 123');
    expect(pageLabel({ page: 2, perPage: 50, total: 123, count: 23 })).toBe('101–123 of 123');
    expect(pageLabel({ page: 0, perPage: 50, total: 0, count: 0 })).toBe('0 of 0');
  });

  it("a running task's progress: no percentage while nothing is known (its duration is unknown)", () => {
    // The agent reports progress 0 and remaining -1 until the transcoder tells the input's length, and
    // for the whole run when it never does: that is no "0%".
    expect(progressView({ progress: 0, remaining: -1 })).toEqual({ value: null, text: 'progress unknown' });
    expect(progressView({ progress: 0, remaining: Number.NaN }).value).toBeNull();
    expect(progressView({ progress: 0, remaining: 600 })).toEqual({ value: 0, text: '0% · 10m 00s left' });
    expect(progressView({ progress: 42.7, remaining: 65 })).toEqual({ value: 42, text: '42% · 1m 05s left' });
    // A segment's start, no estimate: the percentage alone.
    expect(progressView({ progress: 30, remaining: -1 })).toEqual({ value: 30, text: '30%' });
  });

  it('statuses: labels, classes (server text never picks a class), open and done', () => {
    expect(TASK_STATUSES.map(statusLabel)).toEqual([
      'queued',
      'pre-processing',
      'running',
      'successful',
      'failed',
      'canceled',
    ]);
    expect(statusLabel('SOMETHING_NEW')).toBe('SOMETHING_NEW');
    expect(statusLabel('constructor')).toBe('constructor');
    expect(statusClass('DONE_ERROR')).toBe('status-done-error');
    expect(statusClass('PRE_PROCESSING')).toBe('status-pre-processing');
    expect(statusClass('draining')).toBe('status-draining');
    for (const odd of ['hidden', 'x status-online', 'Online', '', 'constructor']) {
      expect(statusClass(odd)).toBe('status-unknown');
    }
    // The browser module cannot import the shared schema: its copy of the statuses must not drift.
    expect(TASK_STATUSES).toEqual(TaskStatus.options);
    // Nor its events: the stream refuses a name it does not know.
    expect(TASK_EVENTS).toEqual(EventName.options.filter((e) => e.startsWith('task.')));
    expect(PRESET_EVENTS).toEqual(EventName.options.filter((e) => e.startsWith('preset.')));
    expect(parseTaskEvent({ event: 'preset.updated', data: '{}', id: '1' })).toBeNull();
    expect(TASK_STATUSES.filter(isOpenStatus)).toEqual(['QUEUED', 'PRE_PROCESSING', 'RUNNING']);
    expect(TASK_STATUSES.filter(isDoneStatus)).toEqual(['DONE_SUCCESSFUL', 'DONE_ERROR', 'DONE_CANCELED']);
    expect(agentState({ status: 'draining', paused: true })).toBe('paused');
    expect(agentState({ status: 'draining', paused: false })).toBe('draining');
    expect(agentState({ status: 'offline', paused: true })).toBe('offline');
  });

  it("a failed call's message: the problem's detail and field errors, else the text", () => {
    const problem = {
      type: 'about:blank',
      title: 'Conflict',
      status: 409,
      detail: 'task is running',
      code: 'CONFLICT',
    };
    expect(problemMessage(409, JSON.stringify(problem))).toBe('task is running');
    expect(
      problemMessage(
        422,
        JSON.stringify({
          ...problem,
          detail: 'invalid body',
          errors: [{ path: 'paused', message: 'boolean' }],
        }),
      ),
    ).toBe('invalid body (paused: boolean)');
    expect(problemMessage(502, '<html>Bad gateway</html>')).toBe('<html>Bad gateway</html>');
    expect(problemMessage(500, '')).toBe('HTTP 500');
    expect(problemMessage(500, 'x'.repeat(1000))).toHaveLength(300);
  });

  it('reconnect delays: the base (or retry:), doubled per failure, at most 30 s, ±20 %', () => {
    expect([0, 1, 2, 3, 4, 5, 6, 40].map((n) => reconnectDelay(n))).toEqual([
      1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000,
    ]);
    expect(reconnectDelay(0, 3000)).toBe(3000);
    expect(reconnectDelay(0, 1000, 0)).toBe(800);
    expect(reconnectDelay(0, 1000, 1)).toBe(1200);
    expect(reconnectDelay(0, 0)).toBe(100); // `retry: 0` does not make a tight loop
  });
});

describe("an agent's new token", () => {
  /** An answer as the API gives it (checked against its schema, so the fixture cannot drift). */
  const issued = (over: Partial<AgentTokenIssued> = {}) =>
    AgentTokenIssued.parse({
      agent: 'encode-07',
      generation: 2,
      token: 'tok-secret',
      disconnected: true,
      known: true,
      fleetTokenAccepted: false,
      ...over,
    });
  type View = { title: string; token: string; command: string; notes: string[] };
  const view = (i: AgentTokenIssued): View => agentTokenView(i);

  it('is asked for by id (or name), and the question says the old token stops at once and the box is disconnected', () => {
    expect(agentTokenPath('6f1c0b6e-1f7e-4a57-9a53-0b8f6d3f7f52')).toBe(
      '/api/v1/agents/6f1c0b6e-1f7e-4a57-9a53-0b8f6d3f7f52/token',
    );
    expect(agentTokenPath('a/b?c')).toBe('/api/v1/agents/a%2Fb%3Fc/token');
    const q = agentTokenQuestion({ name: 'encode-07', runningTasks: [] });
    expect(q).toContain('“encode-07”');
    expect(q).toContain('current own token stops working at once');
    expect(q).toContain('disconnected');
    expect(q).toContain('FFLEET_AGENT_TOKEN');
    expect(q).not.toContain('task');
    expect(agentTokenQuestion({ name: 'x', runningTasks: ['t1'] })).toContain(
      'hands its running task back to the queue before its lease runs out',
    );
    expect(agentTokenQuestion({ name: 'x', runningTasks: ['t1', 't2'] })).toContain('its 2 running tasks');
  });

  it('shows the token once with the command that prints it again, and what the answer means in plain words', () => {
    const v = view(issued());
    expect(v.token).toBe('tok-secret');
    expect(v.title).toBe('New token for “encode-07” (generation 2)');
    expect(v.command).toBe('npm run -s agent-token -- encode-07 --generation 2');
    expect(v.notes).toEqual([
      'The box’s connection with its old token was closed.',
      'Only own tokens log agents in (FFLEET_AGENT_AUTH=per-agent): the old token is refused from now on.',
    ]);
    // Nothing else carries the token: the title, command and notes may be shown and kept anywhere.
    for (const text of [v.title, v.command, ...v.notes]) expect(text).not.toContain('tok-secret');

    const shared = view(issued({ disconnected: false, known: false, fleetTokenAccepted: true }));
    expect(shared.notes).toEqual([
      'No connection with the old token was open (the box is offline, or logged in with the fleet token).',
      'No agent named “encode-07” has registered yet: if you meant another box, check the name (this one now has a token of its own all the same).',
      'The fleet token still logs any agent in (FFLEET_AGENT_AUTH=shared): this does not keep out a box holding it.',
    ]);
  });

  describe('from a running control plane (embedded broker, shared mode, a local agent)', () => {
    const API_TOKEN = 'api-token-for-the-dashboard-tests';
    const dataDir = mkdtempSync(join(tmpdir(), 'ffleet-dashboard-token-'));
    let cp: RunningControlPlane | undefined;
    afterAll(async () => {
      await cp?.stop();
      rmSync(dataDir, { recursive: true, force: true });
    });

    it("the answer gives the dialog's view; the local agent's refusal reads as its detail", async () => {
      cp = await startLocalControlPlane(
        dataDir,
        { FFLEET_API_TOKENS: API_TOKEN },
        { localAgentName: 'local-box' },
      );
      const post = (id: string) =>
        fetch(`http://127.0.0.1:${cp!.httpPort}${agentTokenPath(id)}`, {
          method: 'POST',
          headers: { Authorization: `Bearer ${API_TOKEN}` },
        });
      const answer = AgentTokenIssued.parse(await json(await post('encode-11')));
      const v = view(answer);
      expect(v.token).toBe(answer.token);
      expect(v.command).toBe('npm run -s agent-token -- encode-11 --generation 1');
      expect(v.notes).toContain(
        'The fleet token still logs any agent in (FFLEET_AGENT_AUTH=shared): this does not keep out a box holding it.',
      );
      expect(v.notes.some((n) => n.startsWith('No agent named “encode-11” has registered yet'))).toBe(true);

      const res = await post('local-box');
      const text = await res.clone().text();
      const problem = await expectProblem(res, 409, 'LOCAL_AGENT');
      expect(problemMessage(409, text)).toBe(problem.detail);
    }, 60_000);
  });

  describe('refused (the message bar shows the detail)', () => {
    const open = useTestApp();
    const withTokens = useTestApp({ apiTokens: ['tok-refusals'] });

    it('403 API_TOKENS_REQUIRED without API tokens; 409 EXTERNAL_BROKER when the broker is not the embedded one', async () => {
      for (const [res, status, code] of [
        [await open.call('POST', agentTokenPath('encode-01')), 403, 'API_TOKENS_REQUIRED'],
        [
          await withTokens.call('POST', agentTokenPath('encode-01'), undefined, {
            Authorization: 'Bearer tok-refusals',
          }),
          409,
          'EXTERNAL_BROKER',
        ],
      ] as const) {
        const text = await res.clone().text();
        const problem = await expectProblem(res, status, code);
        expect(problemMessage(status, text)).toBe(problem.detail);
      }
    });
  });
});

describe('the log level', () => {
  const t = useTestApp();

  it("offers exactly the API's levels; reads an answer, builds a body only for a level the API takes", () => {
    expect([...LOG_LEVELS]).toEqual([...API_LOG_LEVELS]);
    expect(LOG_LEVEL_PATH).toBe('/api/v1/system/log-level');
    expect(readLogLevel({ level: 'debug' })).toBe('debug');
    for (const bad of [null, undefined, 'info', [], {}, { level: 'verbose' }, { level: 30 }]) {
      expect(readLogLevel(bad), JSON.stringify(bad)).toBeNull();
    }
    expect(logLevelBody('trace')).toEqual({ level: 'trace' });
    expect(logLevelBody('TRACE')).toBeNull();
    expect(logLevelBody('')).toBeNull();
  });

  it('asks first only for a level that hides errors or warnings; says a change lasts until a restart', () => {
    for (const to of ['warn', 'info', 'debug', 'trace']) expect(logLevelQuestion('info', to), to).toBeNull();
    expect(logLevelQuestion('silent', 'silent')).toBeNull();
    expect(logLevelQuestion('info', 'silent')).toContain('log nothing at all');
    expect(logLevelQuestion('info', 'fatal')).toContain('only fatal errors');
    expect(logLevelQuestion('info', 'error')).toContain('no warnings');
    for (const to of ['silent', 'fatal', 'error'])
      expect(logLevelQuestion('info', to)).toContain('until the control plane restarts');
    const at = new Date(2026, 10, 27, 9, 30, 5).getTime();
    expect(logLevelNote('debug', at, at + 1000)).toBe(
      'debug since 09:30:05, until the control plane restarts',
    );
  });

  it('the API takes the body and answers what readLogLevel reads', async () => {
    expect(readLogLevel(await json(await t.call('GET', LOG_LEVEL_PATH)))).toBe('silent'); // the test app's
    // Levels that keep the change's own warning out of the test output (LOG_LEVELS equals the API's).
    for (const level of ['fatal', 'error', 'silent']) {
      expect(readLogLevel(await json(await t.call('PUT', LOG_LEVEL_PATH, logLevelBody(level))))).toBe(level);
      expect(readLogLevel(await json(await t.call('GET', LOG_LEVEL_PATH)))).toBe(level);
    }
    // What the select can never send, the API refuses as well.
    expect(logLevelBody('verbose')).toBeNull();
    await expectProblem(await t.call('PUT', LOG_LEVEL_PATH, { level: 'verbose' }), 422);
  });
});
