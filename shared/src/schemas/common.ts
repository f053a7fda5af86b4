import { z } from 'zod';

/** Every task status. `QUEUED` is the spec's "queued"; `DONE_CANCELED` is ffleet's (and FFmate's) cancel state. */
export const TaskStatus = z.enum([
  'QUEUED',
  'PRE_PROCESSING',
  'RUNNING',
  'DONE_SUCCESSFUL',
  'DONE_ERROR',
  'DONE_CANCELED',
]);
export type TaskStatus = z.infer<typeof TaskStatus>;

/** Statuses a task never leaves on its own. */
export const DONE_STATUSES: readonly TaskStatus[] = ['DONE_SUCCESSFUL', 'DONE_ERROR', 'DONE_CANCELED'];
export const isDoneStatus = (s: string): boolean => (DONE_STATUSES as readonly string[]).includes(s);

/** The spec's 14 global webhook events. */
export const EventName = z.enum([
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
export type EventName = z.infer<typeof EventName>;

/** Events a direct webhook (on a task or preset) may subscribe to. */
export const DirectWebhookEvent = z.enum([
  'task.created',
  'task.updated',
  'task.deleted',
  'preset.created',
  'preset.updated',
  'preset.deleted',
]);
export type DirectWebhookEvent = z.infer<typeof DirectWebhookEvent>;
export const TaskWebhookEvent = z.enum(['task.created', 'task.updated', 'task.deleted']);
export type TaskWebhookEvent = z.infer<typeof TaskWebhookEvent>;

/** Why `v` is not a deliverable webhook URL, or null when it is. */
function httpUrlProblem(v: string): string | null {
  // The URL parser drops leading/trailing whitespace and tabs/newlines anywhere, so the stored text
  // would not be the URL that is called: reject rather than silently store something else.
  if (v !== v.trim()) return 'must not have leading or trailing whitespace';
  if (/[\u0000-\u001f\u007f]/.test(v)) return 'must not contain control characters';
  let u: URL;
  try {
    u = new URL(v);
  } catch {
    return 'must be an absolute http(s) URL';
  }
  if ((u.protocol !== 'http:' && u.protocol !== 'https:') || u.hostname.length === 0) {
    return 'must be an absolute http(s) URL';
  }
  // fetch refuses URLs with credentials, and the password would show in every response and record.
  if (u.username !== '' || u.password !== '') {
    return 'must not contain a user name or password (user:pass@); use a secret or a token in the path or query';
  }
  if (u.port === '0') return 'must not use port 0';
  return null;
}

/**
 * An absolute http(s) URL a webhook can be delivered to: no credentials (`user:pass@`), no port 0, no
 * surrounding whitespace or control characters. Loopback and private addresses are valid (studio
 * networks).
 */
export const HttpUrl = z
  .string()
  .max(2048)
  .superRefine((v, ctx) => {
    const problem = httpUrlProblem(v);
    if (problem) ctx.addIssue({ code: 'custom', message: problem });
  });

/** A direct webhook as attached to a task or preset. */
export const DirectWebhook = z.strictObject({ event: DirectWebhookEvent, url: HttpUrl });
export type DirectWebhook = z.infer<typeof DirectWebhook>;

/** `{raw, resolved}` — a value with wildcards and its substituted form (`""` until resolved). */
export const RawResolved = z.object({ raw: z.string(), resolved: z.string() });
export type RawResolved = z.infer<typeof RawResolved>;

/** Unix milliseconds; 0 = not set. */
export const Millis = z.number().int().nonnegative();

/** The name of a preset or watchfolder: what operators pick it by in lists and logs, so never blank. */
export const ResourceName = z
  .string()
  .min(1)
  .max(200)
  .refine((s) => s.trim() !== '', { message: 'must not be blank' });

export const Uuid = z.string().uuid();

/** Free-form JSON object. */
export const JsonObject = z.record(z.string(), z.unknown());
export type JsonObject = z.infer<typeof JsonObject>;

/** Pagination query: `page` 0-based, `perPage` 1..1000 (default 100). */
export const MAX_PER_PAGE = 1000;
/** A whole number in a query string: decimal digits only (no sign, blank, hex, fraction or exponent). */
const QueryInt = z
  .string()
  .regex(/^[0-9]{1,15}$/, 'must be a whole number written in decimal digits')
  .transform(Number);
export const PageQuery = z.object({
  page: QueryInt.pipe(z.number().int().min(0)).default(0),
  perPage: QueryInt.pipe(z.number().int().min(1).max(MAX_PER_PAGE)).default(100),
});
export type PageQuery = z.infer<typeof PageQuery>;

/** RFC 9457 problem details as ffleet sends them. */
export const Problem = z.object({
  type: z.string(),
  title: z.string(),
  status: z.number().int(),
  detail: z.string(),
  code: z.string(),
  errors: z.array(z.object({ path: z.string(), message: z.string() })).optional(),
});
export type Problem = z.infer<typeof Problem>;

/** A capability/label token used by `requires` and agent labels. */
export const Label = z
  .string()
  .min(1)
  .max(100)
  .regex(/^[A-Za-z0-9_.:\-/]+$/, 'letters, digits and _ . : - / only');

/**
 * Prefixes of the capabilities an agent offers by itself (its name, what its ffmpeg can do on the box,
 * its platform): a label may not claim one, or a box without NVENC could offer `encoder:h264_nvenc`
 * and one env file copied between boxes (`agent:encode-01`) would pin that box's tasks to all of them.
 */
export const RESERVED_LABEL_PREFIXES = ['agent:', 'encoder:', 'hwaccel:', 'os:', 'arch:'] as const;

/** Why `label` may not be an agent label, or null when it may. */
export function reservedLabelProblem(label: string): string | null {
  const prefix = RESERVED_LABEL_PREFIXES.find((p) => label.toLowerCase().startsWith(p));
  return prefix
    ? `"${label}": labels may not start with ${prefix} (the agent offers ${RESERVED_LABEL_PREFIXES.join(', ')} capabilities itself)`
    : null;
}

const EXAMPLE_AFTER: Record<string, string> = {
  'agent:': 'encode-01',
  'encoder:': 'libx264',
  'hwaccel:': 'cuda',
  'os:': 'linux',
  'arch:': 'amd64',
};

/**
 * One item of a task's or preset's `requires`: a label, or a capability an agent offers by itself with
 * its name (`encoder:libx264`). A reserved prefix alone (`agent:`) names nothing any agent offers: the
 * task would wait forever.
 */
export const Requirement = Label.superRefine((r, ctx) => {
  const prefix = r.toLowerCase();
  if (RESERVED_LABEL_PREFIXES.some((p) => prefix === p))
    ctx.addIssue({
      code: 'custom',
      message: `"${r}" names nothing after its prefix (e.g. ${prefix}${EXAMPLE_AFTER[prefix] ?? 'name'})`,
    });
});

/** The first label of `labels` that repeats an earlier one, with its index, or null. */
export function duplicateLabel(labels: readonly string[]): { label: string; index: number } | null {
  const seen = new Set<string>();
  for (const [index, label] of labels.entries()) {
    if (seen.has(label)) return { label, index };
    seen.add(label);
  }
  return null;
}

/** A label an agent is given (FFLEET_AGENT_LABELS, PATCH /agents): a {@link Label} without a reserved prefix. */
export const AgentLabel = Label.superRefine((label, ctx) => {
  const problem = reservedLabelProblem(label);
  if (problem) ctx.addIssue({ code: 'custom', message: problem });
});
