import { describe, expect, it } from 'vitest';
import type { AgentRow, WatchfolderRow } from '../db/mappers.ts';
import { planAssignments, yieldsFor } from './watch-assignment.ts';

const agent = (id: string) => ({ id, name: id }) as AgentRow;
const folder = (id: string, path: string, more: Partial<WatchfolderRow> = {}) =>
  ({ id, path, agent: null, assignedAgentId: null, ...more }) as WatchfolderRow;
/** The plan as `{folder id: agent id}`, over agents named by id. */
const planOf = (
  folders: WatchfolderRow[],
  agents: string[] = ['a1', 'a2'],
  failed: ReadonlyMap<string, ReadonlySet<string>> = new Map(),
) => Object.fromEntries(planAssignments(folders, agents.map(agent), failed));

describe('planAssignments', () => {
  it('puts a folder that is, holds or lies inside another watchfolder’s on that one’s agent', () => {
    const plan = planOf([
      folder('drop', '/srv/drop'),
      folder('other', '/srv/other'),
      folder('special', '/srv/drop/special'),
      folder('again', '/srv/drop'),
      folder('parent', '/srv'),
    ]);
    // `/srv` holds `/srv/other` too: all five are one group.
    expect(plan).toEqual({
      drop: 'a1',
      other: 'a1',
      special: 'a1',
      again: 'a1',
      parent: 'a1',
    });
    // Without the parent, `/srv/other` is balanced onto the other agent.
    const apart = planOf([
      folder('drop', '/srv/drop'),
      folder('other', '/srv/other'),
      folder('special', '/srv/drop/special'),
    ]);
    expect(apart).toEqual({ drop: 'a1', other: 'a2', special: 'a1' });
  });

  it('moves a folder onto the agent of another it now overlaps (a PUT changed its path)', () => {
    const plan = planOf(
      [
        folder('e', '/x/E', { assignedAgentId: 'a1' }),
        folder('f', '/x/E', { assignedAgentId: 'a3' }),
        folder('g', '/x/G', { assignedAgentId: 'a3' }),
      ],
      ['a1', 'a3'],
    );
    expect(plan).toEqual({ e: 'a1', f: 'a1', g: 'a3' });
  });

  it('puts folders that overlap through another (a parent over two subfolders) on one agent', () => {
    const plan = planOf([
      folder('a', '/w/a', { assignedAgentId: 'a1' }),
      folder('c', '/w/c', { assignedAgentId: 'a2' }),
      folder('w', '/w'),
      folder('z', '/z', { assignedAgentId: 'a2' }),
    ]);
    expect(plan).toEqual({ a: 'a1', c: 'a1', w: 'a1', z: 'a2' });
  });

  it('keeps a pinned folder on its agent and balances the rest as before', () => {
    const plan = planOf([
      folder('pinned', '/srv/drop', { agent: 'a2' }),
      folder('inner', '/srv/drop/x'),
      folder('z', '/z'),
    ]);
    expect(plan).toEqual({ pinned: 'a2', inner: 'a2', z: 'a1' });
    // An inner folder its group's agent cannot read (not created yet) stays in the group: elsewhere it
    // would take the files the group's folder there takes too once it exists.
    const failed = new Map([['inner', new Set(['a2'])]]);
    const again = planOf(
      [folder('pinned', '/srv/drop', { agent: 'a2' }), folder('inner', '/srv/drop/x')],
      undefined,
      failed,
    );
    expect(again.inner).toBe('a2');
    // Alone, a folder an agent cannot read goes to another.
    const alone = planOf([folder('solo', '/srv/solo')], undefined, new Map([['solo', new Set(['a1'])]]));
    expect(alone.solo).toBe('a2');
  });
});

describe('yieldsFor', () => {
  const named = (id: string, path: string, more: Partial<WatchfolderRow> = {}) =>
    folder(id, path, { name: id, suspended: false, createdAt: 1, ...more });

  it('leaves the pinned inner folder of an offline agent to it, not to the outer folder’s agent', () => {
    const folders = [
      named('outer', '/srv/drop'),
      named('gpu', '/srv/drop/gpu', { agent: 'box-b', suspended: true, createdAt: 2 }),
      named('elsewhere', '/srv/other', { agent: 'box-b' }),
    ];
    // box-b is offline: the outer folder is on a1, the pinned ones on no agent.
    const plan = planOf(folders);
    expect(plan).toEqual({ outer: 'a1', gpu: null, elsewhere: null });
    const agentOf = (f: WatchfolderRow) => plan[f.id] ?? null;
    expect(yieldsFor('a1', folders, agentOf)).toEqual([
      { id: 'gpu', name: 'gpu', path: '/srv/drop/gpu', suspended: true, createdAt: 2, overlaps: ['outer'] },
    ]);
    expect(yieldsFor('a2', folders, agentOf)).toEqual([]);
  });

  it('leaves pinned folders to each other when an unpinned folder declares their tree shared', () => {
    const folders = [
      named('inner', '/wf/outer/q/p', { agent: 'enc-p', createdAt: 1 }),
      named('outer', '/wf/outer', { createdAt: 2 }),
      named('qfolder', '/wf/outer/q', { agent: 'a2', createdAt: 3 }),
    ];
    // enc-p is offline: the group goes to qfolder's agent, inner to none.
    const plan = planOf(folders);
    expect(plan).toEqual({ inner: null, outer: 'a2', qfolder: 'a2' });
    const agentOf = (f: WatchfolderRow) => plan[f.id] ?? null;
    // qfolder (pinned) leaves q/p to inner (pinned elsewhere): the files wait for enc-p.
    expect(yieldsFor('a2', folders, agentOf).map((y) => [y.id, y.overlaps])).toEqual([
      ['inner', ['outer', 'qfolder']],
    ]);
  });

  it('leaves folders pinned to two agents alone: same-named folders on two boxes are two folders', () => {
    const folders = [
      named('a-local', '/srv/ingest', { agent: 'a1' }),
      named('b-local', '/srv/ingest/x', { agent: 'a2' }),
    ];
    const plan = planOf(folders);
    expect(plan).toEqual({ 'a-local': 'a1', 'b-local': 'a2' });
    const agentOf = (f: WatchfolderRow) => plan[f.id] ?? null;
    expect(yieldsFor('a1', folders, agentOf)).toEqual([]);
    expect(yieldsFor('a2', folders, agentOf)).toEqual([]);
    // An unpinned folder over them says the tree is one shared volume: then a1 leaves x to b-local.
    const withShared = [...folders, named('shared', '/srv/ingest/x/y')];
    const plan2 = planOf(withShared);
    expect(plan2).toEqual({ 'a-local': 'a1', 'b-local': 'a2', shared: 'a1' });
    const agentOf2 = (f: WatchfolderRow) => plan2[f.id] ?? null;
    expect(yieldsFor('a1', withShared, agentOf2).map((y) => [y.id, y.overlaps])).toEqual([
      ['b-local', ['a-local', 'shared']],
    ]);
    expect(yieldsFor('a2', withShared, agentOf2).map((y) => [y.id, y.overlaps])).toEqual([
      ['a-local', ['b-local']],
      ['shared', ['b-local']],
    ]);
  });
});
