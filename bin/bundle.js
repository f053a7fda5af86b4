// Builds (when missing or stale) and locates a plain-JS bundle of the ffleet command, so every
// subcommand runs without the tsx loader (its hooks thread and on-the-fly transforms cost ~40-50 MB of
// RSS and seconds of start-up CPU). Not a build step: the bundle is a cache, rebuilt whenever a
// source it was built from changed; bin/ffleet.js falls back to tsx when anything here fails.
//
// Two esbuild runs into one build directory: ffleet.js (bin/ffleet.ts, the whole CLI; the control
// plane and the agent are lazy chunks) and agent/agent-main.js (bin/agent-main.ts, `ffleet agent`
// without commander or any control-plane module). The agent's build is tuned for RSS (see AGENT_BUILD):
// a box runs the agent for weeks beside ffmpeg, every MB it keeps counts.
//
// Layout: <cache>/bundle.json names the current build directory <cache>/build-<id>/. Builds go to a
// fresh directory and bundle.json is replaced atomically, so concurrent starts never see a
// half-written bundle and a running process's lazy chunks stay in place. One process builds at a
// time per cache (build.lock); others starting meanwhile wait for its result instead of building
// the same thing again. Packages from node_modules are not bundled: they are imported by absolute
// URL (resolved as Node would from the repository root), so the cache can live anywhere, e.g. in the
// data dir when node_modules is read-only. `import.meta.url` (and .dirname/.filename) in our sources
// is replaced by the source file's own location, so paths found relative to a source file (drizzle
// migrations, package.json for the version, createRequire for swagger-ui-dist and PGlite) are the
// same as when the sources run through tsx.
import {
  closeSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  unlinkSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join, resolve, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
/** Entry name → its source and its output file below the build directory. */
const ENTRIES = {
  ffleet: { source: join(ROOT, 'bin', 'ffleet.ts'), file: 'ffleet.js' },
  'agent-main': { source: join(ROOT, 'bin', 'agent-main.ts'), file: join('agent', 'agent-main.js') },
};
/**
 * The agent-only bundle, its own esbuild run (so nothing here changes the CLI's bundle):
 * - zod is bundled, not imported: esbuild then keeps only the parts the agent's schemas use (175 kB
 *   with the shared schemas instead of zod's ~100 modules: every locale, every check), which V8 would
 *   keep as source and metadata for the process's life. Safe here because no package the agent imports
 *   uses zod itself (the control plane's @hono/zod-openapi needs the one shared zod instance, so the
 *   CLI's bundle keeps it external).
 * - minified whitespace and syntax: V8 keeps every script's source text for lazy compilation.
 * Measured (agent modules loaded, after GC): heap used 9.8 → 7.4 MB, RSS 3–5 MB less.
 */
const AGENT_BUILD = {
  inline: new Set(['zod']),
  /**
   * `z` is zod's whole namespace re-exported as one value, which esbuild must keep whole (every schema
   * type, every locale); as a namespace import of the same module each `z.x` is a plain reference and
   * only what is referenced stays. The same bindings either way.
   */
  rewrites: [[/^import \{ z \} from 'zod';$/m, "import * as z from 'zod/v4';"]],
  minifyWhitespace: true,
  minifySyntax: true,
};
/**
 * Besides the bundled sources: changes here also rebuild (build config, module resolution, installed
 * packages — npm rewrites node_modules/.package-lock.json on every install).
 */
const EXTRA_INPUTS = [
  fileURLToPath(import.meta.url),
  join(ROOT, 'package.json'),
  join(ROOT, 'package-lock.json'),
  join(ROOT, 'node_modules', '.package-lock.json'),
  join(ROOT, 'tsconfig.json'),
  join(ROOT, 'shared', 'package.json'),
  join(ROOT, 'control-plane', 'package.json'),
  join(ROOT, 'agent', 'package.json'),
];
const MANIFEST = 'bundle.json';
const LOCK = 'build.lock';
/** Build directories no longer current are removed once older than this (a running process may still use one). */
const OLD_BUILD_MS = 7 * 24 * 3600_000;
/** A build lock older than this is abandoned (its holder hung or died on another host). */
const STALE_LOCK_MS = 120_000;
/** How long a start waits for another process's build before building itself. */
const WAIT_MS = 60_000;
const FORMAT = 3;

function cacheDirs() {
  const dirs = [join(ROOT, 'node_modules', '.cache', 'ffleet')];
  const data = process.env.FFLEET_DATA_DIR || './data';
  dirs.push(join(resolve(data), '.cache'));
  return dirs;
}

/** What "unchanged" means for an input: same mtime and size (or still missing). */
function stamp(path) {
  try {
    const s = statSync(path);
    return [s.mtimeMs, s.size];
  } catch {
    return null;
  }
}

function readManifest(dir) {
  try {
    const m = JSON.parse(readFileSync(join(dir, MANIFEST), 'utf8'));
    return m.format === FORMAT && m.root === ROOT ? m : null;
  } catch {
    return null;
  }
}

/**
 * The build directory of a build whose inputs are all unchanged, else null. An input (or a source
 * directory: a new file there may change what an import resolves to) counts as changed when its
 * mtime or size differs from when the build finished, or when it was modified after the build
 * started (it may have been read before that change).
 */
function currentBuild(dir) {
  const m = readManifest(dir);
  if (!m) return null;
  for (const [path, st] of m.inputs) {
    const now = stamp(path);
    if (now === null || st === null) {
      if (now !== st) return null;
      continue;
    }
    if (now[0] !== st[0] || now[1] !== st[1] || now[0] > m.startedAt) return null;
  }
  const out = join(dir, m.build);
  for (const { file } of Object.values(ENTRIES)) {
    if (stamp(join(out, file)) === null) return null;
  }
  return out;
}

/**
 * Our sources as esbuild reads them: `import.meta.url/dirname/filename` replaced by the source file's
 * own location, then `rewrites` (pairs for String.replace) applied. Files in node_modules are read as is.
 */
function loadSources(rewrites = []) {
  return {
    name: 'ffleet-sources',
    setup(b) {
      b.onLoad({ filter: /\.[cm]?[jt]s$/ }, async (args) => {
        if (args.path.includes(`${sep}node_modules${sep}`)) return undefined;
        const text = await readFile(args.path, 'utf8');
        const values = {
          url: JSON.stringify(pathToFileURL(args.path).href),
          dirname: JSON.stringify(dirname(args.path)),
          filename: JSON.stringify(args.path),
        };
        let contents = text.replace(/\bimport\.meta\.(url|dirname|filename)\b/g, (_, k) => values[k]);
        for (const [from, to] of rewrites) contents = contents.replace(from, to);
        if (contents === text) return undefined;
        const loader = args.path.endsWith('ts') ? 'ts' : 'js';
        return { contents, loader, resolveDir: dirname(args.path) };
      });
    },
  };
}

/** The package name of a bare specifier (`zod/v4/core` → `zod`, `@scope/x/y` → `@scope/x`). */
function packageName(specifier) {
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
}

/**
 * Bare specifiers other than the workspace's own TypeScript packages stay imports, by absolute URL;
 * packages named in `inline` are bundled.
 */
function externalPackages(inline = new Set()) {
  const require = createRequire(join(ROOT, 'package.json'));
  return {
    name: 'ffleet-external-packages',
    setup(b) {
      b.onResolve({ filter: /^[^./]/ }, (args) => {
        if (args.path.startsWith('node:') || args.path.startsWith('@ffleet/')) return undefined;
        if (inline.has(packageName(args.path))) return undefined;
        let url;
        try {
          // The file Node would load from the repository root (ESM resolution)...
          url = import.meta.resolve(args.path);
        } catch {
          // ...or CommonJS resolution, e.g. a package only in a workspace's own node_modules.
          const from = args.importer ? createRequire(args.importer) : require;
          url = pathToFileURL(from.resolve(args.path)).href;
        }
        return { path: url, external: true };
      });
    },
  };
}

async function build(dir) {
  const { build: esbuild, stop } = await import('esbuild');
  const startedAt = Date.now() - 1;
  const id = `${startedAt.toString(36)}-${process.pid}`;
  const out = join(dir, `build-${id}`);
  try {
    const common = {
      absWorkingDir: ROOT,
      bundle: true,
      splitting: true,
      format: 'esm',
      platform: 'node',
      target: `node${process.versions.node.split('.')[0]}`,
      outExtension: { '.js': '.js' },
      chunkNames: '[name]-[hash]',
      // Identifiers renamed to avoid clashes between modules keep their original .name.
      keepNames: true,
      // Read only with node --enable-source-maps: stack traces then name the TypeScript sources.
      sourcemap: 'linked',
      sourcesContent: false,
      metafile: true,
      logLevel: 'silent',
      legalComments: 'none',
    };
    const { inline, rewrites, ...agentOptions } = AGENT_BUILD;
    const results = await Promise.all([
      esbuild({
        ...common,
        entryPoints: { ffleet: ENTRIES.ffleet.source },
        outdir: out,
        plugins: [loadSources(), externalPackages()],
      }),
      esbuild({
        ...common,
        ...agentOptions,
        entryPoints: { 'agent-main': ENTRIES['agent-main'].source },
        outdir: join(out, dirname(ENTRIES['agent-main'].file)),
        plugins: [loadSources(rewrites), externalPackages(inline)],
      }),
    ]);
    // Chunks are ES modules; a package.json marks them so regardless of where the cache lives.
    writeFileSync(join(out, 'package.json'), '{"type":"module"}\n');
    const inputs0 = new Set(results.flatMap((r) => Object.keys(r.metafile.inputs)));
    // Bundled package files are covered by node_modules/.package-lock.json (EXTRA_INPUTS).
    const sources = [...inputs0].filter((f) => !f.includes('node_modules/')).map((f) => resolve(ROOT, f));
    const dirs = [...new Set(sources.map((f) => dirname(f)))];
    const inputs = [...sources, ...dirs, ...EXTRA_INPUTS].map((f) => [f, stamp(f)]);
    const manifest = { format: FORMAT, root: ROOT, build: `build-${id}`, startedAt, inputs };
    const tmp = join(dir, `${MANIFEST}.${process.pid}.tmp`);
    writeFileSync(tmp, JSON.stringify(manifest));
    renameSync(tmp, join(dir, MANIFEST));
  } catch (err) {
    rmSync(out, { recursive: true, force: true });
    throw err;
  } finally {
    await stop();
  }
  removeOldBuilds(dir, `build-${id}`);
  return out;
}

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return err.code === 'EPERM';
  }
}

/** Pids of the processes that marked build directory `out` as in use (see markInUse), live or not. */
function users(out) {
  try {
    return readdirSync(out)
      .filter((n) => n.startsWith('.run-'))
      .map((n) => Number(n.slice(5)));
  } catch {
    return [];
  }
}

/**
 * Mark build directory `out` as used by this process (its lazy chunks must outlive any rebuild), and
 * drop the marks of processes that are gone. Best effort: a missing mark only risks removal of a
 * build older than OLD_BUILD_MS while it runs.
 */
function markInUse(out) {
  try {
    for (const pid of users(out)) if (pid !== process.pid && !alive(pid)) rmSync(join(out, `.run-${pid}`));
    writeFileSync(join(out, `.run-${process.pid}`), '');
  } catch {
    // read-only cache or a concurrent cleanup
  }
}

function removeOldBuilds(dir, keep) {
  try {
    for (const name of readdirSync(dir)) {
      // agent-*: builds of the agent-only bundle this one replaced.
      if (!(name.startsWith('build-') || name.startsWith('agent-')) || name === keep) continue;
      const p = join(dir, name);
      if (Date.now() - statSync(p).mtimeMs <= OLD_BUILD_MS) continue;
      if (users(p).some((pid) => pid !== process.pid && alive(pid))) continue;
      rmSync(p, { recursive: true, force: true });
    }
  } catch {
    // best effort
  }
}

/**
 * Take the cache's build lock: true when taken, false when another live process holds it. (Two
 * processes clearing the same stale lock may both end up building: wasted work, no harm.)
 */
function tryLock(dir, retry = true) {
  const path = join(dir, LOCK);
  try {
    const fd = openSync(path, 'wx');
    writeSync(fd, String(process.pid));
    closeSync(fd);
    return true;
  } catch (err) {
    if (err.code !== 'EEXIST') throw err;
  }
  let stale;
  try {
    const pid = Number(readFileSync(path, 'utf8'));
    // Empty: its holder is between creating and writing it.
    stale = Date.now() - statSync(path).mtimeMs > STALE_LOCK_MS || (pid > 0 && !alive(pid));
  } catch {
    stale = true; // just released: try again at once
  }
  if (stale && retry) {
    try {
      unlinkSync(path);
    } catch {
      // someone else removed it first
    }
    return tryLock(dir, false);
  }
  return false;
}

function unlock(dir) {
  try {
    unlinkSync(join(dir, LOCK));
  } catch {
    // best effort
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** An up-to-date build in `dir`: built here, or by another process that held the lock. */
async function buildOrWait(dir) {
  mkdirSync(dir, { recursive: true });
  const deadline = Date.now() + WAIT_MS;
  while (Date.now() < deadline) {
    if (tryLock(dir)) {
      try {
        return currentBuild(dir) ?? (await build(dir));
      } finally {
        unlock(dir);
      }
    }
    await sleep(50);
    const out = currentBuild(dir);
    if (out) return out;
  }
  return build(dir); // the lock holder is taking too long: build without it (still atomic)
}

/**
 * The file URL of entry `name` ('ffleet' or 'agent-main') in an up-to-date bundle, building one if
 * needed. Throws when no cache directory is writable or esbuild fails (the caller then runs the
 * TypeScript sources through tsx).
 */
export async function bundleEntry(name) {
  const out = await upToDateBuild();
  markInUse(out);
  return pathToFileURL(join(out, ENTRIES[name].file)).href;
}

async function upToDateBuild() {
  const dirs = cacheDirs();
  for (const dir of dirs) {
    const out = currentBuild(dir);
    if (out) return out;
  }
  const errors = [];
  for (const dir of dirs) {
    try {
      return await buildOrWait(dir);
    } catch (err) {
      // esbuild's own errors (a source that does not compile) would only repeat in the next cache.
      if (Array.isArray(err.errors) && err.errors.length > 0) throw err;
      errors.push(`${dir}: ${err.message}`);
    }
  }
  throw new Error(errors.join('; '));
}
