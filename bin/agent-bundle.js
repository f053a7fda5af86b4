// Builds (when missing or stale) and locates a plain-JS bundle of bin/agent-main.ts, so `ffleet agent`
// runs without the tsx loader (its hooks thread and on-the-fly transforms cost ~40 MB of RSS on an
// idle agent). Not a build step: the bundle is a cache, rebuilt whenever a source it was built from
// is newer than it; bin/ffleet.js falls back to tsx when anything here fails.
//
// Layout: <cache>/agent.json names the current build directory <cache>/agent-<id>/ (entry
// agent-main.js plus lazily imported chunks, e.g. watchfolder code). Builds go to a fresh directory
// and agent.json is replaced atomically, so concurrent starts never see a half-written bundle, and a
// running agent's lazy chunks stay in place. Packages from node_modules are not bundled: they are
// imported by absolute URL (resolved as Node would from the repository root), so the cache can live
// anywhere, e.g. in the agent's data dir when node_modules is read-only.
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const ENTRY = join(ROOT, 'bin', 'agent-main.ts');
/** Besides the bundled sources: changes here (build config, resolved packages) also rebuild. */
const EXTRA_INPUTS = [fileURLToPath(import.meta.url), join(ROOT, 'package-lock.json')];
/** Build directories no longer current are removed once older than this (a running agent may still use one). */
const OLD_BUILD_MS = 7 * 24 * 3600_000;
const FORMAT = 1;

function cacheDirs() {
  const dirs = [join(ROOT, 'node_modules', '.cache', 'ffleet')];
  const data = process.env.FFLEET_DATA_DIR || './data';
  dirs.push(join(resolve(data), '.cache'));
  return dirs;
}

function readManifest(dir) {
  try {
    const m = JSON.parse(readFileSync(join(dir, 'agent.json'), 'utf8'));
    return m.format === FORMAT && m.root === ROOT ? m : null;
  } catch {
    return null;
  }
}

/** The entry file of a build whose inputs are all unchanged since it started, else null. */
function currentBuild(dir) {
  const m = readManifest(dir);
  if (!m) return null;
  for (const f of m.inputs) {
    try {
      if (statSync(f).mtimeMs > m.startedAt) return null;
    } catch {
      return null;
    }
  }
  const entry = join(dir, m.build, 'agent-main.js');
  try {
    statSync(entry);
  } catch {
    return null;
  }
  return entry;
}

async function build(dir) {
  const { build: esbuild, stop } = await import('esbuild');
  mkdirSync(dir, { recursive: true });
  const startedAt = Date.now() - 1;
  const id = `${startedAt.toString(36)}-${process.pid}`;
  const out = join(dir, `agent-${id}`);
  const require = createRequire(join(ROOT, 'package.json'));
  const external = {
    name: 'ffleet-external-packages',
    setup(b) {
      // Bare specifiers other than the workspace's own TypeScript packages stay imports, pinned to
      // the file Node would load from the repository root (ESM first, CommonJS resolution otherwise).
      b.onResolve({ filter: /^[^./]/ }, (args) => {
        if (args.path.startsWith('node:') || args.path.startsWith('@ffleet/')) return undefined;
        let url;
        try {
          url = import.meta.resolve(args.path);
        } catch {
          // Not resolvable from the root (e.g. a package only in a workspace's own node_modules).
          const from = args.importer ? createRequire(args.importer) : require;
          url = pathToFileURL(from.resolve(args.path)).href;
        }
        return { path: url, external: true };
      });
    },
  };
  try {
    const r = await esbuild({
      entryPoints: { 'agent-main': ENTRY },
      absWorkingDir: ROOT,
      outdir: out,
      bundle: true,
      splitting: true,
      format: 'esm',
      platform: 'node',
      target: `node${process.versions.node.split('.')[0]}`,
      outExtension: { '.js': '.js' },
      chunkNames: '[name]-[hash]',
      plugins: [external],
      metafile: true,
      logLevel: 'silent',
      legalComments: 'none',
    });
    // Chunks are ES modules; a package.json marks them so regardless of where the cache lives.
    writeFileSync(join(out, 'package.json'), '{"type":"module"}\n');
    const inputs = [...Object.keys(r.metafile.inputs).map((f) => resolve(ROOT, f)), ...EXTRA_INPUTS];
    const manifest = { format: FORMAT, root: ROOT, build: `agent-${id}`, startedAt, inputs };
    const tmp = join(dir, `agent.json.${process.pid}.tmp`);
    writeFileSync(tmp, JSON.stringify(manifest));
    renameSync(tmp, join(dir, 'agent.json'));
  } catch (err) {
    rmSync(out, { recursive: true, force: true });
    throw err;
  } finally {
    await stop();
  }
  removeOldBuilds(dir, `agent-${id}`);
  return join(out, 'agent-main.js');
}

function removeOldBuilds(dir, keep) {
  try {
    for (const name of readdirSync(dir)) {
      if (!name.startsWith('agent-') || name === keep) continue;
      const p = join(dir, name);
      if (Date.now() - statSync(p).mtimeMs > OLD_BUILD_MS) rmSync(p, { recursive: true, force: true });
    }
  } catch {
    // best effort
  }
}

/**
 * The URL of an up-to-date agent bundle, building one if needed. Throws when no cache directory is
 * writable or esbuild fails (the caller then runs the TypeScript sources through tsx).
 */
export async function agentBundle() {
  const errors = [];
  for (const dir of cacheDirs()) {
    const entry = currentBuild(dir);
    if (entry) return pathToFileURL(entry).href;
  }
  for (const dir of cacheDirs()) {
    try {
      return pathToFileURL(await build(dir)).href;
    } catch (err) {
      errors.push(`${dir}: ${err.message}`);
    }
  }
  throw new Error(errors.join('; '));
}
