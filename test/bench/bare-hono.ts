// The baseline for bench:api: a bare Hono route returning constant JSON, same server stack.
import { serve } from '@hono/node-server';
import { Hono } from 'hono';

const app = new Hono()
  .get('/const', (c) => c.json({ ok: true, n: 1 }))
  .post('/const', (c) => c.json({ ok: true }, 201));
serve({ fetch: app.fetch, hostname: '127.0.0.1', port: Number(process.env.PORT) });
