import { z } from 'zod';

/** Variables whose value an error never repeats: secrets, and URLs, which may carry a password. */
const SECRET = /TOKEN|SECRET|PASSWORD|_URL$/;
/** A longer value is cut when repeated in an error. */
const SHOWN_CHARS = 80;

/** One invalid environment variable: its name and what is wrong with it, in words an operator can act on. */
export type EnvProblem = { variable: string; message: string };

/**
 * What a failed parse of an environment object says, as one line: every invalid variable (its first
 * issue), so that one start names everything to fix. `variable` is the first of them; `message` is its
 * problem followed by `OTHER: problem` for each of the others. zod's generic wording ("Invalid input:
 * expected number, received NaN") becomes the rule the value broke; a message the schema gives itself is
 * kept. The value is repeated (`got "abc"`) unless the variable may hold a secret.
 */
export function envError(error: z.ZodError, env: Record<string, string | undefined>): EnvProblem {
  const problems: EnvProblem[] = [];
  for (const issue of error.issues) {
    const variable = String(issue.path[0] ?? 'env');
    if (problems.some((p) => p.variable === variable)) continue;
    const raw = env[variable];
    const shown =
      raw === undefined || SECRET.test(variable)
        ? ''
        : `, got ${JSON.stringify(raw.length > SHOWN_CHARS ? `${raw.slice(0, SHOWN_CHARS)}…` : raw)}`;
    problems.push({ variable, message: `${describe(issue as unknown as Issue)}${shown}` });
  }
  const [first, ...rest] = problems;
  if (!first) return { variable: 'env', message: error.message };
  return {
    variable: first.variable,
    message: [first.message, ...rest.map((p) => `${p.variable}: ${p.message}`)].join('; '),
  };
}

type Issue = {
  code: string;
  message: string;
  expected?: string;
  origin?: string;
  minimum?: number | bigint;
  maximum?: number | bigint;
  inclusive?: boolean;
  values?: unknown[];
};

function describe(issue: Issue): string {
  if (issue.code === 'invalid_type' && issue.expected === 'number') return 'must be a number';
  if (issue.code === 'invalid_type' && issue.expected === 'int') return 'must be a whole number';
  if (issue.code === 'too_small' && issue.origin === 'number')
    return `must be ${issue.inclusive === false ? 'greater than' : 'at least'} ${issue.minimum}`;
  if (issue.code === 'too_big' && issue.origin === 'number')
    return `must be ${issue.inclusive === false ? 'less than' : 'at most'} ${issue.maximum}`;
  if (issue.code === 'invalid_value' && issue.values) {
    const allowed = issue.values.filter((v) => v !== '').map(String);
    return `must be one of ${allowed.join(', ')}`;
  }
  return issue.message;
}

/**
 * Tokens shorter than this are accepted (an operator's test setup, a token another system imposes) but
 * warned about at start: a guessable API or agent token is the whole of ffleet's access control.
 */
export const SHORT_TOKEN_CHARS = 16;

/** The log line for short tokens: the variables are named, their values never. */
export const SHORT_TOKEN_WARNING = `tokens shorter than ${SHORT_TOKEN_CHARS} characters are easy to guess; use long random ones (e.g. openssl rand -hex 24)`;

/** What a number in an environment variable may look like: decimal digits (a sign and a fraction are
 * left for the schema to refuse with its own message). */
const DECIMAL = /^-?\d+(?:\.\d+)?$/;

/**
 * A number read from an environment variable: `schema` (a `z.coerce.number()` one, usually with a
 * default) gets only decimal text. An empty or blank value counts as unset (the default applies);
 * `0x1F90`, `4.7e4` or ` ` are refused as "must be a number" instead of being read as JavaScript reads
 * them (8080, 47000, 0: a blank PORT listened on a random port).
 */
export function envNumber<T extends z.ZodType>(schema: T) {
  return z.preprocess((value) => {
    if (typeof value !== 'string') return value;
    const text = value.trim();
    if (text === '') return undefined;
    return DECIMAL.test(text) ? text : Number.NaN;
  }, schema);
}

const BROKER_SCHEMES = new Set(['mqtt:', 'mqtts:', 'tcp:', 'ssl:', 'ws:', 'wss:']);

/**
 * Why `text` is not a broker URL the MQTT client can use, or null. A malformed URL must not get past
 * the configuration check: mqtt.js reads `mqtt://user:pw@` (no host) as localhost and connects to
 * whatever broker listens there, and fails on a bad port only once the process is running. The
 * message never repeats the value (it may hold a password).
 */
export function brokerUrlProblem(text: string): string | null {
  // `ws:host:port` parses (as `ws://localhost:80host:port` to mqtt.js): the slashes are required.
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(text))
    return 'must be a URL like mqtt://broker.local:1883 (a scheme, then //, then the host)';
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return 'must be a URL like mqtt://broker.local:1883 (it does not parse: check the host and the port, 1 to 65535)';
  }
  if (!BROKER_SCHEMES.has(url.protocol)) return 'must be an mqtt://, mqtts://, tcp://, ws:// or wss:// URL';
  if (url.hostname === '') return 'names no host (e.g. mqtt://broker.local:1883)';
  if (url.port === '0') return 'port must be 1 to 65535';
  return null;
}

/** An environment variable holding a broker URL (`MQTT_URL`). */
export const BrokerUrl = z.string().superRefine((text, ctx) => {
  const problem = brokerUrlProblem(text);
  if (problem) ctx.addIssue({ code: 'custom', message: problem });
});
