// POST /api/v1/agents/{id}/token: a new own token for one agent, revoking the one it had.
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { MqttClient } from 'mqtt';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { expectProblem } from '../../../test/api/support.ts';
import { useTestApp } from '../../../test/helpers/app.ts';
import { startLocalControlPlane } from '../../../test/helpers/control-plane.ts';
import { defaultDbKind, openTestDatabase, type TestDatabase } from '../../../test/helpers/db.ts';
import { agentTokenFor } from '../agent-token.ts';
import { connectRaw } from '../broker/test-brokers.ts';
import type { RunningControlPlane } from '../control-plane.ts';
import { agents } from '../db/schema.ts';

const API_TOKEN = 'api-token-for-the-rotation-tests';
const AUTH = { Authorization: `Bearer ${API_TOKEN}` };

describe('POST /api/v1/agents/{id}/token in a running control plane (embedded broker)', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'ffleet-token-rotation-'));
  const clients: MqttClient[] = [];
  let cp: RunningControlPlane | undefined;
  /** PostgreSQL in the services pass (a database of its own), else the embedded one in the data dir. */
  let pg: TestDatabase | undefined;

  const start = async () => {
    if (defaultDbKind() === 'postgres') pg ??= await openTestDatabase('postgres');
    cp = await startLocalControlPlane(
      dataDir,
      {
        ...(pg ? { DATABASE_URL: pg.url! } : {}),
        FFLEET_API_TOKENS: API_TOKEN,
        FFLEET_AGENT_AUTH: 'per-agent',
      },
      { localAgentName: 'local-box' },
    );
    return cp;
  };
  const rotate = (name: string, headers: Record<string, string> = AUTH) =>
    fetch(`http://127.0.0.1:${cp!.httpPort}/api/v1/agents/${encodeURIComponent(name)}/token`, {
      method: 'POST',
      headers,
    });
  const logsIn = async (username: string, password: string) => {
    const r = await connectRaw(cp!.mqttUrl, { username, password });
    if (r.ok) clients.push(r.client);
    else expect(r.code).toBe(4);
    return r.ok;
  };

  afterEach(async () => {
    await Promise.all(clients.splice(0).map((c) => c.endAsync(true)));
  });
  afterAll(async () => {
    await cp?.stop();
    await pg?.drop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('issues the next generation, disconnects the box on the old token, refuses it from then on, across a restart', async () => {
    await start();
    const fleet = cp!.agentToken;
    const first = await connectRaw(cp!.mqttUrl, {
      username: 'encode-01',
      password: agentTokenFor(fleet, 'encode-01'),
    });
    if (!first.ok) throw new Error(first.error);
    clients.push(first.client);
    const closed = new Promise<void>((resolve) => first.client.once('close', () => resolve()));

    // A credential is handed out only to an authenticated caller.
    expect((await rotate('encode-01', {})).status).toBe(401);
    const res = await rotate('encode-01');
    expect(res.status).toBe(200);
    expect(res.headers.get('cache-control')).toBe('no-store');
    const body = (await res.json()) as Record<string, unknown>;
    expect(body).toEqual({
      agent: 'encode-01',
      generation: 1,
      token: agentTokenFor(fleet, 'encode-01', 1),
      disconnected: true,
      known: false,
      fleetTokenAccepted: false,
    });
    expect(cp!.ownAgentToken('encode-01')).toBe(body.token);
    expect(cp!.ownAgentToken('encode-02')).toBe(agentTokenFor(fleet, 'encode-02'));
    await closed;
    expect(await logsIn('encode-01', agentTokenFor(fleet, 'encode-01'))).toBe(false);
    expect(await logsIn('encode-01', body.token as string)).toBe(true);
    // Other agents keep theirs.
    expect(await logsIn('encode-02', agentTokenFor(fleet, 'encode-02'))).toBe(true);

    // A name no agent has used yet (a token printed for a box never installed) can be revoked too; the
    // answer says no agent of that name is known (a typo shows).
    const unseen = await rotate('encode-09');
    expect(unseen.status).toBe(200);
    expect(await unseen.json()).toMatchObject({
      agent: 'encode-09',
      generation: 1,
      disconnected: false,
      known: false,
    });
    // A known agent, by its id.
    const id = randomUUID();
    await cp!.database.db.insert(agents).values({ id, name: 'encode-03' });
    const byId = await rotate(id);
    expect(await byId.json()).toMatchObject({ agent: 'encode-03', generation: 1, known: true });
    // The local agent takes its token from the control plane: replacing it could only lock it out.
    await expectProblem(await rotate('local-box'), 409, 'LOCAL_AGENT');
    expect(cp!.ownAgentToken('local-box')).toBe(agentTokenFor(fleet, 'local-box'));
    // The agents API says which agent that is, so a client (the dashboard) need not ask to find out.
    await cp!.database.db.insert(agents).values({ id: randomUUID(), name: 'local-box' });
    const read = async (path: string) =>
      (await fetch(`http://127.0.0.1:${cp!.httpPort}/api/v1/agents${path}`, { headers: AUTH })).json();
    expect(await read('/local-box')).toMatchObject({ name: 'local-box', local: true });
    expect(await read('/encode-03')).toMatchObject({ name: 'encode-03', local: false });
    const listed = (await read('?perPage=100')) as { name: string; local: boolean }[];
    expect(listed.filter((a) => a.local).map((a) => a.name)).toEqual(['local-box']);

    // Kept in the database: after a restart the revoked tokens stay out.
    await Promise.all(clients.splice(0).map((c) => c.endAsync(true)));
    await cp!.stop();
    cp = undefined;
    await start();
    expect(await logsIn('encode-01', agentTokenFor(fleet, 'encode-01'))).toBe(false);
    expect(await logsIn('encode-09', agentTokenFor(fleet, 'encode-09'))).toBe(false);
    expect(await logsIn('encode-01', agentTokenFor(fleet, 'encode-01', 1))).toBe(true);
    const again = await rotate('encode-01');
    expect(await again.json()).toMatchObject({ generation: 2, token: agentTokenFor(fleet, 'encode-01', 2) });
    expect(await logsIn('encode-01', agentTokenFor(fleet, 'encode-01', 1))).toBe(false);
  }, 120_000);
});

describe('POST /api/v1/agents/{id}/token refused', () => {
  const open = useTestApp();
  const withTokens = useTestApp({ apiTokens: [API_TOKEN] });

  it('without API tokens: 403, no credential handed out', async () => {
    const res = await open.call('POST', '/api/v1/agents/encode-01/token');
    await expectProblem(res, 403, 'API_TOKENS_REQUIRED');
  });

  it('an agent that cannot exist: 404 (a malformed name, an unknown uuid)', async () => {
    for (const id of ['bad%20name', '00000000-0000-4000-8000-000000000000']) {
      const res = await withTokens.call('POST', `/api/v1/agents/${id}/token`, undefined, AUTH);
      await expectProblem(res, 404, 'AGENT_NOT_FOUND');
    }
  });

  it('with an external broker (no embedded one to tell): 409, the broker holds the credentials', async () => {
    const res = await withTokens.call('POST', '/api/v1/agents/encode-01/token', undefined, AUTH);
    const problem = await expectProblem(res, 409, 'EXTERNAL_BROKER');
    expect(problem.detail).toContain('MQTT_URL');
  });
});
