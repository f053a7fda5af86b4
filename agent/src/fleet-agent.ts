import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { join } from 'node:path';
import {
  archName,
  type ClaimedTask,
  type InboxMessage,
  isDoneStatus,
  osName,
  PROTOCOL_VERSION,
  parseMessage,
  type RunningTask,
  TaskReport,
  type WatchfolderAssignment,
  type WatchfolderYield,
} from '@ffleet/shared';
import type { Logger } from 'pino';
import { keepBootId, previousBootId } from './boot-id.ts';
import type { AgentConfig } from './config.ts';
import { ContactWatch } from './contact-watch.ts';
import { killOrphanedRuns, RUN_MARK_VAR, runMark } from './orphans.ts';
import { Outbox, type PutResult } from './outbox/outbox.ts';
import { withoutCredentials } from './runner/child-env.ts';
import {
  coalescingReporter,
  FENCED_OUT,
  HANDED_BACK,
  hideProcessMemory,
  nativeSpawnStatus,
  type ReportBody,
  type RunStep,
  runTask,
} from './runner/index.ts';
import { protectedDirs } from './runner/protected-paths.ts';
import { findTranscoder, TranscoderSearch } from './runner/transcoder.ts';
import { AgentSession, type BirthInfo, reportKey } from './session/agent-session.ts';
import type { SubmitResult, WatchFile, WatchState } from './watch/watch-scanner.ts';
import type { WatchSupervisor } from './watch/watch-supervisor.ts';

/**
 * Even without a work hint, an agent with free slots asks for work this often: a lost hint costs at
 * most this. Hints are rarely lost (they ride the agent's open connection, and an agent claims again
 * whenever it reconnects), while every poll of an idle agent is a claim transaction on the control
 * plane: at 2 s, 500 idle agents cost it 250 transactions a second.
 */
const CLAIM_POLL_MS = 10_000;
/**
 * An operator's cancel read within this long after this agent was out of touch (frozen, disconnected)
 * stops the run but keeps its partial output: the control plane finishes a cancel or a DELETE without
 * an agent that does not answer (after the lease, or 3 s), and the path may be new work's by now.
 */
const LATE_CANCEL_MS = 5_000;
/**
 * A canceled transcode still running this long after the cancel is killed and keeps its partial
 * output: the control plane answers a DELETE after waiting 3 s for the agent and then deletes the task,
 * and a new task may write the same path from then on (a transcoder let run past that, stopped or slow
 * to finish its file, wrote its trailer into the new task's output).
 */
const OWN_OUTPUT_AFTER_CANCEL_MS = 2_500;

/**
 * Refused by the broker (bad credentials: a rotated agent token, `FFLEET_AGENT_AUTH=per-agent` while
 * this box still presents the fleet's token), an agent is cut off from a control plane that hears the
 * rest of the fleet: its leases run out and its tasks go to other agents, which write the same output
 * paths. Its runs are stopped this long before their leases can have run out (counted from the last
 * heartbeat, which may be a heartbeat interval before the connection was lost).
 */
const REFUSED_STOP_MARGIN_MS = 1_000;

/**
 * A run's question "is this attempt still mine?" (#askStillOurs) that could not be stored in the outbox
 * (a full disk) lives in the outbox's memory only, which may drop it (its bound): it is asked again this
 * long later.
 */
const ASK_AGAIN_MS = 5_000;

/**
 * How long a run may go without the control plane's word on its attempt (the claim's answer, an ack of
 * one of its reports) before its lease may have run out: past it, the run's next step waits for that
 * word (#beforeStep). The agent's heartbeat renews the lease every `heartbeatMs`, so the lease lasts at
 * least `leaseTtlMs - heartbeatMs` past the last word, one heartbeat less if the last one (QoS 0) was
 * lost; and never more than half the lease, which leaves room for what the agent cannot see (the control
 * plane's commits and sweeps running late). Erring low costs a round trip to the control plane at a step
 * boundary; erring high starts a step on an output path another attempt owns.
 */
const stepGateAfterMs = (leaseTtlMs: number, heartbeatMs: number): number =>
  Math.max(0, Math.min(leaseTtlMs / 2, leaseTtlMs - 2 * heartbeatMs));

/** A claim request unanswered this long is given up (the next poll asks again). */
const CLAIM_TIMEOUT_MS = 5_000;
/** Unanswered claim requests whose send time is kept (answers to older ones are taken as on time). */
const CLAIMS_REMEMBERED = 64;
/** Tasks whose newest attempt started here is remembered, to drop a claim answer delivered twice. */
const STARTED_MEMORY = 4_096;
/**
 * How long a watchfolder file submission waits for the control plane's commit once its request is no
 * longer in the outbox (i.e. it could not be stored). While it is stored the session resends it until
 * answered, so the wait goes on (up to WATCH_SUBMIT_MAX_WAIT_MS): under a burst the control plane may
 * take longer than this to reach it, and giving up would only submit the file again behind the backlog.
 */
const WATCH_SUBMIT_TIMEOUT_MS = 15_000;
/** A stored submission unanswered this long is given up (the file is submitted again at a later scan). */
const WATCH_SUBMIT_MAX_WAIT_MS = 10 * 60_000;
/** Watch scan state (lastCheck/error) is sent at most this often per folder unless the error changes. */
const WATCH_STATE_EVERY_MS = 2_000;

/** Why a run of this agent's previous process goes back to the queue when the next one starts. */
const STRANDED = 'the process of this agent that ran it ended without finishing it (killed or crashed)';

/** Why a run goes back to the queue on a forced stop. */
const FORCED_STOP = 'the agent was told to stop now (a second SIGTERM or a forced stop)';

/**
 * A stopping agent (a first SIGTERM: running tasks finish) whose run waits at its step gate this long for
 * a control plane it cannot reach hands the task back instead: the drain would otherwise never end.
 */
const DRAIN_GATE_WAIT_MS = 30_000;
const DRAIN_GATE_GAVE_UP =
  'the agent is stopping and the control plane could not confirm the attempt before the next step';

/** Sends one report of a run (its task, attempt, lease and next seq added); resolves once it is stored. */
type ReportSend = (body: ReportBody) => Promise<PutResult>;

type Run = {
  claimed: ClaimedTask;
  seq: number;
  abort: AbortController;
  handingBack: boolean;
  /** Why it is handed back: the last line of the attempt's logs. */
  handBackWhy?: string;
  done: Promise<void>;
  /** Why the canceled run's partial output must stay: the path may be other work's by now. */
  keepsOutput?: string;
  /** Set on an operator's cancel: OWN_OUTPUT_AFTER_CANCEL_MS later the run gives the output up. */
  giveUpTimer?: NodeJS.Timeout;
  /** Aborted then: the transcoder's grace is cut short, so it writes no trailer into other work's file. */
  killNow: AbortController;
  /**
   * Since when (performance.now()) the control plane has confirmed the attempt as this agent's: the
   * claim's answer, the sending of a report it acked, a question at the step gate it answered.
   * `gateAfterMs` or more since then makes the next step wait for the control plane (#beforeStep).
   */
  confirmedAt: number;
  gateAfterMs: number;
  /** Seq → when (performance.now()) each of the run's reports not acknowledged yet was sent. */
  sentAt: Map<number, number>;
  /** While the run waits at its step gate: hands it back if the agent is (or starts) stopping meanwhile. */
  gateDrainTimer?: () => void;
};

export type FleetAgentOptions = {
  config: AgentConfig;
  logger: Logger;
  version: string;
  /**
   * The control plane refused this very process (another one holds its name) and it has left: its
   * session is closed and its runs stopped. `ffleet agent` exits; the all-in-one keeps its control plane.
   */
  onRefused?: (reason: string) => void;
  /**
   * While no working transcoder is found, it is looked for again this often (default
   * TRANSCODER_RETRY_MS, 10 s); tests shorten it.
   */
  transcoderRetryMs?: number;
};

/**
 * One encode box: MQTT session, claims, task runs, cancel, hand-back on forced shutdown, watchfolder
 * scanning. Everything the control plane must know is reported through the session's outbox.
 */
export class FleetAgent {
  readonly #cfg: AgentConfig;
  /**
   * Bound to this agent's name only: each part (session, outbox, runner, watchfolders) adds its own
   * `component`. A pino child repeats a key its parent already binds, and a log line with a key twice is
   * refused by shippers that check (Elasticsearch's strict duplicate detection).
   */
  readonly #base: Logger;
  readonly #log: Logger;
  readonly #version: string;
  readonly #runs = new Map<string, Run>();
  readonly #outbox: Outbox;
  readonly #bootId = randomUUID();
  #session: AgentSession | null = null;
  #watch: WatchSupervisor | null = null;
  /** Set once the search has found a working transcoder (this agent claims only then). */
  #transcoder: { path: string; version: string; encoders: string[]; hwaccels: string[] } | null = null;
  #transcoderError = '';
  /** Finds the transcoder, and keeps looking every few seconds while there is none that works. */
  readonly #search: TranscoderSearch;
  #slots: number;
  #labels: string[];
  #paused = false;
  #draining = false;
  /** A forced stop (second SIGTERM): every run, also one a claim answered late starts, is handed back. */
  #handingBack = false;
  #refused = '';
  #claimPending: string | null = null;
  /** Waiting for the claim in flight to be answered or given up (see #claimSettled). */
  readonly #claimWaiters: Array<() => void> = [];
  /** A reason to claim (hint, freed slot, config) came while a claim was pending: claim again on its answer. */
  #claimAgain = false;
  /** The latest assigned watchfolders; the watch code is loaded only once there is one. */
  #watchAssigned: readonly WatchfolderAssignment[] = [];
  /** Watchfolders scanned elsewhere whose folders overlap these: their files are left to them. */
  #watchYields: readonly WatchfolderYield[] = [];
  #watchLoading: Promise<void> | null = null;
  #claimTimer: NodeJS.Timeout | null = null;
  #pollTimer: NodeJS.Timeout | null = null;
  /**
   * Spells out of touch with the control plane (frozen, disconnected): see #onInbox's task.cancel and
   * #beforeStep. It also holds when the connection was lost: a lease counts from about then.
   */
  #contact: ContactWatch | null = null;
  /** The broker's answer to the last login attempt when it refused it (4 or 5); undefined once let in. */
  #refusedCode: number | undefined;
  /** Stops the runs of an agent the broker keeps refusing (#brokerRefused). */
  #refusedTimer: NodeJS.Timeout | undefined;
  #lastState = new Map<string, { at: number; error: string }>();
  /** Report writes not yet on disk: stop() waits for them, or a drain would exit before its result is sent. */
  readonly #puts = new Set<Promise<unknown>>();
  /** `taskId:attempt` → seq of the run's last report, for runs that ended and await that report's ack. */
  readonly #lastSeq = new Map<string, number>();
  /** A report's key (reportKey) → what its ack wakes: runs waiting at their step gate (#askStillOurs). */
  readonly #ackWaiters = new Map<string, () => void>();
  #drainGateWaitMs = DRAIN_GATE_WAIT_MS;
  /** Claim requests not yet answered → when they left (performance.now()), to spot answers that come too late. */
  readonly #claimSentAt = new Map<string, number>();
  /**
   * Task id → the newest attempt started here (the last STARTED_MEMORY tasks): a claim answer delivered
   * again after its run ended (MQTT is at-least-once: the answer comes back when our acknowledgement
   * was lost with the connection) must not run that attempt a second time.
   */
  readonly #started = new Map<string, number>();

  readonly #onRefused: ((reason: string) => void) | undefined;
  /** Where no task may write (its data dir: outbox, lock; in the all-in-one the database and token too). */
  readonly #protectedDirs: readonly string[];

  constructor(opts: FleetAgentOptions) {
    this.#cfg = opts.config;
    this.#onRefused = opts.onRefused;
    this.#protectedDirs = protectedDirs([opts.config.dataDir]);
    this.#version = opts.version;
    this.#base = opts.logger.child({ agent: opts.config.name });
    this.#log = this.#base.child({ component: 'agent' });
    this.#slots = opts.config.slots;
    this.#labels = opts.config.labels;
    this.#outbox = new Outbox({
      dir: join(this.#cfg.dataDir, `agent-${this.#cfg.name}`, 'outbox'),
      logger: this.#base,
    });
    this.#search = new TranscoderSearch({
      find: (signal) =>
        findTranscoder(this.#cfg.env, {
          signal,
          childEnv: withoutCredentials({
            ...this.#cfg.env,
            [RUN_MARK_VAR]: runMark(this.#cfg.name, this.#bootId),
          }),
        }),
      logger: this.#log,
      onChange: () => this.#transcoderChanged(),
      retryMs: opts.transcoderRetryMs,
    });
  }

  get name(): string {
    return this.#cfg.name;
  }

  get runningCount(): number {
    return this.#runs.size;
  }

  async start(): Promise<void> {
    const orphans = killOrphanedRuns(this.#cfg.name, this.#bootId);
    if (orphans.length)
      this.#log.warn({ groups: orphans }, 'killed processes a previous run of this agent left behind');
    await this.#outbox.start();
    await this.#handBackStranded();
    if (this.#cfg.slots === 0)
      this.#log.warn(
        'FFLEET_AGENT_SLOTS is 0: this agent claims no task until its slots are raised (PATCH /api/v1/agents/{id} {"slots": n})',
      );
    const spawner = nativeSpawnStatus();
    if (spawner.available) this.#log.info('processes start through posix_spawn (native spawner)');
    else
      this.#log.info(
        { reason: spawner.reason },
        "processes start through Node's spawn (native spawner not used)",
      );
    // Before any task runs: its ffmpeg and scripts run as this user and could read the token from
    // /proc/<this pid>/environ otherwise.
    const memory = hideProcessMemory();
    if (!memory.hidden)
      this.#log.warn(
        { reason: memory.reason },
        "this process's environment (its token) stays readable to other processes of its user, the tasks' ffmpeg and scripts included",
      );
    const ownDir = join(this.#cfg.dataDir, `agent-${this.#cfg.name}`);
    const previous = previousBootId(ownDir);
    // The first attempt is waited for (up to TRANSCODER_HANG_MS), so the first birth names the transcoder.
    await this.#search.start();
    const session = new AgentSession({
      url: this.#cfg.mqttUrl,
      name: this.#cfg.name,
      token: this.#cfg.token,
      birth: () => this.#birth(),
      running: () => this.#running(),
      freeSlots: () => this.#free(),
      heartbeatMs: this.#cfg.heartbeatMs,
      outbox: this.#outbox,
      logger: this.#base,
      bootId: this.#bootId,
      ...(previous ? { previousBootId: previous } : {}),
    });
    this.#session = session;
    session.on('inbox', (m) => this.#onInbox(m));
    session.on('work', () => this.#claim());
    this.#contact = new ContactWatch({
      onStall: (ms) =>
        this.#log.warn(
          { stalledMs: Math.round(ms) },
          'this agent did not run for a while (stopped or starved)',
        ),
    });
    session.on('refused', (code) => this.#brokerRefused(code));
    let bootIdKept = false;
    session.on('connection', (up) => {
      if (up && !bootIdKept) {
        // Once the control plane can have heard of this process: the next restart names it.
        bootIdKept = true;
        const error = keepBootId(ownDir, this.#bootId);
        if (error)
          this.#log.warn(
            { error },
            'cannot keep the boot id in the data dir: after a restart, the tasks this process held wait for their leases',
          );
      }
      if (!up) {
        this.#contact?.disconnected();
        return;
      }
      this.#contact?.connected();
      this.#refusedCode = undefined;
      clearTimeout(this.#refusedTimer);
      this.#refusedTimer = undefined;
      this.#claim();
    });
    session.start();
    this.#pollTimer = setInterval(() => this.#claim(), CLAIM_POLL_MS);
    this.#pollTimer.unref();
  }

  /**
   * First SIGTERM: stop claiming, let running tasks finish, then leave. `gateWaitMs`: how long a run
   * waiting at its step gate may hold the drain (DRAIN_GATE_WAIT_MS).
   */
  async drain(opts: { gateWaitMs?: number } = {}): Promise<void> {
    this.#drainGateWaitMs = opts.gateWaitMs ?? DRAIN_GATE_WAIT_MS;
    this.#startDraining();
    for (const r of this.#runs.values()) r.gateDrainTimer?.();
    if (this.#refusedCode !== undefined) this.#stopRefusedRuns(this.#refusedCode);
    this.#applyWatch([]);
    // A claim the control plane granted just before the signal: its tasks are ours (RUNNING on the
    // control plane) and run like the others; leaving before its answer would strand them until their
    // lease expired.
    await this.#claimSettled();
    await Promise.allSettled([...this.#runs.values()].map((r) => r.done));
  }

  /** Second SIGTERM: kill running work and hand the tasks back to the queue (not a failure). */
  async handBack(): Promise<void> {
    this.#startDraining();
    this.#handingBack = true;
    for (const r of this.#runs.values()) this.#handBackRun(r, FORCED_STOP);
    // Tasks of a claim answered meanwhile are handed back as they arrive (#startRun).
    await this.#claimSettled();
    await Promise.allSettled([...this.#runs.values()].map((r) => r.done));
  }

  /**
   * A canceled run's output path may be other work's by now: its transcoder is killed at once (no
   * trailer written into that file) and its partial output kept (RunTaskOptions.outputKeptBecause).
   */
  #giveUpOutput(r: Run, why: string): void {
    if (r.keepsOutput) return;
    r.keepsOutput = why;
    clearTimeout(r.giveUpTimer);
    r.killNow.abort();
  }

  /** Where unsent reports stay when this process leaves: on disk, but for those the disk refused. */
  #whereUnsentStay(): string {
    return this.#outbox.unsaved() > 0
      ? 'they stay on disk for the next start, but for those the disk refused, which the outbox tries to write once more as it stops'
      : 'they stay on disk for the next start';
  }

  /**
   * The step gate, asked by a run before each of its steps starts (RunTaskOptions.beforeStep). If the
   * control plane has not confirmed the attempt for long enough that its lease may have run out, it may
   * have given the task to another attempt, which writes the same output; the cancel that says so comes
   * only in answer to what this agent sends next, too late once the step has started. Then the step
   * waits for the control plane's word (#confirmAttempt). The attempt is confirmed by the claim's answer
   * and by every ack of the run's reports (a transcode reports its progress every second), so a step
   * asks after a long pre-processing script, and after any spell out of touch: frozen (SIGSTOP, a paused
   * VM), cut off from the broker, or cut off without knowing it yet (a silent partition that only the
   * MQTT keepalive finds, up to 45 s later). Otherwise nothing waits: one comparison per step.
   */
  #beforeStep(run: Run, step: RunStep, send: ReportSend): Promise<void> | undefined {
    const quietMs = performance.now() - run.confirmedAt;
    return quietMs >= run.gateAfterMs ? this.#confirmAttempt(run, step, quietMs, send) : undefined;
  }

  /**
   * Wait until the control plane confirms the run's attempt (the step starts) or the run is stopped: by
   * the control plane's cancel of the stale attempt (the run ends canceled with the step not started, as
   * a fenced-out run does), by an operator's cancel, or by a hand-back (a second SIGTERM, a forced stop).
   * While the control plane cannot be reached it waits: it cannot say whose the output path is.
   */
  async #confirmAttempt(run: Run, step: RunStep, quietMs: number, send: ReportSend): Promise<void> {
    const { task, attempt } = run.claimed;
    const signal = run.abort.signal;
    if (signal.aborted) return;
    const fields = { taskId: task.id, attempt, step };
    // A spell out of touch this agent saw (in the quiet) is worth a line; a long script's quiet alone is
    // the usual case (debug).
    const away = this.#contact?.recentlyAway(quietMs) ?? false;
    this.#log[away ? 'info' : 'debug'](
      { ...fields, quietMs: Math.round(quietMs), leaseTtlMs: run.claimed.leaseTtlMs },
      away
        ? 'this agent was out of touch long enough for the lease to have run out: the step waits until the control plane confirms the attempt'
        : 'no word from the control plane on this attempt for half its lease: the step waits until the control plane confirms the attempt',
    );
    const waitStarted = performance.now();
    // A drain waits for its runs: one waiting here for a control plane out of reach would hold it forever.
    let drainTimer: NodeJS.Timeout | undefined;
    run.gateDrainTimer = () => {
      drainTimer ??= setTimeout(() => this.#handBackRun(run, DRAIN_GATE_GAVE_UP), this.#drainGateWaitMs);
    };
    if (this.#draining) run.gateDrainTimer();
    // Asked again when the answer took so long that the lease may have run out since the question left
    // (frozen before its answer was read, or cut off and the question sent after the reconnect).
    while (performance.now() - run.confirmedAt >= run.gateAfterMs && !signal.aborted) {
      const askedAt = performance.now();
      if (await this.#askStillOurs(run, send)) run.confirmedAt = Math.max(run.confirmedAt, askedAt);
    }
    run.gateDrainTimer = undefined;
    clearTimeout(drainTimer);
    const waitedMs = Math.round(performance.now() - waitStarted);
    const done = { ...fields, waitedMs };
    if (!signal.aborted)
      this.#log[away || waitedMs >= 1_000 ? 'info' : 'debug'](
        done,
        'the control plane confirmed the attempt: the step starts',
      );
    else if (signal.reason === FENCED_OUT)
      this.#log.warn(
        done,
        'the control plane gave the task to another attempt while this agent was out of touch: the step is not started',
      );
    else this.#log.info(done, 'the run was stopped while the step waited for the control plane: not started');
  }

  /**
   * Ask the control plane whether the run's attempt is still this agent's: true once it said so; false
   * when the run was stopped meanwhile, or (after ASK_AGAIN_MS) when the question could not be stored.
   *
   * The question is a report, the smallest one the control plane fences: a log report without text,
   * which renews a current attempt's lease and stores nothing. The answer is its ack. A control plane
   * sends the cancel a report calls for before that report's ack (fleet.ts #reportApplied), so an ack
   * with no cancel before it says the report found the attempt current. One from before that rule sends
   * the cancel just after the ack: so a second such report follows the first, and the answer is the
   * second one's ack. A control plane handles one agent's reports in order and answers each before the
   * next, so the first one's cancel is read before that ack whichever control plane sent it. Both stay in
   * the outbox until acknowledged: asked while the broker cannot be reached, they go once it can.
   */
  #askStillOurs(run: Run, send: ReportSend): Promise<boolean> {
    const signal = run.abort.signal;
    if (signal.aborted) return Promise.resolve(false);
    const { task, attempt } = run.claimed;
    const question = send({ kind: 'log', step: 'agent', text: '' });
    const key = reportKey({ taskId: task.id, attempt, seq: run.seq });
    const barrier = send({ kind: 'log', step: 'agent', text: '' });
    return new Promise<boolean>((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      let settled = false;
      const settle = (answer: boolean) => {
        if (settled) return;
        settled = true;
        this.#ackWaiters.delete(key);
        signal.removeEventListener('abort', stopped);
        clearTimeout(timer);
        resolve(answer);
      };
      const stopped = () => settle(false);
      this.#ackWaiters.set(key, () => settle(true));
      signal.addEventListener('abort', stopped, { once: true });
      void Promise.all([question, barrier]).then((puts) => {
        // Not on disk: the outbox keeps it in memory and sends it again, but may drop it (its memory bound),
        // so its ack may never come.
        if (settled || puts.every((p) => p.ok)) return;
        timer = setTimeout(stopped, ASK_AGAIN_MS);
        timer.unref();
      });
    });
  }

  /**
   * The broker refused this agent's login (again). If it has runs, they are handed back (killed at once,
   * their partial output kept) just before their leases can have run out: the control plane, which hears
   * nothing from this box, then gives the tasks to other agents, which write the same paths. Handed
   * back, not canceled: if the agent gets in again before that, its report puts each task back in the
   * queue (a cancel would end it for good). Draining (SIGTERM), it does not wait for them: their results
   * could not reach the control plane.
   */
  #brokerRefused(code: number): void {
    this.#refusedCode = code;
    if (this.#refusedTimer || this.#runs.size === 0) return;
    const since = this.#contact?.disconnected() ?? performance.now();
    const leaseMs = Math.min(...[...this.#runs.values()].map((r) => r.claimed.leaseTtlMs));
    const waitMs = this.#draining
      ? 0
      : Math.max(0, since + leaseMs - this.#cfg.heartbeatMs - REFUSED_STOP_MARGIN_MS - performance.now());
    this.#refusedTimer = setTimeout(() => {
      this.#refusedTimer = undefined;
      this.#stopRefusedRuns(code);
    }, waitMs);
    this.#refusedTimer.unref();
  }

  #stopRefusedRuns(code: number): void {
    if (this.#session?.connected) return;
    const runs = [...this.#runs.values()].filter((r) => r.keepsOutput === undefined);
    if (runs.length === 0) return;
    this.#log.error(
      { code, tasks: runs.map((r) => r.claimed.task.id) },
      this.#draining
        ? 'the broker refuses this agent, so its tasks cannot finish for the control plane: handing them back now (partial output kept)'
        : 'the broker keeps refusing this agent while it runs tasks: their leases run out and the control plane gives them to other agents; handing them back now (partial output kept)',
    );
    for (const r of runs) {
      r.keepsOutput = 'the broker refused this agent, and the task goes to another attempt';
      clearTimeout(r.giveUpTimer);
      // An operator's cancel in its grace stays a cancel; anything else goes back to the queue.
      if (!r.abort.signal.aborted)
        this.#handBackRun(r, 'the broker refuses this agent, so the task goes to another attempt');
      r.killNow.abort(); // at once: no trailer written into a path that may be the next attempt's
    }
  }

  #handBackRun(r: Run, why: string): void {
    r.handBackWhy ??= why;
    r.handingBack = true;
    r.abort.abort(HANDED_BACK);
  }

  /**
   * Refused for sharing its name with a process that was there first: stop at once, without an
   * `offline` status (the name's status is the other process's) and without the Last Will (a clean
   * disconnect), kill running work (the control plane requeues it: it is not ours any more) and tell
   * the host.
   */
  async #leave(reason: string): Promise<void> {
    this.#refused = reason;
    this.#log.error({ reason }, 'the control plane refused this agent process: leaving');
    await this.#quiesce();
    for (const r of this.#runs.values()) r.abort.abort(FENCED_OUT);
    await Promise.allSettled([...this.#runs.values()].map((r) => r.done));
    await this.#session?.stop({ graceful: false, silent: true });
    this.#contact?.stop();
    await this.#outbox.stop();
    this.#onRefused?.(reason);
  }

  /** Claim nothing more, ever: the claim timers and the watchfolder scans stop. */
  async #quiesce(): Promise<void> {
    this.#draining = true;
    this.#search.stop();
    if (this.#pollTimer) clearInterval(this.#pollTimer);
    // The claim timer stays: it gives up a claim in flight, which drain and handBack wait for.
    await this.#watchLoading;
    await this.#watch?.stopAll();
  }

  /**
   * Stop everything. Waits up to `flushMs` (default 3 s) for the control plane to acknowledge what the
   * outbox holds; while the broker is unreachable only with `evenDisconnected` (a drain: the results of
   * the tasks it let finish are worth waiting for, since another agent would otherwise run them again
   * once their lease expired). What is left stays on disk and is sent when this agent next starts.
   */
  async stop(opts: { flushMs?: number; evenDisconnected?: boolean } = {}): Promise<void> {
    clearTimeout(this.#refusedTimer);
    await this.#quiesce();
    await this.handBack();
    await Promise.allSettled([...this.#puts]);
    const flushMs = opts.flushMs ?? 3_000;
    const deadline = Date.now() + flushMs;
    let told = false;
    while (this.#outbox.size() > 0 && Date.now() < deadline) {
      if (!this.#session?.connected) {
        if (!opts.evenDisconnected) break;
        if (this.#refusedCode !== undefined) {
          // Waiting cannot help: the broker does not let this agent in with its present token.
          this.#log.warn(
            { unsent: this.#outbox.size(), notOnDisk: this.#outbox.unsaved() },
            `the broker refuses this agent, so the control plane cannot get the last reports: ${this.#whereUnsentStay()}`,
          );
          break;
        }
        if (!told) {
          told = true;
          this.#log.warn(
            {
              unsent: this.#outbox.size(),
              notOnDisk: this.#outbox.unsaved(),
              waitS: Math.round(flushMs / 1000),
            },
            `the control plane has not got the last reports yet: waiting for it (signal again to leave now; ${this.#whereUnsentStay()})`,
          );
        }
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    await this.#session?.stop({ graceful: true });
    this.#contact?.stop();
    await this.#outbox.stop();
  }

  /**
   * The transcoder was found (an agent that started without one: it is announced, through the retained
   * birth, and claiming begins), or the reason there is none changed (the agents API shows the new one).
   */
  #transcoderChanged(): void {
    const found = this.#search.found;
    this.#transcoder = found
      ? { path: found.path, version: found.version, encoders: found.encoders, hwaccels: found.hwaccels }
      : null;
    this.#transcoderError = this.#search.error;
    this.#session?.updateBirth();
    this.#claim();
  }

  /**
   * Claim nothing more, and say so: the retained birth is republished with `draining`, so the fleet
   * shows the agent `draining` (not `online`) for as long as its running tasks take, and its
   * watchfolders move to another agent now rather than when it leaves.
   */
  #startDraining(): void {
    if (this.#draining) return;
    this.#draining = true;
    this.#search.stop();
    this.#session?.updateBirth();
  }

  #birth(): BirthInfo {
    return {
      version: this.#version,
      protocol: PROTOCOL_VERSION,
      hostname: hostname(),
      os: osName(),
      arch: archName(),
      transcoder: this.#transcoder
        ? { path: this.#transcoder.path, version: this.#transcoder.version }
        : null,
      ...(this.#transcoderError ? { transcoderError: this.#transcoderError } : {}),
      encoders: this.#transcoder?.encoders ?? [],
      hwaccels: this.#transcoder?.hwaccels ?? [],
      labels: this.#cfg.labels,
      slots: this.#cfg.slots,
      ...(this.#draining ? { draining: true } : {}),
    };
  }

  /**
   * What the agent still holds: its live runs, plus runs whose result (final report) is not yet
   * acknowledged. A run that ended while the control plane could not hear us (broker or control-plane
   * restart, or before this process restarted) is listed until its result is delivered; otherwise the
   * hello after reconnecting would have the task requeued as lost just before the replay delivers it.
   */
  #running(): RunningTask[] {
    const held = new Map<string, RunningTask>();
    for (const r of this.#runs.values()) {
      held.set(r.claimed.task.id, {
        taskId: r.claimed.task.id,
        attempt: r.claimed.attempt,
        leaseToken: r.claimed.leaseToken,
      });
    }
    for (const e of this.#outbox.list()) {
      if (!e.topic.endsWith('/events') || !/"status":"(DONE_|QUEUED)/.test(e.payload)) continue;
      const r = parseMessage(TaskReport, e.payload);
      if (r?.kind !== 'update' || !r.patch.status) continue;
      if (!isDoneStatus(r.patch.status) && r.patch.status !== 'QUEUED') continue;
      if (!held.has(r.taskId))
        held.set(r.taskId, { taskId: r.taskId, attempt: r.attempt, leaseToken: r.leaseToken });
    }
    return [...held.values()];
  }

  /**
   * At start: the tasks a previous process of this agent was running when it died, i.e. whose newest
   * report in the outbox is not a final one. That process is gone (one process holds an outbox, and its
   * runs were killed above), so each goes back to the queue with a hand-back report after them. Left
   * alone, the replay of the dead process's progress reports renewed their leases, and they stayed
   * RUNNING until the lease ran out (30 s by default) instead of the hello's 5 s grace. A hand-back the
   * control plane no longer matches (the task finished, or went to another attempt) changes nothing.
   */
  async #handBackStranded(): Promise<void> {
    const newest = new Map<string, { report: TaskReport; topic: string }>();
    for (const e of this.#outbox.list()) {
      if (!e.topic.endsWith('/events')) continue;
      const report = parseMessage(TaskReport, e.payload);
      if (!report) continue;
      const seen = newest.get(report.taskId);
      if (
        !seen ||
        report.attempt > seen.report.attempt ||
        (report.attempt === seen.report.attempt && report.seq > seen.report.seq)
      )
        newest.set(report.taskId, { report, topic: e.topic });
    }
    for (const { report, topic } of newest.values()) {
      const status = report.kind === 'update' ? report.patch.status : undefined;
      if (status && (isDoneStatus(status) || status === 'QUEUED')) continue;
      const handBack: TaskReport = {
        taskId: report.taskId,
        attempt: report.attempt,
        leaseToken: report.leaseToken,
        seq: report.seq + 1,
        kind: 'update',
        patch: { status: 'QUEUED' },
        logs: [{ step: 'agent', text: `handed back: ${STRANDED}\n` }],
      };
      const put = await this.#outbox.put(reportKey(handBack), topic, JSON.stringify(handBack));
      if (put.ok)
        this.#log.warn(
          { taskId: report.taskId, attempt: report.attempt },
          'handing back a task the previous process of this agent was running',
        );
      else
        this.#log.error(
          { taskId: report.taskId, error: put.error },
          'could not store the hand-back of a stranded task: it is sent from memory once connected',
        );
    }
  }

  #free(): number {
    if (this.#draining || this.#paused || !this.#transcoder || this.#refused) return 0;
    return Math.max(0, this.#slots - this.#runs.size);
  }

  #claim(): void {
    const free = this.#free();
    if (free <= 0 || !this.#session?.connected) return;
    if (this.#claimPending) {
      this.#claimAgain = true;
      return;
    }
    this.#claimAgain = false;
    const requestId = randomUUID();
    this.#claimPending = requestId;
    this.#claimSentAt.set(requestId, performance.now());
    if (this.#claimSentAt.size > CLAIMS_REMEMBERED)
      this.#claimSentAt.delete(this.#claimSentAt.keys().next().value!);
    if (this.#claimTimer) clearTimeout(this.#claimTimer);
    this.#claimTimer = setTimeout(() => this.#settleClaim(requestId), CLAIM_TIMEOUT_MS);
    this.#claimTimer.unref();
    // Through the session's ordered publisher: a claim made as a run ends leaves after that run's final
    // report, so the control plane (which handles an agent's messages in order) already sees the slot free.
    // The runs it still holds: back from a freeze, a claim can leave before a finished run's result,
    // and that run's task (given up meanwhile) must not come back as a new attempt (claim.ts).
    const holding = this.#runs.size ? { holding: [...this.#runs.keys()] } : {};
    const claim = { type: 'claim' as const, requestId, max: free, ...holding };
    void this.#session.request(claim, { durable: false }).then((r) => {
      if (!r.ok) this.#settleClaim(requestId);
    });
  }

  /** The claim `requestId` is answered, failed or given up: no claim is in flight any more. */
  #settleClaim(requestId: string): void {
    if (this.#claimPending !== requestId) return;
    this.#claimPending = null;
    if (this.#claimTimer) clearTimeout(this.#claimTimer);
    for (const resolve of this.#claimWaiters.splice(0)) resolve();
  }

  /** Resolves once no claim is in flight (at most CLAIM_TIMEOUT_MS after it was sent). */
  #claimSettled(): Promise<void> {
    if (!this.#claimPending) return Promise.resolve();
    return new Promise((resolve) => this.#claimWaiters.push(resolve));
  }

  #applyWatch(list: readonly WatchfolderAssignment[], yieldTo: readonly WatchfolderYield[] = []): void {
    this.#watchAssigned = list;
    this.#watchYields = yieldTo;
    if (this.#watch) {
      this.#watch.apply(list, yieldTo);
      return;
    }
    if (list.length === 0 || this.#watchLoading || this.#draining) return;
    // Loaded on first use: most agents never scan a watchfolder, and the code (with chokidar) costs RSS.
    this.#watchLoading = import('./watch/watch-supervisor.ts').then(
      ({ WatchSupervisor }) => {
        if (this.#draining) return;
        this.#watch = new WatchSupervisor({
          submit: (f) => this.#submitWatchFile(f),
          onState: (s) => this.#onWatchState(s),
          logger: this.#base.child({ component: 'watch' }),
        });
        this.#watch.apply(this.#watchAssigned, this.#watchYields);
      },
      (err: unknown) => {
        this.#log.error({ err }, 'cannot load the watchfolder scanner');
        this.#watchLoading = null; // the next config tries again
      },
    );
  }

  #onInbox(m: InboxMessage): void {
    switch (m.type) {
      case 'claim.result': {
        // An answer that arrives later than a lease lasts (this process was frozen, or the network held it)
        // may be for tasks the control plane has already given to another agent: they are handed back
        // unstarted (a fenced report if so; else the task is queued again at once), never run.
        const sentAt = this.#claimSentAt.get(m.requestId);
        this.#claimSentAt.delete(m.requestId);
        const waitedMs = sentAt === undefined ? 0 : performance.now() - sentAt;
        // Runs start before the claim settles: drain and handBack, woken by it, then wait for them too.
        for (const c of m.tasks) this.#startRun(c, waitedMs > c.leaseTtlMs ? waitedMs : 0);
        this.#settleClaim(m.requestId);
        if (m.tasks.length > 0 || this.#claimAgain) this.#claim();
        return;
      }
      case 'task.cancel': {
        const r = this.#runs.get(m.taskId);
        if (r && r.claimed.attempt === m.attempt) {
          if (r.abort.signal.aborted) {
            // Stopping already; the control plane repeats itself with every report the run sends.
            if (m.reason !== 'canceled')
              this.#giveUpOutput(r, 'the control plane has given the task up since the cancel');
            this.#log.debug(
              { taskId: m.taskId, attempt: m.attempt, reason: m.reason },
              'cancel (stopping already)',
            );
            return;
          }
          // 'canceled' is an operator's cancel; any other reason means this attempt lost its lease and
          // another one owns the task (and its output) now. An operator's cancel read just after a spell
          // out of touch may be that old: the control plane may have finished the cancel without us
          // meanwhile and given the output path to new work, so the run stops but its output stays.
          const late = m.reason === 'canceled' && (this.#contact?.recentlyAway(LATE_CANCEL_MS) ?? false);
          this.#log.info(
            {
              taskId: m.taskId,
              attempt: m.attempt,
              reason: m.reason,
              ...(late ? { keepsOutput: true } : {}),
            },
            'cancel',
          );
          if (m.reason !== 'canceled') {
            r.abort.abort(FENCED_OUT);
            return;
          }
          r.abort.abort();
          if (late)
            this.#giveUpOutput(
              r,
              'the cancel came right after this agent was out of touch (frozen or disconnected)',
            );
          else {
            r.giveUpTimer = setTimeout(
              () =>
                this.#giveUpOutput(
                  r,
                  `it did not stop within ${OWN_OUTPUT_AFTER_CANCEL_MS / 1000} s of the cancel`,
                ),
              OWN_OUTPUT_AFTER_CANCEL_MS,
            );
            r.giveUpTimer.unref();
          }
        }
        return;
      }
      case 'config': {
        this.#slots = m.slots;
        this.#labels = m.labels;
        this.#paused = m.paused;
        if (!this.#draining) this.#applyWatch(m.watchfolders, m.yieldTo);
        this.#claim();
        return;
      }
      case 'refused': {
        if (m.bootId !== undefined) {
          // Meant for the other process sharing our name (same inbox), or for us: then we leave.
          if (m.bootId === this.#bootId && !this.#refused) void this.#leave(m.reason);
          return;
        }
        this.#refused = m.reason;
        this.#log.error({ reason: m.reason }, 'the control plane refused this agent');
        return;
      }
      case 'ack': {
        if (this.#ackWaiters.size > 0) this.#ackWaiters.get(reportKey(m))?.();
        // The report found its attempt current (a control plane sends a stale one's cancel first) when it
        // was applied, after it was sent: the step gate counts the lease's time from its sending. Not from
        // the ack's arrival: an ack that waited in the socket while this agent was frozen says nothing of
        // the time since.
        const acked = this.#runs.get(m.taskId);
        if (acked?.claimed.attempt === m.attempt) {
          const sentAt = acked.sentAt.get(m.seq);
          if (sentAt !== undefined) acked.confirmedAt = Math.max(acked.confirmedAt, sentAt);
          for (const seq of acked.sentAt.keys()) {
            if (seq > m.seq) break;
            acked.sentAt.delete(seq);
          }
        }
        const key = `${m.taskId}:${m.attempt}`;
        const last = this.#lastSeq.get(key);
        if (last !== undefined && m.seq >= last) {
          this.#lastSeq.delete(key);
          // A pending claim either left after this report (the control plane handles an agent's messages
          // in order, so its answer already counts the slot free) or is followed by another one
          // (#claimAgain, set when the run ended): claiming now would only cost the control plane an
          // empty claim.
          if (!this.#claimPending) this.#claim();
        }
        return; // The outbox side of acks is the session's.
      }
      default:
        return; // request.result is handled by the session
    }
  }

  /** Start a claimed task; `lateMs` > 0: its claim was answered that late, so it is handed back unstarted. */
  #startRun(claimed: ClaimedTask, lateMs = 0): void {
    const { task, attempt, leaseToken } = claimed;
    // The transcoder was lost while the claim was on its way: the task goes back unstarted (below).
    const transcoderPath = this.#transcoder?.path;
    const current = this.#runs.get(task.id);
    /** An answer delivered again (MQTT is at least once) for an attempt this process started. */
    const repeated = () =>
      this.#log.info(
        { taskId: task.id, attempt },
        'claim answer for an attempt already started here: ignored',
      );
    if (current) {
      // This attempt again: it runs still (its run may be between its process's exit and its end).
      if (current.claimed.attempt >= attempt) {
        repeated();
        return;
      }
      // An older attempt that lost its lease and is still being stopped (its cancel came with this
      // answer): this one starts once it is gone, rather than never (the task would wait a lease).
      const next = () => this.#startRun(claimed, lateMs);
      current.done.then(next, next);
      return;
    }
    const ran = this.#started.get(task.id);
    if (ran !== undefined && ran >= attempt) {
      repeated();
      return;
    }
    this.#started.delete(task.id);
    this.#started.set(task.id, attempt);
    if (this.#started.size > STARTED_MEMORY) this.#started.delete(this.#started.keys().next().value!);
    const session = this.#session!;
    const run: Run = {
      claimed,
      seq: 0,
      abort: new AbortController(),
      killNow: new AbortController(),
      handingBack: false,
      done: Promise.resolve(),
      confirmedAt: performance.now(),
      sentAt: new Map(),
      gateAfterMs: stepGateAfterMs(claimed.leaseTtlMs, this.#cfg.heartbeatMs),
    };
    const send = (body: ReportBody) => {
      const seq = run.seq++;
      run.sentAt.set(seq, performance.now());
      const put = session.publishReport({ taskId: task.id, attempt, leaseToken, seq, ...body });
      this.#puts.add(put);
      void put.finally(() => this.#puts.delete(put));
      return put;
    };
    // After a hand-back starts, the run's own (cancel) reports are dropped: the task goes back to the queue.
    const reporter = coalescingReporter(send, () => run.handingBack);
    this.#log.info({ taskId: task.id, attempt }, 'task claimed');
    if (lateMs > 0)
      this.#log.warn(
        { taskId: task.id, attempt, answeredAfterMs: Math.round(lateMs), leaseTtlMs: claimed.leaseTtlMs },
        'claim answered after its lease could have run out: handed back unstarted',
      );
    if (transcoderPath === undefined)
      this.#log.warn(
        { taskId: task.id, attempt },
        'claimed with no working transcoder: handed back unstarted',
      );
    // Claimed as a forced stop began, answered too late, or with no transcoder: it goes straight back,
    // nothing is started.
    if (this.#handingBack) this.#handBackRun(run, FORCED_STOP);
    else if (lateMs > 0)
      this.#handBackRun(
        run,
        'the claim was answered after its lease could have run out; nothing was started',
      );
    else if (transcoderPath === undefined)
      this.#handBackRun(run, 'this agent has no working transcoder; nothing was started');
    run.done = runTask({
      claimed,
      transcoderPath: transcoderPath ?? '',
      onTranscoderLost: (error) => {
        this.#log.error(
          { taskId: task.id, attempt, transcoder: transcoderPath, error },
          'the transcoder could not be started and is gone: the task is handed back, and the transcoder looked for again',
        );
        this.#handBackRun(
          run,
          'the transcoder could not be started and is gone; this agent looks for it again and claims nothing meanwhile',
        );
        if (this.#transcoder?.path === transcoderPath) this.#search.lost(error);
      },
      reporter,
      signal: run.abort.signal,
      beforeStep: (step) => this.#beforeStep(run, step, send),
      outputKeptBecause: () => run.keepsOutput,
      killNow: run.killNow.signal,
      logger: this.#base,
      scriptDirs: this.#cfg.scriptDirs,
      protectedDirs: this.#protectedDirs,
      env: { ...this.#cfg.env, [RUN_MARK_VAR]: runMark(this.#cfg.name, this.#bootId) },
    })
      .then(() => {
        if (!run.handingBack) return;
        // The attempt's output is kept with the hand-back (the control plane stores it whatever the patch
        // does), ending with why it went back to the queue.
        const logs = [
          ...reporter.takeUnsent(),
          { step: 'agent' as const, text: `handed back: ${run.handBackWhy}\n` },
        ];
        send({ kind: 'update', patch: { status: 'QUEUED', deliberate: true }, logs });
      })
      .finally(() => {
        clearTimeout(run.giveUpTimer);
        this.#runs.delete(task.id);
        // Until the control plane applies the final report it counts the task against our slots, so this
        // claim may come back empty; the ack of that report claims again (else the slot idles until a poll).
        this.#lastSeq.set(`${task.id}:${attempt}`, run.seq - 1);
        this.#claim();
      });
    this.#runs.set(task.id, run);
  }

  async #submitWatchFile(f: WatchFile): Promise<SubmitResult> {
    const session = this.#session;
    if (!session) return { ok: false, error: 'agent is stopping', retry: true };
    const requestId = randomUUID();
    const req = {
      type: 'watch.file' as const,
      requestId,
      watchfolderId: f.watchfolderId,
      relativePath: f.relativePath,
      size: f.size,
      mtimeMs: f.mtimeMs,
    };
    const waiting = session.awaitResult(requestId, WATCH_SUBMIT_TIMEOUT_MS);
    const sent = await session.request(req, { durable: true });
    if (!sent.ok) return { ok: false, error: sent.error, retry: true };
    let r = await waiting;
    const giveUpAt = Date.now() + WATCH_SUBMIT_MAX_WAIT_MS;
    // Still stored (so still resent until answered): keep waiting rather than submit it again later.
    while (!r.ok && r.error === 'timeout' && this.#outbox.has(requestId) && Date.now() < giveUpAt)
      r = await session.awaitResult(requestId, WATCH_SUBMIT_TIMEOUT_MS);
    if (!r.ok) return { ok: false, error: `control plane did not answer (${r.error})`, retry: true };
    if (r.reply.type === 'request.result' && r.reply.ok) {
      const taskId = r.reply.taskId;
      const confirmLock = taskId
        ? () =>
            void session.request(
              { type: 'watch.locked', requestId: randomUUID(), watchfolderId: f.watchfolderId, taskId },
              { durable: true },
            )
        : undefined;
      return { ok: true, confirmLock };
    }
    return {
      ok: false,
      error: r.reply.type === 'request.result' ? (r.reply.error ?? 'refused') : 'unexpected reply',
      retry: true,
    };
  }

  #onWatchState(s: WatchState): void {
    const prev = this.#lastState.get(s.watchfolderId);
    const now = Date.now();
    if (prev && prev.error === s.error && now - prev.at < WATCH_STATE_EVERY_MS) return;
    this.#lastState.set(s.watchfolderId, { at: now, error: s.error });
    void this.#session?.request(
      {
        type: 'watch.state',
        requestId: randomUUID(),
        watchfolderId: s.watchfolderId,
        lastCheck: s.lastCheck,
        error: s.error,
        unreadable: s.unreadable,
      },
      { durable: false },
    );
  }
}
