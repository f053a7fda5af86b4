// @ts-check
// The presets, watchfolders and webhooks tabs: each a paged list (X-Total) with a create/edit form
// (PUT replaces the whole definition) and a delete that asks first; watchfolders can be suspended
// and resumed (a PATCH of `suspended` alone); the webhooks tab lists the delivery attempts, with
// their details and a redelivery. The lists are loaded when their tab is shown and every 5 s while
// it is (app.js calls loadTab).
import {
  api,
  apiList,
  badge,
  button,
  byId,
  clearFormErrors,
  clipped,
  el,
  errorText,
  FormInvalid,
  fillForm,
  handleForm,
  isUnauthorized,
  report,
  syncRows,
} from './dom.js';
import { formatAgo, formatTime, pageLabel } from './logic.js';
import {
  executionDetails,
  executionSummary,
  filterLabel,
  listQuery,
  pageToReload,
  presetBody,
  presetFields,
  presetHasAdvanced,
  WATCHFOLDER_DEFAULTS,
  WEBHOOK_EVENTS,
  watchfolderBody,
  watchfolderFields,
  watchfolderState,
  webhookBody,
  webhookFields,
} from './manage-logic.js';
import { openTaskForm } from './task-form.js';

/** @typedef {import('./dom.js').Cell} Cell */
/** @typedef {import('./manage-logic.js').Fields} Fields */
/** @typedef {import('./manage-logic.js').Preset} Preset */
/** @typedef {import('./manage-logic.js').Watchfolder} Watchfolder */
/** @typedef {import('./manage-logic.js').Webhook} Webhook */
/** @typedef {import('./manage-logic.js').Execution} Execution */
/** @typedef {import('./logic.js').Agent} Agent */
/** @template T @typedef {import('./manage-logic.js').Built<T>} Built */

const PER_PAGE = 50;
/** The most presets or agents one select lists (the API's largest page). */
const CATALOG = 1000;

/** Rows with an action in flight (their buttons are disabled). */
const busy = new Set();

/**
 * @template {{id: string}} T
 * @typedef {object} PagedList
 * @property {() => Promise<void>} load load the current page (again)
 * @property {() => void} render
 * @property {() => void} clear forget the rows (and go back to the first page)
 * @property {(id: string) => T | undefined} find
 * @property {(page: number) => void} goTo
 * @property {(text: string) => void} say the line beside the list's title
 */

/**
 * A table of one kind of resource, a page at a time. Its elements are `<prefix>-rows`, `-empty`,
 * `-prev`, `-next`, `-page` and `-state`.
 * @template {{id: string}} T
 * @param {string} prefix
 * @param {(page: number, perPage: number) => string} url the list's URL for a page
 * @param {(item: T) => Cell[]} cells
 * @param {(items: T[]) => Promise<void>} [before] runs after a load, before the rows are shown
 * @returns {PagedList<T>}
 */
function pagedList(prefix, url, cells, before) {
  const tbody = byId(`${prefix}-rows`);
  const empty = byId(`${prefix}-empty`);
  const prev = /** @type {HTMLButtonElement} */ (byId(`${prefix}-prev`));
  const next = /** @type {HTMLButtonElement} */ (byId(`${prefix}-next`));
  const label = byId(`${prefix}-page`);
  const state = byId(`${prefix}-state`);
  /** @type {Map<string, HTMLTableRowElement>} */
  const rows = new Map();
  let page = 0;
  let total = 0;
  let loaded = false;
  /** @type {T[]} */
  let items = [];
  let seq = 0;

  function render() {
    syncRows(tbody, rows, items, (item) => item.id, cells);
    empty.hidden = !loaded || items.length > 0;
    label.textContent = loaded ? pageLabel({ page, perPage: PER_PAGE, total, count: items.length }) : '…';
    prev.disabled = page === 0;
    next.disabled = (page + 1) * PER_PAGE >= total;
  }

  async function load() {
    const mine = ++seq;
    try {
      /** @type {{items: T[], total: number}} */
      const got = await apiList(url(page, PER_PAGE));
      if (mine !== seq) return;
      const back = pageToReload(page, PER_PAGE, got.total, got.items.length);
      if (back !== null && back !== page) {
        page = back; // the page emptied (rows deleted): show the last one that has rows
        return load();
      }
      if (before) await before(got.items);
      if (mine !== seq) return;
      items = got.items;
      total = got.total;
      loaded = true;
      render();
      state.textContent = `refreshed ${formatTime(Date.now())}`;
    } catch (err) {
      if (mine !== seq || isUnauthorized(err)) return;
      state.textContent = `refresh failed: ${errorText(err)}`;
    }
  }

  /** @param {number} to */
  function goTo(to) {
    page = Math.max(0, to);
    load();
  }

  prev.addEventListener('click', () => goTo(page - 1));
  next.addEventListener('click', () => goTo(page + 1));
  return {
    load,
    render,
    clear() {
      seq++;
      items = [];
      total = 0;
      page = 0;
      loaded = false;
      render();
      state.textContent = '';
    },
    find: (id) => items.find((i) => i.id === id),
    goTo,
    say(text) {
      state.textContent = text;
    },
  };
}

/**
 * @template {{id: string}} T
 * @template B
 * @typedef {object} FormOptions
 * @property {string} prefix elements `<prefix>-form`, `-form-title`, `-form-submit`, `-form-cancel`, `-new`
 * @property {string} noun "preset"
 * @property {string} path "/api/v1/presets"
 * @property {(f: Fields) => Built<B>} body the request body from the form's values
 * @property {(item: T) => Fields} fields the form's values from an item, for editing it
 * @property {Fields} blank the form's values for a new item
 * @property {(item: T) => string} nameOf
 * @property {(item: T | null) => Promise<void>} [prepare] runs before the form is shown (fill its selects)
 * @property {() => void} saved after a create or an update
 */

/**
 * The create/edit form of one kind of resource: a POST for a new one, a PUT (the whole definition)
 * for an edited one.
 * @template {{id: string}} T
 * @template B
 * @param {FormOptions<T, B>} o
 */
function resourceForm(o) {
  const form = /** @type {HTMLFormElement} */ (byId(`${o.prefix}-form`));
  const title = byId(`${o.prefix}-form-title`);
  const submit = byId(`${o.prefix}-form-submit`);
  /** @type {T | null} */
  let editing = null;
  let openSeq = 0;

  /** @param {T | null} item null: a new one */
  async function open(item) {
    const mine = ++openSeq;
    editing = item;
    form.reset();
    clearFormErrors(form);
    if (o.prepare) await o.prepare(item);
    if (mine !== openSeq) return;
    fillForm(form, item ? o.fields(item) : o.blank);
    title.textContent = item ? `Edit ${o.noun} “${o.nameOf(item)}”` : `New ${o.noun}`;
    submit.textContent = item ? 'Save changes' : `Create ${o.noun}`;
    form.hidden = false;
    form.scrollIntoView({ block: 'nearest' });
    const first = form.querySelector('input, select, textarea');
    if (first instanceof HTMLElement) first.focus();
  }

  function close() {
    openSeq++;
    editing = null;
    form.hidden = true;
    form.reset();
    clearFormErrors(form);
  }

  handleForm(form, async (values) => {
    const built = o.body(values);
    if (!built.ok) throw new FormInvalid(built.errors);
    const item = editing;
    if (item) await api('PUT', `${o.path}/${encodeURIComponent(item.id)}`, { body: built.body });
    else await api('POST', o.path, { body: built.body });
    close();
    o.saved();
  });
  byId(`${o.prefix}-form-cancel`).addEventListener('click', close);
  byId(`${o.prefix}-new`).addEventListener('click', () => open(null));
  return {
    open,
    close,
    /** The id of the item being edited, or null. */
    editingId: () => editing?.id ?? null,
  };
}

/**
 * Run an action on a row: its buttons are disabled meanwhile, a failure shows the API's detail, and
 * the list is loaded again either way.
 * @template {{id: string}} T
 * @param {PagedList<T>} list
 * @param {T} item
 * @param {string} what for the message of a failure
 * @param {() => Promise<void>} run
 */
async function act(list, item, what, run) {
  if (busy.has(item.id)) return;
  busy.add(item.id);
  list.render();
  try {
    await run();
  } catch (err) {
    report(err, what);
  } finally {
    busy.delete(item.id);
    await list.load();
    list.render();
  }
}

/**
 * Delete an item after the operator confirms.
 * @template {{id: string}} T
 * @param {PagedList<T>} list
 * @param {{close: () => void, editingId: () => string | null}} form
 * @param {T} item
 * @param {string} path the item's URL
 * @param {string} question
 * @param {string} what
 */
function remove(list, form, item, path, question, what) {
  if (!confirm(question)) return;
  act(list, item, what, async () => {
    await api('DELETE', path);
    if (form.editingId() === item.id) form.close();
  });
}

/** @param {string[]} labels */
const chips = (labels) => labels.map((l) => el('span', 'chip', l));
/** @param {number} ms */
function ago(ms) {
  const s = el('span', '', formatAgo(ms));
  if (ms > 0) s.title = new Date(ms).toLocaleString();
  return s;
}
/** @param {string} kind @param {string} id */
const itemPath = (kind, id) => `/api/v1/${kind}/${encodeURIComponent(id)}`;

// --- presets ---------------------------------------------------------------------------------------

/** Preset names by id, for the watchfolders table and form (loaded with them). @type {Map<string, Preset>} */
let presetCatalog = new Map();

async function loadPresetCatalog() {
  /** @type {{items: Preset[], total: number}} */
  const { items } = await apiList(`/api/v1/presets?perPage=${CATALOG}`);
  presetCatalog = new Map(items.map((p) => [p.id, p]));
}

/** @type {PagedList<Preset>} */
const presets = pagedList(
  'presets',
  (page, perPage) => `/api/v1/presets?${listQuery(page, perPage)}`,
  (p) => {
    const isBusy = busy.has(p.id);
    return [
      [
        JSON.stringify([p.name, p.description, p.id]),
        () => {
          const out = [clipped('name', p.name)];
          if (p.description) out.push(clipped('muted small', p.description));
          out.push(el('div', 'id', p.id));
          return out;
        },
        'task',
      ],
      [
        JSON.stringify([p.command, p.outputFile]),
        () => [
          clipped('code', p.command),
          p.outputFile
            ? clipped('code muted', `→ ${p.outputFile}`)
            : el('div', 'muted small', '→ the task’s own output file'),
        ],
        'wide-text',
      ],
      [String(p.priority), () => [String(p.priority)], 'num'],
      [JSON.stringify(p.requires), () => chips(p.requires)],
      [
        String(isBusy),
        () => [
          button(
            'New task',
            () => {
              location.hash = 'tasks';
              openTaskForm(p.id);
            },
            { title: 'A new task from this preset' },
          ),
          button('Edit', () => presetForm.open(p), { disabled: isBusy }),
          button(
            'Delete',
            () =>
              remove(
                presets,
                presetForm,
                p,
                itemPath('presets', p.id),
                `Delete the preset “${p.name}”? Tasks made from it keep their own copy of its values.`,
                `Delete “${p.name}”`,
              ),
            { disabled: isBusy, danger: true },
          ),
        ],
        'actions',
      ],
    ];
  },
);

const presetMore = /** @type {HTMLDetailsElement} */ (byId('presets-form-more'));
const presetForm = resourceForm(
  /** @type {FormOptions<Preset, import('./manage-logic.js').PresetBody>} */ ({
    prefix: 'presets',
    noun: 'preset',
    path: '/api/v1/presets',
    body: presetBody,
    fields: presetFields,
    blank: {},
    nameOf: (p) => p.name,
    async prepare(p) {
      presetMore.open = p !== null && presetHasAdvanced(p);
    },
    saved: () => presets.load(),
  }),
);

// --- watchfolders ----------------------------------------------------------------------------------

const watchfolderPreset = /** @type {HTMLSelectElement} */ (byId('watchfolders-preset'));
const agentNames = byId('agent-names');

/** @type {PagedList<Watchfolder>} */
const watchfolders = pagedList(
  'watchfolders',
  (page, perPage) => `/api/v1/watchfolders?${listQuery(page, perPage)}`,
  (w) => {
    const isBusy = busy.has(w.id);
    const preset = presetCatalog.get(w.preset);
    const state = watchfolderState(w);
    const assigned = w.assignedAgent ? w.assignedAgent.name || w.assignedAgent.id : '';
    return [
      [
        JSON.stringify([w.name, w.path, w.description]),
        () => {
          const out = [clipped('name', w.name), clipped('code small', w.path)];
          if (w.description) out.push(el('div', 'muted small', w.description));
          return out;
        },
        'task',
      ],
      [
        JSON.stringify([w.preset, preset?.name]),
        () => [preset ? el('span', '', preset.name) : el('span', 'id', w.preset)],
      ],
      [JSON.stringify(w.filter), () => [filterLabel(w.filter)]],
      [
        JSON.stringify([w.agent, assigned]),
        () => {
          const out = [el('div', '', w.agent ? `pinned: ${w.agent}` : 'any agent')];
          out.push(el('div', 'muted small', assigned ? `scanned by ${assigned}` : 'no agent scanning'));
          return out;
        },
      ],
      [
        `${formatAgo(w.lastCheck)}|${w.lastCheck}|${w.interval}|${w.growthChecks}`,
        () => [
          ago(w.lastCheck),
          el(
            'div',
            'muted small',
            `every ${w.interval} s · ${w.growthChecks} ${w.growthChecks === 1 ? 'check' : 'checks'}`,
          ),
        ],
        'time',
      ],
      [
        JSON.stringify([state, w.error]),
        () => {
          const out = [badge(`tone-${state.tone}`, state.label)];
          if (w.error) out.push(el('div', 'task-error', w.error));
          return out;
        },
      ],
      [
        JSON.stringify([w.suspended, isBusy]),
        () => [
          button(w.suspended ? 'Resume' : 'Suspend', () => setSuspended(w, !w.suspended), {
            disabled: isBusy,
          }),
          button('Edit', () => watchfolderForm.open(w), { disabled: isBusy }),
          button(
            'Delete',
            () =>
              remove(
                watchfolders,
                watchfolderForm,
                w,
                itemPath('watchfolders', w.id),
                `Delete the watchfolder “${w.name}”? Its folder is no longer scanned; files and tasks stay.`,
                `Delete “${w.name}”`,
              ),
            { disabled: isBusy, danger: true },
          ),
        ],
        'actions',
      ],
    ];
  },
  async (items) => {
    // Preset names for the table: loaded again when a watchfolder names one not known yet.
    if (items.some((w) => !presetCatalog.has(w.preset))) {
      await loadPresetCatalog().catch(() => undefined);
    }
  },
);

/** @param {Watchfolder} w @param {boolean} suspended */
function setSuspended(w, suspended) {
  act(watchfolders, w, `${suspended ? 'Suspend' : 'Resume'} “${w.name}”`, async () => {
    // Only `suspended` is sent: an edit another client made meanwhile stays.
    await api('PATCH', itemPath('watchfolders', w.id), { body: { suspended } });
  });
}

const watchfolderForm = resourceForm(
  /** @type {FormOptions<Watchfolder, import('./manage-logic.js').WatchfolderBody>} */ ({
    prefix: 'watchfolders',
    noun: 'watchfolder',
    path: '/api/v1/watchfolders',
    body: watchfolderBody,
    fields: watchfolderFields,
    blank: { ...WATCHFOLDER_DEFAULTS },
    nameOf: (w) => w.name,
    async prepare() {
      // The preset select and the agent suggestions, fresh each time the form opens.
      const [presetList, agentList] = await Promise.allSettled([
        loadPresetCatalog(),
        /** @type {Promise<{items: Agent[], total: number}>} */ (
          apiList(`/api/v1/agents?perPage=${CATALOG}`)
        ),
      ]);
      if (presetList.status === 'rejected') report(presetList.reason, 'Loading the presets');
      const options = [...presetCatalog.values()].map((p) => new Option(p.name, p.id));
      watchfolderPreset.replaceChildren(
        new Option(options.length ? 'choose a preset' : 'no presets yet: create one first', ''),
        ...options,
      );
      const names = agentList.status === 'fulfilled' ? agentList.value.items.map((a) => a.name).sort() : [];
      agentNames.replaceChildren(...names.map((n) => new Option(n, n)));
    },
    saved: () => watchfolders.load(),
  }),
);

// --- webhooks and their delivery attempts ---------------------------------------------------------

const webhookEvent = /** @type {HTMLSelectElement} */ (byId('webhooks-event'));
webhookEvent.replaceChildren(...WEBHOOK_EVENTS.map((e) => new Option(e, e)));
const webhookSecret = /** @type {HTMLInputElement} */ (byId('webhooks-secret'));
const webhookRemoveSecret = byId('webhooks-remove-secret');
const executionWebhook = /** @type {HTMLSelectElement} */ (byId('executions-webhook'));
const executionSuccess = /** @type {HTMLSelectElement} */ (byId('executions-success'));

/** @param {Pick<Webhook, 'event' | 'url'>} w */
const webhookName = (w) => `${w.event} → ${w.url}`;

/** @type {PagedList<Webhook>} */
const webhooks = pagedList(
  'webhooks',
  (page, perPage) => `/api/v1/webhooks?${listQuery(page, perPage)}`,
  (w) => {
    const isBusy = busy.has(w.id);
    return [
      [w.event, () => [el('span', 'code', w.event)]],
      [w.url, () => [clipped('code', w.url)], 'wide-text'],
      [String(w.hasSecret), () => [w.hasSecret ? 'signed' : el('span', 'muted', 'none')]],
      [String(w.createdAt), () => [formatTime(w.createdAt)], 'time'],
      [
        String(isBusy),
        () => [
          button('Attempts', () => showAttemptsOf(w.id), {
            title: 'Show only the delivery attempts of this webhook',
          }),
          button('Edit', () => webhookForm.open(w), { disabled: isBusy }),
          button(
            'Delete',
            () =>
              remove(
                webhooks,
                webhookForm,
                w,
                itemPath('webhooks', w.id),
                `Delete the webhook ${webhookName(w)}? Its deliveries still waiting are dropped.`,
                `Delete the webhook for ${w.event}`,
              ),
            { disabled: isBusy, danger: true },
          ),
        ],
        'actions',
      ],
    ];
  },
  async (items) => {
    // The attempts' webhook filter offers the webhooks listed (and keeps one chosen from another page).
    const chosen = executionWebhook.value;
    const options = items.map((w) => new Option(webhookName(w), w.id));
    if (chosen !== '' && !items.some((w) => w.id === chosen)) {
      const kept = Array.from(executionWebhook.options).find((o) => o.value === chosen);
      options.unshift(kept ?? new Option(chosen, chosen));
    }
    executionWebhook.replaceChildren(new Option('all', ''), ...options);
    executionWebhook.value = chosen;
  },
);

const webhookForm = resourceForm(
  /** @type {FormOptions<Webhook, import('./manage-logic.js').WebhookBody>} */ ({
    prefix: 'webhooks',
    noun: 'webhook',
    path: '/api/v1/webhooks',
    body: webhookBody,
    fields: webhookFields,
    blank: { event: WEBHOOK_EVENTS[0] ?? '' },
    nameOf: webhookName,
    async prepare(w) {
      // The secret is write-only: an edit leaves it blank to keep the one set.
      webhookRemoveSecret.hidden = !w?.hasSecret;
      webhookSecret.placeholder = w?.hasSecret ? 'set: leave blank to keep it' : 'none';
    },
    saved: () => webhooks.load(),
  }),
);

/** @type {PagedList<Execution>} */
const executions = pagedList(
  'executions',
  (page, perPage) =>
    `/api/v1/webhooks/executions?${listQuery(page, perPage, {
      webhook: executionWebhook.value,
      success: executionSuccess.value,
    })}`,
  (x) => {
    const s = executionSummary(x);
    const isBusy = busy.has(x.id);
    return [
      [String(x.createdAt), () => [formatTime(x.createdAt)], 'time'],
      [x.event, () => [el('span', 'code', x.event)]],
      [
        JSON.stringify([x.url, x.source]),
        () => {
          /** @type {HTMLElement[]} */
          const out = [clipped('code', x.url)];
          if (x.source === 'direct') out.push(el('span', 'chip', 'direct'));
          return out;
        },
        'wide-text',
      ],
      [String(x.attempt), () => [String(x.attempt)], 'num'],
      [s.response, () => [s.response], 'time'],
      [s.duration, () => [s.duration], 'num'],
      [
        JSON.stringify([s.result, s.error]),
        () => {
          const out = [badge(s.result === 'delivered' ? 'tone-ok' : 'tone-bad', s.result)];
          if (s.error) out.push(el('div', 'task-error', s.error));
          return out;
        },
      ],
      [
        String(isBusy),
        () => [
          button('Details', () => showExecution(x)),
          button('Redeliver', () => redeliver(x), {
            disabled: isBusy,
            title: 'Send this event again, as a new delivery with its own retries',
          }),
        ],
        'actions',
      ],
    ];
  },
);

/** @param {string} webhookId */
function showAttemptsOf(webhookId) {
  executionWebhook.value = webhookId;
  executions.goTo(0);
  byId('executions-rows').scrollIntoView({ block: 'nearest' });
}

/** @param {Execution} x */
function redeliver(x) {
  if (!confirm(`Send the ${x.event} event again to ${x.url}?`)) return;
  act(executions, x, `Redeliver the ${x.event} event`, async () => {
    await api('POST', `/api/v1/webhooks/executions/${encodeURIComponent(x.id)}/redeliver`);
    executions.say(`redelivery of ${x.event} queued ${formatTime(Date.now())}; its attempts appear here`);
    // The attempt is made in the background: look again shortly.
    setTimeout(() => executions.load(), 1500);
  });
}

const executionPanel = byId('execution');
/** @param {Execution} x */
function showExecution(x) {
  byId('execution-title').textContent = `${x.event}, attempt ${x.attempt}, ${formatTime(x.createdAt)}`;
  byId('execution-text').textContent = executionDetails(x);
  executionPanel.hidden = false;
  executionPanel.scrollIntoView({ block: 'nearest' });
}
function closeExecution() {
  executionPanel.hidden = true;
  byId('execution-text').textContent = '';
}
byId('execution-close').addEventListener('click', closeExecution);
executionWebhook.addEventListener('change', () => executions.goTo(0));
executionSuccess.addEventListener('change', () => executions.goTo(0));
byId('executions-refresh').addEventListener('click', () => executions.load());

// --- what app.js calls -----------------------------------------------------------------------------

/**
 * Load the lists of a tab (when it is shown, and every 5 s while it is).
 * @param {string} tab
 */
export function loadTab(tab) {
  if (tab === 'presets') presets.load();
  else if (tab === 'watchfolders') watchfolders.load();
  else if (tab === 'webhooks') {
    webhooks.load();
    executions.load();
  }
}

/** Forget everything shown (the token was refused or forgotten): lists, open forms, details. */
export function clearManage() {
  for (const list of [presets, watchfolders, webhooks, executions]) list.clear();
  for (const form of [presetForm, watchfolderForm, webhookForm]) form.close();
  presetCatalog = new Map();
  executionWebhook.replaceChildren(new Option('all', ''));
  executionSuccess.value = '';
  closeExecution();
}
