// @ts-check
// The operator dashboard's pure logic: no DOM, no fetch, no timers. app.js imports it in the browser and
// the tests import it in Node (control-plane/src/ui/dashboard-logic.test.ts).

/**
 * The fields of the API's task object the dashboard reads (the object has more; see CONTRACT.md).
 * @typedef {object} Task
 * @property {string} id
 * @property {string} name
 * @property {string} status
 * @property {number} progress 0–100
 * @property {number} remaining seconds, -1 while unknown
 * @property {string} error "" without an error
 * @property {string} [waitingFor] why a QUEUED task is not being claimed, or what a running task's cancel
 *   waits for (on the API's reads and a cancel's answer only)
 * @property {number} attempt
 * @property {{id: string, name: string} | null} agent
 * @property {number} createdAt Unix ms
 * @property {number} startedAt Unix ms, 0 = not set
 * @property {number} finishedAt Unix ms, 0 = not set
 * @property {number} updatedAt Unix ms
 * @property {{startedAt: number} | null} [postProcessing] running its post-processing script once `startedAt` is set
 */

/**
 * The fields of the API's agent object the dashboard reads.
 * @typedef {object} Agent
 * @property {string} id
 * @property {string} name
 * @property {string} hostname
 * @property {string} status online | offline | draining
 * @property {boolean} paused
 * @property {boolean} [local] the control plane's own agent (FFLEET_LOCAL_AGENT): no token of its own
 * @property {string} version
 * @property {{path: string, version: string} | null} transcoder
 * @property {string} [transcoderError]
 * @property {string[]} labels
 * @property {number} slots
 * @property {string[]} runningTasks
 * @property {number} lastSeen Unix ms, 0 = never
 */

/** @typedef {'task.created' | 'task.updated' | 'task.deleted'} TaskEventName */

/** Every task status, in the order a task goes through them. */
export const TASK_STATUSES = Object.freeze([
  'QUEUED',
  'PRE_PROCESSING',
  'RUNNING',
  'DONE_SUCCESSFUL',
  'DONE_ERROR',
  'DONE_CANCELED',
]);
/** The task events the dashboard subscribes to (`GET /api/v1/events?events=…`). */
export const TASK_EVENTS = Object.freeze(['task.created', 'task.updated', 'task.deleted']);
/** The preset events it subscribes to: they tell the watchfolders tab its preset names are stale. */
export const PRESET_EVENTS = Object.freeze(['preset.created', 'preset.updated', 'preset.deleted']);

/** A task that has not finished: it can be canceled. @param {string} status */
export const isOpenStatus = (status) =>
  status === 'QUEUED' || status === 'PRE_PROCESSING' || status === 'RUNNING';
/** A finished task: it can be restarted. @param {string} status */
export const isDoneStatus = (status) => status.startsWith('DONE_');

const STATUS_LABELS = new Map([
  ['QUEUED', 'queued'],
  ['PRE_PROCESSING', 'pre-processing'],
  ['RUNNING', 'running'],
  ['DONE_SUCCESSFUL', 'successful'],
  ['DONE_ERROR', 'failed'],
  ['DONE_CANCELED', 'canceled'],
]);

/** How a status reads in the dashboard: `DONE_ERROR` → `failed`; any other text as it is. @param {string} status */
export const statusLabel = (status) => STATUS_LABELS.get(status) ?? status;

const KNOWN_STATUSES = new Set([...TASK_STATUSES, 'online', 'offline', 'draining', 'paused']);

/**
 * The CSS class of a task or agent status (`status-running`, `status-done-error`, `status-online`…);
 * `status-unknown` for anything else, so server text never picks a class.
 * @param {string} status
 */
export function statusClass(status) {
  return KNOWN_STATUSES.has(status)
    ? `status-${status.toLowerCase().replaceAll('_', '-')}`
    : 'status-unknown';
}

/**
 * What the agents table shows: `paused` for an agent an operator paused (the API says `draining`, as
 * for one shutting down), else the API's status.
 * @param {Pick<Agent, 'status' | 'paused'>} agent
 */
export const agentState = (agent) => (agent.paused && agent.status === 'draining' ? 'paused' : agent.status);

// ---------------------------------------------------------------------------------------------------
// Formatting

/** @param {number} n */
const pad2 = (n) => String(n).padStart(2, '0');

/**
 * A duration in seconds: `42s`, `3m 05s`, `1h 02m`, `2d 03h`; `—` when unknown (negative, not a number).
 * @param {number} seconds
 */
export function formatDuration(seconds) {
  if (!Number.isFinite(seconds) || seconds < 0) return '—';
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${pad2(s % 60)}s`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h}h ${pad2(m % 60)}m`;
  return `${Math.floor(h / 24)}d ${pad2(h % 24)}h`;
}

/**
 * Unix ms in local time: `HH:MM:SS` on the day of `now`, else `YYYY-MM-DD HH:MM`; `—` for 0 (not set).
 * @param {number} ms
 * @param {number} [now]
 */
export function formatTime(ms, now = Date.now()) {
  if (!Number.isFinite(ms) || ms <= 0) return '—';
  const d = new Date(ms);
  const n = new Date(now);
  const time = `${pad2(d.getHours())}:${pad2(d.getMinutes())}`;
  if (d.getFullYear() === n.getFullYear() && d.getMonth() === n.getMonth() && d.getDate() === n.getDate()) {
    return `${time}:${pad2(d.getSeconds())}`;
  }
  return `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())} ${time}`;
}

/**
 * How long ago: `just now`, `12s ago`, `5m ago`, `3h ago`, `4d ago`; `never` for 0.
 * @param {number} ms
 * @param {number} [now]
 */
export function formatAgo(ms, now = Date.now()) {
  if (!Number.isFinite(ms) || ms <= 0) return 'never';
  const s = Math.floor((now - ms) / 1000);
  if (s < 2) return 'just now';
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

/**
 * Progress as a whole percentage, 0–100 (never shows 100 % before the end: floored).
 * @param {number} progress
 */
export function percent(progress) {
  return Number.isFinite(progress) ? Math.min(100, Math.max(0, Math.floor(progress))) : 0;
}

/**
 * What the progress cell of a running task shows: a bar at its percentage, and the time left when it
 * is known. While nothing is known (progress 0 and no estimate: the input's duration is unknown to the
 * transcoder, or no progress report came yet) it shows no percentage: `value` null is a bar that only
 * says the task runs.
 * @param {Pick<Task, 'progress' | 'remaining'>} t
 * @returns {{value: number | null, text: string}}
 */
export function progressView(t) {
  const pct = percent(t.progress);
  const known = Number.isFinite(t.remaining) && t.remaining >= 0;
  if (pct === 0 && !known) return { value: null, text: 'progress unknown' };
  return { value: pct, text: known ? `${pct}% · ${formatDuration(t.remaining)} left` : `${pct}%` };
}

/**
 * The pager's text: `1–50 of 123`, `0 of 0`.
 * @param {{page: number, perPage: number, total: number, count: number}} p `count` = rows on this page
 */
export function pageLabel({ page, perPage, total, count }) {
  if (count === 0) return `0 of ${total}`;
  const first = page * perPage + 1;
  return `${first}–${first + count - 1} of ${total}`;
}

/** One field's problem, as the API's problem+json `errors` list has it. @typedef {{path: string, message: string}} FieldError */

/**
 * A failed API call's problem+json (RFC 9457), as far as the body is one.
 * @typedef {object} Problem
 * @property {number} status
 * @property {string} detail the problem's `detail`; "" when the body is no problem
 * @property {string} code the problem's `code` (`VALIDATION_FAILED`…); "" when the body is no problem
 * @property {FieldError[]} errors its field errors (paths like `preProcessing.scriptPath`, `requires.2`)
 */

/**
 * Read a failed call's body as a problem; anything that is not one gives an empty detail and no errors.
 * @param {number} status
 * @param {string} body
 * @returns {Problem}
 */
export function parseProblem(status, body) {
  /** @type {Problem} */
  const out = { status, detail: '', code: '', errors: [] };
  let p;
  try {
    p = JSON.parse(body);
  } catch {
    return out;
  }
  if (!p || typeof p !== 'object' || Array.isArray(p)) return out;
  if (typeof p.detail === 'string') out.detail = p.detail;
  if (typeof p.code === 'string') out.code = p.code;
  if (Array.isArray(p.errors)) {
    for (const e of p.errors) {
      if (!e || typeof e !== 'object' || typeof e.message !== 'string') continue;
      out.errors.push({ path: typeof e.path === 'string' ? e.path : '', message: e.message });
    }
  }
  return out;
}

/**
 * The message of a failed API call: a problem's `detail` (with its field errors), else the body's
 * first 300 characters, else `HTTP <status>`.
 * @param {number} status
 * @param {string} body
 */
export function problemMessage(status, body) {
  const p = parseProblem(status, body);
  if (p.detail !== '') {
    const errors = p.errors.map((e) => (e.path ? `${e.path}: ${e.message}` : e.message));
    return errors.length > 0 ? `${p.detail} (${errors.join('; ')})` : p.detail;
  }
  const text = body.trim().slice(0, 300);
  return text === '' ? `HTTP ${status}` : text;
}

/**
 * Delay before the next reconnect of the event stream: `baseMs` (the server's `retry:` or 1 s),
 * doubled per failure in a row, at most 30 s, spread by ±20 % with `random` (0–1) so that tabs do not
 * all come back at once after a restart.
 * @param {number} failures failed attempts in a row so far (0 for the first retry)
 * @param {number} [baseMs]
 * @param {number} [random]
 */
export function reconnectDelay(failures, baseMs = 1000, random = 0.5) {
  const delay = Math.min(30_000, Math.max(100, baseMs) * 2 ** Math.min(Math.max(0, failures), 10));
  return Math.round(delay * (0.8 + 0.4 * random));
}

// ---------------------------------------------------------------------------------------------------
// Server-sent events (text/event-stream), read with fetch so that requests can carry the API token

/**
 * One dispatched message. `id` is the last event ID at dispatch, as EventSource's `lastEventId`.
 * @typedef {{event: string, data: string, id: string}} SseMessage
 */

/**
 * An incremental `text/event-stream` parser, per the HTML standard: lines end in CRLF, LF or CR (also
 * when a chunk ends between CR and LF), a blank line dispatches, `:` lines are comments (keep-alives),
 * `data` lines join with `\n`, `id` sets the last event ID (kept across messages and reconnects; one
 * containing NUL is ignored), `retry` (digits only) sets the reconnection delay; a message without data
 * is not dispatched, and one cut off by the end of the stream is dropped.
 */
export class SseParser {
  /** The last event ID: send it as `Last-Event-ID` when reconnecting. */
  lastEventId = '';
  /** @type {number | undefined} The reconnection delay the server asked for, in ms. */
  retry = undefined;
  #line = '';
  #data = '';
  #event = '';
  #afterCR = false;
  #bomChecked = false;
  #decoder = new TextDecoder();

  /**
   * Feed the next chunk (bytes or text); returns the messages it completes.
   * @param {string | Uint8Array} chunk
   * @returns {SseMessage[]}
   */
  push(chunk) {
    let text = typeof chunk === 'string' ? chunk : this.#decoder.decode(chunk, { stream: true });
    if (!this.#bomChecked && text !== '') {
      this.#bomChecked = true;
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    }
    if (this.#afterCR && text.startsWith('\n')) text = text.slice(1); // the LF of a CRLF split across chunks
    if (text !== '') this.#afterCR = text.endsWith('\r');
    /** @type {SseMessage[]} */
    const out = [];
    const buf = this.#line + text;
    const eol = /\r\n|\r|\n/g;
    let start = 0;
    for (let m = eol.exec(buf); m; m = eol.exec(buf)) {
      this.#field(buf.slice(start, m.index), out);
      start = eol.lastIndex;
    }
    this.#line = buf.slice(start);
    return out;
  }

  /** A new connection: forget a partly received message, keep `lastEventId` and `retry`. */
  reset() {
    this.#line = '';
    this.#data = '';
    this.#event = '';
    this.#afterCR = false;
    this.#bomChecked = false;
    this.#decoder = new TextDecoder();
  }

  /**
   * @param {string} line
   * @param {SseMessage[]} out
   */
  #field(line, out) {
    if (line === '') {
      if (this.#data !== '') {
        out.push({ event: this.#event || 'message', data: this.#data.slice(0, -1), id: this.lastEventId });
      }
      this.#data = '';
      this.#event = '';
      return;
    }
    if (line.startsWith(':')) return; // a comment: the server's keep-alive
    const colon = line.indexOf(':');
    const name = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (name === 'data') this.#data += `${value}\n`;
    else if (name === 'event') this.#event = value;
    else if (name === 'id' && !value.includes('\0')) this.lastEventId = value;
    else if (name === 'retry' && /^[0-9]+$/.test(value)) this.retry = Number(value);
  }
}

/**
 * The task event of an SSE message (`data` is the webhook payload, whose `data.task` is the task's full
 * snapshot), or null for any other message or a malformed one.
 * @param {SseMessage} message
 * @returns {{event: TaskEventName, task: Task} | null}
 */
export function parseTaskEvent(message) {
  const event = message.event;
  if (event !== 'task.created' && event !== 'task.updated' && event !== 'task.deleted') return null;
  let payload;
  try {
    payload = JSON.parse(message.data);
  } catch {
    return null;
  }
  const task = payload?.data?.task;
  if (!task || typeof task !== 'object' || typeof task.id !== 'string' || typeof task.status !== 'string') {
    return null;
  }
  return { event, task };
}

// ---------------------------------------------------------------------------------------------------
// The task list: one page as the API gave it, kept current by task events

/**
 * @typedef {object} TaskView
 * @property {Task[]} tasks the page's rows in the API's order: newest first (createdAt, then id, descending)
 * @property {number} total tasks matching the filter (`X-Total`)
 * @property {string[]} statuses the status filter; empty = every status
 * @property {number} page 0-based
 * @property {number} perPage
 */

/**
 * @typedef {object} MergeResult
 * @property {TaskView} view the view with the event applied (the same object when nothing changed)
 * @property {boolean} resync the page's rows or total may now differ from the API's in a way one event
 *   cannot tell (a row moves in from another page, a task on another page entered or left the filter):
 *   reload the page soon
 */

/**
 * The API's order: newer first, then the larger id first.
 * @param {Pick<Task, 'createdAt' | 'id'>} a
 * @param {Pick<Task, 'createdAt' | 'id'>} b
 */
export function newestFirst(a, b) {
  if (a.createdAt !== b.createdAt) return b.createdAt - a.createdAt;
  return a.id < b.id ? 1 : a.id > b.id ? -1 : 0;
}

/**
 * The query of one page of the task list: `page`, `perPage` and `status` (a comma list) when filtered.
 * @param {Pick<TaskView, 'page' | 'perPage' | 'statuses'>} view
 */
export function taskListQuery(view) {
  const q = new URLSearchParams({ page: String(view.page), perPage: String(view.perPage) });
  if (view.statuses.length > 0) q.set('status', view.statuses.join(','));
  return q.toString();
}

/**
 * What the address's hash says: the tab, for the tasks tab its status filter and page
 * (`#tasks?status=QUEUED,RUNNING&page=2`, the page counted from 1 there), for the presets tab its name
 * filter (`#presets?name=h264`). Unknown tabs are the tasks tab; unknown statuses and pages that are no
 * whole number ≥ 1 are left out; the name is trimmed and cut to the API's 200 characters.
 * @template {string} T
 * @param {string} hash `location.hash`, with or without its `#`
 * @param {readonly T[]} tabs the first is the default
 * @returns {{tab: T, statuses: string[], page: number, name: string}} `page` 0-based
 */
export function parseHash(hash, tabs) {
  const text = hash.replace(/^#/, '');
  const q = text.indexOf('?');
  const tabName = q < 0 ? text : text.slice(0, q);
  const tab = tabs.find((t) => t === tabName) ?? /** @type {T} */ (tabs[0]);
  const params = new URLSearchParams(q < 0 ? '' : text.slice(q + 1));
  const statuses = (params.get('status') ?? '')
    .split(',')
    .filter((s, i, all) => TASK_STATUSES.includes(s) && all.indexOf(s) === i);
  const page = /^[0-9]{1,6}$/.test(params.get('page') ?? '') ? Number(params.get('page')) : 0;
  const name = (params.get('name') ?? '').trim().slice(0, PRESET_NAME_FILTER_MAX).trim();
  return { tab, statuses, page: Math.max(0, page - 1), name };
}

/**
 * The hash of the tasks tab with its status filter and page (the first page and no filter are left out).
 * @param {{statuses: string[], page: number}} q `page` 0-based
 */
export function tasksHash(q) {
  const parts = [];
  if (q.statuses.length > 0) parts.push(`status=${q.statuses.join(',')}`);
  if (q.page > 0) parts.push(`page=${q.page + 1}`);
  return parts.length > 0 ? `tasks?${parts.join('&')}` : 'tasks';
}

/** The longest text the presets' name filter takes (`?name=`: a preset name has at most 200 characters). */
export const PRESET_NAME_FILTER_MAX = 200;

/**
 * The hash of the presets tab with its name filter (none is left out): `presets`, `presets?name=h264`.
 * Any text survives the address (`&`, `#`, `%`, `+`, spaces): parseHash reads it back.
 * @param {string} name
 */
export function presetsHash(name) {
  const v = name.trim();
  return v === '' ? 'presets' : `presets?${new URLSearchParams({ name: v })}`;
}

/**
 * Apply one task event to the page. A snapshot older than the row's (`updatedAt`) is ignored (events
 * replayed after a reload); a created event for a row already shown counts as an update. New tasks
 * appear on the first page; a task that leaves the filter leaves the page.
 * @param {TaskView} view
 * @param {TaskEventName} event
 * @param {Task} task
 * @returns {MergeResult}
 */
export function mergeTaskEvent(view, event, task) {
  const unchanged = { view, resync: false };
  const filtered = view.statuses.length > 0;
  const matches = !filtered || view.statuses.includes(task.status);
  const index = view.tasks.findIndex((t) => t.id === task.id);
  // More matching tasks on later pages: removing a row here pulls one of them in.
  const moreAfter = view.total > view.page * view.perPage + view.tasks.length;
  /** @param {Task[]} tasks @param {number} total @param {boolean} resync */
  const result = (tasks, total, resync) => ({ view: { ...view, tasks, total: Math.max(0, total) }, resync });
  const remove = () => {
    const tasks = view.tasks.filter((t) => t.id !== task.id);
    return result(tasks, view.total - 1, moreAfter);
  };

  if (event === 'task.deleted') {
    if (index >= 0) return remove();
    // On another page, or already gone: only a reload can tell the total.
    return matches ? { view, resync: true } : unchanged;
  }
  if (index >= 0) {
    const current = view.tasks[index];
    if (current && task.updatedAt < current.updatedAt) return unchanged;
    if (!matches) return remove();
    const tasks = view.tasks.slice();
    // Events do not carry `waitingFor` (the API's reads work it out): a task still queued keeps it, and so
    // does a running one whose cancel waits for its agent (its progress events go on until it stops).
    tasks[index] =
      task.status === current?.status && isOpenStatus(task.status) && current.waitingFor && !task.waitingFor
        ? { ...task, waitingFor: current.waitingFor }
        : task;
    return result(tasks, view.total, false);
  }
  if (!matches) {
    // Without a filter every task matches. With one, this task may have left it on another page.
    return filtered && event === 'task.updated' ? { view, resync: true } : unchanged;
  }
  // Where the API would list it, relative to this page's rows.
  let at = view.tasks.findIndex((t) => newestFirst(task, t) < 0);
  if (at < 0) at = view.tasks.length;
  const full = view.tasks.length >= view.perPage;
  const belongsHere = (view.page === 0 || at > 0) && (at < view.tasks.length || !full);
  if (event === 'task.created') {
    if (view.page > 0) return result(view.tasks, view.total + 1, true); // every row here moves down one
    const tasks = view.tasks.slice();
    tasks.splice(at, 0, task);
    return result(tasks.slice(0, view.perPage), view.total + 1, false);
  }
  if (!belongsHere) {
    // Unfiltered: a row of another page that changed. Filtered: it may just have entered the filter.
    return filtered ? { view, resync: true } : unchanged;
  }
  // Its place is on this page but it was not here: it entered the filter (or the page was loaded
  // before the task existed, which only a reload can sort out).
  const tasks = view.tasks.slice();
  tasks.splice(at, 0, task);
  return result(tasks.slice(0, view.perPage), view.total + 1, !filtered);
}

// ---------------------------------------------------------------------------------------------------
// An agent's own token: a new one, revoking the one it had (POST /api/v1/agents/{id}/token)

/**
 * The answer of `POST /api/v1/agents/{id}/token`.
 * @typedef {object} AgentTokenIssued
 * @property {string} agent the agent's name
 * @property {number} generation this token's generation; the ones before it are revoked
 * @property {string} token the new own token (shown once, never stored)
 * @property {boolean} disconnected a connection of the box with its old token was closed
 * @property {boolean} known an agent of this name has registered
 * @property {boolean} fleetTokenAccepted the fleet token also logs agents in (FFLEET_AGENT_AUTH=shared)
 */

/**
 * What the token dialog shows: the token, the command that prints it again, and notes in plain words.
 * @typedef {{title: string, token: string, command: string, notes: string[]}} AgentTokenView
 */

/** The request of a new own token for an agent (by id, or by name). @param {string} id */
export const agentTokenPath = (id) => `/api/v1/agents/${encodeURIComponent(id)}/token`;

/**
 * The question asked before an agent's token is replaced: what stops working, and what happens to the
 * box.
 * @param {Pick<Agent, 'name' | 'runningTasks'>} agent
 */
export function agentTokenQuestion(agent) {
  const n = agent.runningTasks.length;
  const tasks =
    n > 0
      ? ` Kept out, it hands its ${n === 1 ? 'running task' : `${n} running tasks`} back to the queue before ${n === 1 ? 'its lease runs' : 'their leases run'} out.`
      : '';
  return (
    `Give “${agent.name}” a new token? Its current own token stops working at once: the box is ` +
    `disconnected if it is logged in with it, and logs in again only with the new token as its ` +
    `FFLEET_AGENT_TOKEN (shown next, once).${tasks}`
  );
}

/**
 * The token dialog's content from the API's answer. The notes say what happened and what it means:
 * whether a connection was closed, a name no agent has registered under (a mistyped one), and that in
 * `shared` mode the fleet token still lets any box in.
 * @param {AgentTokenIssued} issued
 * @returns {AgentTokenView}
 */
export function agentTokenView(issued) {
  /** @type {string[]} */
  const notes = [];
  notes.push(
    issued.disconnected
      ? 'The box’s connection with its old token was closed.'
      : 'No connection with the old token was open (the box is offline, or logged in with the fleet token).',
  );
  if (!issued.known) {
    notes.push(
      `No agent named “${issued.agent}” has registered yet: if you meant another box, check the name (this one now has a token of its own all the same).`,
    );
  }
  notes.push(
    issued.fleetTokenAccepted
      ? 'The fleet token still logs any agent in (FFLEET_AGENT_AUTH=shared): this does not keep out a box holding it.'
      : 'Only own tokens log agents in (FFLEET_AGENT_AUTH=per-agent): the old token is refused from now on.',
  );
  return {
    title: `New token for “${issued.agent}” (generation ${issued.generation})`,
    token: issued.token,
    command: `npm run -s agent-token -- ${issued.agent} --generation ${issued.generation}`,
    notes,
  };
}

// ---------------------------------------------------------------------------------------------------
// The control plane's log level (GET/PUT /api/v1/system/log-level)

export const LOG_LEVEL_PATH = '/api/v1/system/log-level';
/** pino's levels, most severe first: the values the API (and LOG_LEVEL) takes. */
export const LOG_LEVELS = Object.freeze(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']);

/**
 * The level in the API's answer (`{"level": "info"}`); null for anything else.
 * @param {unknown} body
 * @returns {string | null}
 */
export function readLogLevel(body) {
  if (!body || typeof body !== 'object') return null;
  const level = /** @type {{level?: unknown}} */ (body).level;
  return typeof level === 'string' && LOG_LEVELS.includes(level) ? level : null;
}

/**
 * The body of `PUT /api/v1/system/log-level`, or null for a level the API does not take.
 * @param {string} level
 * @returns {{level: string} | null}
 */
export const logLevelBody = (level) => (LOG_LEVELS.includes(level) ? { level } : null);

/**
 * The question asked before a change that hides the control plane's errors or warnings (`fatal`,
 * `silent`; `error` hides warnings such as refused logins); null when none is needed.
 * @param {string} from
 * @param {string} to
 * @returns {string | null}
 */
export function logLevelQuestion(from, to) {
  if (to === from) return null;
  const until = 'until the control plane restarts or the level is changed again';
  if (to === 'silent') return `Make the control plane log nothing at all, ${until}?`;
  if (to === 'fatal')
    return `Make the control plane log only fatal errors (not its errors or warnings), ${until}?`;
  if (to === 'error')
    return `Make the control plane log only errors (no warnings, such as refused agent logins), ${until}?`;
  return null;
}

/**
 * The line beside the log level after a change: that it lasts until a restart (LOG_LEVEL applies
 * again then), for this control plane process only.
 * @param {string} level
 * @param {number} at Unix ms
 * @param {number} [now]
 */
export const logLevelNote = (level, at, now = Date.now()) =>
  `${level} since ${formatTime(at, now)}, until the control plane restarts`;
