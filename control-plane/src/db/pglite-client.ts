import { messages, type PGlite, protocol, type QueryOptions, type Results } from '@electric-sql/pglite';
import { databaseUnavailableReason } from './errors.ts';

const { serialize } = protocol;

type Field = { name: string; dataTypeID: number };
type Parsers = Record<number, (value: string, typeId: number) => unknown>;

type Statement = {
  name: string;
  paramTypes: number[];
  /** Null for statements that return no rows. */
  fields: Field[] | null;
};

export type PgliteTransaction = {
  query<T>(text: string, params?: unknown[], options?: QueryOptions): Promise<Results<T>>;
  exec(text: string, options?: QueryOptions): Promise<Results[]>;
  rollback(): Promise<void>;
  readonly closed: boolean;
};

/** Clients made so far: each names its statements apart (two clients may share one PGlite). */
let clients = 0;

/** Named statements kept per database; the least recently used one is closed beyond this. */
export const DEFAULT_STATEMENT_CACHE = 500;

/** ReadyForQuery transaction states. */
const IDLE = 0x49; // 'I'

/**
 * How long a refusal for lack of resources keeps the database failing (see
 * {@link PgliteClient.writeFailure}) when none of the refused statements has run again since: the
 * clients a load balancer took away no longer retry them here, and without this the database would stay
 * failing after its disk was freed.
 */
export const WRITE_FAILURE_HOLD_MS = 60_000;
/** Refused statements remembered per failure; the success of any of them ends it. */
const MAX_REFUSED = 100;

type WriteFailure = {
  reason: string;
  /** The first refusal, and the last. */
  since: number;
  last: number;
  /** Statement keys (as in the statement cache; the text for `exec`) that were refused. */
  refused: Set<string>;
};

type Internals = {
  readonly closed: boolean;
  serializers: Record<number, (x: unknown) => unknown>;
  parsers: Parsers;
  _runExclusiveQuery<T>(fn: () => Promise<T>): Promise<T>;
  _runExclusiveTransaction<T>(fn: () => Promise<T>): Promise<T>;
  execProtocolRawStream(
    message: Uint8Array,
    options: { syncToFs?: boolean; onRawData: (data: Uint8Array) => void },
  ): Promise<void>;
  syncToFs(): Promise<void>;
};

/**
 * The embedded database's client for drizzle: PGlite driven over the PostgreSQL wire protocol with
 * named statements.
 *
 * `PGlite.query()` runs every statement unnamed, in six calls into the WASM backend (Parse, Describe,
 * Bind, Describe, Execute, Sync), and PostgreSQL plans it again each time. Planning is where most of a
 * short statement's time goes in PGlite: it sizes every table and index the statement touches, and
 * each size is an `fstat` through Emscripten's file system. Here a statement text is parsed and
 * described once (its parameter and column types are kept), then each run is one call (Bind, Execute,
 * Sync), and after a few runs PostgreSQL's plan cache reuses a generic plan. A transaction's BEGIN
 * travels with its first statement.
 *
 * It implements the part of PGlite's interface that drizzle's PGlite session uses: `query`
 * (`rowMode`, `parsers`), `exec` and `transaction`. Messages are written with PGlite's serializer;
 * answers are read here in one pass over the bytes, because PGlite's reader is the slow part of its own
 * query path: its parser took 69 µs and its result builder 87 µs (it copies all 318 default parsers
 * whenever a query brings its own, as drizzle's always do) for a 10-row answer the backend produced in
 * 86 µs; a statement through this client costs ~130 µs, against ~280 µs through PGlite's reader.
 * Statements, transactions and PGlite's own calls are serialised with PGlite's mutexes, exactly as
 * `PGlite.query()` and `PGlite.transaction()` do.
 */
export class PgliteClient {
  readonly #pg: PGlite & Internals;
  readonly #cacheSize: number;
  /** Statement text (and parameter types when given) → named statement, least recently used first. */
  readonly #statements = new Map<string, Statement>();
  /** Statements evicted from the cache, closed at the start of the next exchange. */
  #toClose: string[] = [];
  #seq = 0;
  readonly #prefix = `ffleet_${++clients}_`;
  /** A transaction was opened but its BEGIN not sent yet (it goes with the first statement). */
  #pendingBegin = false;
  readonly #holdMs: number;
  readonly #now: () => number;
  #failure: WriteFailure | undefined;
  /** A refused statement ran in the transaction under way: its COMMIT ends the failure. */
  #retried = false;

  constructor(
    pg: PGlite,
    opts: { statementCache?: number; writeFailureHoldMs?: number; now?: () => number } = {},
  ) {
    this.#pg = pg as PGlite & Internals;
    this.#cacheSize = Math.max(1, opts.statementCache ?? DEFAULT_STATEMENT_CACHE);
    this.#holdMs = opts.writeFailureHoldMs ?? WRITE_FAILURE_HOLD_MS;
    this.#now = opts.now ?? Date.now;
  }

  /** The PGlite instance underneath (dumps, close). */
  get pglite(): PGlite {
    return this.#pg;
  }

  /** How many named statements are prepared now. */
  get preparedCount(): number {
    return this.#statements.size;
  }

  /**
   * Why the database refuses statements for lack of resources (SQLSTATE class 53: disk full, out of
   * memory, …) and since when; undefined when it does not. Only the statements the control plane really
   * runs can show it: the database still answers a `select 1`, and on a full disk a write still
   * succeeds where its page has room (measured on a full tmpfs: an UPDATE of one row, 200 times in a
   * row, while every INSERT that extended its table was refused), as do the fleet's sweeps, an UPDATE
   * every 3 s that mostly writes no rows. So neither a read nor another write ends a failure: a refused
   * statement that runs again and commits does (the space or memory it lacked is there now), or else
   * {@link WRITE_FAILURE_HOLD_MS} without a refusal.
   */
  get writeFailure(): string | undefined {
    const f = this.#failure;
    if (!f || this.#now() - f.last >= this.#holdMs) return undefined;
    const at = (ms: number) => new Date(ms).toISOString();
    return f.last === f.since
      ? `${f.reason}, refused at ${at(f.since)}`
      : `${f.reason}, refused since ${at(f.since)}, the last time at ${at(f.last)}`;
  }

  query<T>(text: string, params: unknown[] = [], options?: QueryOptions): Promise<Results<T>> {
    return this.#pg._runExclusiveTransaction(() => this.#query<T>(text, params, options));
  }

  exec(text: string, options?: QueryOptions): Promise<Results[]> {
    return this.#pg._runExclusiveTransaction(() => this.#exec(text, options));
  }

  transaction<T>(callback: (tx: PgliteTransaction) => Promise<T>): Promise<T> {
    return this.#pg._runExclusiveTransaction(async () => {
      this.#pendingBegin = true;
      let closed = false;
      const check = () => {
        if (closed) throw new Error('Transaction is closed');
      };
      const tx: PgliteTransaction = {
        query: <R>(text: string, params?: unknown[], options?: QueryOptions) => {
          check();
          return this.#query<R>(text, params ?? [], options);
        },
        exec: (text: string, options?: QueryOptions) => {
          check();
          return this.#exec(text, options);
        },
        rollback: async () => {
          check();
          closed = true;
          await this.#end('ROLLBACK');
        },
        get closed() {
          return closed;
        },
      };
      try {
        const result = await callback(tx);
        if (!closed) {
          closed = true;
          const command = await this.#end('COMMIT');
          // COMMIT of a transaction that had failed reports ROLLBACK.
          if (command === 'ROLLBACK') throw new Error('Transaction was aborted and rolled back');
        }
        return result;
      } catch (err) {
        if (!closed) {
          closed = true;
          await this.#end('ROLLBACK');
        }
        throw err;
      } finally {
        this.#pendingBegin = false;
        // Also when the transaction ended without an answer (PGlite closed under it).
        this.#retried = false;
      }
    });
  }

  /** COMMIT or ROLLBACK; returns the command tag. Nothing to send when BEGIN never went out. */
  async #end(command: 'COMMIT' | 'ROLLBACK'): Promise<string> {
    if (this.#pendingBegin) {
      this.#pendingBegin = false;
      return command;
    }
    const res = await this.#query(command, [], undefined);
    return res.command ?? command;
  }

  async #query<T>(text: string, params: unknown[], options: QueryOptions | undefined): Promise<Results<T>> {
    return this.#pg._runExclusiveQuery(async () => {
      const key = options?.paramTypes?.length ? `${options.paramTypes.join(',')}|${text}` : text;
      let stmt = this.#statements.get(key);
      if (stmt) {
        // Most recently used goes last.
        this.#statements.delete(key);
        this.#statements.set(key, stmt);
      } else {
        stmt = await this.#prepare(key, text, options?.paramTypes ?? [], params);
      }
      // Values first: a value that cannot be serialised throws before anything (BEGIN included) is sent.
      const values = this.#values(stmt, params, text);
      const reply = await this.#exchange(
        [
          ...this.#begin(),
          serialize.bind({ statement: stmt.name, values }),
          serialize.execute({}),
          serialize.sync(),
        ],
        options,
        stmt.fields,
      );
      this.#observe(reply, key);
      const result = reply.sets[0];
      if (reply.error) {
        // A statement prepared before a schema change may not run any more; prepare it again next time.
        if (reply.error.code === '0A000') this.#forget(key);
        throw withQuery(reply.error, text, params);
      }
      if (reply.status === IDLE) await this.#pg.syncToFs();
      return (result ?? { rows: [], fields: [], affectedRows: 0 }) as Results<T>;
    });
  }

  /** Parse and describe a statement under a new name (one exchange); throws what Parse throws. */
  async #prepare(key: string, text: string, paramTypes: number[], params: unknown[]): Promise<Statement> {
    const name = `${this.#prefix}${++this.#seq}`;
    const closes = this.#toClose.map((old) => serialize.close({ type: 'S', name: old }));
    this.#toClose = [];
    const reply = await this.#exchange(
      [
        ...closes,
        ...this.#begin(),
        serialize.parse({ name, text, types: paramTypes }),
        serialize.describe({ type: 'S', name }),
        serialize.sync(),
      ],
      undefined,
      null,
    );
    if (reply.error) {
      // Only a refusal counts here: a Parse that succeeds shows nothing, the statement has not run yet.
      this.#refused(reply.error, key);
      throw withQuery(reply.error, text, params);
    }
    const stmt: Statement = { name, paramTypes: reply.paramTypes, fields: reply.fields };
    this.#statements.set(key, stmt);
    while (this.#statements.size > this.#cacheSize) {
      const [oldest, evicted] = this.#statements.entries().next().value as [string, Statement];
      this.#statements.delete(oldest);
      this.#toClose.push(evicted.name);
    }
    return stmt;
  }

  /**
   * Keep {@link writeFailure} up to date with the answer to the statement `key`: a refusal for lack of
   * resources is noted; a refused statement that ran counts once its transaction commits, which the
   * closing ReadyForQuery shows (idle again, and not by a ROLLBACK: COMMIT of a failed transaction
   * answers ROLLBACK too). A statement outside a transaction commits by itself, in the same exchange.
   */
  #observe(reply: Reply, key: string): void {
    if (reply.error) this.#refused(reply.error, key);
    else if (this.#failure?.refused.has(key)) this.#retried = true;
    if (reply.status !== IDLE) return;
    if (this.#retried && !reply.error && reply.sets.at(-1)?.command !== 'ROLLBACK') this.#failure = undefined;
    this.#retried = false;
  }

  /** Note `err` when it is a refusal for lack of resources (SQLSTATE class 53) of the statement `key`. */
  #refused(err: Error & { code?: string }, key: string): void {
    if (!err.code?.startsWith('53')) return;
    const now = this.#now();
    let f = this.#failure;
    if (!f || now - f.last >= this.#holdMs)
      f = this.#failure = { reason: '', since: now, last: now, refused: new Set() };
    f.reason = databaseUnavailableReason(err) ?? `SQLSTATE ${err.code}`;
    f.last = now;
    // A COMMIT succeeds without writing anything when its transaction wrote nothing: no evidence.
    if (key !== 'COMMIT' && f.refused.size < MAX_REFUSED) f.refused.add(key);
  }

  #forget(key: string): void {
    const stmt = this.#statements.get(key);
    if (!stmt) return;
    this.#statements.delete(key);
    this.#toClose.push(stmt.name);
  }

  #values(stmt: Statement, params: unknown[], text: string): (string | Uint8Array | null)[] {
    if (params.length !== stmt.paramTypes.length) {
      throw new Error(
        `bind message supplies ${params.length} parameters, but prepared statement requires ${stmt.paramTypes.length}: ${text}`,
      );
    }
    const serializers = this.#pg.serializers;
    return params.map((value, i) => {
      if (value === null || value === undefined) return null;
      const toWire = serializers[stmt.paramTypes[i]!];
      const out = toWire ? toWire(value) : value;
      if (typeof out === 'string' || out instanceof Uint8Array) return out;
      return String(out);
    });
  }

  /** BEGIN, when a transaction opened since the last statement (it travels with the next one). */
  #begin(): Uint8Array[] {
    if (!this.#pendingBegin) return [];
    this.#pendingBegin = false;
    return [serialize.query('BEGIN')];
  }

  /**
   * One call into the backend with these messages; its answer read. Through PGlite's raw stream call:
   * its `execProtocolRawSync` also parses every message the backend writes into objects (rows with
   * their strings) and appends them to a list that only its own `query()` clears, so each statement
   * was read twice and its answer kept in memory until the next PGlite `query()` (measured: heap
   * +6.7 MB per 5,000 statements answering one 1 kB value, never released while only this client runs;
   * 176 µs of CPU per such statement that way, 99 µs this way).
   */
  async #exchange(
    parts: Uint8Array[],
    options: QueryOptions | undefined,
    described: Field[] | null,
  ): Promise<Reply> {
    // PGlite's own calls check this; its raw stream does not, and past close() it fails on a missing
    // module instead ("Cannot read properties of undefined"), which reads like a bug, not a shutdown.
    if (this.#pg.closed) throw new Error('PGlite is closed');
    const chunks: Uint8Array[] = [];
    await this.#pg.execProtocolRawStream(Buffer.concat(parts), {
      syncToFs: false,
      // A view of the backend's memory, valid during this write only.
      onRawData: (data) => chunks.push(data.slice()),
    });
    const bytes = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
    return new Reply(bytes, this.#pg.parsers, options, described);
  }

  /** Simple-query protocol: several statements, no parameters, no statement cache. */
  async #exec(text: string, options: QueryOptions | undefined): Promise<Results[]> {
    return this.#pg._runExclusiveQuery(async () => {
      const reply = await this.#exchange([...this.#begin(), serialize.query(text)], options, null);
      this.#observe(reply, text);
      const results = reply.sets;
      if (reply.error) throw withQuery(reply.error, text, []);
      if (reply.status === IDLE) await this.#pg.syncToFs();
      return results;
    });
  }
}

function withQuery(err: Error, query: string, params: unknown[]): Error {
  Object.assign(err, { query, params });
  return err;
}

type ResultSet = Results & { command?: string; rowCount?: number };

const ERROR_FIELDS: Record<string, string> = {
  S: 'severity',
  C: 'code',
  D: 'detail',
  H: 'hint',
  P: 'position',
  p: 'internalPosition',
  q: 'internalQuery',
  W: 'where',
  s: 'schema',
  t: 'table',
  c: 'column',
  d: 'dataType',
  n: 'constraint',
  F: 'file',
  L: 'line',
  R: 'routine',
};

/**
 * The backend's answer to one exchange, read in one pass: result sets (one per CommandComplete), the
 * first error, the closing transaction status, and a Describe's parameter types and columns.
 */
class Reply {
  readonly #buf: Buffer;
  readonly sets: ResultSet[] = [];
  /** The first error (the backend skips the rest of the exchange after it). */
  error: (Error & { code?: string }) | null = null;
  /** Transaction status of the closing ReadyForQuery. */
  status = IDLE;
  paramTypes: number[] = [];
  /** Columns a RowDescription announced (a Describe's, or a simple query's last). */
  fields: Field[] | null = null;

  readonly #parsers: Parsers;
  /** Per-query parser overrides (drizzle keeps timestamps and intervals as text). */
  readonly #overrides: Parsers | undefined;
  readonly #rowMode: 'array' | 'object';

  /**
   * `described`: the columns of a prepared statement, whose Bind/Execute answer carries no
   * RowDescription; simple queries bring their own.
   */
  constructor(
    bytes: Uint8Array,
    parsers: Parsers,
    options: QueryOptions | undefined,
    described: Field[] | null,
  ) {
    this.#buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.#parsers = parsers;
    this.#overrides = options?.parsers as Parsers | undefined;
    this.#rowMode = options?.rowMode ?? 'object';
    this.#read(described);
  }

  #read(described: Field[] | null): void {
    const b = this.#buf;
    let fields: Field[] = described ?? [];
    let rows: unknown[] = [];
    let affectedRows = 0;
    for (let i = 0; i + 5 <= b.length; ) {
      const type = b[i]!;
      const end = i + 1 + b.readInt32BE(i + 1);
      const body = i + 5;
      if (type === 0x44) {
        // D: DataRow
        rows.push(this.#dataRow(body, fields));
      } else if (type === 0x43) {
        // C: CommandComplete "INSERT 0 5", "UPDATE 3", "SELECT 2", "BEGIN"
        const tag = b.toString('utf8', body, end - 1);
        const parts = tag.split(' ');
        const command = parts[0]!;
        const rowCount = Number.parseInt(parts[parts.length - 1]!, 10);
        if (['INSERT', 'UPDATE', 'DELETE', 'COPY', 'MERGE'].includes(command)) affectedRows += rowCount;
        const set: ResultSet = { rows: rows as ResultSet['rows'], fields, affectedRows, command };
        if (!Number.isNaN(rowCount)) set.rowCount = rowCount;
        this.sets.push(set);
        rows = [];
        fields = described ?? [];
      } else if (type === 0x54) {
        // T: RowDescription
        fields = this.#rowDescription(body);
        this.fields = fields;
      } else if (type === 0x74) {
        // t: ParameterDescription
        const n = b.readInt16BE(body);
        this.paramTypes = Array.from({ length: n }, (_, k) => b.readUInt32BE(body + 2 + 4 * k));
      } else if (type === 0x45 && !this.error) {
        this.error = this.#error(body, end);
      } else if (type === 0x5a) {
        this.status = b[body]!;
      }
      i = end;
    }
    // BEGIN sent along with a statement answers first; the caller wants the statement's result.
    if (this.sets.length > 1 && this.sets[0]!.command === 'BEGIN') this.sets.shift();
  }

  #rowDescription(at: number): Field[] {
    const b = this.#buf;
    const n = b.readInt16BE(at);
    const fields: Field[] = [];
    let i = at + 2;
    for (let k = 0; k < n; k++) {
      const zero = b.indexOf(0, i);
      const name = b.toString('utf8', i, zero);
      i = zero + 1;
      const dataTypeID = b.readUInt32BE(i + 6);
      fields.push({ name, dataTypeID });
      i += 18;
    }
    return fields;
  }

  #error(at: number, end: number): Error & { code?: string } {
    const b = this.#buf;
    const parts: Record<string, string> = {};
    let i = at;
    while (i < end && b[i] !== 0) {
      const code = String.fromCharCode(b[i]!);
      const zero = b.indexOf(0, i + 1);
      parts[code] = b.toString('utf8', i + 1, zero);
      i = zero + 1;
    }
    const err = new messages.DatabaseError(parts.M ?? 'unknown database error', end - at + 4, 'error');
    for (const [k, prop] of Object.entries(ERROR_FIELDS)) {
      if (parts[k] !== undefined) (err as unknown as Record<string, string>)[prop] = parts[k];
    }
    return err as Error & { code?: string };
  }

  #dataRow(at: number, fields: Field[]): unknown {
    const b = this.#buf;
    const n = b.readInt16BE(at);
    let i = at + 2;
    const values: unknown[] = new Array(n);
    for (let k = 0; k < n; k++) {
      const len = b.readInt32BE(i);
      i += 4;
      if (len < 0) {
        values[k] = null;
        continue;
      }
      const text = b.toString('utf8', i, i + len);
      i += len;
      const typeId = fields[k]?.dataTypeID ?? 0;
      const parse = this.#overrides?.[typeId] ?? this.#parsers[typeId];
      values[k] = parse ? parse(text, typeId) : text;
    }
    if (this.#rowMode === 'array') return values;
    const row: Record<string, unknown> = {};
    for (let k = 0; k < n; k++) row[fields[k]?.name ?? String(k)] = values[k];
    return row;
  }
}
