import { spawn } from 'node:child_process';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Outbox } from './outbox.ts';

const silent = pino({ level: 'silent' });
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

describe('Outbox', () => {
  let dir: string;
  const open: Outbox[] = [];

  async function openOutbox(logger: pino.Logger = silent): Promise<Outbox> {
    const o = new Outbox({ dir, logger });
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
    expect((await readdir(dir)).length).toBe(3);
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

  it('stores an entry put twice at once with the same content only once, after it is on disk', async () => {
    const o = await openOutbox();
    const [a, b] = await Promise.all([o.put('dup', 't', 'p'), o.put('dup', 't', 'p')]);
    expect([a, b]).toEqual([{ ok: true }, { ok: true }]);
    expect(o.size()).toBe(1);
    expect(await readdir(dir)).toEqual(['000000000000.json']);
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

  it('skips and logs a corrupt entry and drops a half-written one', async () => {
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
    // New entries are numbered after the corrupt one, so nothing collides with it.
    await again.put('good-3', 'x', '3');
    expect(again.list().map((e) => e.key)).toEqual(['good-1', 'good-2', 'good-3']);
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

  it('measures put latency (fsync per entry)', async () => {
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
});
