import { randomUUID } from 'node:crypto';
import { basename } from 'node:path';
import { checkCommand, Requirement, type TaskCreate } from '@ffleet/shared';
import { asJsonb, type PresetRow, type TaskRow } from '../db/mappers.ts';
import type { StoredStep, tasks } from '../db/schema.ts';

export type Issue = { path: string; message: string };
export type TaskInsert = typeof tasks.$inferInsert;

const step = (
  s: { scriptPath?: string; sidecarPath?: string; importSidecar?: boolean } | null | undefined,
  pre: boolean,
): StoredStep | null =>
  s
    ? {
        scriptPath: { raw: s.scriptPath ?? '', resolved: '' },
        sidecarPath: { raw: s.sidecarPath ?? '', resolved: '' },
        importSidecar: pre ? (s.importSidecar ?? false) : false,
        startedAt: 0,
        finishedAt: 0,
        error: '',
      }
    : null;

export type BuildOptions = {
  source: 'api' | 'watchfolder';
  batchId?: string | null;
  now: number;
  id?: string;
  watchKey?: string | null;
  watchfolderId?: string | null;
};

/**
 * A string field as given on a task, for the preset merge: an empty (or blank) one counts as not
 * given, as forms and clients that send every field send `""` for "unset" (FFmate's presets fill empty
 * fields the same way); `outputFile: ""` used to wipe the preset's output path and fail the task.
 */
const given = (value: string | undefined): string | undefined =>
  value === undefined || value.trim() === '' ? undefined : value;

/** The preset a create body names: an empty or blank `preset` is none, as FFmate reads it. */
export const presetOf = (input: Pick<TaskCreate, 'preset'>): string | undefined => given(input.preset);

const COMMAND_REQUIRED = 'command is required unless a preset with a command is given';

/**
 * buildTaskRow's command checks on a create body that failed its schema (`at`: the body's path, e.g.
 * `tasks.3`), so that answer names a bad command too. A body naming a preset is not checked for a
 * missing command (the preset may have one); a command that is no string is the schema's to report.
 */
export function commandIssuesOf(body: unknown, at = ''): Issue[] {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return [];
  const b = body as Record<string, unknown>;
  const path = at ? `${at}.command` : 'command';
  if (b.command !== undefined && typeof b.command !== 'string') return [];
  const command = given(b.command);
  if (command === undefined) {
    const preset = typeof b.preset === 'string' ? given(b.preset) : b.preset;
    return preset === undefined ? [{ path, message: COMMAND_REQUIRED }] : [];
  }
  const checked = checkCommand(command);
  return checked.ok ? [] : [{ path, message: checked.error }];
}

/**
 * Merge a validated create body with its preset (a field given on the task wins; processing steps are
 * taken whole) and produce the row to insert, or the validation issues (paths relative to the body).
 */
export function buildTaskRow(
  input: TaskCreate,
  preset: PresetRow | null,
  opts: BuildOptions,
): { ok: true; row: TaskInsert } | { ok: false; issues: Issue[] } {
  const issues: Issue[] = [];
  const command = given(input.command) ?? preset?.command ?? input.command;
  if (command === undefined || command.trim() === '') {
    issues.push({ path: 'command', message: COMMAND_REQUIRED });
  } else {
    const checked = checkCommand(command);
    if (!checked.ok) issues.push({ path: 'command', message: checked.error });
  }
  // A preset saved before bare capability prefixes were refused may still hold one: the task would
  // wait forever, so it is refused here too, naming the preset to fix.
  const bare =
    input.requires === undefined
      ? preset?.requires.find((r) => !Requirement.safeParse(r).success)
      : undefined;
  if (bare !== undefined)
    issues.push({
      path: 'preset',
      message: `the preset's requires holds "${bare}", which no agent can offer: fix the preset (PUT /api/v1/presets/{id})`,
    });
  if (issues.length > 0) return { ok: false, issues };

  // A step left out or `null` is the preset's (FFmate takes a task's null as not given); `{}` is a step
  // that runs nothing, so a task can still do without its preset's step.
  const pre = input.preProcessing ?? preset?.preProcessing ?? null;
  const post = input.postProcessing ?? preset?.postProcessing ?? null;
  const presetTaskHooks = (preset?.webhooks ?? []).filter((w) => w.event.startsWith('task.'));
  const inputFile = input.inputFile ?? '';
  const name = given(input.name) ?? (inputFile ? basename(inputFile) || 'task' : 'task');
  return {
    ok: true,
    row: {
      id: opts.id ?? randomUUID(),
      name,
      commandRaw: command!,
      inputRaw: inputFile,
      outputRaw: given(input.outputFile) ?? preset?.outputFile ?? input.outputFile ?? '',
      metadata: input.metadata ?? {},
      status: 'QUEUED',
      priority: input.priority ?? preset?.priority ?? 0,
      source: opts.source,
      preProcessing: step(pre, true),
      postProcessing: step(post, false),
      createdAt: opts.now,
      updatedAt: opts.now,
      presetId: preset?.id ?? null,
      batchId: opts.batchId ?? null,
      webhooks: [...presetTaskHooks, ...(input.webhooks ?? [])],
      requires: input.requires ?? preset?.requires ?? [],
      watchKey: opts.watchKey ?? null,
      watchfolderId: opts.watchfolderId ?? null,
    },
  };
}

/**
 * The row as the database stores and returns it after inserting `row`: column defaults filled in and
 * jsonb values normalised (asJsonb). Equal to what `INSERT … RETURNING *` gives, without reading it.
 */
export function storedTaskRow(row: TaskInsert): TaskRow {
  return {
    id: row.id,
    name: row.name,
    commandRaw: row.commandRaw,
    commandResolved: row.commandResolved ?? '',
    inputRaw: row.inputRaw ?? '',
    inputResolved: row.inputResolved ?? '',
    outputRaw: row.outputRaw ?? '',
    outputResolved: row.outputResolved ?? '',
    metadata: asJsonb(row.metadata ?? {}),
    status: row.status,
    progress: row.progress ?? 0,
    remaining: row.remaining ?? 0,
    error: row.error ?? '',
    priority: row.priority ?? 0,
    source: row.source ?? 'api',
    preProcessing: asJsonb(row.preProcessing ?? null),
    postProcessing: asJsonb(row.postProcessing ?? null),
    startedAt: row.startedAt ?? 0,
    finishedAt: row.finishedAt ?? 0,
    createdAt: row.createdAt ?? 0,
    updatedAt: row.updatedAt ?? 0,
    presetId: row.presetId ?? null,
    batchId: row.batchId ?? null,
    webhooks: asJsonb(row.webhooks ?? []),
    requires: row.requires ?? [],
    attempt: row.attempt ?? 0,
    maxAttempts: row.maxAttempts ?? 3,
    agentId: row.agentId ?? null,
    agentName: row.agentName ?? null,
    leaseToken: row.leaseToken ?? null,
    leaseExpiresAt: row.leaseExpiresAt ?? 0,
    reportSeq: row.reportSeq ?? -1,
    lostLeaseToken: row.lostLeaseToken ?? null,
    lostAttempt: row.lostAttempt ?? 0,
    lostReportSeq: row.lostReportSeq ?? -1,
    lostRun: asJsonb(row.lostRun ?? null),
    cancelRequested: row.cancelRequested ?? false,
    watchKey: row.watchKey ?? null,
    watchfolderId: row.watchfolderId ?? null,
  };
}
