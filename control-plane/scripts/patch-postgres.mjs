#!/usr/bin/env node
/**
 * Fixes in the installed postgres.js 3.4.9 (run by `npm install` as part of the root package's
 * postinstall; idempotent). Without them a control plane on PostgreSQL died or hung when the server
 * ended its connections (pg_terminate_backend, a restart, a proxy losing its backend):
 *
 * - `nextWrite` wrote to a connection whose socket was already gone (a transaction's next statement or
 *   its ROLLBACK after the server ended the session): a TypeError thrown from a setImmediate, which ended
 *   the process (upstream issues #1066, #1154, #1208). Now the connection's queries fail with
 *   CONNECTION_CLOSED.
 * - `closed` and `terminate` cancelled the pending write without forgetting it, so the connection never
 *   flushed a small write again: once reconnected, its startup message stayed unsent and every query given
 *   to it waited for connect_timeout (30 s), on every later use.
 * - the array types fetched on a new connection were a promise nobody awaited: when the server ended the
 *   connection during that fetch, an unhandled rejection ended the process (the error also reaches the
 *   query waiting for that connection, which is where it belongs).
 * - a query that finds no open connection waits for one at most `wait_timeout` seconds (a new option,
 *   off by default), then fails with CONNECTION_WAIT_TIMEOUT without having been sent: while the server
 *   cannot be reached a query otherwise waited for the reconnect backoff (up to 20 s) and connect_timeout
 *   (30 s), or, when the server ended every new connection during its start, until one survived. A new
 *   connection whose query gave up meanwhile joins the pool instead of being left out of it. A query that
 *   finds an open connection, or one it can be pipelined on, arms no timer.
 * - a transaction whose connection closed went on sending its statements (the rest of the callback, the
 *   ROLLBACK) to that connection object, which the pool may already have reconnected for another query:
 *   they would have run outside the transaction. Now they fail with the error that closed it.
 *
 * Each fix is a text replacement that must match exactly once; a different postgres.js version is left
 * alone (with a line saying so), and this script then needs a look. `--check` only reports, exit 1 when
 * the installed driver lacks the fixes.
 */
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const POSTGRES_PATCH_MARKER = '/* ffleet-patch 1 */';
const FOR_VERSION = '3.4.9';

const CONNECTION = [
  [
    `  function nextWrite(fn) {
    const x = socket.write(chunk, fn)`,
    `  function nextWrite(fn) {
    ${POSTGRES_PATCH_MARKER}
    if (socket === null) {
      chunk = nextWriteTimer = null
      error(Errors.connection('CONNECTION_CLOSED', options))
      return false
    }
    const x = socket.write(chunk, fn)`,
  ],
  [
    `    clearImmediate(nextWriteTimer)
    if (socket) {`,
    `    clearImmediate(nextWriteTimer)
    chunk = nextWriteTimer = null
    if (socket) {`,
  ],
  [
    `    clearImmediate(nextWriteTimer)
    socket.removeListener('data', data)`,
    `    clearImmediate(nextWriteTimer)
    chunk = nextWriteTimer = null
    socket.removeListener('data', data)`,
  ],
  [
    `      initial && !initial.reserve && execute(initial)
      options.shared.retries = retries = 0`,
    `      if (initial && initial.cancelled) {
        initial = null
        options.shared.retries = retries = 0
        return onopen(connection)
      }
      initial && !initial.reserve && execute(initial)
      options.shared.retries = retries = 0`,
  ],
  [
    `        return fetchArrayTypes()
      }`,
    `        return fetchArrayTypes().catch(() => { /* errored() gave the error to the waiting query */ })
      }`,
  ],
];

const INDEX = [
  [
    `    connect_timeout : 30,`,
    `    connect_timeout : 30,
    wait_timeout    : null,`,
  ],
  [
    `    if (closed.length)
      return connect(closed.shift(), query)

    busy.length
      ? go(busy.shift(), query)
      : queries.push(query)`,
    `    if (closed.length)
      return waitAtMost(query), connect(closed.shift(), query)

    busy.length
      ? go(busy.shift(), query)
      : (waitAtMost(query), queries.push(query))`,
  ],
  [
    `  function go(c, query) {`,
    `  function waitAtMost(query) {
    if (!options.wait_timeout)
      return
    const timer = setTimeout(() => {
      if (query.state || query.cancelled)
        return
      queries.remove(query)
      query.cancelled = true
      query.reject(Errors.connection('CONNECTION_WAIT_TIMEOUT', options))
    }, options.wait_timeout * 1000)
    timer.unref && timer.unref()
  }

  function go(c, query) {`,
  ],
  [
    `      , connection
      , prepare = null`,
    `      , connection
      , prepare = null
      , lost = null ${POSTGRES_PATCH_MARKER}`,
  ],
  [
    `        new Promise((_, reject) => connection.onclose = reject)`,
    `        new Promise((_, reject) => connection.onclose = e => reject(lost = e))`,
  ],
  [
    `      function handler(q) {
        q.catch(e => uncaughtError || (uncaughtError = e))
        c.queue === full`,
    `      function handler(q) {
        q.catch(e => uncaughtError || (uncaughtError = e))
        if (lost)
          return q.reject(lost)
        c.queue === full`,
  ],
];

/** The installed postgres.js package's root folder. */
export function postgresRoot() {
  // The package's exports map resolves `postgres` to cjs/src/index.js for require.
  return join(dirname(createRequire(import.meta.url).resolve('postgres')), '..', '..');
}

/** The driver's source files this script patches, relative to its root, with their replacements. */
function targets(root) {
  return ['src', 'cjs/src']
    .flatMap((dir) => [
      [join(root, dir, 'connection.js'), CONNECTION],
      [join(root, dir, 'index.js'), INDEX],
    ])
    .filter(([file]) => existsSync(file));
}

/** Patch (or with `check`, only inspect) the installed driver (or the copy at `root`); returns the exit code. */
export function patchPostgres({ check = false, log = console.log, root = postgresRoot() } = {}) {
  const { version } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
  if (version !== FOR_VERSION) {
    log(`ffleet: postgres.js ${version} left as installed (its fixes are written for ${FOR_VERSION})`);
    return check ? 1 : 0;
  }
  let missing = 0;
  for (const [file, replacements] of targets(root)) {
    let text = readFileSync(file, 'utf8');
    if (text.includes(POSTGRES_PATCH_MARKER)) continue;
    missing++;
    if (check) continue;
    for (const [from, to] of replacements) {
      const at = text.indexOf(from);
      if (at < 0 || text.indexOf(from, at + 1) >= 0) {
        log(`ffleet: cannot patch ${file}: its text differs from postgres.js ${FOR_VERSION}'s`);
        return 1;
      }
      text = text.slice(0, at) + to + text.slice(at + from.length);
    }
    // A new file in its place: an install hard-linked from another tree (cp -al) keeps that tree's copy.
    writeFileSync(`${file}.ffleet-tmp`, text);
    renameSync(`${file}.ffleet-tmp`, file);
  }
  if (check && missing)
    log(
      `ffleet: postgres.js lacks ffleet's fixes: run npm install (or node ${fileURLToPath(import.meta.url)})`,
    );
  return check && missing ? 1 : 0;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  process.exitCode = patchPostgres({ check: process.argv.includes('--check') });
}
