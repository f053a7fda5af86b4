// @ts-check
// What every view of the dashboard shares: building the DOM from text, the API helper (token, problem
// details, the 401 hand-off), the message bar, tables kept per row, and forms read, filled and marked
// with field errors. Server data only ever reaches the page as textContent, text nodes or property
// values, never as markup.
import { parseProblem, problemMessage } from './logic.js';
import { failureSummary, fieldItems, placeFieldErrors } from './manage-logic.js';

/** @typedef {import('./manage-logic.js').Fields} Fields */
/** @typedef {import('./logic.js').FieldError} FieldError */
/** @typedef {import('./logic.js').Problem} Problem */
/** A table cell: the key of what it shows, how to build that, and its class. @typedef {[string, () => (Node | string)[], string?]} Cell */

/** @param {string} id */
export function byId(id) {
  const found = document.getElementById(id);
  if (!found) throw new Error(`#${id} is missing from the page`);
  return found;
}

/**
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {string} [className]
 * @param {string} [text]
 * @returns {HTMLElementTagNameMap[K]}
 */
export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/** @param {string} label @param {() => void} onClick @param {{disabled?: boolean, danger?: boolean, title?: string}} [opts] */
export function button(label, onClick, opts = {}) {
  const b = el('button', opts.danger ? 'danger' : '', label);
  b.type = 'button';
  b.disabled = !!opts.disabled;
  if (opts.title) b.title = opts.title;
  b.addEventListener('click', onClick);
  return b;
}

/**
 * A badge whose class is one of the code's own (never chosen by server text).
 * @param {string} className @param {string} text
 */
export const badge = (className, text) => el('span', `badge ${className}`, text);

/**
 * A formatted time (`06:51:15`, or `2026-11-27 06:51` for another day): a narrow column may put the
 * date above the time, but never breaks inside either.
 * @param {string} text
 * @returns {(Node | string)[]}
 */
export function dateTime(text) {
  const space = text.indexOf(' ');
  if (space < 0) return [el('span', 'nowrap', text)];
  return [el('span', 'nowrap', text.slice(0, space)), ' ', el('span', 'nowrap', text.slice(space + 1))];
}

/** Text that may be long: shown cut to one line, whole in its tooltip. @param {string} className @param {string} text */
export function clipped(className, text) {
  const node = el('div', `clip ${className}`, text);
  node.title = text;
  return node;
}

// --- the message bar -------------------------------------------------------------------------------

const message = byId('message');
const messageText = byId('message-text');

/** @param {string} text */
export function showError(text) {
  messageText.textContent = text;
  message.hidden = false;
}

export function hideError() {
  message.hidden = true;
}

byId('message-close').addEventListener('click', hideError);

// --- the API ---------------------------------------------------------------------------------------

const TOKEN_KEY = 'ffleet.apiToken';

export const token = () => sessionStorage.getItem(TOKEN_KEY) ?? '';
/** @param {string} value "" forgets it */
export function setToken(value) {
  if (value === '') sessionStorage.removeItem(TOKEN_KEY);
  else sessionStorage.setItem(TOKEN_KEY, value);
}

/** Called with the API's detail when a call is refused for want of a (valid) token. */
let unauthorized = /** @type {(reason: string) => void} */ (() => {});
/** @param {(reason: string) => void} handler */
export function onUnauthorized(handler) {
  unauthorized = handler;
}

export class ApiError extends Error {
  /** @param {number} status @param {string} message @param {Problem | null} [problem] */
  constructor(status, message, problem = null) {
    super(message);
    this.status = status;
    this.problem = problem;
  }
}

/**
 * A request to the API with the token; a failure throws an ApiError with the problem's detail (and the
 * parsed problem, for its field errors), and a 401 also asks for a token.
 * @param {string} method
 * @param {string} path
 * @param {{body?: unknown, headers?: Record<string, string>, signal?: AbortSignal}} [opts]
 */
export async function api(method, path, opts = {}) {
  /** @type {Record<string, string>} */
  const headers = { ...opts.headers };
  if (token()) headers.Authorization = `Bearer ${token()}`;
  if (opts.body !== undefined) headers['Content-Type'] = 'application/json';
  let res;
  try {
    const body = opts.body === undefined ? undefined : JSON.stringify(opts.body);
    res = await fetch(path, { method, headers, body, cache: 'no-store', signal: opts.signal });
  } catch (err) {
    if (opts.signal?.aborted) throw err;
    throw new ApiError(0, 'the control plane cannot be reached');
  }
  if (res.ok) return res;
  const text = await res.text().catch(() => '');
  const msg = problemMessage(res.status, text);
  if (res.status === 401) unauthorized(msg);
  throw new ApiError(res.status, msg, parseProblem(res.status, text));
}

/**
 * A list page: its rows and `X-Total`.
 * @template T
 * @param {string} path with its query
 * @returns {Promise<{items: T[], total: number}>}
 */
export async function apiList(path) {
  const res = await api('GET', path);
  /** @type {T[]} */
  const items = await res.json();
  const total = Number(res.headers.get('X-Total') ?? items.length);
  return { items, total: Number.isFinite(total) ? total : items.length };
}

/** @param {unknown} err */
export const isUnauthorized = (err) => err instanceof ApiError && err.status === 401;

/** @param {unknown} err */
export const errorText = (err) => (err instanceof Error ? err.message : String(err));

/** @param {unknown} err @param {string} what */
export function report(err, what) {
  if (isUnauthorized(err)) return; // the token form says it
  showError(`${what}: ${errorText(err)}`);
}

/**
 * An idempotency key (works outside secure contexts too, where crypto.randomUUID is missing: a
 * dashboard opened over plain HTTP at a LAN address).
 */
export function randomKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

// --- tables --------------------------------------------------------------------------------------------

/**
 * Make `tbody`'s rows those of `items`, in order. Rows are kept per id and each cell is rebuilt only
 * when its key changes, so a task's progress does not rebuild (and swallow a click on) its buttons.
 * @template T
 * @param {HTMLElement} tbody
 * @param {Map<string, HTMLTableRowElement>} rows
 * @param {T[]} items
 * @param {(item: T) => string} idOf
 * @param {(item: T) => Cell[]} cellsOf
 */
export function syncRows(tbody, rows, items, idOf, cellsOf) {
  const keep = new Set();
  /** @type {ChildNode | null} */
  let next = tbody.firstChild;
  for (const item of items) {
    const id = idOf(item);
    keep.add(id);
    const row = rows.get(id) ?? el('tr');
    rows.set(id, row);
    cellsOf(item).forEach(([key, build, className = ''], i) => {
      const cell = row.cells.item(i) ?? row.insertCell();
      if (cell.dataset.key === key) return;
      cell.dataset.key = key;
      cell.className = className;
      cell.replaceChildren(...build());
    });
    if (row === next) next = row.nextSibling;
    else tbody.insertBefore(row, next);
  }
  for (const [id, row] of rows) {
    if (keep.has(id)) continue;
    row.remove();
    rows.delete(id);
  }
}

// --- forms ---------------------------------------------------------------------------------------------

/** @param {Element} e @returns {e is HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement} */
const isField = (e) =>
  e instanceof HTMLInputElement || e instanceof HTMLSelectElement || e instanceof HTMLTextAreaElement;

/** @param {HTMLFormElement} form */
const fieldsOf = (form) =>
  Array.from(form.elements)
    .filter(isField)
    .filter((e) => e.name !== '');

/**
 * The values of a form's named fields: checkboxes as booleans, the rest as text.
 * @param {HTMLFormElement} form
 * @returns {Fields}
 */
export function formValues(form) {
  /** @type {Fields} */
  const out = {};
  for (const e of fieldsOf(form)) {
    out[e.name] = e instanceof HTMLInputElement && e.type === 'checkbox' ? e.checked : e.value;
  }
  return out;
}

/**
 * Set a form's fields (as values, never markup). A select given a value it has no option for gets one
 * (a watchfolder's preset beyond the first page of presets), so the value is kept.
 * @param {HTMLFormElement} form
 * @param {Fields} values
 */
export function fillForm(form, values) {
  for (const [name, value] of Object.entries(values)) {
    const e = form.elements.namedItem(name);
    if (e instanceof HTMLInputElement && e.type === 'checkbox') e.checked = value === true;
    else if (e instanceof HTMLSelectElement) {
      const v = typeof value === 'string' ? value : '';
      if (v !== '' && !Array.from(e.options).some((o) => o.value === v)) e.add(new Option(v, v));
      e.value = v;
    } else if (e instanceof HTMLInputElement || e instanceof HTMLTextAreaElement) {
      e.value = typeof value === 'string' ? value : '';
    }
  }
}

/** @param {HTMLFormElement} form */
function errorBox(form) {
  const box = form.querySelector('.form-errors');
  if (!(box instanceof HTMLElement)) throw new Error(`#${form.id} has no .form-errors`);
  return box;
}

/** Remove the field errors shown on a form. @param {HTMLFormElement} form */
export function clearFormErrors(form) {
  for (const e of fieldsOf(form)) e.removeAttribute('aria-invalid');
  for (const e of form.querySelectorAll('.field-error')) e.remove();
  const box = errorBox(form);
  box.replaceChildren();
  box.hidden = true;
}

/**
 * Show why a form was refused: each field error under its field, the rest and the summary in the
 * form's error box. The first marked field gets the focus.
 * @param {HTMLFormElement} form
 * @param {string} summary
 * @param {FieldError[]} errors
 */
export function showFormErrors(form, summary, errors) {
  clearFormErrors(form);
  const fields = fieldsOf(form);
  const { byField, other } = placeFieldErrors(
    errors,
    fields.map((e) => e.name),
    (name) => {
      // A field marked data-items="list" or "lines" names its items in its errors.
      const field = fields.find((e) => e.name === name);
      const kind = field?.dataset.items;
      return field && (kind === 'list' || kind === 'lines') ? fieldItems(kind, field.value) : undefined;
    },
  );
  /** @type {HTMLElement | null} */
  let first = null;
  for (const [name, messages] of byField) {
    const field = fields.find((e) => e.name === name);
    if (!field) continue;
    field.setAttribute('aria-invalid', 'true');
    const host = field.closest('label') ?? field.parentElement;
    host?.append(el('span', 'field-error', messages.join('; ')));
    // A field inside a closed <details> would hide its error.
    const details = field.closest('details');
    if (details) details.open = true;
    first ??= field;
  }
  const box = errorBox(form);
  box.append(el('p', '', summary));
  if (byField.size > 0) box.append(el('p', 'hint', 'See the marked fields.'));
  if (other.length > 0) {
    const list = el('ul');
    for (const line of other) list.append(el('li', '', line));
    box.append(list);
  }
  box.hidden = false;
  (first ?? box).scrollIntoView({ block: 'nearest' });
  first?.focus();
}

/**
 * Thrown by a form's submit when its own checks refuse the values (shown like the API's), or when it
 * sent nothing for another reason (`summary`).
 */
export class FormInvalid extends Error {
  /** @param {FieldError[]} errors @param {string} [summary] the form's message instead of the usual one */
  constructor(errors, summary = 'Not sent: some fields need a change.') {
    super('the form has errors');
    this.errors = errors;
    this.summary = summary;
  }
}

/**
 * Handle a form in script: it is never submitted (the CSP says form-action 'none'). While `submit`
 * runs the form's buttons are disabled; what it throws is shown on the form (a 401 goes to the token
 * form instead). `what` says what the request does, for the message when no answer comes.
 * @param {HTMLFormElement} form
 * @param {(values: Fields) => Promise<void>} submit
 * @param {() => {noun: string, creating: boolean, idempotent?: boolean}} what
 */
export function handleForm(form, submit, what) {
  let busy = false;
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    if (busy) return;
    busy = true;
    const buttons = Array.from(form.querySelectorAll('button'));
    for (const b of buttons) b.disabled = true;
    clearFormErrors(form);
    try {
      await submit(formValues(form));
    } catch (err) {
      if (err instanceof FormInvalid) showFormErrors(form, err.summary, err.errors);
      else if (err instanceof ApiError) {
        if (err.status !== 401) {
          const detail = err.problem?.detail || err.message;
          showFormErrors(form, failureSummary(err.status, detail, what()), err.problem?.errors ?? []);
        }
      } else showFormErrors(form, errorText(err), []);
    } finally {
      busy = false;
      for (const b of buttons) b.disabled = false;
    }
  });
}
