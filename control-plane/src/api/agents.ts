import { AGENT_ID_RE, AgentPatch, type AgentTokenIssued } from '@ffleet/shared';
import { Hono } from 'hono';
import { deleteAgent, findAgentRow, getAgent, listAgents, patchAgent } from '../services/agents.ts';
import { isUuid } from '../services/tasks.ts';
import type { ApiEnv } from './app-env.ts';
import { ConflictError, HttpError, NotFoundError } from './errors.ts';
import { listResponse, parseJsonBody, parsePage } from './http.ts';

/** What `POST /api/v1/agents/{id}/token` needs from the running control plane. */
export type AgentTokenIssuer = {
  /** API tokens are configured: a credential is handed out only to a caller that presented one. */
  authenticated: boolean;
  /**
   * Move the name's own token to its next generation (the one before stops logging in, and a client
   * connected with it is disconnected); undefined with an external broker, which checks logins itself.
   */
  rotate?: (name: string) => Promise<{ generation: number; token: string; disconnected: boolean }>;
  /** The fleet's agent token also logs agents in (FFLEET_AGENT_AUTH=shared). */
  fleetTokenAccepted: boolean;
};

export const agentsApi = (tokens: AgentTokenIssuer) =>
  new Hono<ApiEnv>()
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
    })
    // A new own token for the agent, revoking the one it had (a lost or stolen box). By uuid, or by name
    // (also a name no agent has used yet: a token printed for a box never installed can be revoked).
    .post('/:id/token', async (c) => {
      const id = c.req.param('id');
      if (!isUuid(id) && !AGENT_ID_RE.test(id)) throw new NotFoundError('agent', id);
      const row = await findAgentRow(c.var.ctx.database.db, id);
      if (!row && isUuid(id)) throw new NotFoundError('agent', id);
      const name = row?.name ?? id;
      if (!tokens.authenticated)
        throw new HttpError(
          403,
          'API_TOKENS_REQUIRED',
          'Forbidden',
          'agent credentials are handed out only to authenticated clients: set FFLEET_API_TOKENS',
        );
      if (!tokens.rotate)
        throw new ConflictError(
          'EXTERNAL_BROKER',
          "agents log in to the external broker (MQTT_URL), which checks their tokens itself: change this agent's password there",
        );
      const { generation, token, disconnected } = await tokens.rotate(name);
      c.var.ctx.logger.warn(
        { agent: name, known: row !== null, generation, disconnected, requestId: c.get('requestId') },
        "agent token replaced through the API: the agent's previous own token no longer logs in",
      );
      c.header('Cache-Control', 'no-store');
      return c.json<AgentTokenIssued>({
        agent: name,
        generation,
        token,
        disconnected,
        known: row !== null,
        fleetTokenAccepted: tokens.fleetTokenAccepted,
      });
    });
