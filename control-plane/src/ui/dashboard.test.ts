import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { expectProblem } from '../../../test/api/support.ts';
import { useTestApp } from '../../../test/helpers/app.ts';
import { DASHBOARD_CSP, DASHBOARD_FILES } from './dashboard.ts';

const DIR = fileURLToPath(new URL('./dashboard/', import.meta.url));
const TOKEN = 'tok-dashboard-test';
// API tokens configured: the page and its files must still be served without one.
const t = useTestApp({ apiTokens: [TOKEN] });

const ASSETS = Object.keys(DASHBOARD_FILES).filter((f) => f !== 'index.html');
const TEXT_FILES = Object.keys(DASHBOARD_FILES).filter((f) => !f.endsWith('.png'));
const SCRIPTS = Object.keys(DASHBOARD_FILES).filter((f) => f.endsWith('.js'));

/** The modules a dashboard script imports (relative to itself), as file names. */
const importsOf = (file: string) =>
  [...readFileSync(join(DIR, file), 'utf8').matchAll(/^\s*(?:import|export)\b[^;]*?from\s+'([^']+)'/gms)].map(
    (m) => m[1]!.replace(/^\.\//, ''),
  );

function expectPageHeaders(res: Response, type: string, what: string) {
  expect(res.status, what).toBe(200);
  expect(res.headers.get('content-type'), what).toBe(type);
  expect(res.headers.get('content-security-policy'), what).toBe(DASHBOARD_CSP);
  expect(res.headers.get('x-content-type-options'), what).toBe('nosniff');
  expect(res.headers.get('cache-control'), what).toBe('no-cache');
  expect(res.headers.get('etag'), what).toMatch(/^"/);
  // The app's own headers, as on every other route.
  expect(res.headers.get('x-request-id'), what).toBeTruthy();
  expect(res.headers.get('x-server'), what).toMatch(/^ffleet\//);
}

describe('the dashboard (/ui)', () => {
  it('GET / redirects to /ui, and /ui/ to /ui', async () => {
    for (const [path, to] of [
      ['/', '/ui'],
      ['/ui/', '/ui'],
    ]) {
      const res = await t.call('GET', path!);
      expect(res.status, path).toBe(302);
      expect(res.headers.get('location'), path).toBe(to);
    }
  });

  it('serves the page and every file without a token, with CSP and nosniff', async () => {
    const page = await t.call('GET', '/ui');
    expectPageHeaders(page, 'text/html; charset=utf-8', '/ui');
    expect(await page.text()).toBe(readFileSync(join(DIR, 'index.html'), 'utf8'));
    for (const file of ASSETS) {
      const res = await t.call('GET', `/ui/${file}`);
      expectPageHeaders(res, DASHBOARD_FILES[file]!, file);
      expect(Buffer.from(await res.arrayBuffer()).equals(readFileSync(join(DIR, file))), file).toBe(true);
    }
  });

  it('the page loads only whitelisted files of /ui (and links to the API reference)', async () => {
    const html = await (await t.call('GET', '/ui')).text();
    const urls = [...html.matchAll(/(?:src|href)="([^"]*)"/g)].map((m) => m[1]!);
    expect(urls.sort()).toEqual(['/api/v1/docs', '/ui/app.js', '/ui/favicon.png', '/ui/style.css']);
    // The scripts' module graph (relative imports from app.js on) is exactly the served scripts.
    const graph = new Map<string, string[]>();
    const visit = (file: string) => {
      if (graph.has(file)) return;
      const imports = importsOf(file);
      graph.set(file, imports);
      for (const i of imports) visit(i);
    };
    visit('app.js');
    expect([...graph.keys()].sort()).toEqual(SCRIPTS.slice().sort());
    // The pure modules (tested in Node) import no module that touches the DOM.
    expect(graph.get('logic.js')).toEqual([]);
    expect(graph.get('manage-logic.js')).toEqual(['logic.js']);
  });

  it('the page has every element the scripts look up by id, and only forms the scripts handle', () => {
    const html = readFileSync(join(DIR, 'index.html'), 'utf8');
    const ids = new Set([...html.matchAll(/\sid="([^"]+)"/g)].map((m) => m[1]!));
    const wanted = new Set<string>();
    for (const file of SCRIPTS) {
      const source = readFileSync(join(DIR, file), 'utf8');
      for (const m of source.matchAll(/\bbyId\('([^']+)'\)/g)) wanted.add(m[1]!);
      // The lists and forms of manage.js find their elements by a prefix.
      for (const m of source.matchAll(/\bpagedList\(\s*'([^']+)'/g)) {
        for (const suffix of ['rows', 'empty', 'prev', 'next', 'page', 'state'])
          wanted.add(`${m[1]}-${suffix}`);
      }
      for (const m of source.matchAll(/\bprefix: '([^']+)'/g)) {
        for (const suffix of ['form', 'form-title', 'form-submit', 'form-cancel', 'new'])
          wanted.add(`${m[1]}-${suffix}`);
      }
    }
    expect(wanted.size).toBeGreaterThan(40); // the scan is not blind
    expect([...wanted].filter((id) => !ids.has(id))).toEqual([]);
    // Every form is handled in script (preventDefault; the CSP's form-action 'none' would block a real
    // submit): the token form in app.js, the others through dom.js's handleForm. None names a target.
    const forms = [...html.matchAll(/<form\b[^>]*>/g)].map((m) => m[0]);
    expect(forms.map((f) => /\sid="([^"]+)"/.exec(f)?.[1]).sort()).toEqual([
      'auth',
      'presets-form',
      'task-form',
      'watchfolders-form',
      'webhooks-form',
    ]);
    for (const f of forms) expect(f).not.toMatch(/\s(?:action|method|target)=/i);
    expect(readFileSync(join(DIR, 'dom.js'), 'utf8')).toMatch(
      /addEventListener\('submit', async \(e\) => \{\s*e\.preventDefault\(\);/,
    );
    expect(readFileSync(join(DIR, 'app.js'), 'utf8')).toMatch(
      /ui\.auth\.addEventListener\('submit', \(e\) => \{\s*e\.preventDefault\(\);/,
    );
  });

  it('an ETag lets the browser revalidate (304)', async () => {
    const first = await t.call('GET', '/ui/app.js');
    const again = await t.call('GET', '/ui/app.js', undefined, {
      'If-None-Match': first.headers.get('etag')!,
    });
    expect(again.status).toBe(304);
  });

  it('anything else under /ui is 404, and /ui is no way around the token', async () => {
    for (const path of [
      '/ui/index.html', // the page is /ui
      '/ui/nope.js',
      '/ui/dashboard.ts',
      '/ui/api-reference.ts',
      '/ui/dashboard.test.ts',
      '/ui/..%2Fdashboard.ts',
      '/ui/%2e%2e%2fdashboard.ts',
      '/ui/constructor',
      '/ui/__proto__',
      '/ui/hasOwnProperty',
      '/ui/dashboard/app.js',
      '/ui/app.js/x',
    ]) {
      await expectProblem(await t.call('GET', path), 404);
    }
    for (const path of ['/uix', '/ui/../api/v1/tasks', '/ui/%2e%2e/api/v1/tasks', '/api/v1/events']) {
      await expectProblem(await t.call('GET', path), 401, 'UNAUTHORIZED');
    }
    // The API the page calls still needs the token.
    await expectProblem(await t.call('GET', '/api/v1/tasks'), 401, 'UNAUTHORIZED');
    await expectProblem(await t.call('GET', '/api/v1/agents'), 401, 'UNAUTHORIZED');
    const ok = await t.call('GET', '/api/v1/tasks', undefined, { Authorization: `Bearer ${TOKEN}` });
    expect(ok.status).toBe(200);
    expect(ok.headers.get('x-total')).toBe('0');
  });

  it('works offline: no URL to another host in any served file', async () => {
    for (const file of TEXT_FILES) {
      const text = await (await t.call('GET', file === 'index.html' ? '/ui' : `/ui/${file}`)).text();
      // Only loopback examples (a webhook URL's placeholder): nothing that points at another host.
      expect(text, file).not.toMatch(/\bhttps?:(?!\/\/127\.0\.0\.1[:/])/i);
      expect(text, file).not.toMatch(/(?:src|href)=["']?\/\/|url\(\s*["']?\/\/|@import/i);
      expect(text, file).not.toMatch(/\bimport\s*\(\s*['"](?!\.\/)|from\s+['"](?!\.\/)/); // relative imports only
    }
    const png = Buffer.from(await (await t.call('GET', '/ui/favicon.png')).arrayBuffer());
    expect(png.subarray(1, 4).toString()).toBe('PNG');
    expect(png.toString('latin1')).not.toMatch(/https?:/i);
  });

  it('an element hidden is hidden whatever class shows it (`[hidden]` beats `.fields label.check`)', () => {
    const css = readFileSync(join(DIR, 'style.css'), 'utf8');
    expect(css).toMatch(/^\[hidden\] \{[^}]*\bdisplay: none !important;[^}]*\}/m);
  });

  it('the CSP allows nothing inline, no eval and no other origin, and the page needs none of it', async () => {
    for (const bad of ["'unsafe-inline'", "'unsafe-eval'", '*', 'data:', 'http', 'blob:']) {
      expect(DASHBOARD_CSP).not.toContain(bad);
    }
    expect(DASHBOARD_CSP).toMatch(/^default-src 'self'(;|$)/);
    const html = readFileSync(join(DIR, 'index.html'), 'utf8');
    for (const m of html.matchAll(/<script\b[^>]*>([\s\S]*?)<\/script>/g)) {
      expect(m[0]).toMatch(/\bsrc="\/ui\//); // every script is a file…
      expect(m[1]!.trim()).toBe(''); // …and none is inline
    }
    expect(html).not.toMatch(/<style|\sstyle=|\son[a-z]+=|javascript:/i);
  });
});

describe('the dashboard scripts build the DOM from text only', () => {
  it('never write HTML: no innerHTML, outerHTML, insertAdjacentHTML, document.write, eval', () => {
    expect(SCRIPTS.length).toBeGreaterThanOrEqual(6);
    for (const file of SCRIPTS) {
      const source = readFileSync(join(DIR, file), 'utf8');
      for (const sink of [
        /\binnerHTML\b/,
        /\bouterHTML\b/,
        /\binsertAdjacentHTML\b/,
        /\bdocument\s*\.\s*write(?:ln)?\b/,
        /\bcreateContextualFragment\b/,
        /\bDOMParser\b/,
        /\bsrcdoc\b/,
        /\beval\s*\(/,
        /\bnew\s+Function\b/,
        /\bset(?:Timeout|Interval)\(\s*['"`]/,
      ]) {
        expect(source, `${file} ${sink}`).not.toMatch(sink);
      }
    }
    // The scan is not blind: it finds a sink in a file that has one.
    expect('row.innerHTML = task.name').toMatch(/\binnerHTML\b/);
  });

  it("a row's buttons keep only its id, and act on the row as the list has it when clicked", () => {
    // A row's cells are rebuilt only when their key changes, so a handler that kept the row's object
    // would act on the row as it was when its buttons were built (an edit form with the old values,
    // saved back over a newer edit). Handlers may name their row (the cell builders' parameter) only
    // for its id.
    const rowNames: Record<string, string[]> = { 'manage.js': ['p', 'w', 'x'], 'app.js': ['t', 'a'] };
    /** The second argument of each `button(…)` call: its click handler. */
    const handlers = (source: string) => {
      const out: string[] = [];
      for (const m of source.matchAll(/\bbutton\(/g)) {
        let depth = 1;
        let commas = 0;
        let start = -1;
        let i = m.index + m[0].length;
        for (; i < source.length && depth > 0; i++) {
          const c = source[i];
          if (c === '(' || c === '[' || c === '{') depth++;
          else if (c === ')' || c === ']' || c === '}') depth--;
          else if (c === ',' && depth === 1 && ++commas === 1) start = i + 1;
          else if (c === ',' && depth === 1 && commas === 2) break;
        }
        if (start > 0) out.push(source.slice(start, i).trim());
      }
      return out;
    };
    let seen = 0;
    for (const [file, names] of Object.entries(rowNames)) {
      const source = readFileSync(join(DIR, file), 'utf8');
      for (const handler of handlers(source)) {
        seen++;
        for (const name of names) {
          // `p.name`, `p.suspended`… or `p` itself passed on: only `p.id` is allowed.
          const kept = new RegExp(`(?<![\\w.$])${name}\\b(?!\\.id\\b)(?=\\s*[.,)])`);
          expect(handler, `${file}: ${handler}`).not.toMatch(kept);
        }
      }
    }
    expect(seen).toBeGreaterThanOrEqual(12); // the scan is not blind
    expect('() => presetForm.open(p)').toMatch(/(?<![\w.$])p\b(?!\.id\b)(?=\s*[.,)])/);
  });

  it("an agent's new token lives only in its dialog's field: never stored, logged or put in the address, cleared on close", () => {
    const app = readFileSync(join(DIR, 'app.js'), 'utf8');
    for (const file of SCRIPTS) {
      const source = readFileSync(join(DIR, file), 'utf8');
      expect(source, file).not.toMatch(/\blocalStorage\b|\bconsole\s*\./);
      // The API token is the one thing kept (sessionStorage, in dom.js).
      if (file !== 'dom.js') expect(source, file).not.toMatch(/\bsessionStorage\b/);
    }
    // The answer's token goes to the field's value (a property, not an attribute) and nowhere else.
    const uses = [...app.matchAll(/\.token\b/g)].map((m) => app.slice(m.index - 40, m.index + 6));
    expect(uses).toEqual([expect.stringMatching(/ui\.tokenValue\.value = v\.token$/)]);
    expect(app).not.toMatch(/setAttribute\(\s*'value'/);
    // Closing the dialog (its button, Esc) or losing the API token clears it.
    expect(app).toMatch(/ui\.tokenDialog\.addEventListener\('close', clearAgentToken\)/);
    expect(app).toMatch(/function clearAgentToken\(\) \{\s*ui\.tokenValue\.value = '';/);
    expect(/function clearData\([^)]*\) \{[\s\S]*?\n\}/.exec(app)?.[0]).toContain('closeAgentToken();');
    const html = readFileSync(join(DIR, 'index.html'), 'utf8');
    expect(html).toMatch(/<input id="agent-token-value" type="text" readonly autocomplete="off"/);
  });

  it('type-check cleanly against the DOM with their JSDoc types (tsc --checkJs)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'ffleet-dashboard-tsc-'));
    try {
      const config = {
        compilerOptions: {
          noEmit: true,
          allowJs: true,
          checkJs: true,
          strict: true,
          noUncheckedIndexedAccess: true,
          target: 'ES2022',
          module: 'ES2022',
          moduleResolution: 'bundler',
          lib: ['ES2023', 'DOM', 'DOM.Iterable'],
          types: [],
          skipLibCheck: true,
        },
        files: SCRIPTS.map((f) => join(DIR, f)),
      };
      writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify(config));
      const tsc = fileURLToPath(new URL('../../../node_modules/typescript/bin/tsc', import.meta.url));
      const run = spawnSync(process.execPath, [tsc, '-p', join(dir, 'tsconfig.json')], { encoding: 'utf8' });
      expect(run.stdout + run.stderr).toBe('');
      expect(run.status).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
