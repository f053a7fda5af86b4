import { close, constants, fdatasync, fsync, ftruncate, open, write } from 'node:fs';
import { appendFile, readdir, readFile, rename, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import { makeDirectory, takeLockFile } from '@ffleet/shared';
import type { Logger } from 'pino';

/**
 * Durable store of messages the control plane has not acknowledged yet (PROTOCOL.md rule 4).
 *
 * Format: one append-only journal, `journal.log`, opened once (O_APPEND). Each record is one line,
 * `<crc32 of the JSON, 8 hex digits> <JSON>\n` (JSON escapes newlines, so a line is self-delimiting):
 * - `{"v":1,"next":N}`: header, first line of every file the outbox writes whole; N is the next order
 *   number, so numbering never goes back even when compaction dropped the newest records;
 * - `{"put":order,"key","topic","payload","ts"}`: an entry; a later put of the same key replaces it
 *   (and moves it last);
 * - `{"ack":key}`: the entry stored under `key` at that point of the file is gone.
 * Replaying the lines in file order rebuilds the live entries in insertion (= replay) order.
 *
 * Puts. A put resolves once its line is on disk: it survives a process crash and a power loss. The line
 * goes through a second descriptor of the file opened O_DSYNC, so the write returns only after the
 * kernel's fdatasync of it: one syscall instead of write + fdatasync. Group commit: puts made while a
 * write runs are written together by the next one (one write, one sync per group).
 *
 * Acks are never synced for themselves, and ack() resolves at once. An ack line rides with the next
 * put's write; when no put comes within `ackFlushMs` (1 s) it is written alone, without a sync (stop()
 * writes the rest). The next put group then goes out as write + fdatasync of the whole file rather than
 * an O_DSYNC write (which syncs its own range only), so what is durable is always a prefix of the file,
 * never records after a hole. So a process crash loses at most the acks of the last second, a power
 * loss the acks no put has synced since. A lost ack only means the entry is replayed once more after a
 * restart, which the control plane ignores (it dedupes on seq).
 *
 * Damage. On start a line whose CRC or shape is wrong is never taken as data: when good lines follow it
 * (damage in the middle) it is skipped, logged, and its bytes copied to `journal.corrupt` for a human;
 * when none follow it is the torn tail of a write that never returned (its put was not confirmed), and
 * is dropped. A write that fails fails every put of its group (`ok: false`) and the file is truncated
 * back to where the group started.
 *
 * Unsaved entries. A put whose write failed (a full disk, an I/O error) is not dropped: the agent has
 * nothing else that remembers it (a task's final report, sent once while the control plane could not
 * apply it, was lost, and the task ran again as a new attempt after its lease, post-processing twice).
 * It stays live in memory and is listed and replayed like a stored entry until its ack. Every
 * `UNSAVED_RETRY_MS` while any is left, and once more at stop, the unsaved entries are appended to the
 * journal as one group (with their own order numbers: a load sorts entries by them, so they replay in put
 * order). Only a process that ends meanwhile loses them, and says so.
 * Unsaved entries hold at most `MAX_UNSAVED_BYTES`; beyond that the oldest go, logged.
 *
 * Compaction. At start, whenever the file holds anything but a header and live puts (acks, replaced
 * puts, damage, a torn tail), and at run time once it is over `compactBytes` (4 MiB) and at least half
 * dead, the live entries are written to `journal.log.compact`, fsync'd, renamed over the journal and the
 * directory fsync'd. At run time this happens between two groups: puts arriving meanwhile queue up and
 * are appended to the new file after the swap, in order. Memory holds only live entries.
 *
 * Upgrade. Older agents stored one file per entry (`<order, 12 digits>.json`, `{key, topic, payload,
 * ts}`). start() imports them in numeric order (before the journal's entries in a first upgrade, as no
 * journal exists then), writes them into the journal by a compaction, and only then deletes them; a
 * file whose order the journal holds for the same key, or whose key is live in the journal, is the
 * leftover of an interrupted import (or older than the journal's entry) and is just deleted. Leftover
 * `.json.tmp` files (puts that never returned) are deleted; an unreadable `.json` is renamed
 * `.json.corrupt` and logged.
 *
 * Cost, measured on this 2-core VM (shared, so noisy; 2,000 put+ack of a ~300-byte report, CPU of the
 * main thread and the libuv threadpool from `process.cpuUsage()`, median of 7 runs, 3 passes): one put
 * then its ack at a time, 0.16–0.19 ms per put+ack, against 0.80–1.14 ms for the earlier one-file-per-
 * entry store (open, write, fsync, close, rename, directory fsync per put; unlink per ack); four writers
 * at once, 0.05–0.07 ms against 0.65–0.71 ms. Acks written at once (`ackFlushMs: 0`, so most puts go
 * out as write + fdatasync) cost 0.25–0.32 ms sequentially. The callback fs API is used: FileHandle took
 * ~25% more CPU per write + sync here; an O_DSYNC write took 0.12 ms against 0.15 ms for write +
 * fdatasync.
 */
export interface OutboxEntry {
  key: string;
  topic: string;
  payload: string;
  /** ms since epoch when it was put. */
  ts: number;
}

export type PutResult = { ok: true } | { ok: false; error: string };

/**
 * What the journal just did, for tests and metrics: a write (one per group), a sync (a group with puts
 * is on disk), the start of a compaction.
 */
export type OutboxEvent = 'write' | 'sync' | 'compact';

export interface OutboxOptions {
  dir: string;
  logger: Logger;
  /** Compact at run time once the journal is at least this big and half dead (default 4 MiB). */
  compactBytes?: number;
  /**
   * Ack lines ride with the next put's write, or are written this long after the first one waiting
   * (default 1000 ms; 0 = as soon as no write runs).
   */
  ackFlushMs?: number;
  /** Told of each journal write, fdatasync and compaction (tests count syncs with it). */
  onEvent?: (event: OutboxEvent) => void;
  /** How often unsaved entries are tried again (default `UNSAVED_RETRY_MS`). */
  unsavedRetryMs?: number;
  /** Memory for unsaved entries (default `MAX_UNSAVED_BYTES`). */
  maxUnsavedBytes?: number;
}

const JOURNAL = 'journal.log';
const COMPACT_TMP = 'journal.log.compact';
/** Names the process that owns the outbox (shared/src/fs/lock-file.ts). */
const LOCK_FILE = 'owner.lock';
const CORRUPT = 'journal.corrupt';
const FORMAT = 1;
const DEFAULT_COMPACT_BYTES = 4 * 1024 * 1024;
const DEFAULT_ACK_FLUSH_MS = 1_000;
const LEGACY_RE = /^(\d{12})\.json$/;
const NEWLINE = 0x0a;
/** Append-only, created if missing. */
const APPEND_FLAGS = constants.O_WRONLY | constants.O_CREAT | constants.O_APPEND;
const STORED: Promise<PutResult> = Promise.resolve({ ok: true });
/** A failing disk fails every write: the first failure of a streak is logged, then one in this many. */
const FAILED_WRITES_LOGGED_EVERY = 100;
/** Unsaved entries are appended to the journal again this often while any is left. */
const UNSAVED_RETRY_MS = 5_000;
/** Memory for unsaved entries (a report is kilobytes, at most 16 MiB): the oldest beyond this go. */
const MAX_UNSAVED_BYTES = 64 * 1024 * 1024;

interface Slot extends OutboxEntry {
  order: number;
  /** Its put line is on disk (fdatasync'd, or loaded from disk). */
  persisted: boolean;
  /** Its write failed: live in memory only, until a compaction writes it (see the module comment). */
  unsaved: boolean;
  /** Bytes of its put line (for the compaction heuristic). */
  bytes: number;
  /** The entry it replaced, kept while this one is not persisted (to restore it if the write fails). */
  prev: Slot | undefined;
  /** The write that stores it (resolved for entries loaded from disk). */
  write: Promise<PutResult>;
}

/** A line waiting to be appended; `slot` is set for a put (which needs the fdatasync). */
interface Pending {
  line: string;
  slot: Slot | null;
  resolve: (r: PutResult) => void;
}

type JournalRecord =
  | { kind: 'header'; next: number }
  | { kind: 'put'; order: number; key: string; topic: string; payload: string; ts: number }
  | { kind: 'ack'; key: string };

export class Outbox {
  private readonly dir: string;
  private readonly logger: Logger;
  private readonly compactBytes: number;
  private readonly ackFlushMs: number;
  private readonly onEvent: ((event: OutboxEvent) => void) | undefined;
  private readonly unsavedRetryMs: number;
  private readonly maxUnsavedBytes: number;
  /** Live entries; Map insertion order is put order, which is also journal order. */
  private readonly entries = new Map<string, Slot>();
  private queue: Pending[] = [];
  /** Puts in `queue` (a queue of acks alone waits, see `ackFlushMs`). */
  private queuedPuts = 0;
  private ackTimer: NodeJS.Timeout | null = null;
  private ackFlushDue = false;
  /** The running pump (writes the queue group by group), null when idle. */
  private pumping: Promise<void> | null = null;
  /** The journal, O_APPEND: ack-only writes, truncation; -1 when none is open. */
  private fd = -1;
  /** The same file, O_APPEND|O_DSYNC: a write returns once it is on disk (write + fdatasync in one call). */
  private dsyncFd = -1;
  /**
   * Bytes were written since the last sync (acks alone, or a failed write). An O_DSYNC write syncs its
   * own range only, so the next put group goes out as write + fdatasync (the whole file) instead: what
   * is durable is then always a prefix of the file, never records after a hole.
   */
  private unsynced = false;
  private fileSize = 0;
  /** Sum of `bytes` over `entries`. */
  private liveBytes = 0;
  /** Entries whose write failed, live in memory only, and their bytes (see the module comment). */
  private unsavedCount = 0;
  private unsavedBytes = 0;
  /** Unsaved entries are not tried again before this time (Date.now()). */
  private unsavedRetryAt = 0;
  private unsavedTimer: NodeJS.Timeout | null = null;
  /** Journal writes failed in a row (see FAILED_WRITES_LOGGED_EVERY). */
  private failedWrites = 0;
  /** Run-time compaction is not tried again before the file reaches this size (after a failure). */
  private compactRetryAt = 0;
  /** A failed write may have left a partial line that could not be truncated: start the next on a new line. */
  private needNewline = false;
  private nextOrder = 0;
  private starting: Promise<void> | null = null;
  /** start() has finished: puts are taken. */
  private started = false;
  private stopped = false;
  private releaseLock: (() => void) | null = null;
  private closed = false;
  private stopping: Promise<void> | null = null;

  constructor(opts: OutboxOptions) {
    this.dir = opts.dir;
    this.logger = opts.logger.child({ component: 'outbox' });
    this.compactBytes = opts.compactBytes ?? DEFAULT_COMPACT_BYTES;
    this.ackFlushMs = opts.ackFlushMs ?? DEFAULT_ACK_FLUSH_MS;
    this.onEvent = opts.onEvent;
    this.unsavedRetryMs = opts.unsavedRetryMs ?? UNSAVED_RETRY_MS;
    this.maxUnsavedBytes = opts.maxUnsavedBytes ?? MAX_UNSAVED_BYTES;
  }

  /**
   * Create the directory, load the journal (skipping damage), import entries of the old one-file-per-entry
   * layout, and compact when there is anything to drop or import.
   */
  start(): Promise<void> {
    this.starting ??= this.load().then(() => {
      this.started = true;
    });
    return this.starting;
  }

  private async load(): Promise<void> {
    await makeDirectory(this.dir);
    // Two processes on one outbox would replay and drop each other's reports: one owner at a time.
    this.releaseLock = takeLockFile(
      join(this.dir, LOCK_FILE),
      `the outbox ${this.dir}`,
      'each agent process needs its own name (FFLEET_AGENT_NAME) or its own FFLEET_DATA_DIR',
    );
    const names = await readdir(this.dir);
    const journal = await this.loadJournal();
    const legacy = await this.loadLegacy(names, journal.seenOrders);
    this.sortByOrder();
    for (const name of names) {
      if (name.endsWith('.tmp') || name === COMPACT_TMP) await unlink(join(this.dir, name)).catch(() => {});
    }
    const clean = journal.exists && journal.clean && legacy.imported.length === 0;
    if (!clean && (await this.compact())) {
      await this.removeLegacy(legacy.files);
    } else if (journal.exists) {
      // Clean, or it could not be rewritten (e.g. disk full): keep appending to it.
      await this.openExisting(journal.goodEnd, journal.size);
      // Imported entries stay in their files until a start that manages to rewrite the journal.
      for (const slot of legacy.imported) this.forget(slot);
      if (legacy.imported.length === 0) await this.removeLegacy(legacy.files);
    } else {
      // No journal and none could be written: the first put tries again (see commit).
      for (const slot of legacy.imported) this.forget(slot);
    }
    this.logger.debug({ entries: this.entries.size, bytes: this.fileSize }, 'outbox loaded');
  }

  /**
   * Store `payload` for `topic` under `key`; resolves only once it is on disk. Putting an existing key
   * with identical content is a no-op; with different content it replaces it (and moves it last).
   */
  put(key: string, topic: string, payload: string): Promise<PutResult> {
    if (!this.started) return Promise.reject(new Error('Outbox.put before start()'));
    if (this.stopped) return Promise.reject(new Error('Outbox.put after stop()'));
    const existing = this.entries.get(key);
    // Same content: wait for (or reuse) the write already storing it.
    if (existing && existing.topic === topic && existing.payload === payload) return existing.write;
    const ts = Date.now();
    const order = this.nextOrder++;
    const line = encode({ put: order, key, topic, payload, ts });
    const slot: Slot = {
      key,
      topic,
      payload,
      ts,
      order,
      persisted: false,
      unsaved: false,
      bytes: Buffer.byteLength(line),
      prev: existing,
      write: STORED,
    };
    if (existing) this.forget(existing);
    this.entries.set(key, slot);
    this.liveBytes += slot.bytes;
    slot.write = this.append(line, slot);
    return slot.write;
  }

  /**
   * Forget `key`; true when it was stored. Resolves at once: the ack line is appended later, with the
   * next put or after `ackFlushMs`, and never fdatasync'd for itself (see the module comment). An entry
   * still being written is acked right behind its put line.
   */
  async ack(key: string): Promise<boolean> {
    const slot = this.entries.get(key);
    if (!slot) return false;
    this.forget(slot);
    // After stop the journal is closed: the entry is replayed once more on the next start.
    if (!this.closed) void this.append(encode({ ack: key }), null);
    return true;
  }

  /** Stored and unsaved entries in insertion order (the order to replay them in). */
  list(): OutboxEntry[] {
    const out: OutboxEntry[] = [];
    for (const s of this.entries.values()) {
      if (s.persisted || s.unsaved) out.push({ key: s.key, topic: s.topic, payload: s.payload, ts: s.ts });
    }
    return out;
  }

  /** True when `key` is stored (or being stored). */
  has(key: string): boolean {
    return this.entries.has(key);
  }

  /** Number of stored and unsaved entries. */
  size(): number {
    let n = 0;
    for (const s of this.entries.values()) if (s.persisted || s.unsaved) n++;
    return n;
  }

  /** Number of entries held in memory only, their write having failed. */
  unsaved(): number {
    return this.unsavedCount;
  }

  /** Wait for in-flight writes (puts and acks) and close the journal; further puts are refused. Idempotent. */
  stop(): Promise<void> {
    this.stopped = true;
    this.stopping ??= this.shutdown();
    return this.stopping;
  }

  private async shutdown(): Promise<void> {
    await this.starting?.catch(() => {});
    // Acks still waiting are written now (`stopped` makes them due), and entries the disk refused are
    // tried once more: written now, they are replayed by the next start.
    if (this.unsavedCount > 0) this.unsavedRetryAt = 0;
    if (this.queue.length || this.unsavedCount > 0) this.kick();
    while (this.pumping) await this.pumping;
    if (this.ackTimer) clearTimeout(this.ackTimer);
    this.ackTimer = null;
    if (this.unsavedTimer) clearTimeout(this.unsavedTimer);
    this.unsavedTimer = null;
    if (this.unsavedCount > 0)
      this.logger.error(
        { entries: this.unsavedCount, bytes: this.unsavedBytes },
        'outbox entries the disk refused are lost with this process (the control plane had not acknowledged them)',
      );
    this.closed = true;
    await this.closeJournal();
    this.releaseLock?.();
    this.releaseLock = null;
  }

  private async closeJournal(): Promise<void> {
    const fds = [this.fd, this.dsyncFd];
    this.fd = -1;
    this.dsyncFd = -1;
    for (const fd of fds) if (fd >= 0) await closeFd(fd).catch(() => {});
  }

  private emit(event: OutboxEvent): void {
    try {
      this.onEvent?.(event);
    } catch {
      // An observer's failure is not the journal's.
    }
  }

  /**
   * Entries in put order: a journal holds them in the order they were written, which differs where
   * entries the disk had refused were appended later (see "Unsaved entries").
   */
  private sortByOrder(): void {
    const slots = [...this.entries.values()];
    if (slots.every((s, i) => i === 0 || slots[i - 1]!.order < s.order)) return;
    slots.sort((a, b) => a.order - b.order);
    this.entries.clear();
    for (const s of slots) this.entries.set(s.key, s);
  }

  private forget(slot: Slot): void {
    if (this.entries.get(slot.key) !== slot) return;
    this.entries.delete(slot.key);
    this.liveBytes -= slot.bytes;
    if (slot.unsaved) this.setUnsaved(slot, false);
  }

  private setUnsaved(slot: Slot, unsaved: boolean): void {
    if (slot.unsaved === unsaved) return;
    slot.unsaved = unsaved;
    this.unsavedCount += unsaved ? 1 : -1;
    this.unsavedBytes += unsaved ? slot.bytes : -slot.bytes;
  }

  /** Keep a live entry whose write failed in memory (see the module comment). */
  private keepUnsaved(slot: Slot): void {
    this.setUnsaved(slot, true);
    let dropped = 0;
    for (const s of this.entries.values()) {
      if (this.unsavedBytes <= this.maxUnsavedBytes) break;
      if (!s.unsaved || s === slot) continue;
      this.forget(s);
      dropped++;
    }
    if (dropped > 0)
      this.logger.error(
        { dropped, limit: this.maxUnsavedBytes },
        'outbox: dropped the oldest entries the disk refused, to bound the memory they hold',
      );
  }

  /** While entries are unsaved, run the pump again later, to try them again (saveUnsaved). */
  private retryUnsavedLater(): void {
    if (this.unsavedTimer || this.unsavedCount === 0 || this.stopped) return;
    this.unsavedTimer = setTimeout(() => {
      this.unsavedTimer = null;
      if (this.unsavedCount > 0 && !this.stopped) this.kick();
    }, this.unsavedRetryMs);
    this.unsavedTimer.unref();
  }

  private append(line: string, slot: Slot | null): Promise<PutResult> {
    return new Promise<PutResult>((resolve) => {
      this.queue.push({ line, slot, resolve });
      if (slot) this.queuedPuts++;
      if (slot || this.ackFlushMs === 0 || this.stopped) this.kick();
      else if (!this.ackTimer) {
        this.ackTimer = setTimeout(() => {
          this.ackTimer = null;
          this.ackFlushDue = true;
          this.kick();
        }, this.ackFlushMs);
        this.ackTimer.unref();
      }
    });
  }

  /** Run the pump unless it runs; on a microtask, so that puts made in the same tick share a group. */
  private kick(): void {
    this.pumping ??= Promise.resolve().then(() => this.pump());
  }

  /** Write the queue group by group (one write, and one fdatasync when it holds a put, per group). */
  private async pump(): Promise<void> {
    try {
      for (;;) {
        if (this.unsavedDue()) await this.saveUnsaved();
        if (this.compactDue()) await this.compact();
        if (this.queue.length === 0) return;
        // Acks alone wait for a put to ride with, or for their timer.
        const due = this.queuedPuts > 0 || this.ackFlushDue || this.ackFlushMs === 0 || this.stopped;
        if (!due) return;
        const group = this.queue;
        this.queue = [];
        this.queuedPuts = 0;
        this.ackFlushDue = false;
        if (this.ackTimer) clearTimeout(this.ackTimer);
        this.ackTimer = null;
        await this.commit(group);
      }
    } finally {
      this.pumping = null;
      this.retryUnsavedLater();
    }
  }

  /** Unsaved entries are left and their next try is due (tried once per unsavedRetryMs, and at stop). */
  private unsavedDue(): boolean {
    if (this.unsavedCount === 0 || Date.now() < this.unsavedRetryAt) return false;
    this.unsavedRetryAt = Date.now() + this.unsavedRetryMs;
    return true;
  }

  /**
   * Append the unsaved entries as one group (a write and a sync): a disk with room for them takes them,
   * however little, where a compaction needs room for a whole second journal.
   */
  private async saveUnsaved(): Promise<void> {
    const group: Pending[] = [];
    for (const s of this.entries.values()) {
      if (!s.unsaved) continue;
      const line = encode({ put: s.order, key: s.key, topic: s.topic, payload: s.payload, ts: s.ts });
      group.push({ line, slot: s, resolve: () => {} });
    }
    const before = this.unsavedCount;
    await this.commit(group);
    const saved = before - this.unsavedCount;
    if (saved > 0)
      this.logger.info({ entries: saved }, 'outbox entries the disk had refused are written now');
  }

  private compactDue(): boolean {
    return (
      this.fd >= 0 &&
      this.fileSize >= this.compactBytes &&
      this.fileSize >= this.compactRetryAt &&
      this.liveBytes * 2 <= this.fileSize
    );
  }

  private async commit(group: Pending[]): Promise<void> {
    let error: string | null = null;
    const puts = group.some((p) => p.slot !== null);
    // No journal open (it could not be created or rewritten at start): try to write one now.
    if (this.fd < 0 && !(await this.compact())) error = 'outbox journal could not be opened';
    const start = this.fileSize;
    if (error === null) {
      let text = group.length === 1 ? group[0]!.line : group.map((p) => p.line).join('');
      if (this.needNewline) text = `\n${text}`;
      try {
        const buf = Buffer.from(text);
        if (!puts) {
          await this.writeAll(this.fd, buf, true);
          this.unsynced = true;
        } else if (this.unsynced) {
          await this.writeAll(this.fd, buf, true);
          await datasyncFd(this.fd);
          this.unsynced = false;
        } else {
          // One call: the O_DSYNC write is the group's fdatasync.
          await this.writeAll(this.dsyncFd, buf, true);
        }
        this.needNewline = false;
        this.emit('write');
        if (puts) this.emit('sync');
      } catch (err) {
        error = err instanceof Error ? err.message : String(err);
        this.unsynced = true;
        await this.rollBack(start);
      }
    }
    if (error !== null) {
      this.failedWrites++;
      if (this.failedWrites === 1 || this.failedWrites % FAILED_WRITES_LOGGED_EVERY === 0)
        this.logger.error(
          { puts: group.filter((p) => p.slot).length, err: error, failedInARow: this.failedWrites },
          'outbox write failed',
        );
    } else if (this.failedWrites > 0) {
      this.logger.info({ failedBefore: this.failedWrites }, 'outbox writes succeed again');
      this.failedWrites = 0;
    }
    for (const p of group) {
      const slot = p.slot;
      if (!slot) {
        p.resolve({ ok: true });
      } else if (error === null) {
        slot.persisted = true;
        slot.prev = undefined;
        if (slot.unsaved) this.setUnsaved(slot, false);
        p.resolve({ ok: true });
      } else {
        // Still live (not acked or replaced meanwhile): kept in memory until acked or written.
        if (this.entries.get(slot.key) === slot) this.keepUnsaved(slot);
        p.resolve({ ok: false, error });
      }
    }
  }

  /** After a failed write: cut the file back to `size` so no partial line stays in front of the next. */
  private async rollBack(size: number): Promise<void> {
    try {
      await truncateFd(this.fd, size);
      this.fileSize = size;
    } catch (err) {
      this.needNewline = true;
      this.logger.warn({ err: (err as Error).message }, 'outbox journal could not be truncated');
    }
  }

  /** Write all of `buf` at the end of the file (a regular file may take fewer bytes per call). */
  private async writeAll(fd: number, buf: Buffer, counts: boolean): Promise<void> {
    let off = 0;
    while (off < buf.length) {
      const n = await writeFd(fd, buf, off);
      off += n;
      if (counts) this.fileSize += n;
    }
  }

  /**
   * Write the live entries to a new file and rename it over the journal (see the module comment); the
   * queue waits meanwhile. False (logged) when it failed: the current journal stays as it was.
   */
  private async compact(): Promise<boolean> {
    this.emit('compact');
    const live: Slot[] = [];
    for (const s of this.entries.values()) {
      let at: Slot | undefined = s;
      // An entry being replaced stays on disk until its replacement is; an unsaved one is left to
      // saveUnsaved (its older version, if one is on disk, is kept).
      while (at && !at.persisted) at = at.prev;
      if (at) live.push(at);
    }
    live.sort((a, b) => a.order - b.order);
    const parts = [encode({ v: FORMAT, next: this.nextOrder })];
    for (const s of live) {
      parts.push(encode({ put: s.order, key: s.key, topic: s.topic, payload: s.payload, ts: s.ts }));
    }
    const buf = Buffer.from(parts.join(''));
    const tmp = join(this.dir, COMPACT_TMP);
    let fd = -1;
    let dsyncFd = -1;
    try {
      fd = await openFd(tmp, APPEND_FLAGS | constants.O_TRUNC);
      dsyncFd = await openFd(tmp, APPEND_FLAGS | constants.O_DSYNC);
      await this.writeAll(fd, buf, false);
      await fsyncFd(fd);
      await rename(tmp, join(this.dir, JOURNAL));
    } catch (err) {
      for (const f of [fd, dsyncFd]) if (f >= 0) await closeFd(f).catch(() => {});
      await unlink(tmp).catch(() => {});
      this.compactRetryAt = this.fileSize + this.compactBytes;
      this.logger.warn({ err: (err as Error).message }, 'outbox journal compaction failed');
      return false;
    }
    // Renamed: the new file is the journal from now on, whatever happens next.
    const before = this.fileSize;
    await this.closeJournal();
    this.fd = fd;
    this.dsyncFd = dsyncFd;
    this.fileSize = buf.length;
    this.needNewline = false;
    this.unsynced = false;
    this.compactRetryAt = 0;
    try {
      await fsyncDir(this.dir);
    } catch (err) {
      this.logger.warn({ err: (err as Error).message }, 'outbox directory fsync failed');
    }
    this.logger.debug({ entries: live.length, before, after: buf.length }, 'outbox journal compacted');
    return true;
  }

  /** Read and replay the journal into `entries`. */
  private async loadJournal(): Promise<{
    exists: boolean;
    /** Nothing in it but a header and live puts. */
    clean: boolean;
    size: number;
    /** End of the last good line. */
    goodEnd: number;
    seenOrders: Map<number, string>;
  }> {
    const seenOrders = new Map<number, string>();
    let buf: Buffer;
    try {
      buf = await readFile(join(this.dir, JOURNAL));
    } catch (err) {
      // Anything but "missing" must stop the start: rewriting the journal from memory would lose it.
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
        return { exists: false, clean: false, size: 0, goodEnd: 0, seenOrders };
      }
      throw err;
    }
    const bad: Array<{ start: number; end: number }> = [];
    let goodEnd = 0;
    let records = 0;
    let header = false;
    for (let start = 0; start < buf.length; ) {
      const nl = buf.indexOf(NEWLINE, start);
      const end = nl < 0 ? buf.length : nl + 1;
      const rec = nl < 0 ? null : decode(buf, start, nl);
      if (!rec) {
        bad.push({ start, end });
      } else {
        goodEnd = end;
        if (rec.kind === 'header') {
          if (records === 0) header = true;
          this.nextOrder = Math.max(this.nextOrder, rec.next);
        } else if (rec.kind === 'put') {
          seenOrders.set(rec.order, rec.key);
          this.nextOrder = Math.max(this.nextOrder, rec.order + 1);
          const older = this.entries.get(rec.key);
          if (older) this.forget(older);
          const slot: Slot = {
            key: rec.key,
            topic: rec.topic,
            payload: rec.payload,
            ts: rec.ts,
            order: rec.order,
            persisted: true,
            unsaved: false,
            bytes: end - start,
            prev: undefined,
            write: STORED,
          };
          this.entries.set(slot.key, slot);
          this.liveBytes += slot.bytes;
        } else {
          const slot = this.entries.get(rec.key);
          if (slot) this.forget(slot);
        }
        records++;
      }
      start = end;
    }
    const corrupt = bad.filter((b) => b.end <= goodEnd);
    for (const b of corrupt) {
      this.logger.warn({ offset: b.start, bytes: b.end - b.start }, 'outbox journal record corrupt, skipped');
      // Keep the bytes for a human to inspect, out of the way of future loads.
      await appendFile(join(this.dir, CORRUPT), buf.subarray(b.start, b.end), { mode: 0o600 }).catch(
        () => {},
      );
    }
    if (goodEnd < buf.length) {
      this.logger.warn(
        { offset: goodEnd, bytes: buf.length - goodEnd, keptIn: CORRUPT },
        'outbox journal torn tail dropped',
      );
      // Usually half a write that never returned; but a journal that is garbage from its first byte is all
      // "tail" too, and must not vanish without a copy (upgrade QA).
      await appendFile(join(this.dir, CORRUPT), buf.subarray(goodEnd), { mode: 0o600 }).catch(() => {});
    }
    const clean = header && bad.length === 0 && records === this.entries.size + 1;
    return { exists: true, clean, size: buf.length, goodEnd, seenOrders };
  }

  /**
   * Entries of the old one-file-per-entry layout, added after the journal's. `files` are the ones to
   * delete once the journal holds them.
   */
  private async loadLegacy(
    names: string[],
    seenOrders: Map<number, string>,
  ): Promise<{ imported: Slot[]; files: string[] }> {
    const found: Array<{ name: string; order: number }> = [];
    for (const name of names) {
      const m = LEGACY_RE.exec(name);
      if (m) found.push({ name, order: Number(m[1]) });
    }
    found.sort((a, b) => a.order - b.order);
    const imported = new Set<Slot>();
    const files: string[] = [];
    for (const { name, order } of found) {
      const entry = await this.readLegacy(name);
      if (!entry) continue;
      files.push(name);
      const older = this.entries.get(entry.key);
      // Already in the journal: an import that stopped before deleting its files.
      if (seenOrders.get(order) === entry.key || (older && !imported.has(older))) continue;
      // The old layout left both when it crashed between writing a replacement and unlinking the
      // original: keep the newest.
      if (older) {
        this.forget(older);
        imported.delete(older);
      }
      const slot: Slot = {
        ...entry,
        order: Math.max(order, this.nextOrder),
        persisted: true,
        unsaved: false,
        bytes: 0,
        prev: undefined,
        write: STORED,
      };
      slot.bytes = Buffer.byteLength(encode({ put: slot.order, ...entry }));
      this.nextOrder = slot.order + 1;
      this.entries.set(slot.key, slot);
      this.liveBytes += slot.bytes;
      imported.add(slot);
    }
    if (imported.size) this.logger.info({ entries: imported.size }, 'outbox importing old entry files');
    return { imported: [...imported], files };
  }

  private async readLegacy(name: string): Promise<OutboxEntry | null> {
    const path = join(this.dir, name);
    try {
      const v: unknown = JSON.parse(await readFile(path, 'utf8'));
      if (isObject(v) && isStr(v.key) && isStr(v.topic) && isStr(v.payload) && isNum(v.ts)) {
        return { key: v.key, topic: v.topic, payload: v.payload, ts: v.ts };
      }
    } catch {
      // corrupt, below
    }
    // Keep the bytes for a human to inspect, out of the way of future loads.
    this.logger.warn({ file: name }, 'outbox entry corrupt, skipped');
    await rename(path, `${path}.corrupt`).catch(() => {});
    return null;
  }

  private async removeLegacy(files: string[]): Promise<void> {
    if (files.length === 0) return;
    for (const name of files) await unlink(join(this.dir, name)).catch(() => {});
    // Durable, or a power loss could bring an acked entry back (only replayed once more, but still).
    await fsyncDir(this.dir).catch(() => {});
  }

  /** Open the journal for appending, first cutting a torn tail off. */
  private async openExisting(goodEnd: number, size: number): Promise<void> {
    const path = join(this.dir, JOURNAL);
    try {
      this.fd = await openFd(path, APPEND_FLAGS);
      this.dsyncFd = await openFd(path, APPEND_FLAGS | constants.O_DSYNC);
    } catch (err) {
      await this.closeJournal();
      // The first put tries again (by rewriting it, see commit).
      this.logger.error({ err: (err as Error).message }, 'outbox journal could not be opened');
      return;
    }
    this.fileSize = size;
    // What the last run wrote may not all be on disk yet (unsynced acks): the first put syncs it all.
    this.unsynced = true;
    if (goodEnd < size) await this.rollBack(goodEnd);
  }
}

/** One journal line: CRC32 of the JSON (8 hex digits), a space, the JSON, a newline. */
function encode(rec: object): string {
  const body = JSON.stringify(rec);
  return `${crc32(body).toString(16).padStart(8, '0')} ${body}\n`;
}

/** The record of the line `buf[start, nl)`, or null when it is damaged. */
function decode(buf: Buffer, start: number, nl: number): JournalRecord | null {
  if (nl - start < 11 || buf[start + 8] !== 0x20) return null;
  const crc = Number.parseInt(buf.toString('latin1', start, start + 8), 16);
  const body = buf.subarray(start + 9, nl);
  if (!(crc >= 0) || crc32(body) !== crc) return null;
  let v: unknown;
  try {
    v = JSON.parse(body.toString('utf8'));
  } catch {
    return null;
  }
  if (!isObject(v)) return null;
  if (isOrder(v.put) && isStr(v.key) && isStr(v.topic) && isStr(v.payload) && isNum(v.ts)) {
    return { kind: 'put', order: v.put, key: v.key, topic: v.topic, payload: v.payload, ts: v.ts };
  }
  if (isStr(v.ack)) return { kind: 'ack', key: v.ack };
  if (v.v === FORMAT && isOrder(v.next)) return { kind: 'header', next: v.next };
  return null;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null;
}
function isStr(v: unknown): v is string {
  return typeof v === 'string';
}
function isNum(v: unknown): v is number {
  return typeof v === 'number' && Number.isFinite(v);
}
function isOrder(v: unknown): v is number {
  return Number.isSafeInteger(v) && (v as number) >= 0;
}

// The callback fs API: cheaper per call than FileHandle here (see the module comment).
function openFd(path: string, flags: number): Promise<number> {
  return new Promise((resolve, reject) => open(path, flags, 0o600, (e, fd) => (e ? reject(e) : resolve(fd))));
}
function writeFd(fd: number, buf: Buffer, off: number): Promise<number> {
  return new Promise((resolve, reject) =>
    write(fd, buf, off, buf.length - off, null, (e, n) => (e ? reject(e) : resolve(n))),
  );
}
function datasyncFd(fd: number): Promise<void> {
  return new Promise((resolve, reject) => fdatasync(fd, (e) => (e ? reject(e) : resolve())));
}
function fsyncFd(fd: number): Promise<void> {
  return new Promise((resolve, reject) => fsync(fd, (e) => (e ? reject(e) : resolve())));
}
function truncateFd(fd: number, size: number): Promise<void> {
  return new Promise((resolve, reject) => ftruncate(fd, size, (e) => (e ? reject(e) : resolve())));
}
function closeFd(fd: number): Promise<void> {
  return new Promise((resolve, reject) => close(fd, (e) => (e ? reject(e) : resolve())));
}
/** fsync a directory so the renames and unlinks in it survive a power loss. */
async function fsyncDir(dir: string): Promise<void> {
  const fd = await openFd(dir, constants.O_RDONLY);
  try {
    await fsyncFd(fd);
  } finally {
    await closeFd(fd).catch(() => {});
  }
}
