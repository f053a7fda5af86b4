#!/usr/bin/env node
// The ffleet command. The code is TypeScript: every subcommand runs from a plain-JS bundle cached by
// bin/bundle.js (built on first use and whenever a source changed; no tsx loader in the process, which
// saves tens of MB of RSS and start-up CPU). When the bundle cannot be built the sources run through
// tsx instead. FFLEET_BUNDLE=0 forces tsx for every command, FFLEET_AGENT_BUNDLE=0 for `ffleet agent`.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { setFlagsFromString } from 'node:v8';
import { isAgentOnly, v8FlagsFor } from './v8-flags.js';

// No debugger on a signal: Node 20 opens its inspector (unauthenticated, 127.0.0.1:9229) at SIGUSR1, which
// any process of this user may send, a task's script included, and would then run whatever it is sent in
// this process, which holds the tokens. With a listener of its own Node leaves the inspector closed (to
// debug, start node with --inspect). First thing, so that the window after the exec stays short.
process.on('SIGUSR1', () => {});
// Not dumpable from the start, before the bundle loads (agent/native/spawn.c hideMemory; an agent does it
// again, and says so when it cannot): its user's other processes cannot read the tokens in its environment
// through /proc/<pid>. Without the native module this is left to that warning.
try {
  createRequire(import.meta.url)('../agent/native/build/ffleet_spawn.node').hideMemory?.();
} catch {
  // Not built here.
}

const args = process.argv.slice(2);
const agentOnly = isAgentOnly(args);
for (const flag of v8FlagsFor(args, process.env, process.execArgv)) setFlagsFromString(flag);
const bundled = process.env.FFLEET_BUNDLE !== '0' && !(agentOnly && process.env.FFLEET_AGENT_BUNDLE === '0');
let url = null;
if (bundled) {
  try {
    const { bundleEntry } = await import('./bundle.js');
    url = await bundleEntry(agentOnly ? 'agent-main' : 'ffleet');
  } catch (err) {
    const why = String(err?.message ?? err)
      .replace(/\s+/g, ' ')
      .slice(0, 300);
    process.stderr.write(`ffleet: bundle unavailable, running through tsx (${why})\n`);
  }
}
if (url && agentOnly) {
  const { runAgent } = await import(url);
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
  await runAgent(pkg.version);
} else if (url) {
  await import(url); // bin/ffleet.ts: parses process.argv and runs the command
} else {
  const { register } = await import('tsx/esm/api');
  register();
  await import('./ffleet.ts');
}
