// @ts-check
// The new-task form (POST /api/v1/tasks), on the tasks tab. Its preset select is filled from
// GET /api/v1/presets each time the form opens; a chosen preset's values show as the placeholders of
// the fields it fills.
import { api, apiList, byId, clearFormErrors, FormInvalid, handleForm, randomKey, report } from './dom.js';
import { taskBody } from './manage-logic.js';

/** @typedef {import('./logic.js').Task} Task */
/** @typedef {import('./manage-logic.js').Preset} Preset */

/** The most presets one select lists (the API's largest page). */
const CATALOG = 1000;

const form = /** @type {HTMLFormElement} */ (byId('task-form'));
const presetSelect = /** @type {HTMLSelectElement} */ (byId('task-preset'));
const presetHint = byId('task-preset-hint');

/** @param {string} name */
function field(name) {
  const e = form.elements.namedItem(name);
  if (!(e instanceof HTMLInputElement || e instanceof HTMLTextAreaElement))
    throw new Error(`no field ${name}`);
  return e;
}
const command = field('command');
const outputFile = field('outputFile');
const priority = field('priority');
const requires = field('requires');
/** Each field's own placeholder, shown when no preset fills it. */
const placeholders = new Map([command, outputFile, priority, requires].map((e) => [e, e.placeholder]));

/** @type {Map<string, Preset>} */
let presets = new Map();
/** @type {(task: Task) => void} */
let created = () => {};
/**
 * The Idempotency-Key of the body last sent: sending the same body again (after a lost response) with
 * it returns the task created the first time instead of creating a second one.
 * @type {{key: string, body: string} | null}
 */
let lastSent = null;
let loadSeq = 0;

/** @param {(task: Task) => void} onCreated called with each task the form creates */
export function initTaskForm(onCreated) {
  created = onCreated;
}

/**
 * Show the form (with `presetId` chosen, when given) and load the presets into its select.
 * @param {string} [presetId]
 */
export async function openTaskForm(presetId) {
  if (form.hidden) {
    form.reset();
    clearFormErrors(form);
  }
  form.hidden = false;
  form.scrollIntoView({ block: 'nearest' });
  (presetId ? field('inputFile') : command).focus();
  await loadPresets(presetId ?? presetSelect.value);
}

export function closeTaskForm() {
  loadSeq++;
  form.hidden = true;
  form.reset();
  clearFormErrors(form);
  forgetPresets('');
  lastSent = null;
}

/**
 * Forget the presets (server data), keeping only the chosen one's id as the select's value.
 * @param {string} chosen
 */
function forgetPresets(chosen) {
  presets = new Map();
  const kept = new Option(
    chosen === '' ? 'none' : 'the chosen preset (listed again once a token is given)',
    chosen,
  );
  presetSelect.replaceChildren(kept);
  presetSelect.value = chosen;
  showPreset();
}

/**
 * The token was refused: the presets go (server data), what the operator typed stays, the chosen
 * preset too (by its id). resumeTaskForm lists the presets again once a token is given.
 */
export function suspendTaskForm() {
  if (form.hidden) return closeTaskForm();
  loadSeq++;
  forgetPresets(presetSelect.value);
}

/** A token was given: a form left open (suspendTaskForm) gets its presets again. */
export function resumeTaskForm() {
  if (!form.hidden) loadPresets(presetSelect.value);
}

/** @param {string} choose the preset to select once loaded */
async function loadPresets(choose) {
  const seq = ++loadSeq;
  try {
    /** @type {{items: Preset[], total: number}} */
    const { items, total } = await apiList(`/api/v1/presets?perPage=${CATALOG}`);
    if (seq !== loadSeq) return;
    presets = new Map(items.map((p) => [p.id, p]));
    // Names need not be unique: a repeated one is told apart by the start of its id.
    const count = new Map();
    for (const p of items) count.set(p.name, (count.get(p.name) ?? 0) + 1);
    const options = items.map(
      (p) => new Option(count.get(p.name) > 1 ? `${p.name} (${p.id.slice(0, 8)})` : p.name, p.id),
    );
    const none = new Option(items.length > 0 ? 'none' : 'none (no presets yet)', '');
    presetSelect.replaceChildren(none, ...options);
    if (total > items.length) {
      const more = new Option(`… and ${total - items.length} more, not listed`, '');
      more.disabled = true;
      presetSelect.append(more);
    }
    presetSelect.value = presets.has(choose) ? choose : '';
    showPreset();
  } catch (err) {
    report(err, 'Loading the presets');
  }
}

/** Show what the chosen preset fills in: as placeholders, so a typed value visibly overrides it. */
function showPreset() {
  const p = presets.get(presetSelect.value);
  /** @type {[HTMLInputElement | HTMLTextAreaElement, string][]} */
  const filled = p
    ? [
        [command, p.command],
        [outputFile, p.outputFile],
        [priority, String(p.priority)],
        [requires, p.requires.join(', ')],
      ]
    : [];
  for (const [e, own] of placeholders) {
    const fromPreset = filled.find(([f]) => f === e)?.[1] ?? '';
    e.placeholder = fromPreset !== '' ? `from the preset: ${fromPreset}` : own;
  }
  presetHint.textContent = p ? p.description || 'Empty fields take the preset’s values.' : '';
}

presetSelect.addEventListener('change', showPreset);
byId('task-form-cancel').addEventListener('click', closeTaskForm);
form.addEventListener('keydown', (e) => {
  if (e.key !== 'Escape' || e.defaultPrevented || e.isComposing) return;
  e.preventDefault();
  closeTaskForm();
  byId('task-new').focus();
});

handleForm(
  form,
  async (values) => {
    const built = taskBody(values);
    if (!built.ok) throw new FormInvalid(built.errors);
    const body = JSON.stringify(built.body);
    if (lastSent?.body !== body) lastSent = { key: randomKey(), body };
    const res = await api('POST', '/api/v1/tasks', {
      body: built.body,
      headers: { 'Idempotency-Key': lastSent.key },
    });
    /** @type {Task} */
    const task = await res.json();
    closeTaskForm();
    created(task);
  },
  () => ({ noun: 'task', creating: true, idempotent: true }),
);
