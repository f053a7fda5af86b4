import {
  AGENT_RECONNECT_MAX_MS,
  type AgentBirth,
  type AgentHeartbeat,
  type AgentHello,
  type AgentRequest,
  type InboxMessage,
  PROTOCOL_VERSION,
  type TaskReport,
} from '@ffleet/shared';
import { and, asc, eq, sql } from 'drizzle-orm';
import type { Logger } from 'pino';
import type { ControlPlaneClient } from '../broker/control-plane-client.ts';
import { unnestRows } from '../db/array-literal.ts';
import type { Db } from '../db/client.ts';
import { databaseUnavailableReason } from '../db/errors.ts';
import { type AgentRow, effectiveLabels, effectiveSlots } from '../db/mappers.ts';
import { agents, taskIsRunning, tasks, watchfolders } from '../db/schema.ts';
import type { FleetHooks, ServiceContext } from '../services/context.ts';
import {
  getAgentByName,
  markAllOffline,
  markSilentOffline,
  recordBirth,
  touchAgent,
  watchCandidates,
} from './agent-registry.ts';
import { agentCapabilities, claimBlocker } from './capabilities.ts';
import { type ClaimingAgent, claimTasksIn } from './claim.ts';
import { GroupCommit } from './group-commit.ts';
import {
  extendRunningLeases,
  type RunningRef,
  renewLeases,
  renewLeasesIn,
  sweepExpiredLeases,
  type UnreportedTask,
  unreportedTasksIn,
} from './leases.ts';
import { NameClaims } from './name-claims.ts';
import { OncePer } from './once-per.ts';
import { applyReportIn, type ReportOutcome } from './reports.ts';
import { RequirementCheck, unmetRequirements } from './requirements.ts';
import { SerialQueues } from './serial-queue.ts';
import { type Unheard, UnheardClaims } from './unheard-claims.ts';
import { planAssignments, saveAssignments, toAssignment, yieldsFor } from './watch-assignment.ts';
import {
  confirmWatchLock,
  createWatchTask,
  createWatchTasksIn,
  type WatchFileRequest,
  type WatchFileResult,
} from './watch-tasks.ts';

export type FleetOptions = {
  ctx: ServiceContext;
  mqtt: ControlPlaneClient;
  logger: Logger;
  leaseTtlMs: number;
  /** An agent silent this long is shown offline even without its Last Will (network partition). */
  silentAfterMs?: number;
  /** How long stop() waits at most for work already running; default {@link STOP_WAIT_MS}. */
  stopWaitMs?: number;
  /** How long the tasks a hello does not list wait; default {@link HELLO_REQUEUE_GRACE_MS} (tests shorten it). */
  helloGraceMs?: number;
  /** The floor of the margin after a claim before heartbeats that leave its task out count (unheard-claims.ts). */
  unheardAfterMs?: number;
};

/**
 * How often expired leases and silent agents are looked for, and heard agents' last_seen written: a
 * tenth of the lease TTL (3 s by default, so a lease is handled at most 10 % after it expired), within
 * these bounds. Each sweep is three statements even when nothing is due; once a second it was a fifth
 * of an idle embedded control plane's CPU.
 */
const SWEEP_MIN_MS = 100;
const SWEEP_MAX_MS = 3_000;
/**
 * How long the tasks a hello does not list wait before they are requeued: long enough for the process
 * that held the agent's name to reconnect (its reconnect backoff starts at 250 ms) and get a second
 * process of that name refused, short against a lease.
 */
export const HELLO_REQUEUE_GRACE_MS = 5_000;

export const sweepEveryMs = (leaseTtlMs: number): number =>
  Math.min(SWEEP_MAX_MS, Math.max(SWEEP_MIN_MS, Math.round(leaseTtlMs / 10)));
/**
 * After the control plane could not hear the agents (it (re)connected to the broker, or it did not
 * run), every running lease gets at least this long: a full lease, and no less than an agent may take
 * to reconnect (its backoff's cap) and be heard, so that short leases do not requeue healthy tasks.
 */
export const resumeGraceMs = (leaseTtlMs: number): number =>
  Math.max(leaseTtlMs, AGENT_RECONNECT_MAX_MS + 5_000);
/**
 * A sweep timer this many intervals late (and at least STALL_MIN_MS) means the control plane itself did
 * not run meanwhile (SIGSTOP, a paused VM, a starved or blocked process): it heard nobody, so nobody's
 * silence counts. Node runs that overdue timer before it reads the heartbeats queued on its sockets.
 */
const STALL_INTERVALS = 3;
const STALL_MIN_MS = 1_000;
/** Heartbeats come every few seconds; three missed ones mean the agent is gone. */
const DEFAULT_SILENT_AFTER_MS = 20_000;
/**
 * stop() waits this long at most for the work already running (handlers, group commits, a watch
 * batch, an assignment pass, a sweep): a database that hangs must not hang the shutdown.
 */
export const STOP_WAIT_MS = 5_000;

/**
 * A report whose slow path may lock a batch row in the middle of a group: a hand-back (the task may
 * end DONE_ERROR past its attempt limit). Finishing reports leave their batch to the group's end.
 */
const mayLockBatch = (r: TaskReport): boolean => r.kind === 'update' && r.patch.status === 'QUEUED';

/** Why a task its agent never received went back to the queue (the task's log; see #requeueUnheard). */
const UNHEARD = "never received it (its heartbeats do not list it: its claim's answer was lost)";

/** Watchfolder files written in one group job at most (bounds the transaction a claim may wait behind). */
const WATCH_BATCH = 256;

type WatchFileJob = { name: string; req: WatchFileRequest & { requestId: string; agentId: string } };

/**
 * The control plane's side of the agent protocol (PROTOCOL.md): presence, claims, fenced reports,
 * lease renewal and expiry, cancel, reconciliation on hello, and watchfolder assignment.
 */
export class Fleet implements FleetHooks {
  readonly #o: FleetOptions;
  readonly #ctx: ServiceContext;
  readonly #log: Logger;
  readonly #serial = new SerialQueues();
  /**
   * Work outside the agents' serial queues that stop() waits for (#track): answers and acks waiting
   * for their group commit (#afterCommit), `watch.file` lookups, sweeps, lease extension, config pushes.
   */
  readonly #inFlight = new Set<Promise<void>>();
  /** Claims and reports of all agents, written in shared transactions. */
  readonly #group: GroupCommit;
  /**
   * Agent rows by name. The fleet owns agent state: births, wills, hellos and the silent sweep go
   * through it, and API changes arrive through `agentChanged`. Only entries for online agents are
   * trusted (an offline agent may have been deleted or changed by the API meanwhile).
   */
  readonly #agents = new Map<string, AgentRow>();
  /**
   * What a claim needs of an agent row, made once per row (a changed agent is a new row): the
   * capability list is ~230 strings with Debian's ffmpeg, and claim.ts keeps its bound form per list.
   */
  readonly #claimingOf = new WeakMap<AgentRow, ClaimingAgent>();
  /** When each agent was last heard (MQTT receipt), written to `last_seen` once per sweep. */
  readonly #heard = new Map<string, number>();
  /** Agents that reported a watchfolder path unreadable: wfId → agent ids. */
  readonly #pathFailures = new Map<string, Set<string>>();
  /** Last config sent per agent id (JSON), to send only changes. */
  readonly #sentConfig = new Map<string, string>();
  #sweepTimer: NodeJS.Timeout | null = null;
  #hintTimer: NodeJS.Immediate | null = null;
  /** Counts `workAvailable` calls: a claim that raced one and came back empty is tried again. */
  #workSeq = 0;
  #assigning: Promise<void> | null = null;
  #assignAgain = false;
  /** Whether the last assignment pass saw any watchfolder (it must push the "none left" configs). */
  #hadFolders = true;
  /**
   * Set by stop(): nothing starts new database work from then on (messages that arrive are dropped:
   * agents send reports and requests again and re-announce themselves to the next control plane), and
   * failures of the work still running (the database closing under it) are not errors.
   */
  #stopped = false;
  #stopping: Promise<void> | null = null;
  /** `watch.file` requests of all agents waiting for the next batch (see #watchFile). */
  #watchFiles: WatchFileJob[] = [];
  #watchRun: Promise<void> | null = null;
  /**
   * True while we hear the agents: connected to the broker, with the leases extended after the
   * (re)connect. Leases only expire while listening; otherwise a control-plane restart or a broker
   * outage longer than the TTL would requeue every healthy running task.
   */
  #listening = false;
  /** When the database stopped serving the fleet's work (undefined while it serves). */
  #databaseDownSince: number | undefined;
  /** Which processes hold each agent name: two live processes sharing one are told apart (name-claims.ts). */
  readonly #names = new NameClaims();
  /** Pending second halves of hello reconciliations (#requeueLost). */
  readonly #helloTimers = new Set<NodeJS.Timeout>();
  /** `requires` lists of tasks just queued, to log those no agent offers (requirements.ts). */
  readonly #requirements = new RequirementCheck();
  /** When a stale report of each agent/task/attempt was last logged as a warning. */
  readonly #staleLog = new OncePer(60_000);
  /** When each refused process (agent name / boot id) was last logged as refused. */
  readonly #refusedLog = new OncePer(10 * 60_000);
  /** Which claimed tasks each agent's heartbeats leave out (reconciled by #requeueUnheard). */
  readonly #unheard: UnheardClaims;

  constructor(opts: FleetOptions) {
    this.#o = opts;
    this.#ctx = opts.ctx;
    this.#log = opts.logger.child({ component: 'fleet' });
    this.#group = new GroupCommit(opts.ctx);
    this.#unheard = new UnheardClaims(opts.unheardAfterMs);
  }

  async start(): Promise<void> {
    const m = this.#o.mqtt;
    await markAllOffline(this.#ctx.database.db);
    // Handlers that write outside group commit first wait for the agent's queued group jobs, so they
    // still see its earlier reports and claims applied.
    const afterGroup = (id: string, job: () => Promise<void>) =>
      this.#queued(id, async () => {
        await this.#group.settled(id);
        if (!this.#stopped) await job();
      });
    m.onBirth((id, b) => afterGroup(id, () => this.#onBirth(id, b)));
    m.onHello((id, h) => afterGroup(id, () => this.#onHello(id, h)));
    m.onHeartbeat((id, h) => {
      // When it was received, and whether we heard the agents then: the heartbeat may wait its turn in
      // the agent's queue behind slow database work, which says nothing of when the agent sent it.
      const heard = { at: this.#hear(id), listening: this.#listening };
      return this.#queued(id, () => this.#onHeartbeat(id, h, heard));
    });
    m.onRequest((id, r) => {
      this.#hear(id);
      // Idempotent per file version (the watch key), so not behind the agent's other messages: its
      // `watch.locked` comes only after the answer, i.e. after the commit.
      if (r.type === 'watch.file') return this.#track(this.#unlessStopped(id, () => this.#watchFile(id, r)));
      if (r.type === 'claim') return this.#queued(id, () => this.#onRequest(id, r));
      return afterGroup(id, () => this.#onRequest(id, r));
    });
    m.onReport((id, r) => {
      this.#hear(id);
      return this.#queued(id, () => this.#onReport(id, r));
    });
    m.on('connection', (up) => {
      this.#listening = false;
      // After a broker restart every agent re-announces itself; resend configs then.
      if (up && !this.#stopped) {
        this.#sentConfig.clear();
        void this.#track(this.#resumeLeases());
      }
    });
    const every = sweepEveryMs(this.#o.leaseTtlMs);
    let last = performance.now();
    this.#sweepTimer = setInterval(() => {
      const now = performance.now();
      const late = now - last - every;
      last = now;
      if (late >= Math.max(STALL_MIN_MS, STALL_INTERVALS * every)) void this.#track(this.#afterStall(late));
      else void this.#track(this.#sweep());
    }, every);
    this.#sweepTimer.unref();
  }

  /**
   * From now on no message starts database work, and once this resolves nothing of the fleet touches
   * the database (the control plane closes it next): work already running is waited for, up to
   * `stopWaitMs`. Idempotent.
   */
  stop(): Promise<void> {
    this.#stopping ??= this.#stop();
    return this.#stopping;
  }

  async #stop(): Promise<void> {
    this.#stopped = true;
    if (this.#sweepTimer) clearInterval(this.#sweepTimer);
    for (const t of this.#helloTimers) clearTimeout(t);
    this.#helloTimers.clear();
    if (this.#hintTimer) clearImmediate(this.#hintTimer);
    this.#hintTimer = null;
    const waitMs = this.#o.stopWaitMs ?? STOP_WAIT_MS;
    if (!(await settlesWithin(this.#settle(), waitMs))) {
      // Whatever it is waiting for (a hung database) fails later; that is logged at debug only.
      this.#log.warn({ waitedMs: waitMs }, 'fleet work still running at stop; not waiting for it any longer');
      return;
    }
    await this.#flushHeard().catch((err: unknown) =>
      this.#log.debug({ err }, 'last_seen not written at stop'),
    );
  }

  /** Resolves when no handler, group commit, watch batch, assignment pass or tracked work is running. */
  async #settle(): Promise<void> {
    do {
      await this.#serial.drain();
      while (this.#inFlight.size) await Promise.allSettled([...this.#inFlight]);
      await this.#watchRun;
      await this.#group.drain();
      await this.#assigning;
    } while (this.#serial.size || this.#inFlight.size || this.#watchRun || this.#assigning);
  }

  /** An agent message's job, in that agent's queue (see #unlessStopped). */
  #queued(id: string, job: () => Promise<void>): Promise<void> {
    return this.#serial.run(id, () => this.#unlessStopped(id, job));
  }

  /**
   * Run a message's job unless stop() was called (then it is dropped: see #stopped). A failure after
   * stop() was called is dropped work too, logged at debug; before, it is the caller's (the MQTT
   * client logs a failed handler).
   */
  async #unlessStopped(agent: string, job: () => Promise<void>): Promise<void> {
    if (this.#stopped) return;
    try {
      await job();
    } catch (err) {
      if (!this.#stopped) throw err;
      this.#log.debug({ err, agent }, 'agent message not handled: the fleet is stopping');
    }
  }

  /** Have stop() wait for `work` (see #inFlight). */
  #track(work: Promise<void>): Promise<void> {
    const tracked = work.finally(() => this.#inFlight.delete(tracked));
    this.#inFlight.add(tracked);
    return tracked;
  }

  /** A failure of fleet work: an error, unless stop() was called (the database may be closing under it). */
  #failed(err: unknown, fields: Record<string, unknown>, msg: string): void {
    if (this.#stopped) this.#log.debug({ ...fields, err }, `${msg} (stopping)`);
    else {
      // An outage is logged once, when it is first seen; what it fails meanwhile is not news.
      const unavailable = databaseUnavailableReason(err);
      if (!unavailable) this.#log.error({ ...fields, err }, msg);
      else {
        this.#databaseDown(unavailable);
        this.#log.debug({ ...fields, reason: unavailable }, `${msg}: the database is unavailable`);
      }
    }
  }

  /** The database stopped serving the fleet's work: noted (and logged) once per outage; see #sweep. */
  #databaseDown(reason: string): void {
    if (this.#databaseDownSince !== undefined) return;
    this.#databaseDownSince = this.#ctx.now();
    this.#log.error(
      { reason },
      'the database is unavailable: tasks are neither claimed nor finished until it is back, and no lease expires meanwhile',
    );
  }

  // ---- FleetHooks (called by the API services) ----

  cancelRunning(task: { id: string; agentName: string | null; attempt: number }): void {
    if (!task.agentName) return;
    void this.#send(task.agentName, {
      type: 'task.cancel',
      taskId: task.id,
      attempt: task.attempt,
      reason: 'canceled',
    });
  }

  workAvailable(requires?: Iterable<readonly string[]>): void {
    this.#workSeq += 1;
    if (requires) this.#requirements.add(requires);
    if (this.#hintTimer || this.#stopped) return;
    // Hints of one turn of the event loop are sent as one (a batch of 1,000 tasks is one hint).
    this.#hintTimer = setImmediate(() => {
      this.#hintTimer = null;
      void this.#o.mqtt.broadcastWork();
      if (this.#requirements.pending && !this.#stopped) void this.#track(this.#checkRequirements());
    });
  }

  /** Log the `requires` lists just queued that no agent the control plane knows offers whole. */
  async #checkRequirements(): Promise<void> {
    const now = this.#ctx.now();
    const lists = this.#requirements.take(now);
    if (!lists.length) return;
    try {
      const rows = await this.#ctx.database.db.select().from(agents);
      const known = rows.map((a) => ({ ...a, labels: effectiveLabels(a) }));
      for (const u of this.#requirements.toLog(unmetRequirements(lists, known), now)) {
        this.#log.warn(
          { requires: u.requires, offeredByNoAgent: u.missing, knownAgents: rows.length },
          'tasks were queued that no known agent can run: they stay QUEUED until an agent offering all of their requires connects or gets the labels (PATCH /api/v1/agents/{id})',
        );
      }
    } catch (err) {
      this.#log.debug({ err }, 'requirement check failed');
    }
  }

  watchfoldersChanged(): void {
    void this.assignWatchfolders();
  }

  agentChanged(agentId: string): void {
    for (const [name, a] of this.#agents) if (a.id === agentId) this.#agents.delete(name);
    if (this.#stopped) return;
    void this.#track(
      (async () => {
        const [a] = await this.#ctx.database.db.select().from(agents).where(eq(agents.id, agentId));
        if (a) this.#agents.set(a.name, a);
        if (a?.online) await this.#sendConfig(a, true);
      })().catch((err: unknown) => this.#failed(err, { agentId }, 'agent config push failed')),
    );
  }

  // ---- protocol handlers ----

  async #onBirth(name: string, birth: AgentBirth): Promise<void> {
    if (birth.name !== name) {
      this.#log.warn(
        { agent: name, claimed: birth.name },
        'birth name does not match the topic; using the topic',
      );
    }
    if (birth.state === 'online' && Math.abs(birth.protocol - PROTOCOL_VERSION) > 1) {
      const reason = `protocol ${birth.protocol} is not supported by this control plane (speaks ${PROTOCOL_VERSION}, accepts ${PROTOCOL_VERSION - 1}..${PROTOCOL_VERSION})`;
      this.#log.warn({ agent: name, protocol: birth.protocol }, 'agent refused: protocol version');
      await this.#send(name, { type: 'refused', reason });
      return;
    }
    if (birth.state === 'online') {
      const [before] = await this.#ctx.database.db
        .select({ bootId: agents.bootId, hostname: agents.hostname, lastSeen: agents.lastSeen })
        .from(agents)
        .where(eq(agents.name, name));
      if (this.#stopped) return;
      if (before && before.bootId !== birth.bootId)
        this.#names.remember(name, before.bootId, before.hostname, before.lastSeen, this.#ctx.now());
      const refuse = this.#names.birth(name, birth.bootId, birth.hostname, this.#ctx.now());
      if (refuse) {
        const fields = { agent: name, refused: refuse.bootId, hostname: birth.hostname };
        // Each birth of the refused process is refused again; the error is logged once for it.
        if (this.#refusedLog.due(`${name}/${refuse.bootId}`))
          this.#log.error(fields, 'two agent processes share one name: the later one is refused');
        else this.#log.debug(fields, 'refused again: another process holds this agent name');
        // Both read this inbox; only the process with that boot id acts on it (and leaves).
        await this.#send(name, { type: 'refused', reason: refuse.reason, bootId: refuse.bootId });
        if (refuse.bootId === birth.bootId) return;
      }
    } else if (this.#names.isRefused(birth.bootId)) return;
    this.#agents.delete(name);
    this.#unheard.forget(name);
    const row = await recordBirth(this.#ctx.database.db, name, { ...birth, name }, this.#ctx.now());
    this.#agents.set(name, row);
    this.#log.info(
      {
        agent: name,
        // The agents API shows a birth with `draining` (a first SIGTERM) as draining: so does this line.
        state: birth.state === 'online' && birth.draining ? 'draining' : birth.state,
        transcoder: birth.transcoder?.version ?? null,
      },
      'agent presence',
    );
    if (row.online) await this.#sendConfig(row, true);
    else this.#sentConfig.delete(row.id);
    await this.assignWatchfolders();
    if (row.online) this.workAvailable();
  }

  async #onHello(name: string, hello: AgentHello): Promise<void> {
    // A process refused for sharing its name lists none of the other's tasks: they are not lost.
    if (this.#names.isRefused(hello.bootId)) return;
    const db = this.#ctx.database.db;
    const now = this.#ctx.now();
    const before = this.#names.previousHolder(name, hello.bootId, now);
    this.#names.seen(name, hello.bootId, this.#agents.get(name)?.hostname ?? '', now);
    // What the agent runs now is reconciled below; its heartbeats answer only for claims from now on.
    this.#unheard.hello(name, hello.bootId, now);
    this.#heard.delete(name);
    await touchAgent(db, name, now);
    this.#agents.delete(name);
    const agent = await this.#agent(name);
    if (!agent) return; // Its birth (retained, sent first) creates the record; hello without it is noise.
    await this.#stopStale(name, await renewLeases(this.#ctx, agent.id, hello.running, this.#o.leaseTtlMs));
    // Tasks we think it runs that it does not list were lost with its previous process: requeued after
    // a short grace, unless this process has been refused meanwhile. A second process that took the
    // name (a cloned box) says hello before the first one is back and gets it refused; requeued at once,
    // the first one's running task went to another attempt and its ffmpeg was killed (QA).
    const listed = new Set(hello.running.map((r) => r.taskId));
    const mine = await db
      .select({ id: tasks.id, attempt: tasks.attempt, leaseExpiresAt: tasks.leaseExpiresAt })
      .from(tasks)
      .where(and(eq(tasks.agentId, agent.id), taskIsRunning));
    const lost = mine.filter((t) => !listed.has(t.id));
    // Another process held the name just before, and this one does not say it is that one's restart on
    // its box (previousBootId, kept in the agent's data dir): a second box under the same name (a clone)
    // while the first is frozen or cut off. The first may still run those tasks and come back: their
    // leases decide, not this process's word (QA: a clone's hello gave the frozen box's running task to
    // a new attempt, both wrote its output, and the task ran three times).
    const restart = before === null || hello.previousBootId === before;
    if (lost.length && !restart) {
      this.#log.info(
        { agent: name, bootId: hello.bootId, previous: before, tasks: lost.map((t) => t.id) },
        'a new process of this agent does not run tasks its previous process held and is not its restart on the same box: they wait for their leases',
      );
    } else if (lost.length && !this.#stopped) {
      const timer = setTimeout(() => {
        this.#helloTimers.delete(timer);
        const why = before === null ? 'it no longer runs it' : 'its process restarted without it';
        void this.#queued(name, () => this.#requeueLost(name, agent.id, hello.bootId, lost, why)).catch(
          (err: unknown) => this.#failed(err, { agent: name }, 'reconciling tasks after a hello failed'),
        );
      }, this.#o.helloGraceMs ?? HELLO_REQUEUE_GRACE_MS);
      this.#helloTimers.add(timer);
    }
    await this.#sendConfig(agent, true);
  }

  /**
   * The second half of a hello's reconciliation (see #onHello): the tasks still on that agent in the
   * same attempt (not finished, reported by another hello or requeued meanwhile) go back to the queue.
   */
  async #requeueLost(
    name: string,
    agentId: string,
    bootId: string,
    lost: { id: string; attempt: number; leaseExpiresAt: number }[],
    why: string,
  ): Promise<void> {
    if (this.#stopped || this.#names.isRefused(bootId)) return;
    const r = await sweepExpiredLeases(this.#ctx, {
      reason: why,
      // Checked on the locked row: a lease that changed since the hello was renewed (by a heartbeat, hello
      // or report of the process running it) or extended (we reconnected): alive, or its lease decides.
      unchanged: lost.map((l) => ({
        id: l.id,
        agentId,
        attempt: l.attempt,
        leaseExpiresAt: l.leaseExpiresAt,
      })),
    });
    if (!r.requeued.length && !r.failed.length && !r.canceled.length) return;
    this.#log.warn({ agent: name, ...r }, 'reconciled tasks the agent no longer runs');
    this.workAvailable();
  }

  async #onHeartbeat(
    name: string,
    hb: AgentHeartbeat,
    heard: { at: number; listening: boolean },
  ): Promise<void> {
    if (this.#names.isRefused(hb.bootId)) return;
    let agent = await this.#agent(name);
    if (!agent) return;
    this.#names.seen(name, hb.bootId, agent.hostname, this.#ctx.now());
    if (!agent.online) {
      // Back from the silent sweep's offline: say so now (last_seen of online agents is batched). What
      // it sent while silent (and an answer it did not get meanwhile) may come only now: its heartbeats
      // leave nothing out for a margin.
      this.#unheard.backOnline(name, heard.at);
      this.#heard.delete(name);
      await touchAgent(this.#ctx.database.db, name, this.#ctx.now());
      this.#agents.delete(name);
      agent = await this.#agent(name);
      if (!agent) return;
      // Its watchfolders moved while it was silent, and it has not heard (its connection stayed up):
      // tell it what it scans now, or it would go on scanning them beside their new owner.
      await this.#sendConfig(agent, true);
      await this.assignWatchfolders();
    }
    const id = agent.id;
    // This heartbeat and the one before leave out tasks claimed long enough ago: read (in the same group
    // job as the renewal) those of them no report has reached, to requeue after the commit.
    const unheard = this.#unheard.heartbeat(name, hb, heard.at, heard.listening);
    const unreported = async (tx: Db) =>
      unheard ? unreportedTasksIn(tx, id, unheard.from, unheard.until) : [];
    if (hb.running.length) {
      const { stale, tasks: found } = await this.#group.run(
        async (tx) => ({
          stale: await renewLeasesIn(tx, this.#ctx.now(), id, hb.running, this.#o.leaseTtlMs),
          tasks: await unreported(tx),
        }),
        { key: name },
      );
      await this.#stopStale(name, stale);
      if (unheard && found.length)
        this.#afterCommit(name, this.#requeueUnheard(name, id, hb.bootId, unheard, found));
    } else if (unheard) {
      // Not awaited, as a report's job: the agent's next message need not wait for this commit.
      const found = this.#group.run(unreported, { key: name });
      this.#afterCommit(
        name,
        found.then((t) => (t.length ? this.#requeueUnheard(name, id, hb.bootId, unheard, t) : undefined)),
      );
    }
  }

  /**
   * Requeue the tasks two heartbeats of the agent left out (see #onHeartbeat), as an attempt that does
   * not count: nothing ran. Each is checked again on its locked row: still this agent's, in the same
   * attempt with the same lease token, with no report of it applied. The agent is told to stop each
   * one's attempt, which only matters if the answer was late rather than lost: that cancel comes after
   * the answer on the agent's inbox, so its run stops as it starts.
   */
  async #requeueUnheard(
    name: string,
    agentId: string,
    bootId: string,
    unheard: Unheard,
    found: UnreportedTask[],
  ): Promise<void> {
    const counted = found.filter((t) => unheard.counts(t));
    if (!counted.length || this.#stopped || this.#names.isRefused(bootId)) return;
    const r = await sweepExpiredLeases(this.#ctx, {
      reason: "it never received the task: its claim's answer was lost",
      lost: UNHEARD,
      countsAttempt: false,
      unchanged: counted.map((t) => ({
        id: t.id,
        agentId,
        attempt: t.attempt,
        leaseToken: t.leaseToken,
        reportSeq: -1,
      })),
    });
    const given = [...r.requeued, ...r.canceled];
    if (!given.length) return;
    const attemptOf = new Map(counted.map((t) => [t.id, t.attempt]));
    this.#log.warn(
      { agent: name, bootId, requeued: r.requeued, canceled: r.canceled },
      'tasks claimed for the agent that it never received (its heartbeats do not list them): requeued without using up an attempt, or canceled if a cancel was pending',
    );
    for (const taskId of given) {
      void this.#send(name, {
        type: 'task.cancel',
        taskId,
        attempt: attemptOf.get(taskId)!,
        reason:
          "attempt given up: this agent's heartbeats did not list the task, so its claim's answer was taken for lost",
      });
    }
    if (r.requeued.length) this.workAvailable();
  }

  async #onRequest(name: string, req: AgentRequest): Promise<void> {
    const agent = await this.#agent(name);
    if (!agent) return;
    switch (req.type) {
      case 'claim': {
        const claiming = req.holding?.length
          ? { ...this.#claiming(agent), holding: req.holding }
          : this.#claiming(agent);
        const claim = () =>
          this.#group.run(
            async (tx, ev, scope) => {
              const claimed = await claimTasksIn(
                tx,
                ev,
                this.#ctx.now(),
                claiming,
                req.max,
                this.#o.leaseTtlMs,
              );
              for (const c of claimed) if (c.task.batch) scope.claimedFrom(c.task.batch);
              return claimed;
            },
            { key: name },
          );
        const seq = this.#workSeq;
        // Queued, not awaited: like a report, the claim may share a group with the agent's reports.
        const answered = (this.#mayClaim(agent) ? claim() : Promise.resolve([])).then(async (first) => {
          let claimed = first;
          // Work committed while this claim ran: its hint reached an agent still waiting for this
          // answer, which ignores hints then. Answering "nothing" would leave it idle until its poll.
          if (!claimed.length && seq !== this.#workSeq && this.#mayClaim(agent)) claimed = await claim();
          // A claim whose commit waited: the agent's heartbeats may leave its tasks out until it hears this.
          const answeredAt = this.#ctx.now();
          for (const c of claimed) this.#unheard.answered(c.task.id, c.task.startedAt, answeredAt);
          // Not awaited (here and for acks): the agent's next message need not wait for this one's
          // PUBACK; one client publishes in call order, so the agent still sees answers in order.
          void this.#send(name, { type: 'claim.result', requestId: req.requestId, tasks: claimed });
        });
        this.#afterCommit(name, answered);
        return;
      }
      case 'watch.file':
        return this.#watchFile(name, req);
      case 'watch.locked': {
        await confirmWatchLock(this.#ctx, req.watchfolderId, req.taskId);
        await this.#send(name, { type: 'request.result', requestId: req.requestId, ok: true });
        return;
      }
      case 'watch.state': {
        await this.#recordWatchState(agent, req.watchfolderId, req.lastCheck, req.error, req.unreadable);
        await this.#send(name, { type: 'request.result', requestId: req.requestId, ok: true });
        return;
      }
    }
  }

  /**
   * Queue the report's group job and return: the agent's next message (its next report, its next
   * claim) may join the same group (GroupCommit keeps one agent's jobs in order). The ack follows the
   * commit.
   */
  async #onReport(name: string, report: TaskReport): Promise<void> {
    const agent = await this.#agent(name);
    if (!agent) return;
    const applied = this.#group.run(
      (tx, ev, scope) =>
        applyReportIn(tx, ev, this.#ctx.now(), agent.id, report, this.#o.leaseTtlMs, (b) =>
          scope.finishBatch(b),
        ),
      { locksBatch: mayLockBatch(report), key: name },
    );
    this.#afterCommit(
      name,
      applied.then((outcome) => this.#reportApplied(name, report, outcome)),
    );
  }

  /** Track work that follows a group commit outside the agent's serial queue (stop() waits for it). */
  #afterCommit(name: string, work: Promise<void>): void {
    void this.#track(
      work.catch((err: unknown) => this.#failed(err, { agent: name }, 'agent message failed')),
    );
  }

  /**
   * Answer an applied report: the cancel it calls for, if any, then its ack. One client publishes in
   * call order on the agent's inbox at QoS 1, so the agent reads them in this order, and an ack with no
   * cancel before it tells the agent the report found its attempt current: back from a spell out of
   * touch, an agent asks that way before it starts a run's next step (fleet-agent.ts #askStillOurs).
   */
  #reportApplied(name: string, report: TaskReport, outcome: ReportOutcome): void {
    if (outcome.kind === 'stale') {
      // Every stale report is answered (a cancel may be lost), but logged once a minute per attempt:
      // an outbox replaying a long run's reports would otherwise log one warning per report.
      const fields = { agent: name, taskId: report.taskId, attempt: report.attempt, reason: outcome.reason };
      if (this.#staleLog.due(`${name}/${report.taskId}/${report.attempt}`))
        this.#log.warn(fields, 'stale report; telling the agent to stop');
      else this.#log.debug(fields, 'stale report; telling the agent to stop (again)');
      void this.#send(name, {
        type: 'task.cancel',
        taskId: report.taskId,
        attempt: report.attempt,
        reason: outcome.reason,
      });
    } else if (outcome.kind === 'applied' && outcome.cancelRequested) {
      // The cancel may have been lost (agent reconnecting): repeat it until the agent finishes the task.
      void this.#send(name, {
        type: 'task.cancel',
        taskId: report.taskId,
        attempt: report.attempt,
        reason: 'canceled',
      });
    }
    void this.#send(name, { type: 'ack', taskId: report.taskId, attempt: report.attempt, seq: report.seq });
    if (outcome.kind === 'rejected') {
      this.#log.warn({ agent: name, taskId: report.taskId, reason: outcome.reason }, 'report rejected');
    } else if (outcome.kind === 'applied' && outcome.status === 'QUEUED') {
      this.workAvailable();
    }
  }

  /**
   * `watch.file` requests of every agent are batched: those that arrive while a batch is written go
   * into the next one, which is ONE group-commit job (createWatchTasksIn: two reads for the whole batch,
   * one statement per new task). Each answer is sent after the commit, as before.
   */
  async #watchFile(name: string, req: WatchFileRequest & { requestId: string }): Promise<void> {
    const agent = await this.#agent(name);
    if (!agent || this.#stopped) return;
    this.#watchFiles.push({ name, req: { ...req, agentId: agent.id } });
    if (!this.#watchRun) this.#watchRun = this.#drainWatchFiles();
  }

  async #drainWatchFiles(): Promise<void> {
    // Let the requests that arrived in the same I/O turn join the first batch.
    await new Promise((r) => setImmediate(r));
    while (this.#watchFiles.length) {
      // Stopping: what is not written yet is dropped (agents submit their files again).
      if (this.#stopped) this.#watchFiles = [];
      const batch = this.#watchFiles.splice(0, WATCH_BATCH);
      if (!batch.length) break;
      try {
        await this.#writeWatchFiles(batch);
      } catch (err) {
        this.#failed(err, { files: batch.length }, 'watchfolder files not written');
      }
    }
    // In the same synchronous step as the last check: a request pushed later starts a new drain.
    this.#watchRun = null;
  }

  async #writeWatchFiles(batch: WatchFileJob[]): Promise<void> {
    const reqs = batch.map((b) => b.req);
    let results: (WatchFileResult | null)[];
    try {
      results = await this.#group.run((tx, ev) => createWatchTasksIn(tx, ev, this.#ctx.now(), reqs));
    } catch (err) {
      // A unique violation (the same file version committed by another transaction meanwhile, e.g.
      // two agents during a failover) or another failure: one transaction per file, each answering
      // with the task that exists. A file that fails again gets no answer (the agent retries).
      this.#log.debug({ err, files: batch.length }, 'watchfolder batch failed; writing file by file');
      results = [];
      for (const r of reqs) {
        if (this.#stopped) {
          results.push(null);
          continue;
        }
        results.push(
          await createWatchTask(this.#ctx, r).catch((e: unknown) => {
            this.#failed(e, { watchfolderId: r.watchfolderId }, 'watchfolder file not written');
            return null;
          }),
        );
      }
    }
    const created = results.filter((r) => r?.ok && r.created);
    if (created.length) this.workAvailable(created.map((r) => (r?.ok && r.requires) || []));
    await Promise.all(
      batch.map(({ name, req }, i) => {
        const r = results[i];
        if (!r) return Promise.resolve();
        return this.#send(
          name,
          r.ok
            ? { type: 'request.result', requestId: req.requestId, ok: true, taskId: r.taskId }
            : { type: 'request.result', requestId: req.requestId, ok: false, error: r.error },
        );
      }),
    );
  }

  // ---- helpers ----

  /**
   * Whether the agent may claim at all (not paused, online and not shutting down, with a transcoder). How many: configured
   * slots minus running work, counted inside the claim statement (claimTasksIn, `slots`).
   */
  #mayClaim(agent: AgentRow): boolean {
    return claimBlocker(agent) === '';
  }

  #claiming(agent: AgentRow): ClaimingAgent {
    let c = this.#claimingOf.get(agent);
    if (!c) {
      c = {
        id: agent.id,
        name: agent.name,
        capabilities: agentCapabilities({ ...agent, labels: effectiveLabels(agent) }),
        slots: effectiveSlots(agent),
      };
      this.#claimingOf.set(agent, c);
    }
    return c;
  }

  /** The agent's row: from the cache while it is online, else read (and cached). */
  async #agent(name: string): Promise<AgentRow | null> {
    const cached = this.#agents.get(name);
    if (cached?.online) return cached;
    const row = await getAgentByName(this.#ctx.database.db, name);
    if (row) this.#agents.set(name, row);
    else this.#agents.delete(name);
    return row;
  }

  /** Note that `name` was heard now; returns when. */
  #hear(name: string): number {
    const at = this.#ctx.now();
    this.#heard.set(name, at);
    return at;
  }

  /** One statement for every agent heard since the last flush: `last_seen` only moves forward. */
  async #flushHeard(): Promise<void> {
    if (!this.#heard.size) return;
    const heard = [...this.#heard];
    this.#heard.clear();
    await this.#ctx.database.db
      .update(agents)
      .set({ lastSeen: sql`GREATEST(${agents.lastSeen}, heard.at)` })
      .from(
        unnestRows('heard', [
          ['name', 'text', heard.map(([name]) => name)],
          ['at', 'bigint', heard.map(([, at]) => at)],
        ]),
      )
      .where(sql`${agents.name} = heard.name`);
    for (const [name, at] of heard) {
      const a = this.#agents.get(name);
      if (a && a.lastSeen < at) a.lastSeen = at;
    }
  }

  async #stopStale(name: string, stale: RunningRef[]): Promise<void> {
    for (const s of stale) {
      await this.#send(name, {
        type: 'task.cancel',
        taskId: s.taskId,
        attempt: s.attempt,
        reason: 'lease lost: the task was given to another attempt',
      });
    }
  }

  async #recordWatchState(
    agent: AgentRow,
    wfId: string,
    lastCheck: number,
    error: string,
    unreadableFlag: boolean | undefined,
  ): Promise<void> {
    const db = this.#ctx.database.db;
    const [wf] = await db.select().from(watchfolders).where(eq(watchfolders.id, wfId));
    if (!wf || wf.assignedAgentId !== agent.id) return; // A late report from a previous assignee.
    await db.update(watchfolders).set({ lastCheck, error }).where(eq(watchfolders.id, wfId));
    const failures = this.#pathFailures.get(wfId) ?? new Set<string>();
    // The agent says whether the folder itself is unreadable; the text of an older agent's error is read
    // instead (it may name a watchfolder or a file, so the flag is what counts where it is sent).
    const unreadable =
      unreadableFlag ?? /ENOENT|EACCES|ENOTDIR|not exist|not a directory|permission/i.test(error);
    if (unreadable && !wf.agent && !failures.has(agent.id)) {
      failures.add(agent.id);
      this.#pathFailures.set(wfId, failures);
      await this.assignWatchfolders();
    } else if (!error && failures.size) {
      this.#pathFailures.delete(wfId);
    }
  }

  /** Recompute watchfolder assignments and push changed configs. Calls made meanwhile run once more. */
  assignWatchfolders(): Promise<void> {
    if (this.#stopped) return this.#assigning ?? Promise.resolve();
    if (this.#assigning) {
      this.#assignAgain = true;
      return this.#assigning;
    }
    this.#assigning = (async () => {
      do {
        this.#assignAgain = false;
        try {
          await this.#assignOnce();
        } catch (err) {
          this.#failed(err, {}, 'watchfolder assignment failed');
        }
      } while (this.#assignAgain && !this.#stopped);
    })().finally(() => {
      this.#assigning = null;
    });
    return this.#assigning;
  }

  async #assignOnce(): Promise<void> {
    const db = this.#ctx.database.db;
    // In creation order: of an overlapping group's pinned members, the oldest decides the group's agent.
    const folders = await db
      .select()
      .from(watchfolders)
      .orderBy(asc(watchfolders.createdAt), asc(watchfolders.id));
    // No watchfolders now nor at the last pass: nothing to plan or push (births send their own config).
    // Without this, 500 agents coming online read the whole agent list ~1,000 times.
    if (!folders.length && !this.#hadFolders) return;
    this.#hadFolders = folders.length > 0;
    if (this.#stopped) return;
    const online = await watchCandidates(db);
    const known = new Set(folders.map((f) => f.id));
    for (const id of this.#pathFailures.keys()) if (!known.has(id)) this.#pathFailures.delete(id);
    const plan = planAssignments(folders, online, this.#pathFailures);
    if (this.#stopped) return;
    await saveAssignments(db, folders, plan);
    for (const a of online) await this.#sendConfig(a, false, folders, plan);
  }

  async #sendConfig(
    agent: AgentRow,
    force: boolean,
    folders?: Awaited<ReturnType<typeof this.loadFolders>>,
    plan?: Map<string, string | null>,
  ): Promise<void> {
    // Stopping: agents get their config from the next control plane (on their hello).
    if (this.#stopped) return;
    const list = folders ?? (await this.loadFolders());
    const agentOf = (f: (typeof list)[number]) => (plan ? (plan.get(f.id) ?? null) : f.assignedAgentId);
    const mine = list.filter((f) => agentOf(f) === agent.id).map(toAssignment);
    const yieldTo = yieldsFor(agent.id, list, agentOf);
    const msg: InboxMessage = {
      type: 'config',
      slots: effectiveSlots(agent),
      labels: effectiveLabels(agent),
      paused: agent.paused,
      watchfolders: mine,
      ...(yieldTo.length ? { yieldTo } : {}),
    };
    const json = JSON.stringify(msg);
    if (!force && this.#sentConfig.get(agent.id) === json) return;
    this.#sentConfig.set(agent.id, json);
    await this.#send(agent.name, msg);
  }

  loadFolders() {
    return this.#ctx.database.db.select().from(watchfolders);
  }

  async #send(agentName: string, msg: InboxMessage): Promise<void> {
    const r = await this.#o.mqtt.sendInbox(agentName, msg);
    if (!r.ok) this.#log.warn({ agent: agentName, type: msg.type, error: r.error }, 'inbox message not sent');
  }

  /**
   * Agents get `graceMs` from now to renew leases they could not renew while we were away: after a
   * (re)connect resumeGraceMs (they may be reconnecting too), after a stall a lease (they stayed
   * connected; what they sent meanwhile is read next).
   */
  async #resumeLeases(graceMs = resumeGraceMs(this.#o.leaseTtlMs)): Promise<void> {
    try {
      await extendRunningLeases(this.#ctx, this.#ctx.now() + graceMs);
    } catch (err) {
      this.#failed(err, {}, 'extending leases after connecting failed');
    }
    this.#listening = this.#o.mqtt.connected;
    // What reaches us now may have waited meanwhile: heartbeats leave nothing out for a margin.
    this.#unheard.resumed(this.#ctx.now());
  }

  /** The control plane did not run for `lateMs`: as after a reconnect, no lease expires for silence. */
  async #afterStall(lateMs: number): Promise<void> {
    if (this.#stopped || !this.#listening) return;
    this.#log.warn(
      { stalledMs: Math.round(lateMs) },
      'the control plane did not run for a while (paused or starved): running leases extended, none expired for it',
    );
    this.#listening = false;
    await this.#resumeLeases(this.#o.leaseTtlMs);
  }

  async #sweep(): Promise<void> {
    if (this.#stopped || !this.#listening) return;
    try {
      if (this.#databaseDownSince !== undefined) {
        // Agents kept renewing while the database was away, but none of it could be stored: as after
        // a reconnect, silence proves nothing, so no lease expires for the outage.
        await extendRunningLeases(this.#ctx, this.#ctx.now() + this.#o.leaseTtlMs);
        this.#log.info(
          { downMs: this.#ctx.now() - this.#databaseDownSince },
          'the database is back: running leases extended, none expired for its absence',
        );
        this.#databaseDownSince = undefined;
      }
      const r = await sweepExpiredLeases(this.#ctx);
      if (r.requeued.length || r.failed.length || r.canceled.length) {
        // Counts plus a sample: a mass expiry (e.g. after an outage) must not produce a megabyte log line.
        this.#log.warn(
          {
            requeued: r.requeued.length,
            failed: r.failed.length,
            canceled: r.canceled.length,
            sample: [...r.requeued, ...r.failed, ...r.canceled].slice(0, 10),
          },
          'expired leases handled',
        );
        if (r.requeued.length) this.workAvailable();
      }
      if (this.#stopped) return;
      await this.#flushHeard();
      if (this.#stopped) return;
      const silent = await markSilentOffline(
        this.#ctx.database.db,
        this.#ctx.now(),
        this.#o.silentAfterMs ?? DEFAULT_SILENT_AFTER_MS,
      );
      this.#unheard.prune(this.#ctx.now());
      if (silent.length) {
        const ids = new Set(silent);
        for (const [name, a] of this.#agents) if (ids.has(a.id)) this.#agents.delete(name);
        await this.assignWatchfolders();
      }
    } catch (err) {
      this.#failed(err, {}, 'sweep failed');
    }
  }
}

/** Whether `work` settled within `ms` (it keeps running either way). */
async function settlesWithin(work: Promise<void>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([work.then(() => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}
