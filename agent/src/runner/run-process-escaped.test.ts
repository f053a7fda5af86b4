import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { RUN_MARK_VAR, runMark, STEP_MARK_VAR } from '../orphans.ts';
import { waitFor } from './fixtures/live-processes.ts';
import { nativeSpawnStatus } from './native-spawn.ts';
import { FENCED_OUT, type RunProcessOptions, runProcess as runWith } from './run-process.ts';

/**
 * What a step starts outside its process group (`setsid`, `setsid -f`) is found by the marks in its
 * environment and stopped by a cancel like the group. Real processes throughout; the escaped ones are
 * reparented to init, which may not reap them at once, so a zombie counts as gone.
 */

const hasSetsid = spawnSync('setsid', ['--version']).status === 0;

/** The mark the agent gives its runs, here this test process's. */
const MARK = runMark('escape-test', 'boot');
const env = { ...process.env, [RUN_MARK_VAR]: MARK };

/** The process runs and is not a zombie. */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    const state = stat.slice(stat.lastIndexOf(')') + 2)[0];
    return state !== 'Z' && state !== 'X';
  } catch {
    return false;
  }
}

/** Every pid a test saw: killed after it, whatever happened. */
const seen: number[] = [];
const bystanders: ChildProcess[] = [];
let dir = '';

beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'ffleet-escaped-'));
});

afterEach(() => {
  for (const pid of seen.splice(0)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {}
  }
  for (const c of bystanders.splice(0)) c.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

/** A `sleep` outside any step's group carrying these marks. */
function bystander(marks: Record<string, string>): number {
  const c = spawn('sleep', ['300'], { detached: true, stdio: 'ignore', env: { ...process.env, ...marks } });
  bystanders.push(c);
  return c.pid!;
}

/**
 * Processes that carry some of the marks of the run `stepId` but not both: this agent's mark with
 * another step's id or none, and this step's id under another agent's mark.
 */
const startBystanders = (stepId: string): number[] => [
  bystander({ [RUN_MARK_VAR]: MARK, [STEP_MARK_VAR]: 'another-step' }),
  bystander({ [RUN_MARK_VAR]: MARK }),
  bystander({ [RUN_MARK_VAR]: `${MARK}0`, [STEP_MARK_VAR]: stepId }),
  bystander({ [STEP_MARK_VAR]: stepId }),
];

/** `label pid…` lines the step prints, by label; their pids are noted for cleanup. */
function pidsByLabel(lines: string[]): Map<string, number[]> {
  const out = new Map<string, number[]>();
  for (const line of lines) {
    const [label, ...rest] = line.split(' ');
    if (!label || rest.length === 0 || !rest.every((p) => /^\d+$/.test(p))) continue;
    out.set(label, rest.map(Number));
  }
  return out;
}

/** Start escaped processes (each prints `label pid…` once it has left the group). */
const ESCAPE_PLAIN = `setsid sleep 300 & echo "plain $!"`;
const ESCAPE_FORKED = `setsid -f sh -c 'echo "forked $$"; exec sleep 300'`;
/** Ignores SIGTERM (the sleep inherits that): only SIGKILL ends it. */
const ESCAPE_STUBBORN = `setsid sh -c 'trap "" TERM; sleep 300 & echo "stubborn $$ $!"; wait' &`;

const spawners = nativeSpawnStatus().available ? (['node', 'native'] as const) : (['node'] as const);

describe.skipIf(!hasSetsid).each(spawners)(
  'runProcess, processes that left the group (%s spawner)',
  (spawner) => {
    const runProcess = (o: RunProcessOptions) => runWith({ spawner, env, ...o });

    /**
     * Run `script` (sh) with `$1` = the test's dir, and abort (with `reason`) once it printed every label
     * in `labels` and `ready`; `onReady` runs then, before the abort. Resolves once aborted.
     */
    async function cancelWhenReady(
      script: string,
      labels: string[],
      o: Pick<RunProcessOptions, 'graceMs' | 'killNow'> & {
        reason?: string;
        onReady?: (stepId: string) => void;
      },
    ) {
      const controller = new AbortController();
      const lines: string[] = [];
      let abortedAt = 0;
      const { onReady, reason, ...rest } = o;
      const result = runProcess({
        file: '/bin/sh',
        args: [
          '-c',
          `${script}\necho "step $${STEP_MARK_VAR}"\necho ready\nwhile :; do sleep 1; done`,
          'step',
          dir,
        ],
        signal: controller.signal,
        ...rest,
        onStdoutLine: (line) => {
          lines.push(line);
          const pids = pidsByLabel(lines);
          for (const p of pids.values()) for (const pid of p) if (!seen.includes(pid)) seen.push(pid);
          if (abortedAt || !lines.includes('ready') || labels.some((l) => !pids.has(l))) return;
          const stepId = lines.find((l) => l.startsWith('step '))!.slice(5);
          onReady?.(stepId);
          abortedAt = Date.now();
          controller.abort(reason);
        },
      });
      expect(await waitFor(() => abortedAt > 0, 10_000)).toBe(true);
      return { result, lines, abortedAt };
    }

    it('gives each run its own step id besides the unchanged run mark', async () => {
      const run = () =>
        runProcess({
          file: '/bin/sh',
          args: ['-c', `echo "$${RUN_MARK_VAR}"; echo "$${STEP_MARK_VAR}"`],
        });
      const [a, b] = await Promise.all([run(), run()]);
      const [markA, stepA] = a.stdoutTail.trim().split('\n');
      const [markB, stepB] = b.stdoutTail.trim().split('\n');
      expect(markA).toBe(MARK);
      expect(markB).toBe(MARK);
      expect(stepA).toMatch(/\S/);
      expect(stepB).toMatch(/\S/);
      expect(stepA).not.toBe(stepB);
      // Without the agent's mark the environment is passed as given (nothing to find the step by).
      const { [RUN_MARK_VAR]: _, ...unmarked } = env;
      const plain = await runProcess({
        file: '/bin/sh',
        args: ['-c', `echo "[$${STEP_MARK_VAR}]"`],
        env: unmarked,
      });
      expect(plain.stdoutTail).toBe('[]\n');
    });

    it('on cancel sends SIGTERM to what left the group with the group, SIGKILL after the grace, and spares other runs', async () => {
      const graceMs = 3000;
      let others: number[] = [];
      const term = path.join(dir, 'term');
      const run = await cancelWhenReady(
        [
          // Exits on SIGTERM, saying so; its child (in its new group) carries the marks too.
          `setsid sh -c 'trap "echo term > \\"$0\\"; exit 0" TERM; sleep 300 & echo "graceful $$ $!"; wait' "$1/term" &`,
          ESCAPE_PLAIN,
          ESCAPE_FORKED,
          ESCAPE_STUBBORN,
          // The step itself waits for SIGKILL (set after starting the others: an ignored signal is inherited).
          `trap '' TERM`,
        ].join('\n'),
        ['graceful', 'plain', 'forked', 'stubborn'],
        { graceMs, onReady: (stepId) => (others = startBystanders(stepId)) },
      );
      const pids = () => pidsByLabel(run.lines);
      expect(await waitFor(() => existsSync(term), graceMs - 1000)).toBe(true);
      const termed = [...pids().get('graceful')!, ...pids().get('plain')!, ...pids().get('forked')!];
      expect(await waitFor(() => termed.every((p) => !alive(p)), graceMs - 1000)).toBe(true);
      // Ignoring SIGTERM, the stubborn one is still there before the grace ends...
      const stubborn = pids().get('stubborn')!;
      expect(stubborn.every(alive)).toBe(true);
      const result = await run.result;
      expect(result).toMatchObject({ canceled: true, signal: 'SIGKILL' });
      expect(Date.now() - run.abortedAt).toBeGreaterThanOrEqual(graceMs - 20);
      // ... and gets SIGKILL with the group.
      expect(await waitFor(() => stubborn.every((p) => !alive(p)))).toBe(true);
      expect(others).toHaveLength(4);
      expect(others.every(alive)).toBe(true);
    });

    it('on cancel kills what left the group and ignored SIGTERM as soon as the step has ended, not after the grace', async () => {
      const graceMs = 30_000;
      let others: number[] = [];
      const run = await cancelWhenReady(ESCAPE_STUBBORN, ['stubborn'], {
        graceMs,
        onReady: (stepId) => (others = startBystanders(stepId)),
      });
      const result = await run.result;
      // The step's shell dies of the SIGTERM.
      expect(result).toMatchObject({ canceled: true, signal: 'SIGTERM' });
      const stubborn = pidsByLabel(run.lines).get('stubborn')!;
      expect(stubborn).toHaveLength(2);
      expect(await waitFor(() => stubborn.every((p) => !alive(p)))).toBe(true);
      expect(Date.now() - run.abortedAt).toBeLessThan(graceMs / 3);
      expect(others.every(alive)).toBe(true);
    });

    it.each(['killNow', 'fenced out'] as const)('kills what left the group at once: %s', async (how) => {
      const killNow = new AbortController();
      const run = await cancelWhenReady(
        `${ESCAPE_STUBBORN}\n${ESCAPE_FORKED}\ntrap '' TERM`,
        ['stubborn', 'forked'],
        {
          graceMs: 30_000,
          killNow: killNow.signal,
          ...(how === 'fenced out' ? { reason: FENCED_OUT } : {}),
          onReady: () => {
            if (how === 'killNow') setTimeout(() => killNow.abort(), 100);
          },
        },
      );
      const result = await run.result;
      expect(result).toMatchObject({ canceled: true, signal: 'SIGKILL' });
      const pids = pidsByLabel(run.lines);
      const escaped = [...pids.get('stubborn')!, ...pids.get('forked')!];
      expect(await waitFor(() => escaped.every((p) => !alive(p)))).toBe(true);
      expect(Date.now() - run.abortedAt).toBeLessThan(10_000);
    });

    /**
     * A step that ends by itself: the escaped process says where it is through a FIFO before the step
     * exits, so it has surely left the group by then.
     */
    const endsAfterEscaping = (more: string) =>
      runProcess({
        file: '/bin/sh',
        args: [
          '-c',
          `mkfifo "$1/sync"
setsid sh -c 'echo "escaped $$" > "$0"; exec sleep 300' "$1/sync" &
read line < "$1/sync"; echo "$line"
echo "step $${STEP_MARK_VAR}"
${more}
exit 0`,
          'step',
          dir,
        ],
      });

    it('kills what left the group when the step ends leaving processes in its group too', async () => {
      const result = await endsAfterEscaping('sleep 300 &');
      const escaped = pidsByLabel(result.stdoutTail.trim().split('\n')).get('escaped')!;
      seen.push(...escaped);
      expect(result).toMatchObject({ ok: true, leftovers: true });
      expect(await waitFor(() => escaped.every((p) => !alive(p)))).toBe(true);
    });

    it('does not look outside the group when the step ends with an empty group (no /proc scan on this path)', async () => {
      const result = await endsAfterEscaping('');
      const escaped = pidsByLabel(result.stdoutTail.trim().split('\n')).get('escaped')!;
      seen.push(...escaped);
      expect(result.ok).toBe(true);
      expect(result).not.toHaveProperty('leftovers');
      // A process the step deliberately detached (`setsid -f uploader`) outlives it.
      await new Promise((r) => setTimeout(r, 200));
      expect(escaped.every(alive)).toBe(true);
    });
  },
);
