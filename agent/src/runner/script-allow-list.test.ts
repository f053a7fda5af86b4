// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${NAME} wildcards are literal text here.
import { existsSync, mkdirSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAgentConfig } from '../config.ts';
import { RunFixture } from './fixtures/run-fixture.ts';
import { makeStep } from './fixtures/sample-task.ts';
import { allowScript } from './script-allow-list.ts';

let fx: RunFixture;
let allowed: string;
let inside: string;
let outside: string;
beforeAll(() => {
  fx = new RunFixture();
  allowed = fx.file('scripts');
  mkdirSync(allowed);
  inside = fx.script('scripts/ok.sh', `touch "${fx.file('ran-inside')}"`);
  outside = fx.script('evil.sh', `touch "${fx.file('ran-outside')}"`);
  // A link inside the allowed directory that leads out of it.
  symlinkSync(outside, path.join(allowed, 'link.sh'));
});
afterAll(() => fx.remove());

describe('allowScript', () => {
  it('allows anything without a list, and only scripts really inside the listed directories with one', async () => {
    const env = { PATH: `${allowed}:/usr/bin:/bin` };
    expect(await allowScript(outside, [], env)).toEqual({ ok: true, file: outside });
    expect(await allowScript(inside, [allowed], env)).toEqual({ ok: true, file: inside });
    // A bare name is looked up in PATH like the runner would.
    expect(await allowScript('ok.sh', [allowed], env)).toEqual({ ok: true, file: inside });
    const refused = [
      outside,
      path.join(allowed, 'link.sh'),
      path.join(allowed, '..', 'evil.sh'),
      'sh', // found in /usr/bin or /bin, not in the list
    ];
    for (const file of refused) {
      const r = await allowScript(file, [allowed], env);
      expect(r.ok, file).toBe(false);
      expect(!r.ok && r.error).toMatch(/outside the directories this agent may run scripts from/);
    }
    expect(await allowScript('no-such-script', [allowed], env)).toEqual({
      ok: false,
      error: 'script no-such-script not found',
    });
  });

  it('fails the step before the script or the transcoder runs', async () => {
    const { result } = await fx.run({ preProcessing: makeStep(outside, '') }, { scriptDirs: [allowed] });
    expect(result.status).toBe('DONE_ERROR');
    expect(result.error).toMatch(/^pre-processing: script .*evil\.sh is outside the directories/);
    expect(existsSync(fx.file('ran-outside'))).toBe(false);

    const ok = await fx.run(
      {
        preProcessing: makeStep(inside, ''),
        outputFile: { raw: fx.file('out', 'allowed.mp4'), resolved: '' },
      },
      { scriptDirs: [allowed] },
    );
    expect(ok.result).toEqual({ status: 'DONE_SUCCESSFUL', error: '' });
    expect(existsSync(fx.file('ran-inside'))).toBe(true);
  });

  it('reads FFLEET_AGENT_SCRIPT_DIRS like PATH and refuses relative entries', () => {
    const base = { FFLEET_AGENT_TOKEN: 'secret-token-1' };
    expect(parseAgentConfig(base).scriptDirs).toEqual([]);
    expect(parseAgentConfig({ ...base, FFLEET_AGENT_SCRIPT_DIRS: '/opt/a:/opt/b' }).scriptDirs).toEqual([
      '/opt/a',
      '/opt/b',
    ]);
    expect(() => parseAgentConfig({ ...base, FFLEET_AGENT_SCRIPT_DIRS: 'scripts' })).toThrow(
      /FFLEET_AGENT_SCRIPT_DIRS/,
    );
  });
});
