import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
// @ts-expect-error plain-JS module of the ffleet command, no declarations
import { AGENT_INTERRUPT_BUDGET, EAGER_WASM_TIER_UP, v8FlagsFor } from '../../bin/v8-flags.js';

const flags = (args: string[], env: Record<string, string> = {}, execArgv: string[] = []): string[] =>
  v8FlagsFor(args, env, execArgv);

describe('v8FlagsFor (the V8 flags the ffleet command sets for itself)', () => {
  it('gives the agent the high interrupt budget, and nothing else', () => {
    expect(flags(['agent'])).toEqual([AGENT_INTERRUPT_BUDGET]);
    expect(flags(['agent'], {})).not.toContain(EAGER_WASM_TIER_UP);
  });

  it('optimises the embedded database once at load for the commands that run the control plane', () => {
    expect(flags(['control-plane'])).toEqual([EAGER_WASM_TIER_UP]);
    expect(flags(['start'])).toEqual([EAGER_WASM_TIER_UP]);
  });

  it('leaves V8 alone on an external PostgreSQL, for other commands, and when node was given the flag', () => {
    expect(flags(['control-plane'], { DATABASE_URL: 'postgres://127.0.0.1/test' })).toEqual([]);
    expect(flags(['start'], { DATABASE_URL: 'postgres://127.0.0.1/test' })).toEqual([]);
    expect(flags(['--version'])).toEqual([]);
    expect(flags([])).toEqual([]);
    expect(flags(['control-plane'], {}, ['--wasm-dynamic-tiering'])).toEqual([]);
    expect(flags(['control-plane'], {}, ['--no-wasm-dynamic-tiering'])).toEqual([]);
    expect(flags(['agent'], {}, ['--interrupt-budget=100000'])).toEqual([]);
    // `agent` with more arguments (e.g. --help) is commander's, not the agent's own entry.
    expect(flags(['agent', '--help'])).toEqual([]);
  });

  it('the flag names exist in this node (a misspelt flag would be ignored silently)', () => {
    const options = spawnSync(process.execPath, ['--v8-options'], { encoding: 'utf8' }).stdout;
    expect(options).toContain('--wasm-dynamic-tiering');
    expect(options).toContain('--interrupt-budget ');
  });
});
