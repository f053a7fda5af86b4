import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
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
    expect(sent).toEqual([]); // the report is still being stored: the claim waits behind it
    await report;
    expect(sent).toEqual(['task:1:7', 'claim-1']);
    expect(outbox.has('claim-1')).toBe(false);
    publisher.sendTransient('claim-2', 'agents/a/requests', '{}');
    expect(sent.at(-1)).toBe('claim-2');
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
});
