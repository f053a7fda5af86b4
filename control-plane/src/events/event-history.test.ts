import { randomUUID } from 'node:crypto';
import type { EventPayload } from '@ffleet/shared';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { EventBus } from './event-bus.ts';
import { EventHistory, type HistoryEntry } from './event-history.ts';

const payload = (event: EventPayload['event'] = 'task.updated', data: unknown = {}): EventPayload => ({
  id: randomUUID(),
  event,
  timestamp: new Date().toISOString(),
  data,
});

const ids = (entries: HistoryEntry[] | undefined) => entries?.map((e) => e.id);

describe('EventHistory', () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it('records nothing (and serializes nothing) before it is started', () => {
    const bus = new EventBus();
    const history = new EventHistory(bus);
    const stringify = vi.spyOn(JSON, 'stringify');
    const before = payload();
    bus.publish(before);
    expect(stringify).not.toHaveBeenCalled();
    expect(history.recording).toBe(false);
    expect(history.size).toBe(0);
    expect(history.after(before.id)).toBeUndefined();

    history.start();
    const p = [payload(), payload(), payload()];
    for (const e of p) bus.publish(e);
    expect(history.size).toBe(3);
    expect(ids(history.after(p[0]!.id))).toEqual([p[1]!.id, p[2]!.id]);
    expect(history.after(p[2]!.id)).toEqual([]);
    expect(history.after(before.id)).toBeUndefined();
  });

  it('serializes each event once for all subscribers, as the same string, without mutating it', () => {
    const bus = new EventBus();
    const history = new EventHistory(bus);
    const got: HistoryEntry[][] = [[], [], []];
    const unsubscribe = got.map((list) => history.subscribe((e) => list.push(e)));
    const stringify = vi.spyOn(JSON, 'stringify');
    const p = Object.freeze(
      payload('task.created', Object.freeze({ taskId: 'x', nested: Object.freeze([1]) })),
    );
    bus.publish(p);
    expect(stringify).toHaveBeenCalledTimes(1);
    expect(got.map((l) => l.length)).toEqual([1, 1, 1]);
    expect(got[0]![0]).toEqual({ seq: 1, id: p.id, event: 'task.created', data: JSON.stringify(p) });
    expect(got[1]![0]!.data).toBe(got[0]![0]!.data);
    expect(history.after(p.id)).toEqual([]);
    unsubscribe[0]!();
    bus.publish(payload());
    expect(got.map((l) => l.length)).toEqual([1, 2, 2]);
  });

  it('holds at most maxEvents, evicting the oldest', () => {
    const bus = new EventBus();
    const history = new EventHistory(bus, { maxEvents: 3 });
    history.start();
    const p = Array.from({ length: 7 }, () => payload());
    for (const e of p) bus.publish(e);
    expect(history.size).toBe(3);
    for (const e of p.slice(0, 4)) expect(history.after(e.id)).toBeUndefined();
    expect(ids(history.after(p[4]!.id))).toEqual([p[5]!.id, p[6]!.id]);
    expect(history.bytes).toBe(p.slice(4).reduce((n, e) => n + JSON.stringify(e).length, 0));
  });

  it('holds at most maxBytes of serialized data, evicting the oldest; a larger event is sent but not held', () => {
    const bus = new EventBus();
    const size = JSON.stringify(payload('task.updated', { pad: 'x'.repeat(1000) })).length;
    const history = new EventHistory(bus, { maxBytes: size * 2 + 10 });
    const live: string[] = [];
    history.subscribe((e) => live.push(e.id));
    const p = Array.from({ length: 4 }, () => payload('task.updated', { pad: 'x'.repeat(1000) }));
    for (const e of p) bus.publish(e);
    expect(history.size).toBe(2);
    expect(history.bytes).toBe(size * 2);
    expect(history.after(p[1]!.id)).toBeUndefined();
    expect(ids(history.after(p[2]!.id))).toEqual([p[3]!.id]);

    const huge = payload('task.updated', { pad: 'x'.repeat(size * 3) });
    bus.publish(huge);
    expect(live).toEqual([...p.map((e) => e.id), huge.id]);
    expect(history.size).toBe(0);
    expect(history.bytes).toBe(0);
    expect(history.after(p[3]!.id)).toBeUndefined();
    const after = payload();
    bus.publish(after);
    expect(ids(history.after(after.id))).toEqual([]);
  });

  it('filters what after() returns', () => {
    const bus = new EventBus();
    const history = new EventHistory(bus);
    history.start();
    const p = [
      payload('task.created'),
      payload('task.deleted'),
      payload('task.updated'),
      payload('task.deleted'),
    ];
    for (const e of p) bus.publish(e);
    expect(ids(history.after(p[0]!.id, (e) => e.event === 'task.deleted'))).toEqual([p[1]!.id, p[3]!.id]);
  });

  it('stop() unsubscribes from the bus and forgets', () => {
    const bus = new EventBus();
    const history = new EventHistory(bus, { maxEvents: 4 });
    const first = payload();
    history.start();
    bus.publish(first);
    history.stop();
    expect(history.recording).toBe(false);
    expect(history.after(first.id)).toBeUndefined();
    const stringify = vi.spyOn(JSON, 'stringify');
    bus.publish(payload());
    expect(stringify).not.toHaveBeenCalled();
    history.start();
    const p = Array.from({ length: 6 }, () => payload());
    for (const e of p) bus.publish(e);
    expect(ids(history.after(p[2]!.id))).toEqual([p[3]!.id, p[4]!.id, p[5]!.id]);
  });
});
