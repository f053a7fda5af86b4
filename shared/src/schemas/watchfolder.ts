import { z } from 'zod';
import { Millis, ResourceName } from './common.ts';

const Extension = z
  .string()
  .min(1)
  .max(32)
  .regex(/^[^./\\]+$/, 'an extension without a dot or a slash (e.g. "mov")');

export const WatchfolderFilter = z.strictObject({
  extensions: z
    .strictObject({
      include: z.array(Extension).max(200).optional(),
      exclude: z.array(Extension).max(200).optional(),
    })
    .optional(),
});
export type WatchfolderFilter = z.infer<typeof WatchfolderFilter>;

/** Largest scan interval accepted: one day. */
export const MAX_INTERVAL_S = 86_400;

/** Body of `POST/PUT /api/v1/watchfolders`. */
export const WatchfolderCreate = z.strictObject({
  name: ResourceName,
  description: z.string().max(4000).optional(),
  interval: z.number().int().min(1).max(MAX_INTERVAL_S),
  growthChecks: z.number().int().min(1).max(1000),
  preset: z.string().min(1).max(100),
  path: z
    .string()
    .min(1)
    .max(4096)
    .refine((p) => p.startsWith('/') || /^[A-Za-z]:[\\/]/.test(p), { message: 'must be an absolute path' }),
  suspended: z.boolean().optional(),
  filter: WatchfolderFilter.optional(),
  agent: z.string().max(200).nullable().optional(),
});
export type WatchfolderCreate = z.infer<typeof WatchfolderCreate>;

/** Body of `PATCH /api/v1/watchfolders/{id}`: the fields given replace theirs (`filter` whole). */
export const WatchfolderPatch = WatchfolderCreate.partial();
export type WatchfolderPatch = z.infer<typeof WatchfolderPatch>;

export const Watchfolder = z.object({
  id: z.string(),
  uuid: z.string(),
  name: z.string(),
  description: z.string(),
  interval: z.number().int(),
  growthChecks: z.number().int(),
  preset: z.string(),
  path: z.string(),
  suspended: z.boolean(),
  filter: z.object({
    extensions: z.object({ include: z.array(z.string()), exclude: z.array(z.string()) }),
  }),
  agent: z.string().nullable(),
  assignedAgent: z.object({ id: z.string(), name: z.string() }).nullable(),
  lastCheck: Millis,
  error: z.string(),
  createdAt: Millis,
  updatedAt: Millis,
});
export type Watchfolder = z.infer<typeof Watchfolder>;

/** `metadata.ffleet.watchfolder` on a task a watchfolder created. */
export const WatchfolderMetadata = z.object({
  path: z.string(),
  relativeDir: z.string(),
  relativePath: z.string(),
  uuid: z.string(),
});
export type WatchfolderMetadata = z.infer<typeof WatchfolderMetadata>;
