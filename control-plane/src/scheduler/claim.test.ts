import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { insertAgent, json, VALID } from '../../../test/api/support.ts';
import { useTestApp } from '../../../test/helpers/app.ts';
import { dbKinds } from '../../../test/helpers/db-kinds.ts';
import { textArrayLiteral } from '../db/array-literal.ts';
import { agentCapabilities } from './capabilities.ts';
import { claimTasksIn } from './claim.ts';
import { GroupCommit } from './group-commit.ts';

/** Values an agent's birth may carry as encoder or hwaccel names: anything a JSON string holds. */
const HOSTILE = [
  'a,b',
  '{x}',
  'say "hi"',
  'back\\slash',
  'trailing\\',
  'NULL',
  'null',
  '',
  ' spaced ',
  "it's",
  '🎬 ünïcode',
  'new\nline',
  // Unquoted, this would smuggle in a capability of its own.
  'x","encoder:smuggled',
  'y,encoder:smuggled',
];

describe('textArrayLiteral', () => {
  it('quotes every element', () => {
    expect(textArrayLiteral([])).toBe('{}');
    expect(textArrayLiteral(['cpu', 'a"b', 'c\\d'])).toBe('{"cpu","a\\"b","c\\\\d"}');
  });
});

describe.each(dbKinds)('claims on %s', (kind) => {
  const t = useTestApp({ kind });

  it('binds any text values as one text[] parameter and reads them back unchanged', async () => {
    const [row] = await t.db.rows<{ a: string[] }>(
      t.db.db,
      sql`SELECT ${textArrayLiteral(HOSTILE)}::text[] AS a`,
    );
    expect(row!.a).toEqual(HOSTILE);
  });

  it('matches requires against ~230 capabilities, hostile names included', async () => {
    // As many capabilities as an agent with Debian's ffmpeg offers (one per encoder).
    const encoders = [...Array.from({ length: 230 }, (_, i) => `enc${i}`), ...HOSTILE];
    const agent = await insertAgent(t.db, { encoders });
    // The list the fleet makes of an agent row (labels, encoder:…, hwaccel:…, agent:…, os:…, arch:…).
    const caps = agentCapabilities({ ...agent, labels: agent.reportedLabels });
    expect(caps).toHaveLength(encoders.length + 4);
    const post = async (requires: string[]) =>
      (await json<{ id: string }>(await t.call('POST', '/api/v1/tasks', { ...VALID.task(), requires }), 201))
        .id;
    const wanted = await post(['encoder:enc229', 'encoder:enc0']);
    const other = await post(['encoder:missing']);
    const smuggled = await post(['encoder:smuggled']);
    const group = new GroupCommit(t.ctx);
    const claim = () =>
      group.run((tx, ev) =>
        claimTasksIn(tx, ev, Date.now(), { id: agent.id, name: agent.name, capabilities: caps }, 5, 60_000),
      );
    expect((await claim()).map((c) => c.task.id)).toEqual([wanted]);
    // Nothing else it can run: neither the missing encoder nor the one only a hostile name spells out.
    expect(await claim()).toEqual([]);
    const rest = await t.db.rows<{ id: string; status: string }>(
      t.db.db,
      sql`SELECT id, status FROM tasks WHERE id IN (${other}, ${smuggled}) ORDER BY id`,
    );
    expect(rest.map((r) => r.status)).toEqual(['QUEUED', 'QUEUED']);
  });

  it('offers no label that claims a capability the agent reports itself (an older agent, an old override)', () => {
    const caps = agentCapabilities({
      name: 'box-1',
      labels: ['gpu', 'agent:box-2', 'encoder:h264_nvenc', 'Hwaccel:cuda', 'os:windows', 'arch:arm64'],
      encoders: ['libx264'],
      hwaccels: [],
      os: 'linux',
      arch: 'amd64',
    });
    expect(caps).toEqual(['gpu', 'encoder:libx264', 'agent:box-1', 'os:linux', 'arch:amd64']);
  });

  it('claims into PRE_PROCESSING at remaining 0 (its start) or into RUNNING at remaining -1 (unknown)', async () => {
    const agent = await insertAgent(t.db, {});
    const caps = agentCapabilities({ ...agent, labels: agent.reportedLabels });
    const post = async (body: Record<string, unknown>) =>
      (await json<{ id: string }>(await t.call('POST', '/api/v1/tasks', { ...VALID.task(), ...body }), 201))
        .id;
    const pre = await post({ priority: 2, preProcessing: { scriptPath: '/opt/check.sh' } });
    const sidecarOnly = await post({ priority: 1, preProcessing: { sidecarPath: '/tmp/side.json' } });
    const plain = await post({});
    const claimed = await new GroupCommit(t.ctx).run((tx, ev) =>
      claimTasksIn(tx, ev, Date.now(), { id: agent.id, name: agent.name, capabilities: caps }, 3, 60_000),
    );
    expect(claimed.map((c) => [c.task.id, c.task.status, c.task.remaining])).toEqual([
      [pre, 'PRE_PROCESSING', 0],
      [sidecarOnly, 'PRE_PROCESSING', 0],
      [plain, 'RUNNING', -1],
    ]);
  });

  it('finds the tasks to claim through indexes only, also once ANALYZE has seen a long queue', async () => {
    // 2,000 queued tasks, counted by ANALYZE: with `id IN (candidates)` the planner then chose a hash
    // semi join over a sequential scan of the whole table for every claim.
    for (let b = 0; b < 2; b++) {
      const tasks = Array.from({ length: 1000 }, () => VALID.task());
      await json(await t.call('POST', '/api/v1/batches', { tasks }), 201);
    }
    await t.db.db.execute(sql`ANALYZE tasks`);
    const agent = await insertAgent(t.db, { online: true });
    const claiming = {
      id: agent.id,
      name: agent.name,
      capabilities: agentCapabilities({ ...agent, labels: agent.reportedLabels }),
      slots: 10,
    };
    const group = new GroupCommit(t.ctx);
    for (let i = 0; i < 3; i++) {
      const { claimed, seqScans } = await group.run(async (tx, ev) => {
        // This backend's counters not yet reported (pg_stat_xact_*; on PostgreSQL they may still hold
        // earlier transactions'), before and after: what the claim statement read, and how.
        const seqScansNow = async () =>
          (
            await t.db.rows<{ n: number }>(
              tx,
              sql`SELECT coalesce(sum(seq_scan), 0)::int AS n FROM pg_stat_xact_user_tables WHERE relname = 'tasks'`,
            )
          )[0]!.n;
        const before = await seqScansNow();
        const claimed = await claimTasksIn(tx, ev, Date.now(), claiming, 1, 60_000);
        return { claimed, seqScans: (await seqScansNow()) - before };
      });
      expect(claimed).toHaveLength(1);
      expect(seqScans).toBe(0);
    }
  });
});
