#!/usr/bin/env node
// The ffleet command. The code is TypeScript: every subcommand runs from a plain-JS bundle cached by
// bin/bundle.js (built on first use and whenever a source changed; no tsx loader in the process, which
// saves tens of MB of RSS and start-up CPU). When the bundle cannot be built the sources run through
// tsx instead. FFLEET_BUNDLE=0 forces tsx for every command, FFLEET_AGENT_BUNDLE=0 for `ffleet agent`.
import { readFileSync } from 'node:fs';
import { setFlagsFromString } from 'node:v8';

const args = process.argv.slice(2);
// `ffleet agent` alone has its own entry: no commander, no control-plane modules (agent RSS).
const agentOnly = args.length === 1 && args[0] === 'agent';
// V8 optimises a function once it has run ~66 kB of bytecode. An agent runs many different, short code
// paths per task (a claim, a process start, a report, MQTT messages) and few tasks a minute, so V8 kept
// compiling newly warm functions (on the main thread: --no-concurrent-recompilation) for its first
// thousands of tasks: a quarter of its CPU per short transcode, measured with perf on a 2-vCPU VM. At 30
// times that budget only really hot code (a watchfolder scan) is optimised: 11 % less agent CPU per task
// (paired agents on one queue). Not for the control plane: its API bursts need their code optimised
// early (POST /tasks, 16 clients: 1,325 -> 753 req/s with it). Set before any agent code runs; an
// --interrupt-budget given to node wins.
if (agentOnly && !process.execArgv.some((a) => a.startsWith('--interrupt-budget'))) {
  setFlagsFromString('--interrupt-budget=2000000');
}
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
