import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Context, Hono } from 'hono';
import { etag } from 'hono/etag';

// The operator dashboard (/ui): static files served from the source tree (bin/bundle.js gives the
// bundled CLI each source's own import.meta.url, so this directory is found there too). Nothing is
// fetched from elsewhere: studio networks have no internet.
const DIR = fileURLToPath(new URL('./dashboard/', import.meta.url));

/** The files served, and their types; anything else under /ui is 404. The page itself is /ui. */
export const DASHBOARD_FILES: Readonly<Record<string, string>> = {
  'index.html': 'text/html; charset=utf-8',
  'app.js': 'text/javascript; charset=utf-8',
  'logic.js': 'text/javascript; charset=utf-8',
  'dom.js': 'text/javascript; charset=utf-8',
  'task-form.js': 'text/javascript; charset=utf-8',
  'manage.js': 'text/javascript; charset=utf-8',
  'manage-logic.js': 'text/javascript; charset=utf-8',
  'style.css': 'text/css; charset=utf-8',
  'favicon.png': 'image/png',
};

/**
 * A page's Content-Security-Policy: scripts from this origin only (no inline script, no eval), requests
 * to this origin only (the API), no plugins, no framing, no form posting anywhere; styles and images
 * from this origin, plus what `allow` adds to them (a page that needs inline styles or data: images).
 */
export function pagePolicy(allow: { style?: string; img?: string } = {}): string {
  return [
    "default-src 'self'",
    "script-src 'self'",
    `style-src 'self'${allow.style ? ` ${allow.style}` : ''}`,
    `img-src 'self'${allow.img ? ` ${allow.img}` : ''}`,
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
}

/** The dashboard's: no inline style either. */
export const DASHBOARD_CSP = pagePolicy();

const HEADERS = {
  'Content-Security-Policy': DASHBOARD_CSP,
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  // Revalidated on each load (the ETag makes that a 304): an upgraded control plane's page and scripts
  // are never mixed with cached ones.
  'Cache-Control': 'no-cache',
};

/** Each file is read once, at its first request (they change only with the control plane's code). */
const contents = new Map<string, Promise<Buffer>>();

/** Answered through the context, so the app's headers (X-Request-Id, X-Server, CORS) are kept. */
async function serve(c: Context, file: string): Promise<Response> {
  const type = DASHBOARD_FILES[file]!;
  let body = contents.get(file);
  if (!body) {
    body = readFile(join(DIR, file));
    contents.set(file, body);
    // A failed read (a file missing from a broken install) is tried again at the next request.
    body.catch(() => contents.delete(file));
  }
  return c.body(new Uint8Array(await body), 200, { ...HEADERS, 'Content-Type': type });
}

/** Mounted at /ui by createApp; `GET /ui/` redirects to `/ui`. Public: the files hold no data. */
export const dashboard = new Hono()
  .use('*', etag())
  .get('/', (c) => serve(c, 'index.html'))
  .get('/:file', async (c) => {
    const file = c.req.param('file');
    if (file === 'index.html' || !Object.hasOwn(DASHBOARD_FILES, file)) return c.notFound();
    return serve(c, file);
  });
