import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join, normalize } from 'node:path';
import { Hono } from 'hono';

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

const INIT = `window.ui = SwaggerUIBundle({ url: '/api/v1/openapi.json', dom_id: '#ui', deepLinking: true,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset], layout: 'BaseLayout' });`;

export const apiReference = new Hono()
  .get('/', (c) => c.html(PAGE))
  .get('/init.js', (c) => c.body(INIT, 200, { 'Content-Type': 'application/javascript; charset=utf-8' }))
  .get('/assets/:file', async (c) => {
    const file = c.req.param('file');
    const type = ASSETS[file];
    if (!type) return c.notFound();
    const body = await readFile(normalize(join(ASSET_DIR, file)));
    return c.body(body, 200, { 'Content-Type': type, 'Cache-Control': 'public, max-age=86400' });
  });
