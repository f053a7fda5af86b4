import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join, normalize } from 'node:path';
import { Hono } from 'hono';
import { pagePolicy } from './dashboard.ts';

// swagger-ui-dist ships the reference UI as static files; serving them ourselves keeps the page
// working on networks without internet access (no CDN).
const require = createRequire(import.meta.url);
const ASSET_DIR = dirname(require.resolve('swagger-ui-dist/package.json'));
const ASSETS: Record<string, string> = {
  'swagger-ui.css': 'text/css; charset=utf-8',
  'swagger-ui-bundle.js': 'application/javascript; charset=utf-8',
  'swagger-ui-standalone-preset.js': 'application/javascript; charset=utf-8',
  'favicon-32x32.png': 'image/png',
};

const PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>ffleet API reference</title>
<link rel="stylesheet" href="/api/v1/docs/assets/swagger-ui.css">
<link rel="icon" href="/api/v1/docs/assets/favicon-32x32.png"></head>
<body><div id="ui"></div>
<script src="/api/v1/docs/assets/swagger-ui-bundle.js"></script>
<script src="/api/v1/docs/assets/swagger-ui-standalone-preset.js"></script>
<script src="/api/v1/docs/init.js"></script>
</body></html>`;

/**
 * The page's Content-Security-Policy: its scripts and styles from here only (Swagger UI sets inline
 * style attributes and draws its icons from data: URIs), requests to this server only, and no framing
 * (clickjacking: the page can send requests with the operator's token).
 */
export const API_REFERENCE_CSP = pagePolicy({ style: "'unsafe-inline'", img: 'data:' });
const HEADERS = { 'Content-Security-Policy': API_REFERENCE_CSP, 'X-Content-Type-Options': 'nosniff' };

const INIT = `window.ui = SwaggerUIBundle({ url: '/api/v1/openapi.json', dom_id: '#ui', deepLinking: true,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset], layout: 'BaseLayout' });`;

export const apiReference = new Hono()
  .get('/', (c) => c.html(PAGE, 200, HEADERS))
  .get('/init.js', (c) =>
    c.body(INIT, 200, { ...HEADERS, 'Content-Type': 'application/javascript; charset=utf-8' }),
  )
  .get('/assets/:file', async (c) => {
    const file = c.req.param('file');
    const type = ASSETS[file];
    if (!type) return c.notFound();
    const body = await readFile(normalize(join(ASSET_DIR, file)));
    return c.body(body, 200, { ...HEADERS, 'Content-Type': type, 'Cache-Control': 'public, max-age=86400' });
  });
