// V8 flags the ffleet command sets for itself, before any of its code runs (bin/ffleet.js). Plain JS: it
// runs before the bundle or tsx is loaded.

/** Agent: optimise only really hot code (see below). */
export const AGENT_INTERRUPT_BUDGET = '--interrupt-budget=2000000';
/** Control plane on the embedded database: optimise PGlite's WebAssembly once, at load (see below). */
export const EAGER_WASM_TIER_UP = '--no-wasm-dynamic-tiering';

/** `ffleet agent` alone, which has its own entry (no commander, no control-plane modules: agent RSS). */
export const isAgentOnly = (args) => args.length === 1 && args[0] === 'agent';

/**
 * The flags for one invocation: `args` are the command's arguments (process.argv after the script),
 * `env` its environment, `execArgv` the flags given to node (a flag given there wins; node refuses both
 * flags in NODE_OPTIONS, so its command line is the only other place they can come from).
 *
 * `ffleet agent` alone: V8 optimises a function once it has run ~66 kB of bytecode. An agent runs many
 * different, short code paths per task (a claim, a process start, a report, MQTT messages) and few tasks
 * a minute, so V8 kept compiling newly warm functions (on the main thread: --no-concurrent-recompilation)
 * for its first thousands of tasks: a quarter of its CPU per short transcode, measured with perf on a
 * 2-vCPU VM. At 30 times that budget only really hot code (a watchfolder scan) is optimised: 11 % less
 * agent CPU per task (paired agents on one queue). Not for the control plane: its API bursts need their
 * code optimised early (POST /tasks, 16 clients: 1,325 -> 753 req/s with it).
 *
 * `ffleet start` and `ffleet control-plane` without DATABASE_URL load the embedded database (PGlite), a
 * PostgreSQL compiled to WebAssembly. V8 starts every WebAssembly function in its baseline compiler and
 * recompiles those that get hot with its optimising compiler, on background threads, as they get hot: in
 * bench:fleet (b) on a 2-vCPU VM that was still going on 600 tasks after start, taking the cores from
 * ffmpeg (perf: 13 % of the control plane's CPU between tasks 200 and 600; its threads other than the
 * main one took 470, 310, 260 ms per 200 tasks). Without dynamic tiering V8 optimises the whole module
 * once, in the background, when it is loaded: ~0.9 s more CPU and 0.25-0.5 s more until the API answers
 * at start, then 200, 270, 150 ms per 200 tasks; control-plane CPU per task went from 1.68-1.82 to
 * 1.52-1.57 times the agents' (A/B, three runs each; docs/performance-history.md, "A fourteenth instance").
 */
export function v8FlagsFor(args, env, execArgv) {
  const given = (prefixes) => execArgv.some((a) => prefixes.some((p) => a.startsWith(p)));
  if (isAgentOnly(args)) return given(['--interrupt-budget']) ? [] : [AGENT_INTERRUPT_BUDGET];
  const runsControlPlane = args[0] === 'start' || args[0] === 'control-plane';
  if (!runsControlPlane || env.DATABASE_URL) return [];
  return given(['--wasm', '--no-wasm']) ? [] : [EAGER_WASM_TIER_UP];
}
