import { TaskCreate, TaskListQuery } from '@ffleet/shared';
import type { Context } from 'hono';
import { Hono } from 'hono';
import { type IdempotencyRequest, ReplayResponse } from '../services/idempotency.ts';
import { commandIssuesOf } from '../services/task-input.ts';
import {
  cancelTask,
  createTask,
  deleteTask,
  getTask,
  getTaskLogs,
  listTasks,
  restartTask,
} from '../services/tasks.ts';
import { withWaitingFor } from '../services/waiting-for.ts';
import type { ApiEnv } from './app-env.ts';
import { BadRequestError } from './errors.ts';
import {
  created,
  listResponse,
  type ParsedBody,
  parseJsonBody,
  parsePage,
  parseQuery,
  sha256,
} from './http.ts';

/**
 * `Idempotency-Key` → the request's identity for replay (route + key + body hash). The hash is of the
 * body as read, so a retry that differs only in key order, whitespace or an FFmate `null` replays.
 */
export function idempotencyOf(
  c: Context,
  route: string,
  body: Pick<ParsedBody<unknown>, 'raw' | 'canonical'>,
): IdempotencyRequest | undefined {
  const key = c.req.header('idempotency-key');
  if (key === undefined) return undefined;
  if (key.length < 1 || key.length > 255)
    throw new BadRequestError('INVALID_IDEMPOTENCY_KEY', 'Idempotency-Key must be 1 to 255 characters');
  return { route, key, bodyHash: sha256(body.canonical), rawBodyHash: sha256(body.raw) };
}

/** Run a create; an idempotent replay answers with the first response. */
export async function withReplay(c: Context, run: () => Promise<Response>): Promise<Response> {
  try {
    return await run();
  } catch (err) {
    if (!(err instanceof ReplayResponse)) throw err;
    if (err.stored.location) c.header('Location', err.stored.location);
    c.header('Idempotent-Replayed', 'true');
    return c.json(err.stored.body as object, err.stored.status as 201);
  }
}

export const tasksApi = new Hono<ApiEnv>()
  .post('/', async (c) => {
    const body = await parseJsonBody(c, TaskCreate, {
      nullIsAbsent: true,
      alsoCheck: (j) => commandIssuesOf(j),
    });
    const idem = idempotencyOf(c, 'POST /tasks', body);
    return withReplay(c, async () => {
      const task = await createTask(c.var.ctx, body.data, idem);
      return created(c, `/api/v1/tasks/${task.id}`, task);
    });
  })
  .get('/', async (c) => {
    const page = parsePage(c);
    const q = parseQuery(c, TaskListQuery, ['status']);
    const { items, total } = await listTasks(c.var.ctx, q, page);
    return listResponse(c, await withWaitingFor(c.var.ctx, items), total);
  })
  .get('/:id', async (c) => {
    const [task] = await withWaitingFor(c.var.ctx, [await getTask(c.var.ctx, c.req.param('id'))]);
    return c.json(task);
  })
  .get('/:id/logs', async (c) => {
    const text = await getTaskLogs(c.var.ctx, c.req.param('id'));
    return c.text(text, 200, { 'Content-Type': 'text/plain; charset=utf-8' });
  })
  .on(['PATCH', 'POST'], '/:id/cancel', async (c) => {
    // A running task's answer says what its cancel waits for (waitingFor).
    const [task] = await withWaitingFor(c.var.ctx, [await cancelTask(c.var.ctx, c.req.param('id'))]);
    return c.json(task);
  })
  .on(['PATCH', 'POST'], '/:id/restart', async (c) => c.json(await restartTask(c.var.ctx, c.req.param('id'))))
  .delete('/:id', async (c) => {
    await deleteTask(c.var.ctx, c.req.param('id'));
    return c.body(null, 204);
  });
