// @ts-check
// The presets, watchfolders and webhooks tabs: each a paged list (X-Total) with a create/edit form
// (PUT replaces the whole definition, and is sent only when the item did not change elsewhere since
// the form opened) and a delete that asks first; watchfolders can be suspended and resumed (a PATCH of
// `suspended` alone); the webhooks tab lists the delivery attempts, with their details and a
// redelivery. The lists are loaded when their tab is shown and every 5 s while it is (app.js calls
// loadTab). A row's buttons act on the row as the list has it when they are clicked, never on the copy
// they were built with (a cell is rebuilt only when its key changes).
import {
  ApiError,
  api,
  apiList,
  badge,
  button,
  byId,
  clearFormErrors,
  clipped,
  dateTime,
  el,
  errorText,
  FormInvalid,
  fillForm,
  formValues,
  handleForm,
  isUnauthorized,
  report,
  syncRows,
} from './dom.js';
import { formatAgo, formatTime, pageLabel } from './logic.js';
import {
  editConflict,
  executionDetails,
  executionSummary,
  filterLabel,
  listQuery,
  listStateLine,
  mergeEdit,
  pageToReload,
  presetBody,
  presetFields,
  presetHasAdvanced,
  presetNamesStale,
  presetsEmptyText,
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
/**
 * The preset names of the watchfolders table are loaded again when the event stream says a preset
 * changed (presetsChanged), or at a refresh once older than this (the stream may be down).
 */
const CATALOG_MAX_AGE = 60_000;
/** How long a note beside a list's title (a redelivery queued) stays before its refresh time. */
const NOTE_MS = 20_000;

/** Show the tasks tab now (app.js sets it: the new-task form can only take the focus once shown). */
let showTasks = () => {
  location.hash = 'tasks';
};
/** The presets' name filter changed (app.js keeps it in the address). @type {(name: string) => void} */
let presetFilterChanged = () => {};
/** @param {{showTasks: () => void, presetFilterChanged: (name: string) => void}} hooks */
export function initManage(hooks) {
  showTasks = hooks.showTasks;
  presetFilterChanged = hooks.presetFilterChanged;
}

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
 * @property {() => void} firstPage go back to the first page at the next load (a filter changed)
 * @property {(text: string) => void} say a note beside the list's title (kept a while, before the refresh time)
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
  let refreshedAt = 0;
  /** @type {{text: string, until: number} | null} */
  let note = null;

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
      refreshedAt = Date.now();
      state.textContent = listStateLine(refreshedAt, note, refreshedAt);
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
      refreshedAt = 0;
      note = null;
      state.textContent = '';
    },
    find: (id) => items.find((i) => i.id === id),
    goTo,
    firstPage() {
      page = 0;
    },
    say(text) {
      note = { text, until: Date.now() + NOTE_MS };
      state.textContent = text;
    },
  };
}

/**
 * @template {{id: string, updatedAt: number}} T
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
 * @property {() => void} [forget] the token was refused while a new item's form stays open: drop the
 *   server data it shows (its selects' options), keeping the values
 * @property {(item: T) => void} [reopened] the form now edits this newer version of its item
 * @property {Record<string, string>} [editPlaceholders] field placeholders while editing (an example
 *   value would read as the item's own)
 * @property {() => void} saved after a create or an update
 */

/**
 * The create/edit form of one kind of resource: a POST for a new one, a PUT (the whole definition)
 * for an edited one. An edit is sent only if the item is still as it was when the form opened (its
 * `updatedAt`, read again just before); else nothing is sent and the form takes the changes made
 * elsewhere where the operator had not changed the field (mergeEdit), says so, and the next Save
 * compares with that newer version.
 * @template {{id: string, updatedAt: number}} T
 * @template B
 * @param {FormOptions<T, B>} o
 */
function resourceForm(o) {
  const form = /** @type {HTMLFormElement} */ (byId(`${o.prefix}-form`));
  const title = byId(`${o.prefix}-form-title`);
  const submit = byId(`${o.prefix}-form-submit`);
  const newButton = byId(`${o.prefix}-new`);
  /** The item being edited, as the form's values came from it; null: a new one. @type {T | null} */
  let editing = null;
  let openSeq = 0;
  /** The placeholders of a new item's form. */
  const placeholders = new Map(
    Object.keys(o.editPlaceholders ?? {}).map((name) => {
      const e = form.elements.namedItem(name);
      const field = e instanceof HTMLInputElement || e instanceof HTMLTextAreaElement ? e : null;
      return [name, { field, own: field?.placeholder ?? '' }];
    }),
  );

  /** @param {T | null} item null: a new one */
  async function open(item) {
    const mine = ++openSeq;
    editing = item;
    form.reset();
    clearFormErrors(form);
    if (o.prepare) await o.prepare(item);
    if (mine !== openSeq) return;
    fillForm(form, item ? o.fields(item) : o.blank);
    for (const [name, { field, own }] of placeholders) {
      if (field) field.placeholder = item ? (o.editPlaceholders?.[name] ?? own) : own;
    }
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

  /** @param {T} item @returns {Promise<T>} the item as it is now */
  async function reread(item) {
    try {
      return await (await api('GET', `${o.path}/${encodeURIComponent(item.id)}`)).json();
    } catch (err) {
      if (!(err instanceof ApiError) || err.status === 401) throw err;
      if (err.status === 404) {
        throw new FormInvalid(
          [],
          `Not saved: this ${o.noun} was deleted elsewhere since you opened it. Cancel, or create it again with New ${o.noun}.`,
        );
      }
      const why = err.status === 0 ? 'the control plane cannot be reached' : err.message;
      throw new FormInvalid([], `Not saved (nothing was sent): ${why}. Try again.`);
    }
  }

  handleForm(
    form,
    async (values) => {
      const built = o.body(values);
      if (!built.ok) throw new FormInvalid(built.errors);
      const item = editing;
      if (item) {
        const current = await reread(item);
        if (editing !== item) return; // closed meanwhile
        if (current.updatedAt !== item.updatedAt) {
          const now = o.fields(current);
          const merge = mergeEdit(o.fields(item), values, now);
          editing = current;
          fillForm(form, merge.values);
          title.textContent = `Edit ${o.noun} “${o.nameOf(current)}”`;
          o.reopened?.(current);
          const conflict = editConflict(o.noun, current.updatedAt, merge, now);
          throw new FormInvalid(conflict.errors, conflict.summary);
        }
        await api('PUT', `${o.path}/${encodeURIComponent(item.id)}`, { body: built.body });
      } else await api('POST', o.path, { body: built.body });
      close();
      o.saved();
    },
    () => ({ noun: o.noun, creating: editing === null }),
  );
  byId(`${o.prefix}-form-cancel`).addEventListener('click', close);
  form.addEventListener('keydown', (e) => {
    if (e.key !== 'Escape' || e.defaultPrevented || e.isComposing) return;
    e.preventDefault();
    close();
    newButton.focus();
  });
  newButton.addEventListener('click', () => open(null));
  return {
    open,
    close,
    /** The id of the item being edited, or null. */
    editingId: () => editing?.id ?? null,
    /**
     * The token was refused: a new item's form stays open with what the operator typed (their own
     * input, not server data); an edit's form (the item's data) closes.
     */
    suspend() {
      if (form.hidden || editing !== null) return close();
      openSeq++;
      o.forget?.();
    },
    /**
     * A token was given: a new item's form left open gets the choices it forgot (suspend) again, its
     * values kept.
     */
    async resume() {
      if (form.hidden || editing !== null || !o.prepare || !o.forget) return;
      const mine = ++openSeq;
      const values = formValues(form);
      await o.prepare(null);
      if (mine === openSeq) fillForm(form, values);
    },
  };
}

/**
 * Run an action on a row: its buttons are disabled meanwhile, a failure shows the API's detail, and
 * the list is loaded again either way.
 * @template {{id: string}} T
 * @param {PagedList<T>} list
 * @param {string} id the row's
 * @param {string} what for the message of a failure
 * @param {() => Promise<void>} run
 */
async function act(list, id, what, run) {
  if (busy.has(id)) return;
  busy.add(id);
  list.render();
  try {
    await run();
  } catch (err) {
    report(err, what);
  } finally {
    busy.delete(id);
    await list.load();
    list.render();
  }
}

/**
 * Run `use` with a row's item as the list has it now (the row's buttons keep only its id); nothing when
 * the row is gone.
 * @template {{id: string}} T
 * @param {PagedList<T>} list
 * @param {string} id
 * @param {(item: T) => void} use
 */
function withRow(list, id, use) {
  const item = list.find(id);
  if (item) use(item);
}

/**
 * Delete an item after the operator confirms (asked with the item as it is now).
 * @template {{id: string}} T
 * @param {PagedList<T>} list
 * @param {{close: () => void, editingId: () => string | null}} form
 * @param {string} kind the API's collection: "presets"
 * @param {string} id
 * @param {(item: T) => string} question
 * @param {(item: T) => string} what
 */
function remove(list, form, kind, id, question, what) {
  withRow(list, id, (item) => {
    if (!confirm(question(item))) return;
    act(list, id, what(item), async () => {
      await api('DELETE', itemPath(kind, id));
      if (form.editingId() === id) form.close();
      if (kind === 'presets') presetNamesAt = 0;
    });
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
/** When presetCatalog was loaded (Unix ms); 0: never, or a preset was saved or deleted here since. */
let presetNamesAt = 0;

async function loadPresetCatalog() {
  /** @type {{items: Preset[], total: number}} */
  const { items } = await apiList(`/api/v1/presets?perPage=${CATALOG}`);
  presetCatalog = new Map(items.map((p) => [p.id, p]));
  presetNamesAt = Date.now();
}

const presetFilter = /** @type {HTMLInputElement} */ (byId('presets-filter'));
const presetsEmpty = byId('presets-empty');
/** The presets' name filter applied ("" for none; trimmed). */
let presetName = '';
/** The filter of the last load asked for: the empty table's text names it. */
let presetNameAsked = '';
/** Typing in the filter loads the list once this long has passed without a key. */
const FILTER_DEBOUNCE_MS = 300;
let presetFilterTimer = 0;

/** @type {PagedList<Preset>} */
const presets = pagedList(
  'presets',
  (page, perPage) => {
    presetNameAsked = presetName;
    return `/api/v1/presets?${listQuery(page, perPage, { name: presetName })}`;
  },
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
              showTasks();
              openTaskForm(p.id);
            },
            { title: 'A new task from this preset' },
          ),
          button('Edit', () => withRow(presets, p.id, (cur) => presetForm.open(cur)), { disabled: isBusy }),
          button(
            'Delete',
            () =>
              remove(
                presets,
                presetForm,
                'presets',
                p.id,
                (cur) =>
                  `Delete the preset “${cur.name}”? Tasks made from it keep their own copy of its values.`,
                (cur) => `Delete “${cur.name}”`,
              ),
            { disabled: isBusy, danger: true },
          ),
        ],
        'actions',
      ],
    ];
  },
  async () => {
    presetsEmpty.textContent = presetsEmptyText(presetNameAsked);
  },
);

/** Apply what the filter field says (at once: Enter, or the debounce's end). */
function applyPresetFilter() {
  clearTimeout(presetFilterTimer);
  const name = presetFilter.value.trim();
  if (name === presetName) return;
  presetName = name;
  presetFilterChanged(name);
  presets.goTo(0);
}
presetFilter.addEventListener('input', () => {
  clearTimeout(presetFilterTimer);
  presetFilterTimer = window.setTimeout(applyPresetFilter, FILTER_DEBOUNCE_MS);
});
presetFilter.addEventListener('change', applyPresetFilter);

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
    editPlaceholders: { command: 'none', outputFile: 'none: each task’s own output file', requires: 'none' },
    saved() {
      presetNamesAt = 0; // a renamed preset's name shows in the watchfolders table at its next load
      presets.load();
    },
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
          button(w.suspended ? 'Resume' : 'Suspend', () => toggleSuspended(w.id), { disabled: isBusy }),
          button('Edit', () => withRow(watchfolders, w.id, (cur) => watchfolderForm.open(cur)), {
            disabled: isBusy,
          }),
          button(
            'Delete',
            () =>
              remove(
                watchfolders,
                watchfolderForm,
                'watchfolders',
                w.id,
                (cur) =>
                  `Delete the watchfolder “${cur.name}”? Its folder is no longer scanned; files and tasks stay.`,
                (cur) => `Delete “${cur.name}”`,
              ),
            { disabled: isBusy, danger: true },
          ),
        ],
        'actions',
      ],
    ];
  },
  async (items) => {
    // Preset names for the table: loaded again when a watchfolder names one not known yet, after a
    // preset event (a preset renamed elsewhere), and at least once a minute.
    const ids = items.map((w) => w.preset);
    if (presetNamesStale(ids, presetCatalog, presetNamesAt, Date.now(), CATALOG_MAX_AGE)) {
      await loadPresetCatalog().catch(() => undefined);
    }
  },
);

/** Suspend a watchfolder that is not, resume one that is (as the list has it now). @param {string} id */
function toggleSuspended(id) {
  withRow(watchfolders, id, (w) => {
    const suspended = !w.suspended;
    act(watchfolders, id, `${suspended ? 'Suspend' : 'Resume'} “${w.name}”`, async () => {
      // Only `suspended` is sent: an edit another client made meanwhile stays.
      await api('PATCH', itemPath('watchfolders', id), { body: { suspended } });
    });
  });
}

/** The watchfolder form's preset select, while the token is refused: the chosen id only, unnamed. */
function forgetWatchfolderChoices() {
  const chosen = watchfolderPreset.value;
  const label = chosen === '' ? 'choose a preset' : 'the chosen preset (listed again once a token is given)';
  watchfolderPreset.replaceChildren(new Option(label, chosen));
  watchfolderPreset.value = chosen;
  agentNames.replaceChildren();
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
    forget: forgetWatchfolderChoices,
    editPlaceholders: { 'filter.extensions.include': 'none: all files', 'filter.extensions.exclude': 'none' },
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

/** The secret is write-only: an edit leaves it blank to keep the one set. @param {Webhook | null} w */
function showSecretState(w) {
  webhookRemoveSecret.hidden = !w?.hasSecret;
  webhookSecret.placeholder = w?.hasSecret ? 'set: leave blank to keep it' : 'none';
}

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
      [String(w.createdAt), () => dateTime(formatTime(w.createdAt)), 'time'],
      [
        String(isBusy),
        () => [
          button('Attempts', () => showAttemptsOf(w.id), {
            title: 'Show only the delivery attempts of this webhook',
          }),
          button('Edit', () => withRow(webhooks, w.id, (cur) => webhookForm.open(cur)), { disabled: isBusy }),
          button(
            'Delete',
            () =>
              remove(
                webhooks,
                webhookForm,
                'webhooks',
                w.id,
                (cur) => `Delete the webhook ${webhookName(cur)}? Its deliveries still waiting are dropped.`,
                (cur) => `Delete the webhook for ${cur.event}`,
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
      showSecretState(w);
    },
    reopened: showSecretState,
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
      [String(x.createdAt), () => dateTime(formatTime(x.createdAt)), 'time'],
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
      [s.response, () => [s.response], 'nowrap'],
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
          button('Details', () => withRow(executions, x.id, showExecution)),
          button('Redeliver', () => withRow(executions, x.id, redeliver), {
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
  act(executions, x.id, `Redeliver the ${x.event} event`, async () => {
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

/** The presets' name filter applied now (for the address). */
export const presetFilterName = () => presetName;

/**
 * Take the presets' name filter from the address: the field shows it, and the next load (from the
 * first page) applies it.
 * @param {string} name
 * @returns {boolean} whether it changed (the list must be loaded again)
 */
export function setPresetFilter(name) {
  clearTimeout(presetFilterTimer);
  presetFilter.value = name;
  if (name === presetName) return false;
  presetName = name;
  presets.firstPage();
  return true;
}

/** A preset was created, changed or deleted (the event stream says so): its names are loaded again. */
export function presetsChanged() {
  presetNamesAt = 0;
}

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

const forms = [presetForm, watchfolderForm, webhookForm];

/**
 * Forget everything shown (the token was refused or forgotten): lists, open forms, details. With
 * `keepDrafts` (a refused token) a new item's open form stays, with what the operator typed.
 * @param {boolean} [keepDrafts]
 */
export function clearManage(keepDrafts = false) {
  for (const list of [presets, watchfolders, webhooks, executions]) list.clear();
  for (const form of forms) {
    if (keepDrafts) form.suspend();
    else form.close();
  }
  presetCatalog = new Map();
  presetNamesAt = 0;
  executionWebhook.replaceChildren(new Option('all', ''));
  executionSuccess.value = '';
  closeExecution();
}

/** A token was given: the forms kept open by clearManage(true) get their choices again. */
export function resumeManage() {
  for (const form of forms) form.resume();
}
