import { beforeAll, describe, expect, it } from 'vitest';
import { appVariant, expectProblem, json, VALID } from '../../../test/api/support.ts';
import { useTestApp } from '../../../test/helpers/app.ts';
import { parseConfig } from '../config/config.ts';
import { type CorsPolicy, parseCorsOrigins, sameHost } from './cors.ts';

const MAM = 'https://mam.example.com';
const TOKEN = 'cors-test-token-0123456789abcdef';
const auth = { Authorization: `Bearer ${TOKEN}` };

const policy = (value: string): CorsPolicy => {
  const r = parseCorsOrigins(value);
  if (!r.ok || !r.policy) throw new Error(`no policy from ${value}`);
  return r.policy;
};

type Api = ReturnType<typeof appVariant>;

const preflight = (t: Api, path: string, origin: string, headers: Record<string, string> = {}) =>
  t.app.request(path, {
    method: 'OPTIONS',
    headers: { Origin: origin, 'Access-Control-Request-Method': 'POST', ...headers },
  });

describe('FFLEET_CORS_ORIGINS', () => {
  it('parses a list of origins as browsers serialise them, and refuses what is not one', () => {
    const r = parseCorsOrigins(' https://MAM.example.com , http://localhost:5173,https://a.example:443 ');
    expect(r.ok && r.policy && !r.policy.any && [...r.policy.origins]).toEqual([
      'https://mam.example.com',
      'http://localhost:5173',
      'https://a.example',
    ]);
    expect(parseCorsOrigins(undefined)).toEqual({ ok: true, policy: undefined });
    expect(parseCorsOrigins(' , ')).toEqual({ ok: true, policy: undefined });
    expect(parseCorsOrigins('*')).toEqual({ ok: true, policy: { any: true } });
    for (const bad of [
      'https://mam.example.com/',
      'https://mam.example.com/app',
      'mam.example.com',
      'ftp://mam.example.com',
      'https://user@mam.example.com',
      'https://mam.example.com?x=1',
      'null',
      `*,${MAM}`,
      'https://*.example.com',
    ]) {
      expect(parseCorsOrigins(bad).ok, bad).toBe(false);
    }
  });

  it('is validated at start: a bad entry names the variable; `*` needs API tokens', () => {
    expect(parseConfig({ FFLEET_CORS_ORIGINS: MAM }).cors).toEqual(policy(MAM));
    expect(parseConfig({}).cors).toBeUndefined();
    expect(() => parseConfig({ FFLEET_CORS_ORIGINS: 'https://mam.example.com/' })).toThrow(
      /FFLEET_CORS_ORIGINS: "https:\/\/mam.example.com\/" is not an origin/,
    );
    expect(() => parseConfig({ FFLEET_CORS_ORIGINS: '*' })).toThrow(
      /FFLEET_CORS_ORIGINS: `\*` without FFLEET_API_TOKENS/,
    );
    expect(parseConfig({ FFLEET_CORS_ORIGINS: '*', FFLEET_API_TOKENS: TOKEN }).cors).toEqual({ any: true });
  });
});

describe('cross-origin requests to the API', () => {
  // One database; three apps over it (building an app is cheap, a database is not).
  const t = useTestApp();
  let listed: Api;
  let none: Api;
  let any: Api;
  beforeAll(() => {
    listed = appVariant(t, { apiTokens: [TOKEN], cors: policy(`${MAM},http://localhost:5173`) });
    none = appVariant(t, { apiTokens: [TOKEN] });
    any = appVariant(t, { apiTokens: [TOKEN], cors: policy('*') });
  });

  it('answers a listed origin’s preflight without a token, with the methods and the headers asked for', async () => {
    const res = await preflight(listed, '/api/v1/tasks', MAM, {
      'Access-Control-Request-Headers': 'authorization, content-type, idempotency-key',
    });
    expect(res.status).toBe(204);
    expect(res.headers.get('access-control-allow-origin')).toBe(MAM);
    expect(res.headers.get('access-control-allow-methods')).toBe('GET, HEAD, POST, PUT, PATCH, DELETE');
    expect(res.headers.get('access-control-allow-headers')).toBe(
      'authorization, content-type, idempotency-key',
    );
    expect(res.headers.get('access-control-max-age')).toBe('600');
    expect(res.headers.get('vary')).toMatch(/Origin/);
    expect(res.headers.get('access-control-allow-credentials')).toBeNull();
    expect(await res.text()).toBe('');
  });

  it('lets a listed origin read answers, errors and the headers it needs; the token is still required', async () => {
    const created = await listed.call('POST', '/api/v1/tasks', VALID.task(), { ...auth, Origin: MAM });
    expect(created.status).toBe(201);
    expect(created.headers.get('access-control-allow-origin')).toBe(MAM);
    const exposed = created.headers.get('access-control-expose-headers') ?? '';
    for (const h of ['Location', 'X-Total', 'X-Request-Id', 'Retry-After', 'Idempotent-Replayed']) {
      expect(exposed).toContain(h);
    }
    expect(created.headers.get('vary')).toMatch(/Origin/);

    const list = await listed.call('GET', '/api/v1/tasks', undefined, {
      ...auth,
      Origin: 'http://localhost:5173',
    });
    expect(list.headers.get('access-control-allow-origin')).toBe('http://localhost:5173');
    expect(list.headers.get('x-total')).toBe('1');

    // Without the token: refused as before, but readable by the page (it can ask for a token).
    const refused = await listed.call('GET', '/api/v1/tasks', undefined, { Origin: MAM });
    await expectProblem(refused, 401);
    expect(refused.headers.get('access-control-allow-origin')).toBe(MAM);
    const missing = await listed.call('GET', '/api/v1/no-such-route', undefined, { ...auth, Origin: MAM });
    await expectProblem(missing, 404, 'ROUTE_NOT_FOUND');
    expect(missing.headers.get('access-control-allow-origin')).toBe(MAM);
  });

  it('gives an origin not listed no CORS headers, and its preflight a 403 naming the variable', async () => {
    const other = 'https://evil.example';
    const res = await listed.call('GET', '/api/v1/tasks', undefined, { ...auth, Origin: other });
    expect(res.status).toBe(200); // a non-browser client sending Origin is not a browser's page
    expect(res.headers.get('access-control-allow-origin')).toBeNull();
    const pre = await preflight(listed, '/api/v1/tasks', other);
    await expectProblem(pre, 403, 'ORIGIN_NOT_ALLOWED');
    expect(pre.headers.get('access-control-allow-origin')).toBeNull();
    // A listed origin with another port or scheme is another origin.
    for (const near of ['https://mam.example.com:8443', 'http://mam.example.com']) {
      expect((await preflight(listed, '/api/v1/tasks', near)).status, near).toBe(403);
    }
  });

  it('by default allows no origin at all (and says how to allow one)', async () => {
    const pre = await preflight(none, '/api/v1/tasks', MAM);
    const body = await expectProblem(pre, 403, 'ORIGIN_NOT_ALLOWED');
    expect(body.detail).toMatch(/FFLEET_CORS_ORIGINS/);
    const res = await none.call('GET', '/api/v1/tasks', undefined, { ...auth, Origin: MAM });
    expect(res.status).toBe(200);
    expect(res.headers.get('access-control-allow-origin')).toBeNull();
    expect(res.headers.get('access-control-expose-headers')).toBeNull();
    // Same-origin requests and requests without Origin are untouched.
    const plain = await none.call('GET', '/api/v1/tasks', undefined, auth);
    expect(plain.headers.get('access-control-allow-origin')).toBeNull();
  });

  it('with `*` answers every origin with `*` (no credentials mode: bearer tokens only)', async () => {
    const pre = await preflight(any, '/api/v1/tasks', 'https://anything.example');
    expect(pre.status).toBe(204);
    expect(pre.headers.get('access-control-allow-origin')).toBe('*');
    const res = await any.call('GET', '/api/v1/version', undefined, {
      ...auth,
      Origin: 'https://anything.example',
    });
    expect(res.headers.get('access-control-allow-origin')).toBe('*');
    expect(await json(res)).toHaveProperty('version');
  });

  it('without API tokens refuses a change asked by another origin’s page (cancel and restart need no body, so no preflight)', async () => {
    const open = appVariant(t, { cors: policy(MAM) }); // loopback clients, no tokens
    const task = await json(await open.call('POST', '/api/v1/tasks', VALID.task()), 201);
    const cancel = (headers: Record<string, string>) =>
      open.app.request(`/api/v1/tasks/${task.id}/cancel`, {
        method: 'POST',
        headers: { Host: '127.0.0.1:3000', 'Content-Type': 'text/plain', ...headers },
      });
    const refused = await cancel({ Origin: 'https://evil.example' });
    const body = await expectProblem(refused, 403, 'ORIGIN_NOT_ALLOWED');
    expect(body.detail).toMatch(/FFLEET_API_TOKENS/);
    for (const origin of ['null', 'http://127.0.0.1:8080', 'http://localhost:3000']) {
      expect((await cancel({ Origin: origin })).status, origin).toBe(403);
    }
    expect((await json(await open.call('GET', `/api/v1/tasks/${task.id}`))).status).toBe('QUEUED');
    // The dashboard (a page of this host), a listed origin and clients that send no Origin may.
    expect((await cancel({ Origin: 'http://127.0.0.1:3000' })).status).toBe(200);
    const restart = await open.app.request(`/api/v1/tasks/${task.id}/restart`, {
      method: 'POST',
      headers: { Host: '127.0.0.1:3000', Origin: MAM },
    });
    expect(restart.status).toBe(200);
    expect((await cancel({})).status).toBe(200);
    // Reading stays open to any page of this machine (it cannot see the answer without CORS).
    expect(
      (await open.call('GET', '/api/v1/tasks', undefined, { Origin: 'https://evil.example' })).status,
    ).toBe(200);
    // With API tokens a page cannot send the token without a preflight: nothing to guard.
    const guarded = await listed.app.request(`/api/v1/tasks/${task.id}/restart`, {
      method: 'POST',
      headers: { ...auth, Origin: 'https://evil.example' },
    });
    expect(guarded.status).not.toBe(403);
  });

  it('takes a page for this control plane’s own when its host and port are the request’s Host', () => {
    const same: [string, string][] = [
      ['http://127.0.0.1:3000', '127.0.0.1:3000'],
      ['http://localhost:3000', 'LOCALHOST:3000'],
      ['http://localhost', 'localhost:80'],
      ['http://localhost', 'localhost'],
      ['https://ffleet.studio.lan', 'ffleet.studio.lan'],
      ['http://[::1]:3000', '[::1]:3000'],
      ['http://localhost:8080', 'localhost:8080'], // an SSH tunnel: Host is what the browser asked for
    ];
    for (const [origin, host] of same) expect(sameHost(origin, host), `${origin} / ${host}`).toBe(true);
    const other: [string, string | undefined][] = [
      ['http://localhost:8080', 'localhost:3000'],
      ['http://127.0.0.1:3000', 'localhost:3000'],
      ['http://evil.example', 'localhost'],
      ['null', 'localhost:3000'],
      ['file://', 'localhost:3000'],
      ['http://localhost:3000', undefined],
      ['http://localhost:3000', 'bad host/'],
    ];
    for (const [origin, host] of other) expect(sameHost(origin, host), `${origin} / ${host}`).toBe(false);
  });

  it('without API tokens also refuses a change whose Sec-Fetch-Site says another site (old browsers sent no Origin)', async () => {
    const open = appVariant(t, {});
    const task = await json(await open.call('POST', '/api/v1/tasks', VALID.task()), 201);
    const cancel = (site: string) =>
      open.app.request(`/api/v1/tasks/${task.id}/cancel`, {
        method: 'POST',
        headers: { 'Sec-Fetch-Site': site },
      });
    await expectProblem(await cancel('cross-site'), 403, 'ORIGIN_NOT_ALLOWED');
    await expectProblem(await cancel('same-site'), 403, 'ORIGIN_NOT_ALLOWED');
    expect((await cancel('same-origin')).status).toBe(200);
  });

  it('says Vary: Origin on every answer once origins are listed', async () => {
    const res = await listed.call('GET', '/api/v1/tasks', undefined, auth);
    expect(res.headers.get('vary')).toMatch(/Origin/);
    expect((await none.call('GET', '/api/v1/tasks', undefined, auth)).headers.get('vary')).toBeNull();
  });
});
