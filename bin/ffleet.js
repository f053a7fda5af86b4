#!/usr/bin/env node
// The ffleet command. The code is TypeScript: `ffleet agent` runs from a bundle cached by
// bin/agent-bundle.js (built on first use and whenever a source changed; an agent's memory matters on
// an encode box), everything else, and the agent when the bundle cannot be built, through tsx.
// FFLEET_AGENT_BUNDLE=0 forces tsx for the agent too.
import { readFileSync } from 'node:fs';

const args = process.argv.slice(2);
let ran = false;
if (args.length === 1 && args[0] === 'agent' && process.env.FFLEET_AGENT_BUNDLE !== '0') {
  let url = null;
  try {
    const { agentBundle } = await import('./agent-bundle.js');
    url = await agentBundle();
  } catch (err) {
    process.stderr.write(`ffleet: agent bundle unavailable, running through tsx (${err.message})\n`);
  }
  if (url) {
    const { runAgent } = await import(url);
    const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
    await runAgent(pkg.version);
    ran = true;
  }
}
if (!ran) {
  const { register } = await import('tsx/esm/api');
  register();
  await import('./ffleet.ts');
}
