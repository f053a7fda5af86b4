import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MQTT_MAX_PAYLOAD_BYTES } from '@ffleet/shared';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { canMountTmpfs, mountSmallTmpfs } from '../../../test/helpers/small-tmpfs.ts';
import { Outbox } from '../outbox/outbox.ts';
import { OutboxPublisher } from './outbox-publisher.ts';

const silent = pino({ level: 'silent' });

describe('OutboxPublisher', () => {
  let dir: string;
  let outbox: Outbox;
  let sent: string[];
  let publisher: OutboxPublisher;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'ffleet-publisher-'));
    outbox = new Outbox({ dir, logger: silent });
    await outbox.start();
    sent = [];
    publisher = new OutboxPublisher({ outbox, logger: silent, publish: (_t, _p, key) => sent.push(key) });
  });

  afterEach(async () => {
    vi.useRealTimers();
    await outbox.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('publishes a transient message after the stored sends called before it, and never stores it', async () => {
    publisher.goOnline();
    const report = publisher.send('task:1:7', 'agents/a/events', '{"final":true}');
    expect(publisher.sendTransient('claim-1', 'agents/a/requests', '{"type":"claim"}')).toBe(true);
    // Online: the report leaves while it is being stored, the claim right behind it.
    expect(sent).toEqual(['task:1:7', 'claim-1']);
    expect(await report).toEqual({ ok: true });
    expect(outbox.list().map((e) => e.key)).toEqual(['task:1:7']);
    expect(outbox.has('claim-1')).toBe(false);
    publisher.sendTransient('claim-2', 'agents/a/requests', '{}');
    expect(sent.at(-1)).toBe('claim-2');
  });

  it('drops a stored entry no broker takes instead of resending it at every reconnect', async () => {
    // An older agent stored it (reports are slimmed before they are stored now).
    const over = 'x'.repeat(MQTT_MAX_PAYLOAD_BYTES + 1);
    await outbox.put('task:1:1', 'agents/a/events', over);
    await outbox.put('task:1:2', 'agents/a/events', '{}');
    expect(publisher.goOnline()).toBe(1);
    expect(sent).toEqual(['task:1:2']);
    await vi.waitFor(() => expect(outbox.has('task:1:1')).toBe(false));
    expect(outbox.list().map((e) => e.key)).toEqual(['task:1:2']);
  });

  it('an entry acknowledged before its write landed does not stay in the outbox', async () => {
    publisher.goOnline();
    const report = publisher.send('task:1:1', 'agents/a/events', '{}');
    publisher.acknowledge('task:1:1');
    await report;
    expect(outbox.has('task:1:1')).toBe(false);
    expect(outbox.list()).toEqual([]);
  });

  it('while offline, sends wait for their write and leave in call order once online', async () => {
    const first = publisher.send('task:1:1', 'agents/a/events', '{}');
    const second = publisher.send('task:1:2', 'agents/a/events', '{}');
    await Promise.all([first, second]);
    expect(sent).toEqual([]);
    publisher.goOnline();
    expect(sent).toEqual(['task:1:1', 'task:1:2']);
    // Online with a send still being written from before: later ones queue behind it.
    publisher.goOffline();
    sent = [];
    const third = publisher.send('task:1:3', 'agents/a/events', '{}');
    publisher.goOnline(); // replays 1 and 2 (stored); 3 is still being written
    const fourth = publisher.send('task:1:4', 'agents/a/events', '{}');
    publisher.sendTransient('claim', 'agents/a/requests', '{}');
    await Promise.all([third, fourth]);
    expect(sent).toEqual(['task:1:1', 'task:1:2', 'task:1:3', 'task:1:4', 'claim']);
  });

  it('sends again what was published but not yet on disk when the connection came back', async () => {
    publisher.goOnline();
    const report = publisher.send('task:1:1', 'agents/a/events', '{}');
    publisher.goOffline();
    publisher.goOnline(); // its replay cannot include the entry: it is not on disk yet
    await report;
    expect(sent).toEqual(['task:1:1', 'task:1:1']);
  });

  it('drops a transient message while offline', () => {
    expect(publisher.sendTransient('claim-1', 'agents/a/requests', '{}')).toBe(false);
    publisher.goOnline();
    expect(sent).toEqual([]);
  });

  it('while acknowledgements flow, resends only entries sent before the newest acknowledged one', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(1_000_000);
    publisher.goOnline();
    await publisher.send('a', 't', '1');
    vi.setSystemTime(1_000_100);
    await publisher.send('b', 't', '2');
    vi.setSystemTime(1_000_200);
    await publisher.send('c', 't', '3');
    vi.setSystemTime(1_015_000);
    publisher.acknowledge('b'); // handled in order: `a` was lost, `c` is queued behind a backlog
    sent = [];
    expect(publisher.resendStale(10_000)).toBe(1);
    expect(sent).toEqual(['a']);
    // Nothing acknowledged for a whole period: everything stale goes again.
    vi.setSystemTime(1_030_000);
    sent = [];
    expect(publisher.resendStale(10_000)).toBe(2);
    expect(sent.sort()).toEqual(['a', 'c']);
    // A control-plane restart (resync) resends all that is stale regardless.
    vi.setSystemTime(1_031_000);
    publisher.acknowledge('a');
    vi.setSystemTime(1_045_000);
    sent = [];
    expect(publisher.resendStale(1_000, { all: true })).toBe(1);
    expect(sent).toEqual(['c']);
  });

  it.runIf(canMountTmpfs)(
    'replays a report its full disk refused, on reconnect and as a stale resend, until it is acknowledged',
    async () => {
      const disk = mountSmallTmpfs('64k');
      const full = new Outbox({ dir: join(disk.dir, 'outbox'), logger: silent, unsavedRetryMs: 60_000 });
      try {
        await full.start();
        const keys: string[] = [];
        const p = new OutboxPublisher({
          outbox: full,
          logger: silent,
          publish: (_t, _p, key) => keys.push(key),
        });
        disk.fill();
        const big = JSON.stringify({ final: true, pad: 'x'.repeat(5_000) });
        // Offline (the control plane's broker is down) when the run ends: before, this report was lost.
        expect(await p.send('task:1:9', 'agents/a/events', big)).toMatchObject({ ok: false });
        expect(keys).toEqual([]);
        expect(p.goOnline()).toBe(1);
        expect(keys).toEqual(['task:1:9']);
        // Not acknowledged (the control plane could not apply it): sent again, like a stored entry.
        await new Promise((r) => setTimeout(r, 20));
        expect(p.resendStale(10, { all: true })).toBe(1);
        expect(keys).toEqual(['task:1:9', 'task:1:9']);
        p.acknowledge('task:1:9');
        expect(p.resendStale(0, { all: true })).toBe(0);
        expect(full.has('task:1:9')).toBe(false);
      } finally {
        await full.stop();
        disk.remove();
      }
    },
  );
});
