/**
 * Tasks a live agent was given but never heard of. A claim can commit without its answer reaching the
 * agent: the COMMIT's reply was lost with the database session (the control plane took the claim for
 * failed and sent no `claim.result`), or the answer was lost on its way. The task then shows RUNNING on
 * that agent, which never lists it in its heartbeats, until its lease runs out and it is requeued as a
 * lost attempt (QA: 172 s, the leases having been extended by each later database outage), although
 * nothing ran.
 *
 * This tells, per agent process, which tasks two consecutive heartbeats leave out although they came
 * long enough after the task's claim that the agent would list it had it received the answer. The
 * fleet then reads those of the agent's running tasks that no report has reached (an agent that
 * reported on an attempt has it) and requeues them without using up an attempt.
 *
 * The race to rule out: a heartbeat sent before the agent read the answer does not list the task, yet
 * may arrive after the claim committed. So a heartbeat only counts when it arrived (its receipt, not
 * its turn in the agent's queue, which may wait behind slow database work) at least the margin after
 * the claim's statement and after its answer left (a claim answered more than SLOW_ANSWER_MS after its
 * statement ran, its commit having waited, is remembered), and when it came on time (see
 * LATE_HEARTBEAT_MS). Two of them must leave the task out, so a heartbeat that crossed the answer
 * (sent just before the agent read it) is never enough: the answer would have had to take longer than
 * the margin plus one heartbeat interval to arrive. Nothing counts from an agent process that was not
 * heard meanwhile: the two heartbeats must come one after the other from the same process (boot id),
 * neither from the margin after the control plane (re)connected to the broker or was stalled, nor from
 * the margin after the agent came back online from the silent sweep. Only tasks claimed since the
 * process said hello count: those it held before are the hello's to reconcile (fleet.ts #onHello).
 */

/**
 * The margin's floor. The control plane does not know an agent's heartbeat interval
 * (FFLEET_HEARTBEAT_MS, 5 s by default, 100 ms to 60 s) but reads it from the agent's own timestamps
 * (`ts`) of two consecutive heartbeats: the margin is two such intervals, and never less than this.
 * The answer to a claim normally reaches the agent within milliseconds; this leaves it seconds more,
 * and the second heartbeat one interval more again.
 */
export const UNHEARD_AFTER_MS = 5_000;
/**
 * A heartbeat that took this much longer than the agent's quickest one did not count: it was held on
 * its way (a stalled control plane, a partition, a broker's queue), and so may the answer have been.
 * Measured without trusting the agent's clock: from `receivedAt - ts` against its smallest value of the
 * same process, which differs from the true transit time by the clocks' (constant) offset.
 */
const LATE_HEARTBEAT_MS = 1_000;
/**
 * How fast that smallest value may rise (1 ms per second): a clock that drifts or is stepped back on
 * the agent would otherwise make its heartbeats look late for good (which only turns this off).
 */
const BASE_RISE_PER_MS = 0.001;
/** FFLEET_HEARTBEAT_MS's maximum: a longer gap between two heartbeats is not their interval. */
const MAX_HEARTBEAT_MS = 60_000;
/** A claim answered this long after its statement ran: the margin counts from the answer. */
const SLOW_ANSWER_MS = 1_000;
/** Remembered slow answers are dropped after this (far past any margin). */
const SLOW_ANSWER_KEPT_MS = 10 * 60_000;

type Beat = { receivedAt: number; ts: number; listed: ReadonlySet<string> };

type AgentProcess = {
  bootId: string;
  /** Only tasks claimed from then on count (its hello, or the first heartbeat heard from it). */
  since: number;
  /** Heartbeats count only from the margin after this (it came back online then). */
  heardSince: number;
  /** Smallest `receivedAt - ts` so far (see LATE_HEARTBEAT_MS), and when it was last set. */
  base: number | undefined;
  baseAt: number;
  /** The heartbeat before, when it may be the first of two. */
  last: Beat | null;
};

export type HeartbeatIn = {
  bootId: string;
  ts: number;
  running: readonly { taskId: string }[];
};

/** What two consecutive heartbeats of one process both leave out (see UnheardClaims.heartbeat). */
export type Unheard = {
  /** Tasks claimed in [from, until] may count (the database reads those of the agent). */
  from: number;
  until: number;
  /** Whether that task counts: neither heartbeat lists it, and its answer (if slow) left early enough. */
  counts(task: { id: string; startedAt: number }): boolean;
};

export class UnheardClaims {
  readonly #minMarginMs: number;
  readonly #processes = new Map<string, AgentProcess>();
  /** Claims answered slowly: task id → when the answer left. */
  readonly #slowAnswers = new Map<string, number>();
  /** When the control plane last started hearing again (a (re)connect, a stall). */
  #heardSince = Number.NEGATIVE_INFINITY;

  constructor(minMarginMs = UNHEARD_AFTER_MS) {
    this.#minMarginMs = minMarginMs;
  }

  /** The control plane heard nobody until `at` (it was disconnected, or did not run). */
  resumed(at: number): void {
    this.#heardSince = at;
  }

  /** A hello of process `bootId` of agent `name`: tasks claimed before `at` are the hello's. */
  hello(name: string, bootId: string, at: number): void {
    this.#processes.set(name, newProcess(bootId, at));
  }

  /** The agent came back online at `at` after it was shown offline for its silence. */
  backOnline(name: string, at: number): void {
    const p = this.#processes.get(name);
    if (!p) return;
    p.heardSince = at;
    p.last = null;
  }

  /** A birth or a Last Will: whatever that agent's processes did before is not followed any more. */
  forget(name: string): void {
    this.#processes.delete(name);
  }

  /** A claim's answer left at `at` with this task, claimed (its statement ran) at `startedAt`. */
  answered(taskId: string, startedAt: number, at: number): void {
    if (at - startedAt > SLOW_ANSWER_MS) this.#slowAnswers.set(taskId, at);
  }

  /** Drop what no margin can need any more. */
  prune(now: number): void {
    for (const [id, at] of this.#slowAnswers)
      if (now - at > SLOW_ANSWER_KEPT_MS) this.#slowAnswers.delete(id);
  }

  /**
   * A heartbeat of agent `name`, received at `receivedAt` while the control plane was `listening` (or
   * not). Null unless it and the heartbeat before it may be counted together; else which claims the
   * two leave out.
   */
  heartbeat(name: string, hb: HeartbeatIn, receivedAt: number, listening: boolean): Unheard | null {
    let p = this.#processes.get(name);
    if (!p || p.bootId !== hb.bootId) {
      p = newProcess(hb.bootId, receivedAt);
      this.#processes.set(name, p);
    }
    const transit = receivedAt - hb.ts;
    const base = p.base === undefined ? undefined : p.base + (receivedAt - p.baseAt) * BASE_RISE_PER_MS;
    const onTime = base !== undefined && transit - base <= LATE_HEARTBEAT_MS;
    p.base = base === undefined ? transit : Math.min(base, transit);
    p.baseAt = receivedAt;
    const beat: Beat = {
      receivedAt,
      ts: hb.ts,
      listed: new Set(hb.running.map((r) => r.taskId.toLowerCase())),
    };
    const prev = p.last;
    p.last = listening && onTime ? beat : null;
    if (!prev || !p.last) return null;
    const interval = Math.min(MAX_HEARTBEAT_MS, Math.max(0, hb.ts - prev.ts, receivedAt - prev.receivedAt));
    const margin = Math.max(this.#minMarginMs, 2 * interval);
    // The earlier heartbeat came the margin after the control plane and the agent could hear each other.
    if (prev.receivedAt < Math.max(this.#heardSince, p.heardSince) + margin) return null;
    const until = prev.receivedAt - margin;
    const from = p.since;
    if (until < from) return null;
    return {
      from,
      until,
      counts: (t) =>
        t.startedAt >= from &&
        t.startedAt <= until &&
        !beat.listed.has(t.id) &&
        !prev.listed.has(t.id) &&
        (this.#slowAnswers.get(t.id) ?? Number.NEGATIVE_INFINITY) <= until,
    };
  }
}

function newProcess(bootId: string, at: number): AgentProcess {
  return {
    bootId,
    since: at,
    heardSince: Number.NEGATIVE_INFINITY,
    base: undefined,
    baseAt: at,
    last: null,
  };
}
