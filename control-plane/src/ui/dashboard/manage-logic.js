// @ts-check
// The pure logic of the dashboard's forms and of its presets, watchfolders and webhooks views: request
// bodies built from form fields (and form fields from the API's objects, for editing), field errors
// placed on the form, delivery attempts described. No DOM, no fetch. manage.js uses it in the browser;
// control-plane/src/ui/dashboard-manage-logic.test.ts tests it in Node, also against the real API.
import { formatDuration, formatTime } from './logic.js';

/** @typedef {import('./logic.js').FieldError} FieldError */

/**
 * A form's values by field name. Field names are the API's paths (`command`, `preProcessing.scriptPath`,
 * `filter.extensions.include`), so the API's field errors find their field. Checkboxes are booleans.
 * @typedef {Record<string, string | boolean>} Fields
 */

/**
 * A request body built from a form, or why it could not be built (as field errors, like the API's).
 * @template T
 * @typedef {{ok: true, body: T} | {ok: false, errors: FieldError[]}} Built
 */

/** @typedef {{event: string, url: string}} DirectWebhook */

/**
 * `POST /api/v1/tasks` as the new-task form sends it: only what was filled in (an empty field leaves
 * the preset's value, or the API's default).
 * @typedef {object} TaskCreateBody
 * @property {string} [name]
 * @property {string} [command]
 * @property {string} [inputFile]
 * @property {string} [outputFile]
 * @property {number} [priority]
 * @property {Record<string, unknown>} [metadata]
 * @property {string} [preset] a preset id
 * @property {string[]} [requires]
 */

/** @typedef {{scriptPath?: string, sidecarPath?: string, importSidecar?: boolean}} StepBody */

/**
 * `POST`/`PUT /api/v1/presets`. A PUT replaces the whole definition, so every field is sent.
 * @typedef {object} PresetBody
 * @property {string} name
 * @property {string} description
 * @property {string} command
 * @property {string} outputFile
 * @property {number} [priority]
 * @property {StepBody | null} preProcessing
 * @property {StepBody | null} postProcessing
 * @property {DirectWebhook[]} webhooks
 * @property {string[]} requires
 */

/**
 * The API's preset object.
 * @typedef {object} Preset
 * @property {string} id
 * @property {string} name
 * @property {string} description
 * @property {string} command
 * @property {string} outputFile
 * @property {number} priority
 * @property {{scriptPath: string, sidecarPath: string, importSidecar: boolean} | null} preProcessing
 * @property {{scriptPath: string, sidecarPath: string} | null} postProcessing
 * @property {DirectWebhook[]} webhooks
 * @property {string[]} requires
 * @property {number} createdAt
 * @property {number} updatedAt
 */

/**
 * `POST`/`PUT /api/v1/watchfolders` (a PUT replaces the whole definition).
 * @typedef {object} WatchfolderBody
 * @property {string} name
 * @property {string} description
 * @property {string} path
 * @property {string} preset
 * @property {number} interval
 * @property {number} growthChecks
 * @property {boolean} suspended
 * @property {{extensions: {include: string[], exclude: string[]}}} filter
 * @property {string | null} agent
 */

/**
 * The API's watchfolder object.
 * @typedef {object} Watchfolder
 * @property {string} id
 * @property {string} name
 * @property {string} description
 * @property {string} path
 * @property {string} preset a preset id
 * @property {number} interval seconds
 * @property {number} growthChecks
 * @property {boolean} suspended
 * @property {{extensions: {include: string[], exclude: string[]}}} filter
 * @property {string | null} agent the agent (name or id) pinned to scan it; null = any
 * @property {{id: string, name: string} | null} assignedAgent the agent scanning it now
 * @property {number} lastCheck Unix ms, 0 = never
 * @property {string} error the last scan's error, "" without one
 * @property {number} createdAt
 * @property {number} updatedAt
 */

/**
 * `POST`/`PUT /api/v1/webhooks`. Without `secret` a PUT keeps the one set; `null` removes it.
 * @typedef {{event: string, url: string, secret?: string | null}} WebhookBody
 */

/**
 * The API's webhook object (the secret is write-only).
 * @typedef {{id: string, event: string, url: string, hasSecret: boolean, createdAt: number, updatedAt: number}} Webhook
 */

/**
 * One recorded delivery attempt (`GET /api/v1/webhooks/executions`).
 * @typedef {object} Execution
 * @property {string} id
 * @property {string} deliveryId
 * @property {string | null} webhook the global webhook's id; null for a task's or preset's direct webhook
 * @property {'global' | 'direct'} source
 * @property {string} event
 * @property {string} url
 * @property {number} attempt 1-based, per delivery
 * @property {{method: string, headers: Record<string, string>, body: string}} request
 * @property {{status: number, headers: Record<string, string>, body: string} | null} response null when none came
 * @property {string} error "" when delivered
 * @property {boolean} success
 * @property {number} durationMs
 * @property {number} createdAt
 */

/** The events a global webhook can subscribe to (the spec's 14). */
export const WEBHOOK_EVENTS = Object.freeze([
  'task.created',
  'task.updated',
  'task.deleted',
  'batch.created',
  'batch.finished',
  'preset.created',
  'preset.updated',
  'preset.deleted',
  'watchfolder.created',
  'watchfolder.updated',
  'watchfolder.deleted',
  'webhook.created',
  'webhook.updated',
  'webhook.deleted',
]);

/** A new watchfolder's scan settings until the operator changes them (FFmate's examples use these). */
export const WATCHFOLDER_DEFAULTS = Object.freeze({ interval: '10', growthChecks: '3' });

// ---------------------------------------------------------------------------------------------------
// Reading fields

/** A text field's value ("" when missing or a checkbox). @param {Fields} f @param {string} name */
const text = (f, name) => {
  const v = f[name];
  return typeof v === 'string' ? v : '';
};
/** A checkbox's value. @param {Fields} f @param {string} name */
const flag = (f, name) => f[name] === true;

/**
 * Items written one after another, separated by commas, spaces or new lines: `gpu, encoder:hevc_nvenc`.
 * @param {string} value
 */
export function parseList(value) {
  return value.split(/[\s,]+/).filter((s) => s !== '');
}

/**
 * File extensions as an operator writes them: `mp4, .MOV mxf` → `['mp4', 'MOV', 'mxf']` (the API wants
 * them without the dot; matching ignores case).
 * @param {string} value
 */
export function parseExtensions(value) {
  return parseList(value)
    .map((e) => e.replace(/^\.+/, ''))
    .filter((e) => e !== '');
}

/**
 * A whole number typed in a field: blank → undefined; anything but an optional minus and digits (a
 * fraction, `1e3`, text) → an error at `path`.
 * @param {string} value
 * @param {string} path
 * @returns {{ok: true, value: number | undefined} | {ok: false, error: FieldError}}
 */
export function parseInteger(value, path) {
  const v = value.trim();
  if (v === '') return { ok: true, value: undefined };
  if (!/^[-+]?[0-9]{1,15}$/.test(v)) return { ok: false, error: { path, message: 'must be a whole number' } };
  return { ok: true, value: Number(v) };
}

/**
 * Metadata typed as JSON: blank → undefined; otherwise it must parse and be an object (`{…}`).
 * @param {string} value
 * @param {string} [path]
 * @returns {{ok: true, value: Record<string, unknown> | undefined} | {ok: false, error: FieldError}}
 */
export function parseMetadata(value, path = 'metadata') {
  if (value.trim() === '') return { ok: true, value: undefined };
  let parsed;
  try {
    parsed = JSON.parse(value);
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    return { ok: false, error: { path, message: `is not valid JSON: ${why}` } };
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    const what = parsed === null ? 'null' : Array.isArray(parsed) ? 'an array' : `a ${typeof parsed}`;
    return {
      ok: false,
      error: { path, message: `must be a JSON object, like {"project": "x"}, not ${what}` },
    };
  }
  return { ok: true, value: /** @type {Record<string, unknown>} */ (parsed) };
}

/**
 * Direct webhooks, one a line: `task.updated http://127.0.0.1:8080/hook`. Blank lines are skipped; a line that is
 * not an event and a URL is an error at `webhooks.<item>`.
 * @param {string} value
 * @param {string} [path]
 * @returns {{ok: true, value: DirectWebhook[]} | {ok: false, errors: FieldError[]}}
 */
export function parseDirectWebhooks(value, path = 'webhooks') {
  /** @type {DirectWebhook[]} */
  const out = [];
  /** @type {FieldError[]} */
  const errors = [];
  const lines = value.split(/\r\n|\r|\n/).filter((l) => l.trim() !== '');
  lines.forEach((line, i) => {
    const parts = line.trim().split(/\s+/);
    if (parts.length !== 2) {
      errors.push({
        path: `${path}.${i}`,
        message: 'needs an event and a URL, like task.updated http://127.0.0.1:8080/hook',
      });
      return;
    }
    out.push({ event: /** @type {string} */ (parts[0]), url: /** @type {string} */ (parts[1]) });
  });
  return errors.length > 0 ? { ok: false, errors } : { ok: true, value: out };
}

/** The direct webhooks as the form shows them: one `event URL` a line. @param {DirectWebhook[]} hooks */
export const directWebhooksText = (hooks) => hooks.map((w) => `${w.event} ${w.url}`).join('\n');

// ---------------------------------------------------------------------------------------------------
// Request bodies

/**
 * The new-task form's body: blank fields are left out (the preset's value, or the API's default, then
 * applies), text is trimmed, `requires` is a list, `metadata` JSON text.
 * @param {Fields} f
 * @returns {Built<TaskCreateBody>}
 */
export function taskBody(f) {
  /** @type {FieldError[]} */
  const errors = [];
  /** @type {TaskCreateBody} */
  const body = {};
  for (const name of /** @type {const} */ (['name', 'command', 'inputFile', 'outputFile', 'preset'])) {
    const v = text(f, name).trim();
    if (v !== '') body[name] = v;
  }
  const priority = parseInteger(text(f, 'priority'), 'priority');
  if (!priority.ok) errors.push(priority.error);
  else if (priority.value !== undefined) body.priority = priority.value;
  const requires = parseList(text(f, 'requires'));
  if (requires.length > 0) body.requires = requires;
  const metadata = parseMetadata(text(f, 'metadata'));
  if (!metadata.ok) errors.push(metadata.error);
  else if (metadata.value !== undefined) body.metadata = metadata.value;
  return errors.length > 0 ? { ok: false, errors } : { ok: true, body };
}

/**
 * A processing step from its fields (`<prefix>.scriptPath`, …): null when nothing is filled in, else
 * the filled-in fields.
 * @param {Fields} f
 * @param {'preProcessing' | 'postProcessing'} prefix
 * @returns {StepBody | null}
 */
function stepBody(f, prefix) {
  /** @type {StepBody} */
  const step = {};
  const script = text(f, `${prefix}.scriptPath`).trim();
  const sidecar = text(f, `${prefix}.sidecarPath`).trim();
  if (script !== '') step.scriptPath = script;
  if (sidecar !== '') step.sidecarPath = sidecar;
  if (prefix === 'preProcessing' && flag(f, `${prefix}.importSidecar`)) step.importSidecar = true;
  return Object.keys(step).length > 0 ? step : null;
}

/**
 * The preset form's body, for create and for the PUT that replaces a preset: every field is sent
 * (an empty list or step clears it).
 * @param {Fields} f
 * @returns {Built<PresetBody>}
 */
export function presetBody(f) {
  /** @type {FieldError[]} */
  const errors = [];
  const priority = parseInteger(text(f, 'priority'), 'priority');
  if (!priority.ok) errors.push(priority.error);
  const webhooks = parseDirectWebhooks(text(f, 'webhooks'));
  if (!webhooks.ok) errors.push(...webhooks.errors);
  if (!priority.ok || !webhooks.ok) return { ok: false, errors };
  /** @type {PresetBody} */
  const body = {
    name: text(f, 'name').trim(),
    description: text(f, 'description').trim(),
    command: text(f, 'command').trim(),
    outputFile: text(f, 'outputFile').trim(),
    preProcessing: stepBody(f, 'preProcessing'),
    postProcessing: stepBody(f, 'postProcessing'),
    webhooks: webhooks.value,
    requires: parseList(text(f, 'requires')),
  };
  if (priority.value !== undefined) body.priority = priority.value;
  return { ok: true, body };
}

/**
 * A preset's form fields, for editing it.
 * @param {Preset} p
 * @returns {Fields}
 */
export function presetFields(p) {
  return {
    name: p.name,
    description: p.description,
    command: p.command,
    outputFile: p.outputFile,
    priority: String(p.priority),
    requires: p.requires.join(', '),
    'preProcessing.scriptPath': p.preProcessing?.scriptPath ?? '',
    'preProcessing.sidecarPath': p.preProcessing?.sidecarPath ?? '',
    'preProcessing.importSidecar': p.preProcessing?.importSidecar ?? false,
    'postProcessing.scriptPath': p.postProcessing?.scriptPath ?? '',
    'postProcessing.sidecarPath': p.postProcessing?.sidecarPath ?? '',
    webhooks: directWebhooksText(p.webhooks),
  };
}

/** Does the preset use its advanced fields (processing steps, direct webhooks)? @param {Preset} p */
export const presetHasAdvanced = (p) =>
  p.preProcessing !== null || p.postProcessing !== null || p.webhooks.length > 0;

/**
 * The watchfolder form's body (create, or the PUT that replaces it). `interval` and `growthChecks` are
 * required whole numbers; an empty agent means any agent (`null`).
 * @param {Fields} f
 * @returns {Built<WatchfolderBody>}
 */
export function watchfolderBody(f) {
  /** @type {FieldError[]} */
  const errors = [];
  /** @param {string} name */
  const required = (name) => {
    const r = parseInteger(text(f, name), name);
    if (!r.ok) errors.push(r.error);
    else if (r.value === undefined) errors.push({ path: name, message: 'is required' });
    return r.ok ? (r.value ?? 0) : 0;
  };
  const interval = required('interval');
  const growthChecks = required('growthChecks');
  // A select: "" is its "choose a preset" line, which the API would call a too short string.
  if (text(f, 'preset') === '')
    errors.push({ path: 'preset', message: 'choose the preset its tasks are made from' });
  if (errors.length > 0) return { ok: false, errors };
  const agent = text(f, 'agent').trim();
  return {
    ok: true,
    body: {
      name: text(f, 'name').trim(),
      description: text(f, 'description').trim(),
      path: text(f, 'path').trim(),
      preset: text(f, 'preset'),
      interval,
      growthChecks,
      suspended: flag(f, 'suspended'),
      filter: {
        extensions: {
          include: parseExtensions(text(f, 'filter.extensions.include')),
          exclude: parseExtensions(text(f, 'filter.extensions.exclude')),
        },
      },
      agent: agent === '' ? null : agent,
    },
  };
}

/**
 * A watchfolder's form fields, for editing it.
 * @param {Watchfolder} w
 * @returns {Fields}
 */
export function watchfolderFields(w) {
  return {
    name: w.name,
    description: w.description,
    path: w.path,
    preset: w.preset,
    interval: String(w.interval),
    growthChecks: String(w.growthChecks),
    suspended: w.suspended,
    'filter.extensions.include': w.filter.extensions.include.join(', '),
    'filter.extensions.exclude': w.filter.extensions.exclude.join(', '),
    agent: w.agent ?? '',
  };
}

/**
 * The webhook form's body. The secret is write-only: a blank one is left out (a PUT keeps the one set),
 * `removeSecret` sends `null` (removes it).
 * @param {Fields} f
 * @returns {Built<WebhookBody>}
 */
export function webhookBody(f) {
  const secret = text(f, 'secret');
  const remove = flag(f, 'removeSecret');
  if (remove && secret !== '') {
    return { ok: false, errors: [{ path: 'secret', message: 'type a new secret or remove it, not both' }] };
  }
  /** @type {WebhookBody} */
  const body = { event: text(f, 'event'), url: text(f, 'url').trim() };
  if (remove) body.secret = null;
  else if (secret !== '') body.secret = secret;
  return { ok: true, body };
}

/**
 * A webhook's form fields, for editing it (the secret is never shown: the API does not send it).
 * @param {Webhook} w
 * @returns {Fields}
 */
export function webhookFields(w) {
  return { event: w.event, url: w.url, secret: '', removeSecret: false };
}

// ---------------------------------------------------------------------------------------------------
// Saving an edit: changes made elsewhere meanwhile

/**
 * An edit form is saved only when the item is as it was when the form opened (its `updatedAt`); else
 * nothing is sent and the form is merged with the item as it is now: a field the operator left as it
 * was takes the value set elsewhere (`taken`), a field the operator changed keeps the operator's value
 * (`clashes` when it was changed elsewhere too, to something else). The next Save compares with the
 * item as it is now, so it overwrites knowingly what the message named.
 * @param {Fields} opened the item's fields when the form opened
 * @param {Fields} mine the form's values
 * @param {Fields} current the item's fields now
 * @returns {{values: Fields, taken: string[], clashes: string[]}}
 */
export function mergeEdit(opened, mine, current) {
  /** @type {Fields} */
  const values = { ...mine };
  /** @type {string[]} */
  const taken = [];
  /** @type {string[]} */
  const clashes = [];
  for (const name of Object.keys(current)) {
    const now = current[name];
    if (now === undefined || now === opened[name]) continue; // not changed elsewhere
    if (!(name in mine) || mine[name] === opened[name]) {
      values[name] = now;
      taken.push(name);
    } else if (mine[name] !== now) {
      clashes.push(name);
    }
  }
  return { values, taken, clashes };
}

/** A field's value as a message quotes it. @param {string | boolean | undefined} v */
function quoted(v) {
  if (typeof v === 'boolean') return v ? 'on' : 'off';
  if (v === undefined || v === '') return 'empty';
  const one = v.replace(/\s+/g, ' ').trim();
  return `“${one.length > 120 ? `${one.slice(0, 119)}…` : one}”`;
}

/**
 * What the form says when an edit was not saved because the item changed elsewhere: the summary, and
 * one note per field the merge touched (shown under the field).
 * @param {string} noun "preset"
 * @param {number} changedAt the item's `updatedAt` now
 * @param {{taken: string[], clashes: string[]}} merge from mergeEdit
 * @param {Fields} current the item's fields now
 * @param {number} [now]
 * @returns {{summary: string, errors: FieldError[]}}
 */
export function editConflict(noun, changedAt, merge, current, now = Date.now()) {
  const at = formatTime(changedAt, now);
  /** @type {FieldError[]} */
  const errors = [
    ...merge.clashes.map((path) => ({
      path,
      message: `changed elsewhere to ${quoted(current[path])}: Save again to replace it with yours`,
    })),
    ...merge.taken.map((path) => ({ path, message: `changed elsewhere: now ${quoted(current[path])}` })),
  ];
  const what =
    errors.length > 0
      ? ' The marked fields now show what changed; where you had changed a field too, your value is kept.'
      : ' None of the values this form shows differ.';
  return {
    summary: `Not saved: this ${noun} was changed elsewhere since you opened it (at ${at}).${what} Check the form, then Save again to save it as it is now, or Cancel.`,
    errors,
  };
}

// ---------------------------------------------------------------------------------------------------
// A form's failed request

/**
 * The first line of a form whose request failed. Without an answer (status 0: the connection failed or
 * dropped) the server may have done it all the same: a create is not refused, it is unknown.
 * @param {number} status the HTTP status; 0 for no answer
 * @param {string} detail the API's detail (unused without an answer)
 * @param {{noun: string, creating: boolean, idempotent?: boolean}} what what the form sends; `idempotent`:
 *   the same values sent again are not created twice (an Idempotency-Key)
 */
export function failureSummary(status, detail, what) {
  if (status !== 0) return `Refused (HTTP ${status}): ${detail}`;
  const lost = 'No answer from the control plane (the connection failed or dropped)';
  if (!what.creating)
    return `${lost}: the change may have been saved. Check the list before sending it again.`;
  const again = what.idempotent ? ' (sent again without a change, it is not created twice)' : '';
  return `${lost}: the ${what.noun} may have been created. Check the list before sending again${again}.`;
}

// ---------------------------------------------------------------------------------------------------
// Field errors on a form

/**
 * The items of a field holding a list, as the body builders split it: `list` fields (`requires`,
 * extensions) by commas and spaces, `lines` fields (direct webhooks) by non-blank lines.
 * @param {'list' | 'lines'} kind
 * @param {string} value
 */
export function fieldItems(kind, value) {
  if (kind === 'list') return parseList(value);
  return value
    .split(/\r\n|\r|\n/)
    .map((l) => l.trim())
    .filter((l) => l !== '');
}

/**
 * Place field errors (the API's or the form's own) on the form's fields: each goes to the field whose
 * name is its path or the longest prefix of it (`requires.2` → `requires`, `webhooks.0.url` →
 * `webhooks`), and what the field name does not say is put in front: the item itself when `itemsOf`
 * knows the field's items (`“gpu!”: …`, `“nope.event http://127.0.0.1/x”, event: …`), else its number
 * (`item 3, url: …`). Errors no field takes are returned as lines (`path: message`).
 * @param {FieldError[]} errors
 * @param {Iterable<string>} names the form's field names
 * @param {(name: string) => string[] | undefined} [itemsOf] the items of a list field
 * @returns {{byField: Map<string, string[]>, other: string[]}}
 */
export function placeFieldErrors(errors, names, itemsOf = () => undefined) {
  const fields = [...names].filter((n) => n !== '');
  /** @type {Map<string, string[]>} */
  const byField = new Map();
  /** @type {string[]} */
  const other = [];
  for (const e of errors) {
    let best = '';
    for (const n of fields) {
      if ((e.path === n || e.path.startsWith(`${n}.`)) && n.length > best.length) best = n;
    }
    if (best === '') {
      other.push(e.path ? `${e.path}: ${e.message}` : e.message);
      continue;
    }
    const rest = e.path
      .slice(best.length + 1)
      .split('.')
      .filter((p) => p !== '');
    const where = rest.map((p, i) => {
      if (!/^[0-9]+$/.test(p)) return p;
      const item = i === 0 ? itemsOf(best)?.[Number(p)] : undefined;
      return item !== undefined ? `“${item}”` : `item ${Number(p) + 1}`;
    });
    const list = byField.get(best) ?? [];
    list.push(where.length > 0 ? `${where.join(', ')}: ${e.message}` : e.message);
    byField.set(best, list);
  }
  return { byField, other };
}

// ---------------------------------------------------------------------------------------------------
// Lists

/**
 * The query of one page of a list: `page`, `perPage`, and each filter that is set.
 * @param {number} page 0-based
 * @param {number} perPage
 * @param {Record<string, string>} [filters] empty values are left out
 */
export function listQuery(page, perPage, filters = {}) {
  const q = new URLSearchParams({ page: String(page), perPage: String(perPage) });
  for (const [k, v] of Object.entries(filters)) if (v !== '') q.set(k, v);
  return q.toString();
}

/**
 * What the presets table says when it has no rows: none at all, or none whose name contains the filter.
 * @param {string} name the name filter ("" for none)
 */
export function presetsEmptyText(name) {
  const v = name.trim();
  return v === '' ? 'No presets yet.' : `No preset’s name contains “${v}”.`;
}

/**
 * A list page to show after a load: the page asked for, or, when it came back empty although the list
 * is not (rows deleted meanwhile), the last page that has rows.
 * @param {number} page
 * @param {number} perPage
 * @param {number} total
 * @param {number} count rows the page came back with
 * @returns {number | null} the page to load instead, or null to keep this one
 */
export function pageToReload(page, perPage, total, count) {
  if (page === 0 || count > 0) return null;
  return Math.max(0, Math.ceil(total / perPage) - 1);
}

/**
 * Must the preset names (for the watchfolders table) be loaded again? When a watchfolder names a preset
 * not known yet, and when they are older than `maxAgeMs` (a rename elsewhere shows at the next refresh);
 * `loadedAt` 0 means never (or a preset was saved here since).
 * @param {string[]} presetIds the presets the watchfolders listed name
 * @param {{has: (id: string) => boolean}} known
 * @param {number} loadedAt
 * @param {number} now
 * @param {number} maxAgeMs
 */
export function presetNamesStale(presetIds, known, loadedAt, now, maxAgeMs) {
  return loadedAt <= 0 || now - loadedAt >= maxAgeMs || presetIds.some((id) => !known.has(id));
}

/**
 * The line beside a list's title: when it was refreshed, after a note of an action (a redelivery
 * queued) while the note is fresh.
 * @param {number} refreshedAt Unix ms
 * @param {{text: string, until: number} | null} note
 * @param {number} [now]
 */
export function listStateLine(refreshedAt, note, now = Date.now()) {
  const refreshed = `refreshed ${formatTime(refreshedAt, now)}`;
  return note && now < note.until ? `${note.text} · ${refreshed}` : refreshed;
}

/**
 * A watchfolder's state at a glance, and its badge's tone.
 * @param {Pick<Watchfolder, 'suspended' | 'error' | 'lastCheck'>} w
 * @returns {{label: string, tone: 'ok' | 'bad' | 'warn' | 'idle'}}
 */
export function watchfolderState(w) {
  if (w.suspended) return { label: 'suspended', tone: 'warn' };
  if (w.error !== '') return { label: 'error', tone: 'bad' };
  if (w.lastCheck <= 0) return { label: 'not scanned yet', tone: 'idle' };
  return { label: 'watching', tone: 'ok' };
}

/**
 * A watchfolder's extension filter in words: `all files`, `mp4, mov`, `all but tmp`.
 * @param {Watchfolder['filter']} filter
 */
export function filterLabel(filter) {
  const { include, exclude } = filter.extensions;
  const parts = [];
  if (include.length > 0) parts.push(include.join(', '));
  if (exclude.length > 0) parts.push(`${include.length > 0 ? 'not' : 'all but'} ${exclude.join(', ')}`);
  return parts.length > 0 ? parts.join('; ') : 'all files';
}

// ---------------------------------------------------------------------------------------------------
// Delivery attempts

/**
 * A short duration in milliseconds: `85 ms`, `1.2 s`, `10s`, `1m 05s`; `—` when unknown.
 * @param {number} ms
 */
export function formatMs(ms) {
  if (!Number.isFinite(ms) || ms < 0) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 10_000) return `${(Math.floor(ms / 100) / 10).toFixed(1)} s`;
  return formatDuration(ms / 1000);
}

/**
 * What the executions table shows of one attempt.
 * @param {Execution} e
 * @returns {{response: string, duration: string, result: 'delivered' | 'failed', error: string}}
 */
export function executionSummary(e) {
  return {
    response: e.response ? `HTTP ${e.response.status}` : 'no response',
    duration: formatMs(e.durationMs),
    result: e.success ? 'delivered' : 'failed',
    error: e.success ? '' : e.error || (e.response ? `HTTP ${e.response.status}` : 'failed'),
  };
}

/** A body as text, pretty-printed when it is JSON. @param {string} body */
function prettyBody(body) {
  if (body === '') return '(empty body)';
  try {
    return JSON.stringify(JSON.parse(body), null, 2);
  } catch {
    return body;
  }
}

/** @param {Record<string, string>} headers */
const headerLines = (headers) => Object.entries(headers).map(([k, v]) => `${k}: ${v}`);

/**
 * One attempt in full, as plain text: the request (method, URL, headers, body), then the response or
 * the error.
 * @param {Execution} e
 */
export function executionDetails(e) {
  const lines = [
    `${e.request.method} ${e.url}`,
    ...headerLines(e.request.headers),
    '',
    prettyBody(e.request.body),
    '',
  ];
  if (e.response) {
    lines.push(
      `→ HTTP ${e.response.status} after ${formatMs(e.durationMs)}`,
      ...headerLines(e.response.headers),
    );
    lines.push('', prettyBody(e.response.body));
  } else {
    lines.push(`→ no response after ${formatMs(e.durationMs)}`);
  }
  if (e.error !== '') lines.push('', `error: ${e.error}`);
  return lines.join('\n');
}
