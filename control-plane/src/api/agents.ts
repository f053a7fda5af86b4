import { AgentPatch } from '@ffleet/shared';
import { Hono } from 'hono';
import { deleteAgent, getAgent, listAgents, patchAgent } from '../services/agents.ts';
import type { ApiEnv } from './app-env.ts';
import { listResponse, parseJsonBody, parsePage } from './http.ts';

export const agentsApi = new Hono<ApiEnv>()
  .get('/', async (c) => {
    const { items, total } = await listAgents(c.var.ctx, parsePage(c));
    return listResponse(c, items, total);
  })
  .get('/:id', async (c) => c.json(await getAgent(c.var.ctx, c.req.param('id'))))
  .patch('/:id', async (c) => {
    const { data } = await parseJsonBody(c, AgentPatch);
    return c.json(await patchAgent(c.var.ctx, c.req.param('id'), data));
  })
  .delete('/:id', async (c) => {
    await deleteAgent(c.var.ctx, c.req.param('id'));
    return c.body(null, 204);
  });
