import { z } from 'zod';
import { Millis } from './common.ts';
import { TaskCreate } from './task.ts';

/** Most tasks one batch may hold (one transaction; keeps a request bounded). */
export const MAX_BATCH_TASKS = 1000;

export const BatchCreate = z.strictObject({
  name: z.string().max(1000).optional(),
  tasks: z.array(TaskCreate).min(1).max(MAX_BATCH_TASKS),
});
export type BatchCreate = z.infer<typeof BatchCreate>;

export const BatchStatus = z.enum(['RUNNING', 'DONE']);
export type BatchStatus = z.infer<typeof BatchStatus>;

export const Batch = z.object({
  id: z.string(),
  uuid: z.string(),
  name: z.string(),
  status: BatchStatus,
  taskCount: z.number().int(),
  counts: z.record(z.string(), z.number().int()),
  tasks: z.array(z.string()),
  createdAt: Millis,
  updatedAt: Millis,
  finishedAt: Millis,
});
export type Batch = z.infer<typeof Batch>;
