// @ts-check
// The operator dashboard (/ui): tabs for tasks and agents, presets, watchfolders and webhooks. This file
// keeps the tasks live from the event stream, polls the agents, runs the per-task actions and the token
// flow; the new-task form is task-form.js, the other tabs manage.js. Server data (task names, errors,
// logs, agent names, labels) is attacker-controlled: it only ever reaches the page as textContent, text
// nodes or attribute values, never as markup.
import {
  ApiError,
  api,
  badge,
  button,
  byId,
  dateTime,
  el,
  hideError,
  onUnauthorized,
  report,
  setToken,
  showError,
  syncRows,
  token,
} from './dom.js';
import {
  agentState,
  agentTokenPath,
  agentTokenQuestion,
  agentTokenView,
  formatAgo,
  formatTime,
  isDoneStatus,
  isOpenStatus,
  LOG_LEVEL_PATH,
  LOG_LEVELS,
  logLevelBody,
  logLevelNote,
  logLevelQuestion,
  mergeTaskEvent,
  PRESET_EVENTS,
  pageLabel,
  parseHash,
  parseTaskEvent,
  presetsHash,
  progressView,
  readLogLevel,
  reconnectDelay,
  SseParser,
  statusClass,
  statusLabel,
  TASK_EVENTS,
  taskListQuery,
  tasksHash,
} from './logic.js';
import {
  clearManage,
  initManage,
  loadTab,
  presetFilterName,
  presetsChanged,
  resumeManage,
  setPresetFilter,
} from './manage.js';
import { closeTaskForm, initTaskForm, openTaskForm, resumeTaskForm, suspendTaskForm } from './task-form.js';

/** @typedef {import('./logic.js').Task} Task */
/** @typedef {import('./logic.js').Agent} Agent */
/** @typedef {import('./logic.js').TaskView} TaskView */
/** @typedef {import('./logic.js').TaskEventName} TaskEventName */
/** @typedef {import('./logic.js').AgentTokenIssued} AgentTokenIssued */
/** @typedef {import('./logic.js').AgentTokenView} AgentTokenView */
/** @typedef {{event: TaskEventName, task: Task}} TaskEvent */
/** @typedef {import('./dom.js').Cell} Cell */

const PER_PAGE = 50;
const POLL_MS = 5000;
const RESYNC_MS = 3000;
const LOGS_FOLLOW_MS = 2000;
/** The server sends a keep-alive every 15 s: a stream silent for this long is dead. */
const STALL_MS = 45_000;
const EVENTS_URL = `/api/v1/events?events=${[...TASK_EVENTS, ...PRESET_EVENTS].join(',')}`;

/** A status badge: its class comes from statusClass, never from server text. @param {string} status @param {string} text */
const statusBadge = (status, text) => badge(statusClass(status), text);

// --- connection state, token -----------------------------------------------------------------------

const ui = {
  connection: byId('connection'),
  auth: /** @type {HTMLFormElement} */ (byId('auth')),
  authReason: byId('auth-reason'),
  authToken: /** @type {HTMLInputElement} */ (byId('auth-token')),
  forgetToken: /** @type {HTMLButtonElement} */ (byId('forget-token')),
  statusFilter: /** @type {HTMLSelectElement} */ (byId('status-filter')),
  pagePrev: /** @type {HTMLButtonElement} */ (byId('page-prev')),
  pageNext: /** @type {HTMLButtonElement} */ (byId('page-next')),
  pageLabel: byId('page-label'),
  taskRows: byId('task-rows'),
  tasksEmpty: byId('tasks-empty'),
  logs: byId('logs'),
  logsTitle: byId('logs-title'),
  logsState: byId('logs-state'),
  logsText: byId('logs-text'),
  agentRows: byId('agent-rows'),
  agentsEmpty: byId('agents-empty'),
  agentsState: byId('agents-state'),
  logLevel: /** @type {HTMLSelectElement} */ (byId('log-level')),
  logLevelState: byId('log-level-state'),
  tokenDialog: /** @type {HTMLDialogElement} */ (byId('agent-token')),
  tokenTitle: byId('agent-token-title'),
  tokenValue: /** @type {HTMLInputElement} */ (byId('agent-token-value')),
  tokenCopied: byId('agent-token-copied'),
  tokenNotes: byId('agent-token-notes'),
  tokenCommand: byId('agent-token-command'),
};

/** @param {string} text @param {'live' | 'wait' | 'off'} state */
function setConnection(text, state) {
  ui.connection.textContent = text;
  ui.connection.className = `connection conn-${state}`;
}

let needsToken = false;

/** @param {string} reason the API's 401 detail */
function askForToken(reason) {
  needsToken = true;
  stopEvents();
  clearData(true); // a form the operator is filling in for a new item stays, with what they typed
  setConnection('waiting for an API token', 'off');
  ui.authReason.textContent = token() ? `The saved token was refused: ${reason}.` : `${reason}.`;
  ui.auth.hidden = false;
  ui.authToken.focus();
}
onUnauthorized(askForToken);

// --- tasks ---------------------------------------------------------------------------------------------

/** @type {TaskView} */
let view = { tasks: [], total: 0, statuses: [], page: 0, perPage: PER_PAGE };
/** The page and filter asked for (the view shows them once they are loaded). */
const query = { page: 0, statuses: /** @type {string[]} */ ([]) };
/** Events received while a load is in flight, applied again to its result. @type {TaskEvent[] | null} */
let pending = null;
let loadSeq = 0;
let resyncTimer = 0;
/** Tasks with an action in flight (their buttons are disabled). */
const busy = new Set();

async function loadTasks() {
  const seq = ++loadSeq;
  pending ??= [];
  const want = { ...query, perPage: PER_PAGE };
  try {
    const res = await api('GET', `/api/v1/tasks?${taskListQuery(want)}`);
    /** @type {Task[]} */
    const tasks = await res.json();
    const total = Number(res.headers.get('X-Total') ?? tasks.length);
    if (seq !== loadSeq) return; // a newer load is on its way
    if (want.page > 0 && tasks.length === 0) {
      query.page = Math.max(0, Math.ceil(total / PER_PAGE) - 1); // the page emptied: show the last one
      keepQueryInHash();
      return void loadTasks();
    }
    /** @type {TaskView} */
    let next = { ...want, tasks, total };
    let resync = false;
    for (const e of pending ?? []) {
      const r = mergeTaskEvent(next, e.event, e.task);
      next = r.view;
      resync ||= r.resync;
    }
    pending = null;
    view = next;
    renderTasks();
    if (resync) scheduleResync();
  } catch (err) {
    if (seq !== loadSeq) return;
    pending = null;
    report(err, 'Loading tasks');
  }
}

function scheduleResync() {
  if (resyncTimer) return;
  resyncTimer = window.setTimeout(() => {
    resyncTimer = 0;
    loadTasks();
  }, RESYNC_MS);
}

/** @param {TaskEvent} e */
function onTaskEvent(e) {
  pending?.push(e);
  const r = mergeTaskEvent(view, e.event, e.task);
  if (r.view !== view) {
    view = r.view;
    renderTasks();
  }
  // A later page emptied by deletions (or tasks leaving the filter): load again, which moves to the last
  // page that has tasks.
  const emptied = view.page > 0 && view.tasks.length === 0;
  if ((r.resync || emptied) && !pending) scheduleResync();
  if (logsTask?.id === e.task.id) onLogsTaskEvent(e);
  const shown = view.tasks.find((t) => t.id === e.task.id);
  if (shown?.status === 'QUEUED' && !shown.waitingFor) {
    unreadWaiting.add(shown.id);
    if (waitingTimer === 0) waitingTimer = setTimeout(checkWaiting, WAITING_CHECK_MS);
  }
}

// A queued task's `waitingFor` comes with the API's reads, not with events: a task that came by an event
// and is still queued a moment later (not claimed at once) is read again with the list, once.
const WAITING_CHECK_MS = 1_500;
/** Ids of queued tasks shown as an event brought them (without `waitingFor`). */
const unreadWaiting = new Set();
let waitingTimer = 0;
function checkWaiting() {
  waitingTimer = 0;
  const still = view.tasks.some((t) => unreadWaiting.has(t.id) && t.status === 'QUEUED');
  unreadWaiting.clear();
  if (still && !needsToken) loadTasks();
}

/** @type {Map<string, HTMLTableRowElement>} */
const taskRows = new Map();

/** @param {Task} t @returns {Cell[]} */
function taskCells(t) {
  const progress = progressView(t);
  const postProcessing = t.status === 'RUNNING' && (t.postProcessing?.startedAt ?? 0) > 0;
  const created = formatTime(t.createdAt);
  const finished = formatTime(t.finishedAt);
  const isBusy = busy.has(t.id);
  return [
    [
      JSON.stringify([t.name, t.id, t.error]),
      () => {
        const name = el('div', 'name', t.name || '(unnamed)');
        name.title = t.name;
        const out = [name, el('div', 'id', t.id)];
        if (t.error) out.push(el('div', 'task-error', t.error));
        return out;
      },
      'task',
    ],
    [t.status, () => [statusBadge(t.status, statusLabel(t.status))]],
    [
      JSON.stringify([t.status, progress, postProcessing, t.waitingFor]),
      () => {
        // Why no agent claims it (the API's reads say so; the list is read again as agents change).
        if (t.status === 'QUEUED' && t.waitingFor)
          return [el('span', 'task-waiting', `waiting: ${t.waitingFor}`)];
        // A running task whose cancel waits for its agent (the cancel's answer says so): e.g. the agent is
        // offline, and the task is canceled when its lease runs out.
        if (t.waitingFor) return [el('span', 'task-waiting', `waiting for ${t.waitingFor}`)];
        if (t.status === 'PRE_PROCESSING') return [el('span', 'muted', 'pre-processing…')];
        if (t.status !== 'RUNNING') return [];
        if (postProcessing) return [el('span', 'muted', 'post-processing…')];
        const bar = el('progress');
        bar.max = 100;
        // Without a value the bar only says that the task runs (its duration is not known).
        if (progress.value !== null) bar.value = progress.value;
        else bar.title = 'The transcoder has not told how long the input is (yet).';
        return [bar, el('span', 'muted', progress.text)];
      },
      'progress',
    ],
    [t.agent?.name ?? '', () => [t.agent?.name ?? '—']],
    [String(t.attempt), () => [String(t.attempt)], 'num'],
    [created, () => dateTime(created), 'time'],
    [finished, () => dateTime(finished), 'time'],
    [
      JSON.stringify([t.status, isBusy]),
      () => {
        const out = [];
        if (isOpenStatus(t.status)) out.push(button('Cancel', () => cancelTask(t.id), { disabled: isBusy }));
        if (isDoneStatus(t.status))
          out.push(button('Restart', () => restartTask(t.id), { disabled: isBusy }));
        out.push(button('Logs', () => openLogs(t.id)));
        out.push(button('Delete', () => deleteTask(t.id), { disabled: isBusy, danger: true }));
        return out;
      },
      'actions',
    ],
  ];
}

function renderTasks() {
  syncRows(ui.taskRows, taskRows, view.tasks, (t) => t.id, taskCells);
  ui.tasksEmpty.hidden = view.tasks.length > 0;
  ui.pageLabel.textContent = pageLabel({ ...view, count: view.tasks.length });
  ui.pagePrev.disabled = view.page === 0;
  ui.pageNext.disabled = (view.page + 1) * view.perPage >= view.total;
}

/** @param {string} id */
const findTask = (id) => view.tasks.find((t) => t.id === id);

/**
 * Run an action on a task: its buttons are disabled meanwhile, and a failure shows the API's detail.
 * @param {string} id @param {string} what @param {(t: Task) => Promise<TaskEvent | null>} run
 */
async function act(id, what, run) {
  const t = findTask(id);
  if (!t || busy.has(id)) return;
  busy.add(id);
  renderTasks();
  try {
    const e = await run(t);
    if (e) onTaskEvent(e); // the response is the newest state; the event stream brings it too
  } catch (err) {
    report(err, `${what} “${t.name}”`);
    scheduleResync(); // a refused action usually means the row is out of date (finished, deleted)
  } finally {
    busy.delete(id);
    renderTasks();
  }
}

const taskPath = (/** @type {string} */ id) => `/api/v1/tasks/${encodeURIComponent(id)}`;

/** @param {string} id */
function cancelTask(id) {
  const name = findTask(id)?.name ?? id;
  if (!confirm(`Cancel “${name}”? A running transcode is stopped and its partial output removed.`)) return;
  act(id, 'Cancel', async (t) => {
    const res = await api('PATCH', `${taskPath(t.id)}/cancel`);
    return { event: 'task.updated', task: await res.json() };
  });
}

/** @param {string} id */
function restartTask(id) {
  act(id, 'Restart', async (t) => {
    const res = await api('PATCH', `${taskPath(t.id)}/restart`);
    return { event: 'task.updated', task: await res.json() };
  });
}

/** @param {string} id */
function deleteTask(id) {
  const name = findTask(id)?.name ?? id;
  if (!confirm(`Delete “${name}” and its logs? A running task is canceled first.`)) return;
  act(id, 'Delete', async (t) => {
    await api('DELETE', taskPath(t.id));
    return { event: 'task.deleted', task: t };
  });
}

// --- logs ----------------------------------------------------------------------------------------------

/** @type {Task | null} */
let logsTask = null;
let logsDeleted = false;

/** @param {string} id */
function openLogs(id) {
  const t = findTask(id);
  if (!t) return;
  logsTask = t;
  logsDeleted = false;
  ui.logsTitle.textContent = t.name;
  ui.logsText.textContent = 'loading…';
  ui.logs.hidden = false;
  ui.logs.scrollIntoView({ block: 'nearest' });
  refreshLogs();
}

async function refreshLogs() {
  const t = logsTask;
  if (!t || logsDeleted) return;
  try {
    const text = await (await api('GET', `${taskPath(t.id)}/logs`)).text();
    if (logsTask !== t) return;
    const box = ui.logsText;
    const atEnd = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
    box.textContent = text === '' ? '(no output captured yet)' : text;
    if (atEnd) box.scrollTop = box.scrollHeight;
    const follow = isOpenStatus(t.status) ? 'following · ' : '';
    ui.logsState.textContent = `${follow}${statusLabel(t.status)} · loaded ${formatTime(Date.now())}`;
  } catch (err) {
    if (logsTask === t) ui.logsState.textContent = 'could not load';
    report(err, `Logs of “${t.name}”`);
  }
}

/** @param {TaskEvent} e */
function onLogsTaskEvent(e) {
  const wasOpen = logsTask !== null && isOpenStatus(logsTask.status);
  logsTask = e.task;
  if (e.event === 'task.deleted') {
    logsDeleted = true;
    ui.logsState.textContent = 'the task was deleted';
  } else if (wasOpen && isDoneStatus(e.task.status)) {
    refreshLogs(); // the last lines
  }
}

// --- agents --------------------------------------------------------------------------------------------

/** @type {Map<string, HTMLTableRowElement>} */
const agentRows = new Map();
/** @type {Agent[]} */
let agents = [];
/** What of the agents decides whether a task can be claimed, at the last poll ('' before the first). */
let agentsClaimable = '';

async function loadAgents() {
  try {
    const res = await api('GET', '/api/v1/agents?perPage=1000');
    /** @type {Agent[]} */
    const list = await res.json();
    agents = list.sort((a, b) => a.name.localeCompare(b.name));
    // What decides whether a queued task can be claimed changed: its `waitingFor` (read with the list,
    // not sent with events) may have too.
    const claimable = JSON.stringify(
      agents.map((a) => [a.name, a.status, a.paused, a.labels, a.slots, a.transcoder === null]),
    );
    if (claimable !== agentsClaimable) {
      const first = agentsClaimable === '';
      agentsClaimable = claimable;
      if (!first && view.tasks.some((t) => t.status === 'QUEUED')) loadTasks();
    }
    // The control plane answers again while the event stream waits out its backoff: reconnect now.
    if (reconnectTimer !== 0) connectEvents();
    const online = agents.filter((a) => a.status !== 'offline').length;
    ui.agentsState.textContent = `${online} of ${agents.length} online · refreshed ${formatTime(Date.now())}`;
    renderAgents();
  } catch (err) {
    // Polled every 5 s: said beside the table rather than in a message each time.
    if (!(err instanceof ApiError && err.status === 401)) {
      ui.agentsState.textContent = `refresh failed: ${err instanceof Error ? err.message : String(err)}`;
    }
  }
}

/** @param {Agent} a @returns {Cell[]} */
function agentCells(a) {
  const state = agentState(a);
  const seen = formatAgo(a.lastSeen);
  const isBusy = busy.has(a.id);
  return [
    [
      JSON.stringify([a.name, a.hostname, a.local]),
      () => {
        const host = a.hostname && a.hostname !== a.name ? [el('div', 'id', a.hostname)] : [];
        const local = a.local ? [el('div', 'id', 'in the control plane’s process')] : [];
        return [el('div', 'name', a.name), ...host, ...local];
      },
      'task',
    ],
    [
      JSON.stringify([state, a.paused]),
      () => [statusBadge(state, a.paused && state !== 'paused' ? `${state} · paused` : state)],
    ],
    [`${a.runningTasks.length}/${a.slots}`, () => [`${a.runningTasks.length} / ${a.slots}`], 'num'],
    [JSON.stringify(a.labels), () => a.labels.map((l) => el('span', 'chip', l))],
    [
      JSON.stringify([a.transcoder?.version, a.transcoderError]),
      () =>
        a.transcoder
          ? [el('span', '', a.transcoder.version || a.transcoder.path)]
          : [el('span', 'task-error', a.transcoderError || 'no transcoder')],
    ],
    [a.version, () => [a.version]],
    [
      `${seen}|${a.lastSeen}`,
      () => {
        const s = el('span', '', seen);
        if (a.lastSeen > 0) s.title = new Date(a.lastSeen).toLocaleString();
        return [s];
      },
      'time',
    ],
    [
      JSON.stringify([a.paused, isBusy, a.local]),
      () => [
        button(a.paused ? 'Resume' : 'Pause', () => togglePaused(a.id), { disabled: isBusy }),
        // The local agent takes its token from the control plane: there is none of its own to replace
        // (the API answers 409 LOCAL_AGENT), so the button says so instead of asking first.
        button('New token', () => newAgentToken(a.id), {
          disabled: isBusy || a.local === true,
          title: a.local
            ? 'This agent runs inside the control plane (FFLEET_LOCAL_AGENT) and takes its token from it: it has no token of its own to replace'
            : 'Revoke this box’s own token and issue a new one (a lost or stolen box)',
        }),
      ],
      'actions',
    ],
  ];
}

function renderAgents() {
  syncRows(ui.agentRows, agentRows, agents, (a) => a.id, agentCells);
  ui.agentsEmpty.hidden = agents.length > 0;
}

/** Pause an agent that is not paused, resume one that is (as the list has it now). @param {string} id */
async function togglePaused(id) {
  const a = agents.find((x) => x.id === id);
  if (!a || busy.has(id)) return;
  const paused = !a.paused;
  busy.add(id);
  renderAgents();
  try {
    /** @type {Agent} */
    const updated = await (
      await api('PATCH', `/api/v1/agents/${encodeURIComponent(id)}`, { body: { paused } })
    ).json();
    agents = agents.map((x) => (x.id === id ? updated : x));
  } catch (err) {
    report(err, `${paused ? 'Pause' : 'Resume'} “${a.name}”`);
  } finally {
    busy.delete(id);
    renderAgents();
  }
}

// --- an agent's own token: a new one, shown once ------------------------------------------------------
// The token is only ever in the dialog's field (its value, never an attribute) while the dialog is open:
// never stored, logged or put in the address; closing the dialog (or losing the API token) clears it.

/** Replace an agent's own token (as the list has it now), after the operator confirms. @param {string} id */
async function newAgentToken(id) {
  const a = agents.find((x) => x.id === id);
  if (!a || busy.has(id)) return;
  tokenOpener = id;
  // Without an API token the control plane hands out no credential (403 API_TOKENS_REQUIRED): say so
  // before asking whether to cut the box off.
  if (token() === '') {
    showError(
      `New token for “${a.name}”: agent tokens are handed out only to a caller with an API token; set FFLEET_API_TOKENS on the control plane and enter one of them here`,
    );
    return;
  }
  if (!confirm(agentTokenQuestion(a))) return;
  busy.add(id);
  renderAgents();
  try {
    /** @type {AgentTokenIssued} */
    const issued = await (await api('POST', agentTokenPath(id))).json();
    if (!needsToken) showAgentToken(agentTokenView(issued));
  } catch (err) {
    report(err, `New token for “${a.name}”`);
  } finally {
    busy.delete(id);
    renderAgents();
    loadAgents();
  }
}

/** @param {AgentTokenView} v */
function showAgentToken(v) {
  ui.tokenTitle.textContent = v.title;
  ui.tokenValue.value = v.token;
  ui.tokenCommand.textContent = v.command;
  ui.tokenNotes.replaceChildren(...v.notes.map((n) => el('li', '', n)));
  ui.tokenCopied.textContent = '';
  if (!ui.tokenDialog.open) ui.tokenDialog.showModal();
  ui.tokenValue.focus();
  ui.tokenValue.select();
}

async function copyAgentToken() {
  const value = ui.tokenValue.value;
  if (value === '') return;
  try {
    // Missing outside secure contexts (a dashboard opened over plain HTTP at a LAN address).
    if (!navigator.clipboard) throw new Error('no clipboard');
    await navigator.clipboard.writeText(value);
    ui.tokenCopied.textContent = 'Copied to the clipboard.';
  } catch {
    ui.tokenValue.focus();
    ui.tokenValue.select();
    ui.tokenCopied.textContent =
      'Selected: press Ctrl+C (⌘C) to copy it (this browser lets a page copy only over HTTPS or on localhost).';
  }
}

/** The agent whose New token opened the dialog: its button gets the focus back when it closes. */
let tokenOpener = '';

function clearAgentToken() {
  ui.tokenValue.value = '';
  ui.tokenTitle.textContent = 'New token';
  ui.tokenCommand.textContent = '';
  ui.tokenNotes.replaceChildren();
  ui.tokenCopied.textContent = '';
  // The focus would otherwise go back to the top of the page (the button may have been redrawn).
  const row = tokenOpener ? agentRows.get(tokenOpener) : undefined;
  tokenOpener = '';
  const back = row ? [...row.querySelectorAll('button')].find((b) => b.textContent === 'New token') : null;
  if (back && !back.disabled) back.focus();
}

function closeAgentToken() {
  if (ui.tokenDialog.open) ui.tokenDialog.close();
  clearAgentToken();
}

// Esc closes the dialog by itself: its close event (dispatched a moment later) clears the token.
ui.tokenDialog.addEventListener('close', clearAgentToken);
byId('agent-token-copy').addEventListener('click', () => copyAgentToken());
byId('agent-token-close').addEventListener('click', closeAgentToken);

// --- the control plane's log level ----------------------------------------------------------------------
// Read when the page starts (or a token is given) and when the tab comes back into view; a change is
// PUT at once and lasts until the control plane restarts.

/** The level as the control plane last said; "" while unknown. */
let logLevel = '';
let logLevelSeq = 0;

/** @param {string | null} level */
function showLogLevel(level) {
  logLevel = level ?? '';
  const s = ui.logLevel;
  if (level === null) {
    s.replaceChildren(new Option('…', ''));
    s.disabled = true;
  } else {
    if (s.options.length !== LOG_LEVELS.length) s.replaceChildren(...LOG_LEVELS.map((l) => new Option(l, l)));
    s.value = level;
    s.disabled = false;
  }
}

async function loadLogLevel() {
  const mine = ++logLevelSeq;
  try {
    const level = readLogLevel(await (await api('GET', LOG_LEVEL_PATH)).json());
    if (mine === logLevelSeq && document.activeElement !== ui.logLevel) showLogLevel(level);
  } catch (err) {
    if (mine !== logLevelSeq || (err instanceof ApiError && err.status === 401)) return;
    showLogLevel(null);
    ui.logLevelState.textContent = `could not read it: ${err instanceof Error ? err.message : String(err)}`;
  }
}

async function changeLogLevel() {
  const from = logLevel;
  const to = ui.logLevel.value;
  const body = logLevelBody(to);
  if (body === null || to === from) return showLogLevel(from || null);
  const question = logLevelQuestion(from, to);
  if (question && !confirm(question)) return showLogLevel(from);
  const mine = ++logLevelSeq;
  ui.logLevel.disabled = true;
  try {
    const level = readLogLevel(await (await api('PUT', LOG_LEVEL_PATH, { body })).json());
    if (mine !== logLevelSeq) return;
    showLogLevel(level);
    ui.logLevelState.textContent = level ? logLevelNote(level, Date.now()) : '';
  } catch (err) {
    if (mine !== logLevelSeq) return;
    showLogLevel(from || null);
    report(err, `Change the log level to ${to}`);
  }
}

ui.logLevel.addEventListener('change', () => changeLogLevel());

function clearLogLevel() {
  logLevelSeq++;
  showLogLevel(null);
  ui.logLevelState.textContent = '';
}

// --- the event stream ------------------------------------------------------------------------------
// Read with fetch, not EventSource, which cannot send the Authorization header. Reconnects with backoff
// and resumes with Last-Event-ID; the server's first message, `ready`, says whether it could.

const parser = new SseParser();
/** @type {AbortController | null} */
let stream = null;
let failures = 0;
let reconnectTimer = 0;
let stallTimer = 0;

function stopEvents() {
  clearTimeout(reconnectTimer);
  reconnectTimer = 0;
  clearTimeout(stallTimer);
  const s = stream;
  stream = null;
  s?.abort();
}

async function connectEvents() {
  stopEvents();
  const ctrl = new AbortController();
  stream = ctrl;
  parser.reset();
  setConnection(failures > 0 ? 'reconnecting…' : 'connecting…', 'wait');
  const stalled = () => {
    clearTimeout(stallTimer);
    stallTimer = window.setTimeout(() => ctrl.abort(), STALL_MS);
  };
  let why = 'the stream ended';
  try {
    /** @type {Record<string, string>} */
    const headers = parser.lastEventId ? { 'Last-Event-ID': parser.lastEventId } : {};
    const res = await api('GET', EVENTS_URL, { headers, signal: ctrl.signal });
    if (!res.body) throw new Error('no response body');
    const reader = res.body.getReader();
    stalled();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      stalled();
      for (const m of parser.push(value)) onMessage(m);
    }
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) return; // waits for a token
    why = err instanceof Error && err.name !== 'AbortError' ? err.message : 'no data for 45 s';
  }
  if (stream !== ctrl) return; // stopped, or replaced by a new connection
  clearTimeout(stallTimer);
  const delay = reconnectDelay(failures++, parser.retry, Math.random());
  setConnection(`disconnected (${why}); retrying in ${Math.ceil(delay / 1000)} s`, 'off');
  reconnectTimer = window.setTimeout(connectEvents, delay);
}

/** @param {import('./logic.js').SseMessage} m */
function onMessage(m) {
  if (m.event === 'ready') {
    failures = 0;
    setConnection('live', 'live');
    let ready;
    try {
      ready = JSON.parse(m.data);
    } catch {
      ready = {};
    }
    // Not resumed (a first connection, or missed events the server no longer has): reload the list.
    // A restarted control plane cannot resume: its log level is its start-up one again.
    if (ready?.resumed !== true) {
      loadTasks();
      presetsChanged();
      loadLogLevel();
    }
    return;
  }
  if (PRESET_EVENTS.includes(m.event)) {
    presetsChanged();
    return;
  }
  const e = parseTaskEvent(m);
  if (e) onTaskEvent(e);
}

// --- wiring ----------------------------------------------------------------------------------------

function closeLogs() {
  logsTask = null;
  ui.logs.hidden = true;
  ui.logsText.textContent = '';
}

/**
 * Forget every task, agent, log line, preset, watchfolder and webhook shown (a refused or forgotten
 * token must not leave them up). With `keepDrafts` (a refused token) a form for a new item stays open
 * with what the operator typed (their own input), without the server data it showed.
 * @param {boolean} [keepDrafts]
 */
function clearData(keepDrafts = false) {
  view = { tasks: [], total: 0, statuses: view.statuses, page: 0, perPage: PER_PAGE };
  renderTasks();
  agents = [];
  renderAgents();
  ui.agentsState.textContent = '';
  closeAgentToken();
  clearLogLevel();
  closeLogs();
  if (keepDrafts) suspendTaskForm();
  else closeTaskForm();
  clearManage(keepDrafts);
  hideError();
}

function updateTokenButton() {
  ui.forgetToken.hidden = token() === '';
}

// --- tabs: #tasks (tasks and agents), #presets, #watchfolders, #webhooks -------------------------------
// The tasks tab's hash also keeps its status filter and page: #tasks?status=RUNNING&page=2; the presets
// tab's its name filter: #presets?name=h264.

const TABS = /** @type {const} */ (['tasks', 'presets', 'watchfolders', 'webhooks']);
/** @typedef {typeof TABS[number]} Tab */
/** The tab shown, null before the first. @type {Tab | null} */
let shownTab = null;

/** The tab the address asks for; tasks for anything else. @returns {Tab} */
function currentTab() {
  return parseHash(location.hash, TABS).tab;
}

/** Put the tasks' filter and page in the address (without a history entry), when the tasks tab is shown. */
function keepQueryInHash() {
  if (currentTab() !== 'tasks') return;
  const hash = `#${tasksHash(query)}`;
  if (location.hash !== hash) history.replaceState(null, '', hash);
}

/**
 * Take the tasks' filter and page from the address; a filter the select does not offer is none.
 * @returns {boolean} whether they changed
 */
function queryFromHash() {
  const place = parseHash(location.hash, TABS);
  if (place.tab !== 'tasks') return false;
  let statuses = place.statuses;
  const value = statuses.join(',');
  if (!Array.from(ui.statusFilter.options).some((o) => o.value === value)) statuses = [];
  if (statuses.join(',') === query.statuses.join(',') && place.page === query.page) return false;
  query.statuses = statuses;
  query.page = place.page;
  ui.statusFilter.value = statuses.join(',');
  return true;
}

/**
 * Take the presets' name filter from the address, when it shows the presets tab.
 * @returns {boolean} whether it changed
 */
function presetFilterFromHash() {
  const place = parseHash(location.hash, TABS);
  return place.tab === 'presets' && setPresetFilter(place.name);
}

/** Put the presets' name filter in the address (without a history entry), when the presets tab is shown. @param {string} name */
function keepPresetFilterInHash(name) {
  if (currentTab() !== 'presets') return;
  const hash = `#${presetsHash(name)}`;
  if (location.hash !== hash) history.replaceState(null, '', hash);
}

/** Load what the shown tab lists (the tasks are kept current by the event stream on every tab). */
function refreshTab() {
  if (needsToken) return;
  const tab = currentTab();
  if (tab === 'tasks') loadAgents();
  else loadTab(tab);
}

function showTab() {
  const tab = currentTab();
  shownTab = tab;
  for (const t of TABS) byId(`view-${t}`).hidden = t !== tab;
  for (const b of document.querySelectorAll('button.tab')) {
    if (!(b instanceof HTMLButtonElement)) continue;
    if (b.dataset.tab === tab) b.setAttribute('aria-current', 'page');
    else b.removeAttribute('aria-current');
  }
  refreshTab();
}

/** The tasks tab, with the filter and page it had. */
const tasksTabHash = () => tasksHash(query);

for (const b of document.querySelectorAll('button.tab')) {
  if (!(b instanceof HTMLButtonElement)) continue;
  b.addEventListener('click', () => {
    const tab = b.dataset.tab ?? 'tasks';
    location.hash =
      tab === 'tasks' ? tasksTabHash() : tab === 'presets' ? presetsHash(presetFilterName()) : tab;
  });
}
window.addEventListener('hashchange', () => {
  if (queryFromHash() && !needsToken) loadTasks();
  const presetsFiltered = presetFilterFromHash();
  if (currentTab() !== shownTab) showTab();
  else if (presetsFiltered && !needsToken) loadTab('presets');
});
// "New task" on a preset: the tasks tab is shown at once, so that the form can take the focus.
initManage({
  showTasks() {
    location.hash = tasksTabHash();
    if (shownTab !== 'tasks') showTab();
  },
  presetFilterChanged: keepPresetFilterInHash,
});

function start() {
  needsToken = false;
  ui.auth.hidden = true;
  updateTokenButton();
  queryFromHash();
  presetFilterFromHash();
  loadTasks();
  loadLogLevel();
  connectEvents();
  showTab();
  // Forms kept open through the token prompt get their choices (presets, agents) again.
  resumeTaskForm();
  resumeManage();
}

ui.auth.addEventListener('submit', (e) => {
  e.preventDefault(); // never submitted: the token must not end up in a URL
  const value = ui.authToken.value.trim();
  if (value === '') return;
  setToken(value);
  ui.authToken.value = '';
  start();
});
ui.forgetToken.addEventListener('click', () => {
  setToken('');
  // What the token let this tab see goes with it (the next load asks for a token if one is needed).
  clearData();
  start();
});
ui.statusFilter.addEventListener('change', () => {
  const value = ui.statusFilter.value;
  query.statuses = value === '' ? [] : value.split(',');
  query.page = 0;
  keepQueryInHash();
  loadTasks();
});
ui.pagePrev.addEventListener('click', () => {
  query.page = Math.max(0, view.page - 1);
  keepQueryInHash();
  loadTasks();
});
ui.pageNext.addEventListener('click', () => {
  query.page = view.page + 1;
  keepQueryInHash();
  loadTasks();
});
byId('logs-refresh').addEventListener('click', () => refreshLogs());
byId('logs-close').addEventListener('click', closeLogs);
byId('task-new').addEventListener('click', () => openTaskForm());
// The response of a create is the task's newest state; the event stream brings it too.
initTaskForm((task) => onTaskEvent({ event: 'task.created', task }));

setInterval(() => {
  if (!document.hidden) refreshTab();
}, POLL_MS);
setInterval(() => {
  if (!document.hidden && !needsToken && logsTask && isOpenStatus(logsTask.status)) refreshLogs();
}, LOGS_FOLLOW_MS);
document.addEventListener('visibilitychange', () => {
  if (document.hidden) return;
  refreshTab();
  if (!needsToken) loadLogLevel();
});

start();
