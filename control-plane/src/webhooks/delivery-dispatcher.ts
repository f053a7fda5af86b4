import type { EventPayload } from '@ffleet/shared';
import type { Logger } from 'pino';
import type { Database } from '../db/client.ts';
import { databaseUnavailableReason } from '../db/errors.ts';
import { AttemptRecorder } from './attempt-recorder.ts';
import { type ClaimedDelivery, claimDeliveries, hasDueDeliveries } from './claim-deliveries.ts';
import { decideOutcome, type FinishedAttempt, failMissingEvent, releaseDelivery } from './record-attempt.ts';
import { queueRedelivery, type RedeliverResult } from './redeliver.ts';
import { refreshTargets, TARGET_REFRESH_MS } from './refresh-targets.ts';
import { SHUTDOWN, sendWebhook } from './send-webhook.ts';

/**
 * Safety-net poll: finds rows another replica committed but did not deliver (it died right after its
 * commit) and progress windows that opened. New rows of this process wake the dispatcher at once and
 * every scheduled retry has its own timer, so the poll adds latency only to those. Each poll is a
 * statement even when nothing is due: at 4 per second it was a third of an idle embedded control
 * plane's CPU.
 */
export const POLL_INTERVAL_MS = 1_000;
/**
 * When due rows exist but none may be sent yet (they wait behind an older delivery of their task, or
 * for a progress window), polls re-run the full claim only this often: on PGlite a claim runs on the
 * main thread, and repeating it 4×/s for nothing would slow everything else down.
 */
export const BLOCKED_RECHECK_MS = 1_000;
/**
 * Claims start at most this often. Under a stream of commits (one wake() each) this batches several
 * new rows into one claim instead of running a claim per commit, for at most this much added latency.
 */
export const MIN_CLAIM_GAP_MS = 5;
/**
 * On PGlite, a claim that found less than it asked for is followed by a pause of this many times its own
 * duration (at least MIN_CLAIM_GAP_MS) before the next one starts. There a claim runs on the main thread,
 * and with a large backlog behind saturated URLs it scans every pending row (tens of ms each): claiming
 * again after every finished attempt kept the event loop busy back to back, so the API, the agents'
 * messages and the deliveries themselves stalled for minutes. Claims that fill their limit repeat at
 * once; on PostgreSQL the claim runs in the server and the event loop stays free meanwhile.
 */
export const CLAIM_PACING = 3;
/**
 * Attempts in flight per dispatcher. Delivery is round-trip bound (claim, POST, record), so the rate to
 * one receiver is about its slots divided by the time a slot stays busy; on a loaded machine that time
 * grows to tens of milliseconds, and 32 slots per URL capped a single receiver at a few hundred per
 * second (bench:webhooks). In-flight attempts cost little: a kept-alive socket and a small buffer each.
 */
export const DEFAULT_CONCURRENCY = 128;
/**
 * Attempts in flight per URL at most: half the slots, so one busy receiver alone gets enough parallel
 * requests to keep up with a high event rate. With several URLs busy each gets a fair share instead.
 */
export const DEFAULT_PER_URL_CONCURRENCY = 64;
/**
 * Share of the slots (16 of 128) only a URL with nothing in flight may take, so a receiver can always
 * start at once however many requests a few hanging receivers hold (three of them filled all 128
 * slots and healthy receivers waited for their timeouts).
 */
export const RESERVE_FRACTION = 1 / 8;
/** The smallest fair share: with many URLs busy, each still gets a few requests in flight. */
export const MIN_FAIR_SHARE = 4;
/**
 * Rows claimed ahead per URL, as a multiple of its in-flight cap (and of the dispatcher's): while one
 * batch of attempts is in flight, the next is already claimed, so a slot that frees up is refilled at
 * once instead of after a claim round trip (which on a busy database takes as long as the POST itself).
 */
export const PREFETCH = 2;
/** Lease beyond the attempt timeout: time to record the attempt, plus clock skew between replicas. */
export const LEASE_MARGIN_MS = 15_000;
/** How long stop() lets in-flight attempts finish before abandoning them (their rows are released). */
export const STOP_GRACE_MS = 2_000;

export type DeliveryDispatcherOptions = {
  database: Database;
  logger: Logger;
  /** Per-attempt timeout (FFLEET_WEBHOOK_TIMEOUT_MS), covering the whole request and response body. */
  timeoutMs: number;
  /** `User-Agent` header, e.g. `ffleet/${VERSION}`. */
  userAgent: string;
  /** Send with this instead of the built-in HTTP client (tests). */
  fetch?: typeof fetch;
  /** Unix milliseconds; the same clock the events' writer (events/outbox.ts) uses. */
  clock?: () => number;
  concurrency?: number;
  perUrlConcurrency?: number;
  /** Claim ahead: rows claimed per URL (and per dispatcher) as a multiple of the in-flight caps; 1 = none. */
  prefetch?: number;
  pollIntervalMs?: number;
  /** Called after each recorded attempt (metrics). */
  onAttempt?: (success: boolean) => void;
};

type InFlight = { url: string; controller: AbortController; done: Promise<void> };

/** The wire body: the stored payload with its top-level keys in contract order, identical on every retry. */
const serializePayload = (p: EventPayload) =>
  JSON.stringify({ id: p.id, event: p.event, timestamp: p.timestamp, data: p.data });

/** The origin only: webhook URLs often carry tokens in their path or query, which must not reach logs. */
function originOf(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return '(invalid url)';
  }
}

/** drizzle puts the query parameters (which can include a secret) into its error message; keep the cause. */
function dbError(e: unknown): string {
  const err = e as { message?: string; cause?: { message?: string } };
  return err.cause?.message ?? String(err.message ?? e).split('\nparams:')[0]!;
}

/**
 * Delivers the webhook outbox (`deliveries`): claims due rows, POSTs them concurrently, records every
 * attempt and schedules retries. Several dispatchers (replicas) may share one database.
 */
export class DeliveryDispatcher {
  readonly #o: Required<Omit<DeliveryDispatcherOptions, 'onAttempt' | 'fetch'>> &
    Pick<DeliveryDispatcherOptions, 'onAttempt' | 'fetch'>;
  readonly #log: Logger;
  readonly #recorder: AttemptRecorder;
  readonly #inFlight = new Map<string, InFlight>();
  readonly #perUrl = new Map<string, number>();
  /**
   * Claimed ahead, waiting for a slot of their URL (see PREFETCH): sent as soon as an attempt of that URL
   * ends, without waiting for another claim round trip. Leased like the rows in flight.
   */
  readonly #ready: ClaimedDelivery[] = [];
  /** Claimed rows (in flight or ready) by URL: what the claim must count against the URL's room. */
  readonly #claimedPerUrl = new Map<string, number>();
  readonly #recording = new Set<Promise<void>>();
  /** Slots only a URL with nothing in flight may take (RESERVE_FRACTION). */
  readonly #reserve: number;
  /** Ready rows whose webhook is being re-read (see TARGET_REFRESH_MS); not sent meanwhile. */
  readonly #refreshingIds = new Set<string>();
  #refreshing: Promise<void> | null = null;
  #state: 'idle' | 'running' | 'stopped' = 'idle';
  #claiming: Promise<void> | null = null;
  #claimAgain = false;
  /** The database failed the last poll (an outage, logged once): the next poll that works says so. */
  #databaseDown = false;
  #lastClaimAt = 0;
  /** Pause between the start of a claim and the next (see CLAIM_PACING). */
  #claimGapMs = MIN_CLAIM_GAP_MS;
  #gapTimer: NodeJS.Timeout | undefined;
  #poll: NodeJS.Timeout | undefined;
  readonly #retryTimers = new Set<NodeJS.Timeout>();
  /** Polls skip the full claim until then (see BLOCKED_RECHECK_MS). */
  #blockedUntil = 0;
  /** The last claim found nothing: probe cheaply before claiming again. */
  #idle = true;
  #stopping: Promise<void> | undefined;

  constructor(opts: DeliveryDispatcherOptions) {
    this.#o = {
      ...opts,
      // Wrapped: fetch must not be called with the options object as `this`. Without one, sendWebhook
      // uses its built-in keep-alive client.
      fetch: opts.fetch && ((input, init) => opts.fetch!(input, init)),
      clock: opts.clock ?? Date.now,
      concurrency: opts.concurrency ?? DEFAULT_CONCURRENCY,
      perUrlConcurrency: opts.perUrlConcurrency ?? DEFAULT_PER_URL_CONCURRENCY,
      prefetch: Math.max(1, opts.prefetch ?? PREFETCH),
      pollIntervalMs: opts.pollIntervalMs ?? POLL_INTERVAL_MS,
    };
    this.#reserve = Math.floor(this.#o.concurrency * RESERVE_FRACTION);
    this.#log = opts.logger.child({ component: 'webhook-dispatcher' });
    this.#recorder = new AttemptRecorder(opts.database);
  }

  /** Begin delivering (idempotent; a stopped dispatcher stays stopped). */
  start(): void {
    if (this.#state !== 'idle') return;
    this.#state = 'running';
    this.#poll = setInterval(() => {
      if (this.#o.clock() >= this.#blockedUntil) this.wake();
    }, this.#o.pollIntervalMs);
    this.#poll.unref();
    this.wake();
  }

  /** New deliveries were committed (the in-process bus): claim now rather than at the next poll. */
  wake(): void {
    if (this.#state !== 'running') return;
    if (this.#claiming) {
      this.#claimAgain = true;
      return;
    }
    const wait = this.#lastClaimAt + this.#claimGapMs - performance.now();
    if (wait > 0) {
      this.#gapTimer ??= setTimeout(() => {
        this.#gapTimer = undefined;
        this.wake();
      }, wait);
      return;
    }
    this.#claiming = this.#claimLoop()
      .catch((e) => this.#log.error({ err: String(e) }, 'webhook claim loop failed'))
      .finally(() => {
        this.#claiming = null;
        if (this.#claimAgain) this.wake();
      });
  }

  /**
   * Stop claiming, give in-flight attempts `graceMs` to finish, then abort the rest and release their
   * rows (due again at once, the interrupted attempt not counted); resolves once every finished attempt
   * is recorded. Idempotent.
   */
  stop(graceMs = STOP_GRACE_MS): Promise<void> {
    this.#stopping ??= this.#stop(graceMs);
    return this.#stopping;
  }

  async #stop(graceMs: number): Promise<void> {
    this.#state = 'stopped';
    clearInterval(this.#poll);
    clearTimeout(this.#gapTimer);
    for (const t of this.#retryTimers) clearTimeout(t);
    this.#retryTimers.clear();
    await this.#claiming;
    await this.#refreshing;
    // Rows claimed ahead were never attempted: give them back, due again at once.
    const ready = this.#ready.splice(0);
    for (const d of ready) this.#uncount(d);
    await Promise.allSettled(ready.map((d) => releaseDelivery(this.#o.database, d)));
    const all = () => Promise.allSettled([...this.#inFlight.values()].map((f) => f.done));
    let grace: NodeJS.Timeout | undefined;
    await Promise.race([all(), new Promise((r) => (grace = setTimeout(r, graceMs)))]);
    clearTimeout(grace);
    for (const f of this.#inFlight.values()) f.controller.abort(SHUTDOWN);
    await all();
    await Promise.allSettled([...this.#recording]);
  }

  /** Queue the event of an execution again to the same URL (see queueRedelivery) and wake up. */
  async redeliver(executionId: string): Promise<RedeliverResult> {
    const result = await queueRedelivery(this.#o.database, executionId, this.#o.clock());
    if (result.ok) {
      this.#log.info({ executionId, deliveryId: result.delivery.deliveryId }, 'redelivery queued');
      this.wake();
    }
    return result;
  }

  /**
   * Slots one URL may hold: the unreserved slots split evenly between the URLs that have work (claimed
   * rows), at least MIN_FAIR_SHARE, at most the per-URL cap. Alone, a URL gets the whole cap. A URL
   * above its share (it got its slots while it was alone) keeps them until they end, and the slots it
   * frees go to the others.
   */
  #share(): number {
    const { concurrency, perUrlConcurrency } = this.#o;
    const even = Math.floor((concurrency - this.#reserve) / Math.max(1, this.#claimedPerUrl.size));
    return Math.min(perUrlConcurrency, Math.max(MIN_FAIR_SHARE, even));
  }

  /** May an attempt to `url` start now? A URL with nothing in flight may use the reserve. */
  #hasSlot(url: string, share: number): boolean {
    const busy = this.#inFlight.size;
    const held = this.#perUrl.get(url) ?? 0;
    if (busy >= this.#o.concurrency) return false;
    return held === 0 || (held < share && busy < this.#o.concurrency - this.#reserve);
  }

  async #claimLoop(): Promise<void> {
    for (;;) {
      this.#claimAgain = false;
      // Claimed rows are budgeted like slots: prefetch × the slots, then prefetch × the reserve for URLs
      // that hold no rows at all (slow receivers' claimed-ahead rows must not keep a new URL unclaimed).
      const held = this.#inFlight.size + this.#ready.length;
      const budget = this.#o.concurrency * this.#o.prefetch;
      const free = budget + this.#reserve * this.#o.prefetch - held;
      if (free <= 0) return;
      const share = this.#share();
      const perUrlLimit = share * this.#o.prefetch;
      // Refill a URL's claimed-ahead rows in batches: it counts as full until half of what it may claim
      // ahead has gone, so a busy receiver costs one claim per `refill` attempts, not one per attempt.
      const refill = Math.max(1, Math.floor((share * (this.#o.prefetch - 1)) / 2));
      const inFlightByUrl = Object.fromEntries(
        [...this.#claimedPerUrl].map(([url, n]) => [
          url,
          held >= budget || n > perUrlLimit - refill ? perUrlLimit : n,
        ]),
      );
      const limit = held < budget ? budget - held : free;
      const now = this.#o.clock();
      const startedAt = performance.now();
      this.#lastClaimAt = startedAt;
      const probed = this.#idle;
      let claimed: ClaimedDelivery[];
      try {
        // When idle, a cheap indexed probe first: idle polls must not run the full claim (costly on
        // PGlite). While busy, claim directly.
        const due = !probed || (await hasDueDeliveries(this.#o.database, now));
        if (this.#databaseDown) {
          this.#databaseDown = false;
          this.#log.info('deliveries resume: the database is back');
        }
        if (!due) return;
        claimed = await claimDeliveries(this.#o.database, {
          now,
          limit,
          leaseMs: this.#o.timeoutMs + LEASE_MARGIN_MS,
          perUrlLimit,
          inFlightByUrl,
        });
      } catch (e) {
        // Database unreachable or closing: the poll tries again; leases protect anything half-claimed.
        this.#claimAgain = false;
        if (this.#state !== 'running') return;
        // An outage is logged when it starts and when it ends, not at every poll.
        const unavailable = databaseUnavailableReason(e);
        if (!unavailable) this.#log.warn({ err: dbError(e) }, 'claiming deliveries failed');
        else if (this.#databaseDown) this.#log.debug({ reason: unavailable }, 'claiming deliveries failed');
        else {
          this.#databaseDown = true;
          this.#log.warn({ reason: unavailable }, 'deliveries wait: the database is unavailable');
        }
        return;
      }
      const full = claimed.length >= limit;
      this.#claimGapMs =
        full || this.#o.database.kind !== 'pglite'
          ? MIN_CLAIM_GAP_MS
          : Math.max(MIN_CLAIM_GAP_MS, (performance.now() - startedAt) * (1 + CLAIM_PACING));
      this.#idle = claimed.length === 0;
      // Due rows exist (the probe said so) yet none could be claimed: they are blocked for now.
      this.#blockedUntil = this.#idle && probed ? now + BLOCKED_RECHECK_MS : 0;
      if (this.#state !== 'running') {
        await Promise.allSettled(claimed.map((d) => releaseDelivery(this.#o.database, d)));
        return;
      }
      for (const d of claimed) {
        this.#count(d);
        this.#ready.push(d);
      }
      this.#pump();
      // A short claim took all that was claimable: the next one waits for its gap (wake() sees
      // #claimAgain once this loop ends), however many attempts finished meanwhile.
      if (!full) return;
    }
  }

  #count(d: ClaimedDelivery): void {
    this.#claimedPerUrl.set(d.url, (this.#claimedPerUrl.get(d.url) ?? 0) + 1);
  }

  #uncount(d: ClaimedDelivery): void {
    const n = (this.#claimedPerUrl.get(d.url) ?? 1) - 1;
    if (n > 0) this.#claimedPerUrl.set(d.url, n);
    else this.#claimedPerUrl.delete(d.url);
  }

  /**
   * Start the ready rows that have a slot (dispatcher cap, the URL's fair share, see #share), oldest
   * first. A row that waited so long that its lease no longer covers a whole attempt plus recording is
   * given back instead; a global webhook's row that waited TARGET_REFRESH_MS re-reads its webhook first.
   */
  #pump(): void {
    if (this.#ready.length === 0 || this.#state !== 'running') return;
    const now = this.#o.clock();
    const share = this.#share();
    const stale: ClaimedDelivery[] = [];
    let kept = 0;
    for (const d of this.#ready) {
      if (this.#inFlight.size >= this.#o.concurrency || this.#refreshingIds.has(d.id)) {
        this.#ready[kept++] = d;
      } else if (d.lease - now < this.#o.timeoutMs + LEASE_MARGIN_MS / 2) {
        this.#uncount(d);
        releaseDelivery(this.#o.database, d).catch((e) =>
          this.#log.warn({ deliveryId: d.id, err: dbError(e) }, 'releasing a delivery failed'),
        );
      } else if (!this.#hasSlot(d.url, share)) {
        this.#ready[kept++] = d;
      } else if (d.webhookId !== null && now - d.readAt >= TARGET_REFRESH_MS) {
        stale.push(d);
        this.#ready[kept++] = d;
      } else {
        this.#launch(d);
      }
    }
    this.#ready.length = kept;
    if (stale.length > 0 && !this.#refreshing) this.#refresh(stale);
  }

  /**
   * Re-read the webhooks of ready rows that waited (one statement for all): a moved webhook's rows
   * go to its new URL with its new secret, a deleted webhook's rows are dropped unsent.
   */
  #refresh(rows: ClaimedDelivery[]): void {
    for (const d of rows) this.#refreshingIds.add(d.id);
    const now = this.#o.clock();
    this.#refreshing = refreshTargets(this.#o.database, rows, now)
      .then((current) => {
        const ready = new Set(this.#ready);
        const dropped = new Set<string>();
        for (const d of rows) {
          // Given back by stop() meanwhile.
          if (!ready.has(d)) continue;
          const target = current.get(d.id);
          this.#uncount(d);
          if (!target) {
            dropped.add(d.id);
            continue;
          }
          d.url = target.url;
          d.secret = target.secret;
          d.readAt = now;
          this.#count(d);
        }
        if (dropped.size > 0) {
          this.#log.info(
            { deliveries: dropped.size },
            'deliveries dropped: their webhook was deleted or changed its event',
          );
          const kept = this.#ready.filter((d) => !dropped.has(d.id));
          this.#ready.splice(0, this.#ready.length, ...kept);
        }
      })
      .catch((e) => {
        // Database unreachable: send with what was read at the claim rather than retry in a loop.
        this.#log.warn({ err: dbError(e) }, 're-reading webhooks failed');
        for (const d of rows) d.readAt = now;
      })
      .finally(() => {
        for (const d of rows) this.#refreshingIds.delete(d.id);
        this.#refreshing = null;
        this.#pump();
        this.wake();
      });
  }

  /**
   * Run one attempt in a slot. The slot is freed as soon as the HTTP exchange ends; recording happens
   * after, batched with others (the row stays leased and, being still pending, keeps later deliveries
   * of its task waiting until it is recorded).
   */
  #launch(d: ClaimedDelivery): void {
    const controller = new AbortController();
    this.#perUrl.set(d.url, (this.#perUrl.get(d.url) ?? 0) + 1);
    const done = this.#send(d, controller.signal)
      .catch((e) => {
        this.#log.error({ deliveryId: d.id, err: dbError(e) }, 'webhook attempt bookkeeping failed');
        return null;
      })
      .then((finished) => {
        this.#inFlight.delete(d.id);
        const n = (this.#perUrl.get(d.url) ?? 1) - 1;
        if (n > 0) this.#perUrl.set(d.url, n);
        else this.#perUrl.delete(d.url);
        this.#uncount(d);
        this.#pump();
        if (finished) {
          const recording = this.#record(finished).finally(() => this.#recording.delete(recording));
          this.#recording.add(recording);
        }
        this.wake();
      });
    this.#inFlight.set(d.id, { url: d.url, controller, done });
  }

  /** POST the delivery; null when there is nothing to record (no event, or stopped mid-attempt). */
  async #send(d: ClaimedDelivery, signal: AbortSignal): Promise<FinishedAttempt | null> {
    const { database, clock } = this.#o;
    if (!d.payload) {
      await failMissingEvent(database, d, clock());
      this.#log.error({ deliveryId: d.id, eventId: d.eventId }, 'delivery event not found');
      return null;
    }
    const result = await sendWebhook({
      url: d.url,
      eventId: d.eventId,
      body: serializePayload(d.payload),
      secret: d.secret,
      userAgent: this.#o.userAgent,
      timeoutMs: this.#o.timeoutMs,
      fetch: this.#o.fetch,
      signal,
      now: clock,
    });
    if (!result.ok && result.shutdown) {
      await releaseDelivery(database, d);
      return null;
    }
    const now = clock();
    return { delivery: d, result, outcome: decideOutcome(result, d.attempts + 1, now), now };
  }

  async #record(f: FinishedAttempt): Promise<void> {
    const { delivery: d, result, outcome } = f;
    let ours: boolean;
    try {
      ours = await this.#recorder.record(f);
    } catch (e) {
      // Database down: the lease runs out and the row is attempted again.
      this.#log.error({ deliveryId: d.id, err: dbError(e) }, 'recording webhook attempt failed');
      return;
    }
    this.#o.onAttempt?.(result.ok);
    const ctx = {
      deliveryId: d.id,
      event: d.event,
      attempt: d.attempts + 1,
      target: originOf(d.url),
      durationMs: result.durationMs,
    };
    if (result.ok) this.#log.debug({ ...ctx, status: result.response.status }, 'webhook delivered');
    else if (outcome.state === 'failed')
      this.#log.warn({ ...ctx, error: result.error }, 'webhook delivery failed');
    else this.#log.info({ ...ctx, error: result.error }, 'webhook attempt failed, will retry');
    if (!ours) this.#log.warn({ deliveryId: d.id }, 'delivery lease lost before the attempt was recorded');
    if (outcome.state === 'pending' && ours) this.#wakeAt(outcome.nextAttemptAt);
    // Recording may unblock the next delivery of the same task.
    this.wake();
  }

  /** A precise timer per scheduled retry (the poll alone would be up to a poll interval late). */
  #wakeAt(at: number): void {
    if (this.#state !== 'running') return;
    const t = setTimeout(
      () => {
        this.#retryTimers.delete(t);
        this.wake();
      },
      Math.max(0, at - this.#o.clock()),
    );
    t.unref();
    this.#retryTimers.add(t);
  }
}
