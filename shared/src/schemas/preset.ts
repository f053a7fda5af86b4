import { z } from 'zod';
import { DirectWebhook, Millis, Requirement, ResourceName } from './common.ts';
import { MAX_TEXT, PostProcessingInput, PreProcessingInput, Priority } from './task.ts';

/** Body of `POST/PUT /api/v1/presets`. PUT replaces the whole definition. */
export const PresetCreate = z.strictObject({
  name: ResourceName,
  description: z.string().max(4000).optional(),
  command: z.string().min(1).max(MAX_TEXT),
  outputFile: z.string().max(MAX_TEXT).optional(),
  priority: Priority.optional(),
  preProcessing: PreProcessingInput.optional(),
  postProcessing: PostProcessingInput.optional(),
  webhooks: z.array(DirectWebhook).max(50).optional(),
  requires: z.array(Requirement).max(50).optional(),
});
export type PresetCreate = z.infer<typeof PresetCreate>;

export const Preset = z.object({
  id: z.string(),
  uuid: z.string(),
  name: z.string(),
  description: z.string(),
  command: z.string(),
  outputFile: z.string(),
  priority: z.number().int(),
  preProcessing: z
    .object({ scriptPath: z.string(), sidecarPath: z.string(), importSidecar: z.boolean() })
    .nullable(),
  postProcessing: z.object({ scriptPath: z.string(), sidecarPath: z.string() }).nullable(),
  webhooks: z.array(DirectWebhook),
  requires: z.array(z.string()),
  createdAt: Millis,
  updatedAt: Millis,
});
export type Preset = z.infer<typeof Preset>;

/**
 * Filters of `GET /api/v1/presets`. `name`: presets whose name contains the text, ignoring case
 * (`%`, `_` and `\` match themselves); surrounding spaces are ignored and an empty text filters
 * nothing. A preset name has at most 200 characters, so a longer text is a mistake.
 */
export const PresetListQuery = z.object({
  name: z
    .string()
    .trim()
    .max(200)
    .optional()
    .transform((v) => v || undefined),
});
export type PresetListQuery = z.infer<typeof PresetListQuery>;
