#!/usr/bin/env node
/**
 * Builds agent/native/spawn.c into agent/native/build/ffleet_spawn.node (run by `npm install` as the
 * root package's postinstall; run it by hand after editing spawn.c).
 *
 * It needs Linux, a C compiler (`$CC`, else `cc`) and Node's own headers (`<node prefix>/include/node`,
 * as Node's installers and Debian's nodejs package ship them; `$npm_config_nodedir` is tried first). No
 * node-gyp and no download: one compiler call of ~0.3 s. When any of it is missing the build is skipped
 * with one line saying why, and `npm install` still succeeds: the agent then starts processes with
 * Node's spawn (slower, same behaviour). `--strict` makes a failed build exit non-zero.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, renameSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
const SOURCE = join(HERE, 'spawn.c');
const OUTPUT = join(HERE, 'build', 'ffleet_spawn.node');
const strict = process.argv.includes('--strict');

function headerDirs() {
  const dirs = [];
  const nodedir = process.env.npm_config_nodedir;
  if (nodedir) dirs.push(join(nodedir, 'include', 'node'));
  dirs.push(join(dirname(dirname(process.execPath)), 'include', 'node'));
  return dirs;
}

function skip(reason) {
  console.log(
    `ffleet: native spawner not built (${reason}); agents start processes with Node's spawn and cannot hide their environment (tokens) from their user's other processes`,
  );
  process.exit(strict ? 1 : 0);
}

if (process.platform !== 'linux') skip(`${process.platform} is not Linux`);
const include = headerDirs().find((d) => existsSync(join(d, 'node_api.h')) && existsSync(join(d, 'uv.h')));
if (!include) skip(`Node's headers not found in ${headerDirs().join(' or ')}`);
const cc = process.env.CC || 'cc';
mkdirSync(dirname(OUTPUT), { recursive: true });
const partial = `${OUTPUT}.${process.pid}.tmp`;
const result = spawnSync(
  cc,
  ['-O2', '-std=gnu11', '-Wall', '-Wextra', '-shared', '-fPIC', `-I${include}`, '-o', partial, SOURCE],
  { encoding: 'utf8' },
);
if (result.error || result.status !== 0) {
  rmSync(partial, { force: true });
  const why = result.error
    ? `${cc}: ${result.error.message}`
    : result.stderr.trim().split('\n').slice(-3).join(' | ');
  skip(why || `${cc} exited ${result.status}`);
}
renameSync(partial, OUTPUT);
console.log(`ffleet: native spawner built (${OUTPUT})`);
