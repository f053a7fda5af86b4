import { spawn } from 'node:child_process';
import {
  appendFile,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  rm,
  stat,
  truncate,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { crc32 } from 'node:zlib';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { canMountTmpfs, mountSmallTmpfs, type SmallTmpfs } from '../../../test/helpers/small-tmpfs.ts';
import { Outbox, type OutboxEvent, type OutboxOptions } from './outbox.ts';

const silent = pino({ level: 'silent' });
/** The outbox's files, without the lock file naming its owner. */
const dataFiles = async (d: string) => (await readdir(d)).filter((f) => f !== 'owner.lock');
const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const OUTBOX_MODULE = fileURLToPath(new URL('./outbox.ts', import.meta.url));

/** A logger whose records can be inspected. */
function captureLogger(): { logger: pino.Logger; records: Array<Record<string, unknown>> } {
  const records: Array<Record<string, unknown>> = [];
  const stream = new Writable({
    write(chunk, _enc, cb) {
      records.push(JSON.parse(String(chunk)));
      cb();
    },
  });
  return { logger: pino({ level: 'debug' }, stream), records };
}

/** The journal's records (each line's JSON after its CRC); fails unless every line is whole and checks out. */
async function journal(dir: string): Promise<Array<Record<string, unknown>>> {
  const text = await readFile(join(dir, 'journal.log'), 'utf8');
  expect(text.endsWith('\n')).toBe(true);
  return text
    .slice(0, -1)
    .split('\n')
    .map((line) => {
      expect(line).toMatch(/^[0-9a-f]{8} \{/);
      const body = line.slice(9);
      expect(Number.parseInt(line.slice(0, 8), 16)).toBe(crc32(body));
      return JSON.parse(body) as Record<string, unknown>;
    });
}

/** Byte offsets of the journal's lines: [start, end) of each, end including the newline. */
async function lineSpans(dir: string): Promise<Array<[number, number]>> {
  const buf = await readFile(join(dir, 'journal.log'));
  const spans: Array<[number, number]> = [];
  for (let start = 0; start < buf.length; ) {
    const end = buf.indexOf(0x0a, start) + 1;
    spans.push([start, end]);
    start = end;
  }
  return spans;
}

/** Counts the journal's writes, fdatasyncs and compactions. */
function counter(): { counts: Record<OutboxEvent, number>; onEvent: (e: OutboxEvent) => void } {
  const counts: Record<OutboxEvent, number> = { write: 0, sync: 0, compact: 0 };
  return { counts, onEvent: (e) => counts[e]++ };
}

/** A small deterministic PRNG (mulberry32), so a failing sequence can be replayed. */
function prng(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe('Outbox', () => {
  let dir: string;
  const open: Outbox[] = [];

  async function openOutbox(
    logger: pino.Logger = silent,
    opts: Partial<OutboxOptions> = {},
  ): Promise<Outbox> {
    const o = new Outbox({ dir, logger, ...opts });
    await o.start();
    open.push(o);
    return o;
  }

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'ffleet-outbox-'));
  });
  afterEach(async () => {
    await Promise.all(open.splice(0).map((o) => o.stop()));
    await rm(dir, { recursive: true, force: true });
  });

  it('lists puts in insertion order and forgets acked keys', async () => {
    const o = await openOutbox();
    await Promise.all(['a', 'b', 'c', 'd'].map((k) => o.put(k, `t/${k}`, `{"k":"${k}"}`)));
    expect(o.list().map((e) => e.key)).toEqual(['a', 'b', 'c', 'd']);
    expect(await o.ack('b')).toBe(true);
    expect(await o.ack('b')).toBe(false);
    expect(o.size()).toBe(3);
    expect(o.list().map((e) => [e.key, e.topic, e.payload])).toEqual([
      ['a', 't/a', '{"k":"a"}'],
      ['c', 't/c', '{"k":"c"}'],
      ['d', 't/d', '{"k":"d"}'],
    ]);
    // One file: a header, four puts, one ack (written by stop at the latest).
    await o.stop();
    expect(await dataFiles(dir)).toEqual(['journal.log']);
    const recs = await journal(dir);
    expect(recs.map((r) => r.key ?? r.ack ?? 'header')).toEqual(['header', 'a', 'b', 'c', 'd', 'b']);
    expect(recs[2]).toMatchObject({ key: 'b', topic: 't/b', payload: '{"k":"b"}' });
  });

  it('keeps entries and their order across a reopen, and keeps numbering after them', async () => {
    const first = await openOutbox();
    for (let i = 0; i < 5; i++) await first.put(`task:1:${i}`, 'x', String(i));
    await first.ack('task:1:0');
    await first.stop();
    const second = await openOutbox();
    expect(second.list().map((e) => e.key)).toEqual(['task:1:1', 'task:1:2', 'task:1:3', 'task:1:4']);
    await second.put('late', 'x', 'late');
    await second.stop();
    const third = await openOutbox();
    expect(
      third
        .list()
        .map((e) => e.key)
        .at(-1),
    ).toBe('late');
  });

  it('has one owner at a time: a second outbox on the directory is refused until the first stops', async () => {
    const first = await openOutbox();
    await first.put('a', 'x', '1');
    const second = new Outbox({ dir, logger: silent });
    await expect(second.start()).rejects.toThrow(/outbox .* is in use by this process already/);
    expect(first.list().map((e) => e.key)).toEqual(['a']);
    await first.stop();
    const third = await openOutbox();
    expect(third.list().map((e) => e.key)).toEqual(['a']);
  });

  it('stores an entry put twice at once with the same content only once, after it is on disk', async () => {
    const o = await openOutbox();
    const [a, b] = await Promise.all([o.put('dup', 't', 'p'), o.put('dup', 't', 'p')]);
    expect([a, b]).toEqual([{ ok: true }, { ok: true }]);
    expect(o.size()).toBe(1);
    expect(await dataFiles(dir)).toEqual(['journal.log']);
    expect((await journal(dir)).filter((r) => 'put' in r).map((r) => r.key)).toEqual(['dup']);
  });

  it('replaces an entry put again under the same key with new content', async () => {
    const o = await openOutbox();
    await o.put('r1', 'x', 'v1');
    await o.put('r2', 'x', 'v1');
    await o.put('r1', 'x', 'v2');
    expect(o.list().map((e) => `${e.key}=${e.payload}`)).toEqual(['r2=v1', 'r1=v2']);
    await o.stop();
    const again = await openOutbox();
    expect(again.list().map((e) => `${e.key}=${e.payload}`)).toEqual(['r2=v1', 'r1=v2']);
  });

  it('skips and logs a corrupt entry file of the old layout and drops a half-written one', async () => {
    const o = await openOutbox();
    await o.put('good-1', 'x', '1');
    await o.put('good-2', 'x', '2');
    await o.stop();
    await writeFile(join(dir, '000000000007.json'), '{"key":"torn","topic":');
    await writeFile(join(dir, '000000000008.json.tmp'), '{"key":"never-confirmed"');
    const { logger, records } = captureLogger();
    const again = await openOutbox(logger);
    expect(again.list().map((e) => e.key)).toEqual(['good-1', 'good-2']);
    expect(
      records.some((r) => r.msg === 'outbox entry corrupt, skipped' && r.file === '000000000007.json'),
    ).toBe(true);
    const files = await readdir(dir);
    expect(files).toContain('000000000007.json.corrupt');
    expect(files.some((f) => f.endsWith('.tmp'))).toBe(false);
    await again.put('good-3', 'x', '3');
    expect(again.list().map((e) => e.key)).toEqual(['good-1', 'good-2', 'good-3']);
  });

  it('after many puts, replacements and acks, a reopen returns exactly the live entries in order', async () => {
    const rand = prng(7);
    /** The model: what must be stored, in replay order. */
    const model = new Map<string, string>();
    let o = await openOutbox();
    for (let round = 0; round < 4; round++) {
      for (let i = 0; i < 150; i++) {
        const keys = [...model.keys()];
        const batch: Array<Promise<unknown>> = [];
        // Bursts of concurrent calls, so groups mix puts, replacements and acks.
        for (let j = 0, n = 1 + Math.floor(rand() * 4); j < n; j++) {
          const r = rand();
          if (r < 0.45 || keys.length === 0) {
            const key = `t${round}:${i}:${j}`;
            model.delete(key);
            model.set(key, `p${i}.${j}`);
            batch.push(o.put(key, 'x', `p${i}.${j}`));
          } else if (r < 0.55) {
            const key = keys[Math.floor(rand() * keys.length)]!;
            const payload = `re${round}.${i}.${j}`;
            model.delete(key);
            model.set(key, payload);
            batch.push(o.put(key, 'x', payload));
          } else {
            const key = keys[Math.floor(rand() * keys.length)]!;
            if (!model.has(key)) continue;
            model.delete(key);
            batch.push(o.ack(key));
          }
        }
        await Promise.all(batch);
      }
      const want = [...model].map(([k, v]) => `${k}=${v}`);
      expect(o.list().map((e) => `${e.key}=${e.payload}`)).toEqual(want);
      await o.stop();
      o = await openOutbox();
      expect(o.list().map((e) => `${e.key}=${e.payload}`)).toEqual(want);
    }
    expect(model.size).toBeGreaterThan(20);
    // Only live entries survive the start-time compaction: a header and one put per entry.
    const recs = await journal(dir);
    expect(recs.length).toBe(model.size + 1);
    expect(recs.filter((r) => 'ack' in r)).toEqual([]);
    // Numbering goes on after what compaction dropped.
    const orders = recs.filter((r) => 'put' in r).map((r) => r.put as number);
    expect(orders).toEqual([...orders].sort((a, b) => a - b));
    await o.put('last', 'x', 'last');
    const last = (await journal(dir)).at(-1)!;
    expect(last.put as number).toBeGreaterThan(Math.max(...orders));
    expect(last.put as number).toBe(recs[0]!.next);
  });

  it('drops a torn tail (a record cut short, or garbage) and keeps appending after it', async () => {
    const first = await openOutbox();
    for (let i = 0; i < 4; i++) await first.put(`k${i}`, 'x', `payload ${i}`);
    await first.stop();
    // The last put's line cut in half, as by a crash in the middle of its write.
    const spans = await lineSpans(dir);
    const [lastStart, lastEnd] = spans.at(-1)!;
    await truncate(join(dir, 'journal.log'), lastStart + Math.floor((lastEnd - lastStart) / 2));
    const { logger, records } = captureLogger();
    const second = await openOutbox(logger);
    expect(second.list().map((e) => e.key)).toEqual(['k0', 'k1', 'k2']);
    expect(records.some((r) => r.msg === 'outbox journal torn tail dropped')).toBe(true);
    expect(records.some((r) => r.msg === 'outbox journal record corrupt, skipped')).toBe(false);
    await second.put('k4', 'x', 'payload 4');
    await second.ack('k0');
    await second.stop();
    // Garbage after the last record (a complete-looking line and a partial one).
    const garbage = '0badf00d {"put":99,"key":"evil"}\n{"put":100,"ke';
    await appendFile(join(dir, 'journal.log'), garbage);
    const third = await openOutbox(logger);
    expect(third.list().map((e) => e.key)).toEqual(['k1', 'k2', 'k4']);
    // What was dropped is kept for a human, after the first torn tail's bytes.
    expect((await readFile(join(dir, 'journal.corrupt'), 'utf8')).endsWith(garbage)).toBe(true);
    await third.put('k5', 'x', 'payload 5');
    await third.stop();
    const fourth = await openOutbox();
    expect(fourth.list().map((e) => e.key)).toEqual(['k1', 'k2', 'k4', 'k5']);
    // Every line of the file is whole and checks out again.
    expect((await journal(dir)).map((r) => r.key ?? 'header')).toEqual(['header', 'k1', 'k2', 'k4', 'k5']);
  });

  it('skips and logs a corrupt record in the middle of the journal, keeping the ones after it', async () => {
    const first = await openOutbox();
    for (let i = 0; i < 5; i++) await first.put(`k${i}`, 'x', `payload number ${i}`);
    await first.stop();
    const path = join(dir, 'journal.log');
    const buf = await readFile(path);
    // Flip one byte inside k2's payload (line 3: after the header, k0 and k1).
    const [start, end] = (await lineSpans(dir))[3]!;
    const at = buf.indexOf('payload number 2', start) + 3;
    expect(at).toBeGreaterThan(start);
    buf[at] = buf[at]! ^ 0x01;
    await writeFile(path, buf);
    const { logger, records } = captureLogger();
    const again = await openOutbox(logger);
    expect(again.list().map((e) => e.key)).toEqual(['k0', 'k1', 'k3', 'k4']);
    expect(
      records.some((r) => r.msg === 'outbox journal record corrupt, skipped' && r.offset === start),
    ).toBe(true);
    // Its bytes are kept aside for a human, not taken as data.
    expect(await readFile(join(dir, 'journal.corrupt'))).toEqual(buf.subarray(start, end));
    await again.put('k5', 'x', 'payload number 5');
    await again.stop();
    const third = await openOutbox();
    expect(third.list().map((e) => e.key)).toEqual(['k0', 'k1', 'k3', 'k4', 'k5']);
  });

  it('compacts a mostly dead journal while running, keeping live entries, their order and a put made meanwhile', async () => {
    const { counts, onEvent } = counter();
    const during: Array<Promise<unknown>> = [];
    let o: Outbox | null = null;
    const payload = 'y'.repeat(200);
    const o1 = await openOutbox(silent, {
      compactBytes: 16 * 1024,
      onEvent: (e) => {
        onEvent(e);
        // A put arriving while the compaction runs (not the one at start).
        if (e === 'compact' && o) during.push(o.put(`during-${during.length}`, 'x', payload));
      },
    });
    o = o1;
    const startCompactions = counts.compact;
    const keep: string[] = [];
    let maxSize = 0;
    for (let i = 0; i < 600; i++) {
      await o1.put(`t:${i}`, 'x', payload);
      if (i % 50 === 7) keep.push(`t:${i}`);
      else await o1.ack(`t:${i}`);
      maxSize = Math.max(maxSize, (await stat(join(dir, 'journal.log'))).size);
    }
    await Promise.all(during);
    const compactions = counts.compact - startCompactions;
    // ~600 puts of ~260 bytes would be ~160 KB: it was cut back to its live entries several times.
    expect(compactions).toBeGreaterThanOrEqual(3);
    expect(maxSize).toBeLessThan(16 * 1024 + 2_000);
    expect(during.length).toBe(compactions);
    const live = o1.list().map((e) => e.key);
    // Each put made during a compaction is stored, behind the entries put before it.
    expect(live.filter((k) => k.startsWith('t:'))).toEqual(keep);
    expect(live.filter((k) => k.startsWith('during-')).length).toBe(compactions);
    expect(live.indexOf('during-0')).toBeGreaterThan(live.indexOf(keep[0]!));
    await o1.stop();
    const again = await openOutbox();
    expect(again.list().map((e) => e.key)).toEqual(live);
    expect((await stat(join(dir, 'journal.log'))).size).toBeLessThan(live.length * 300 + 100);
  });

  it('imports entry files of the old one-file-per-entry layout, oldest first, then deletes them', async () => {
    const old = (key: string, payload: string, ts: number) =>
      JSON.stringify({ key, topic: `ffleet/v1/agents/a/events`, payload, ts });
    await writeFile(join(dir, '000000000003.json'), old('task:1:0', 'zero', 1000));
    await writeFile(join(dir, '000000000012.json'), old('task:1:1', 'one', 1001));
    await writeFile(join(dir, '000000000010.json'), old('task:2:0', 'first version', 1002));
    // A crash between writing a replacement and unlinking the original left both: the newest wins.
    await writeFile(join(dir, '000000000014.json'), old('task:2:0', 'second version', 1003));
    await writeFile(join(dir, '000000000015.json.tmp'), old('task:3:0', 'never confirmed', 1004));
    const { logger, records } = captureLogger();
    const first = await openOutbox(logger);
    const want = ['task:1:0=zero', 'task:1:1=one', 'task:2:0=second version'];
    expect(first.list().map((e) => `${e.key}=${e.payload}`)).toEqual(want);
    expect(first.list()[0]).toEqual({
      key: 'task:1:0',
      topic: 'ffleet/v1/agents/a/events',
      payload: 'zero',
      ts: 1000,
    });
    expect(records.some((r) => r.msg === 'outbox importing old entry files' && r.entries === 3)).toBe(true);
    expect(await dataFiles(dir)).toEqual(['journal.log']);
    // Numbering goes on after the imported files; acks and new puts work on imported entries.
    expect(await first.ack('task:1:0')).toBe(true);
    await first.put('task:1:2', 'ffleet/v1/agents/a/events', 'two');
    expect((await journal(dir)).at(-1)!.put).toBe(15);
    await first.stop();
    const second = await openOutbox();
    expect(second.list().map((e) => `${e.key}=${e.payload}`)).toEqual([...want.slice(1), 'task:1:2=two']);
    await second.stop();
    // An import that stopped after writing the journal but before deleting the files: not imported twice.
    await writeFile(join(dir, '000000000012.json'), old('task:1:1', 'one', 1001));
    await writeFile(join(dir, '000000000003.json'), old('task:1:0', 'zero', 1000));
    const third = await openOutbox();
    // `task:1:0` was acked since, and its order (3) is no longer in the journal: it comes back, which
    // only means one more replay the control plane ignores; `task:1:1` (order 12, still there) does not.
    expect(third.list().map((e) => e.key)).toEqual(['task:1:1', 'task:2:0', 'task:1:2', 'task:1:0']);
    expect(await dataFiles(dir)).toEqual(['journal.log']);
  });

  it('commits concurrent puts with one fdatasync per group; acks ride with puts, never synced', async () => {
    const { counts, onEvent } = counter();
    const o = await openOutbox(silent, { onEvent, ackFlushMs: 50 });
    const since = (before: typeof counts) => ({
      write: counts.write - before.write,
      sync: counts.sync - before.sync,
    });
    // Sequential puts: one write and one fdatasync each (so the counter does count).
    let before = { ...counts };
    for (let i = 0; i < 5; i++) await o.put(`s${i}`, 'x', 'p');
    expect(since(before)).toEqual({ write: 5, sync: 5 });
    // 40 puts at once: all in the first group (made in one tick).
    before = { ...counts };
    await Promise.all(Array.from({ length: 40 }, (_, i) => o.put(`c${i}`, 'x', 'p')));
    expect(since(before)).toEqual({ write: 1, sync: 1 });
    // Puts arriving while a write or sync runs go out together in the next group.
    before = { ...counts };
    const spread: Array<Promise<unknown>> = [];
    for (let i = 0; i < 40; i++) {
      spread.push(o.put(`d${i}`, 'x', 'p'));
      if (i % 4 === 3) await new Promise((r) => setImmediate(r));
    }
    expect((await Promise.all(spread)).every((r) => (r as { ok: boolean }).ok)).toBe(true);
    expect(since(before).sync).toBeLessThan(40);
    expect(since(before).sync).toBe(since(before).write);
    // Acks alone: nothing written until ackFlushMs has passed, then one write for all, no sync.
    before = { ...counts };
    for (let i = 0; i < 5; i++) expect(await o.ack(`s${i}`)).toBe(true);
    expect(since(before)).toEqual({ write: 0, sync: 0 });
    await new Promise((r) => setTimeout(r, 200));
    expect(since(before)).toEqual({ write: 1, sync: 0 });
    // Each ack rides with the next put's write: five put+ack, five writes.
    before = { ...counts };
    for (let i = 0; i < 5; i++) {
      await o.put(`e${i}`, 'x', 'p');
      await o.ack(`e${i}`);
    }
    expect(since(before)).toEqual({ write: 5, sync: 5 });
    expect(o.size()).toBe(80);
    // stop() writes the last one.
    await o.stop();
    expect(since(before)).toEqual({ write: 6, sync: 5 });
    expect((await journal(dir)).filter((r) => 'ack' in r).length).toBe(10);
  });

  it('an entry acked before its write landed is stored, then gone, also after a reopen', async () => {
    const o = await openOutbox();
    const put = o.put('early', 'x', '1');
    expect(o.has('early')).toBe(true);
    expect(o.list()).toEqual([]);
    expect(await o.ack('early')).toBe(true);
    expect(await put).toEqual({ ok: true });
    expect(o.has('early')).toBe(false);
    // A replacement still being written when its key is acked: neither version survives.
    await o.put('r', 'x', 'v1');
    const replacing = o.put('r', 'x', 'v2');
    await o.ack('r');
    await replacing;
    await o.put('stays', 'x', 's');
    expect(o.list().map((e) => e.key)).toEqual(['stays']);
    await o.stop();
    const again = await openOutbox();
    expect(again.list().map((e) => e.key)).toEqual(['stays']);
  });

  it('stop waits for writes in flight and refuses later puts', async () => {
    const o = await openOutbox();
    const pending = Array.from({ length: 10 }, (_, i) => o.put(`k${i}`, 'x', String(i)));
    const acked = o.ack('k0');
    await o.stop();
    // Everything asked for before stop() is on disk when it resolves.
    expect(o.size()).toBe(9);
    expect(await Promise.all(pending)).toEqual(Array(10).fill({ ok: true }));
    expect(await acked).toBe(true);
    await expect(o.put('late', 'x', 'late')).rejects.toThrow('after stop');
    await expect(new Outbox({ dir, logger: silent }).put('k', 'x', 'p')).rejects.toThrow('before start');
    const again = await openOutbox();
    expect(again.list().map((e) => e.key)).toEqual(['k1', 'k2', 'k3', 'k4', 'k5', 'k6', 'k7', 'k8', 'k9']);
  });

  it('when the journal cannot be rewritten at start, cuts a torn tail off and appends to it', async () => {
    const first = await openOutbox();
    for (let i = 0; i < 3; i++) await first.put(`k${i}`, 'x', `payload ${i}`);
    await first.ack('k0');
    await first.stop();
    await appendFile(join(dir, 'journal.log'), '1234abcd {"put":7,"key":"torn"');
    await writeFile(
      join(dir, '000000000001.json'),
      JSON.stringify({ key: 'old', topic: 'x', payload: 'o', ts: 1 }),
    );
    // A directory where the compaction writes its new file: the rewrite fails.
    await mkdir(join(dir, 'journal.log.compact'));
    const { logger, records } = captureLogger();
    const second = await openOutbox(logger);
    expect(records.some((r) => r.msg === 'outbox journal compaction failed')).toBe(true);
    // The old-layout file waits for a start that can write it into the journal.
    expect(second.list().map((e) => e.key)).toEqual(['k1', 'k2']);
    expect(await readdir(dir)).toContain('000000000001.json');
    await second.put('k3', 'x', 'payload 3');
    await second.stop();
    // Appended right after the last good record: every line whole (the ack of k0 still in there).
    expect((await journal(dir)).map((r) => r.key ?? r.ack ?? 'header')).toEqual([
      'header',
      'k0',
      'k1',
      'k2',
      'k0',
      'k3',
    ]);
    await rm(join(dir, 'journal.log.compact'), { recursive: true });
    const third = await openOutbox();
    expect(third.list().map((e) => e.key)).toEqual(['k1', 'k2', 'k3', 'old']);
    // The torn tail's bytes are kept aside for a human, once.
    expect((await dataFiles(dir)).sort()).toEqual(['journal.corrupt', 'journal.log']);
    expect(await readFile(join(dir, 'journal.corrupt'), 'utf8')).toBe('1234abcd {"put":7,"key":"torn"');
  });

  it('keeps every entry whose put resolved when the process is SIGKILLed right after', async () => {
    // The child puts 50 entries, prints each key once put() resolved, then SIGKILLs itself.
    const script = `
      import { Outbox } from ${JSON.stringify(OUTBOX_MODULE)};
      import pino from 'pino';
      const o = new Outbox({ dir: ${JSON.stringify(dir)}, logger: pino({ level: 'silent' }) });
      await o.start();
      for (let i = 0; i < 50; i++) {
        await o.put('k' + i, 'ffleet/v1/agents/a/events', JSON.stringify({ seq: i }));
        process.stdout.write('k' + i + '\\n');
      }
      process.kill(process.pid, 'SIGKILL');
    `;
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: REPO_ROOT,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    const signal = await new Promise<NodeJS.Signals | null>((resolve) =>
      child.on('exit', (_c, s) => resolve(s)),
    );
    expect(signal).toBe('SIGKILL');
    const confirmed = out.split('\n').filter(Boolean);
    expect(confirmed.length).toBe(50);
    const again = await openOutbox();
    expect(again.list().map((e) => e.key)).toEqual(confirmed);
  });

  it('measures put latency (one fdatasync per group of puts)', async () => {
    const o = await openOutbox();
    const payload = JSON.stringify({ kind: 'update', patch: { progress: 42.5 }, pad: 'x'.repeat(300) });
    const lat: number[] = [];
    for (let i = 0; i < 200; i++) {
      const t = performance.now();
      const r = await o.put(`t:1:${i}`, 'topic', payload);
      lat.push(performance.now() - t);
      expect(r.ok).toBe(true);
    }
    const t = performance.now();
    await Promise.all(Array.from({ length: 200 }, (_, i) => o.put(`p:1:${i}`, 'topic', payload)));
    const parallelMs = performance.now() - t;
    lat.sort((a, b) => a - b);
    const p = (q: number) => lat[Math.floor(q * (lat.length - 1))]!.toFixed(2);
    console.info(
      `outbox put latency sequential p50=${p(0.5)}ms p99=${p(0.99)}ms; 200 concurrent puts ${parallelMs.toFixed(0)}ms`,
    );
    expect(o.size()).toBe(400);
  });

  describe.runIf(canMountTmpfs)('on a disk that fills up (a real tmpfs)', () => {
    let disk: SmallTmpfs;
    /** The test's own temp dir (the outer hooks make and remove it): the tmpfs is mounted in it. */
    let base: string;
    beforeEach(() => {
      base = dir;
      disk = mountSmallTmpfs('256k', join(base, 'disk'));
      dir = join(disk.dir, 'outbox');
    });
    afterEach(async () => {
      await Promise.all(open.splice(0).map((o) => o.stop()));
      disk.remove();
      dir = base;
    });
    // Over a page each: a put never fits in what is left of the journal's last page.
    const payload = (i: number) => JSON.stringify({ seq: i, pad: 'x'.repeat(5_000) });

    it('keeps a put the disk refused in memory, lists it in order, and writes it once there is space', async () => {
      const { logger, records } = captureLogger();
      const o = await openOutbox(logger, { unsavedRetryMs: 50 });
      expect((await o.put('t:1:0', 'topic', payload(0))).ok).toBe(true);
      disk.fill();
      const refused = await o.put('t:1:1', 'topic', payload(1));
      expect(refused).toEqual({ ok: false, error: expect.stringMatching(/ENOSPC/) });
      // Before, the entry was gone here: nothing would have replayed it.
      expect(o.has('t:1:1')).toBe(true);
      expect(o.unsaved()).toBe(1);
      expect(o.list().map((e) => e.key)).toEqual(['t:1:0', 't:1:1']);
      expect(o.size()).toBe(2);
      // Still full: the retries fail, the entry stays.
      await new Promise((r) => setTimeout(r, 200));
      expect(o.unsaved()).toBe(1);
      disk.free();
      await expect.poll(() => o.unsaved(), { timeout: 5_000 }).toBe(0);
      expect(records.some((r) => r.msg === 'outbox entries the disk had refused are written now')).toBe(true);
      await o.stop();
      open.splice(open.indexOf(o), 1);
      const again = await openOutbox();
      expect(again.list().map((e) => [e.key, e.payload])).toEqual([
        ['t:1:0', payload(0)],
        ['t:1:1', payload(1)],
      ]);
    });

    it('forgets an unsaved entry at its ack, and bounds their memory by dropping the oldest', async () => {
      const { logger, records } = captureLogger();
      const o = await openOutbox(logger, { unsavedRetryMs: 60_000, maxUnsavedBytes: 12_000 });
      disk.fill();
      for (let i = 0; i < 3; i++) expect((await o.put(`t:1:${i}`, 'topic', payload(i))).ok).toBe(false);
      // ~5 kB each against 12 kB: the oldest went.
      expect(o.list().map((e) => e.key)).toEqual(['t:1:1', 't:1:2']);
      expect(records.some((r) => String(r.msg).startsWith('outbox: dropped the oldest entries'))).toBe(true);
      expect(await o.ack('t:1:1')).toBe(true);
      expect(o.list().map((e) => e.key)).toEqual(['t:1:2']);
      expect(o.unsaved()).toBe(1);
      await o.stop();
      expect(records.some((r) => String(r.msg).startsWith('outbox entries the disk refused are lost'))).toBe(
        true,
      );
    });

    it('writes a refused entry once the disk has room for it, though not for a compaction', async () => {
      const { logger, records } = captureLogger();
      const o = await openOutbox(logger, { unsavedRetryMs: 50 });
      // ~100 kB live: a compaction needs that much again.
      for (let i = 0; i < 20; i++) expect((await o.put(`t:1:${i}`, 'topic', payload(i))).ok).toBe(true);
      disk.fill();
      expect((await o.put('t:2:0', 'topic', payload(99))).ok).toBe(false);
      // Before, only a compaction wrote it, and that never found room: lost at stop.
      disk.free();
      disk.fill(16 * 1024);
      await expect.poll(() => o.unsaved(), { timeout: 5_000 }).toBe(0);
      expect(records.some((r) => r.msg === 'outbox entries the disk had refused are written now')).toBe(true);
      await o.stop();
      open.splice(open.indexOf(o), 1);
      const keys = (await openOutbox()).list().map((e) => e.key);
      expect(keys).toHaveLength(21);
      expect(keys.at(-1)).toBe('t:2:0');
    });

    it('replays in put order an entry the disk refused and that was written after later ones', async () => {
      const o = await openOutbox(silent, { unsavedRetryMs: 60_000 });
      expect((await o.put('t:1:0', 'topic', payload(0))).ok).toBe(true);
      disk.fill();
      expect((await o.put('t:1:1', 'topic', payload(1))).ok).toBe(false);
      // Its first try again (right after the refusal) fails too; the next is a minute away.
      await new Promise((r) => setTimeout(r, 50));
      disk.free();
      // Written at once, before the refused one is tried again (at stop here).
      expect((await o.put('t:1:2', 'topic', payload(2))).ok).toBe(true);
      await o.stop();
      open.splice(open.indexOf(o), 1);
      expect((await journal(dir)).map((r) => r.key ?? null)).toEqual([null, 't:1:0', 't:1:2', 't:1:1']);
      expect((await openOutbox()).list().map((e) => e.key)).toEqual(['t:1:0', 't:1:1', 't:1:2']);
    });

    it('logs the first of a run of failed writes, and when they succeed again', async () => {
      const { logger, records } = captureLogger();
      const o = await openOutbox(logger, { unsavedRetryMs: 60_000 });
      disk.fill();
      for (let i = 0; i < 5; i++) expect((await o.put(`t:1:${i}`, 'topic', payload(i))).ok).toBe(false);
      expect(records.filter((r) => r.msg === 'outbox write failed')).toHaveLength(1);
      disk.free();
      expect((await o.put('t:1:9', 'topic', payload(9))).ok).toBe(true);
      expect(records.filter((r) => r.msg === 'outbox writes succeed again')).toHaveLength(1);
    });

    it('writes what the disk refused when it stops, if there is space by then', async () => {
      const o = await openOutbox(silent, { unsavedRetryMs: 60_000 });
      disk.fill();
      expect((await o.put('t:1:0', 'topic', payload(0))).ok).toBe(false);
      disk.free();
      await o.stop();
      open.splice(open.indexOf(o), 1);
      expect((await openOutbox()).list().map((e) => e.key)).toEqual(['t:1:0']);
    });
  });
});
