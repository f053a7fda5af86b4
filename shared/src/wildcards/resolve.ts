import type { WildcardContext } from './context.ts';
import { computeFileValues } from './file-values.ts';
import { lookupMetadataPath } from './metadata-path.ts';

/**
 * Paths known at the current stage of a run. A wildcard whose path is not known yet (e.g.
 * `${OUTPUT_FILE}` while the output path itself is being resolved) is left as written.
 */
export interface WildcardPaths {
  /** Resolved input path: enables `${INPUT_FILE}` and `${INPUT_FILE_*}`. */
  inputFile?: string;
  /** Resolved output path: enables `${OUTPUT_FILE}` and `${OUTPUT_FILE_*}`. */
  outputFile?: string;
  /** Resolved sidecar path of the current processing step: enables `${SIDECAR_FILE}`. */
  sidecarFile?: string;
}

const WILDCARD = /\$\{([^{}]*)\}/g;
const METADATA_PREFIX = 'METADATA_';

/**
 * Replace every `${NAME}` in `text`. One pass: a substituted value is never scanned again, so a
 * metadata value containing `${…}` stays literal. An unknown name is left as written.
 *
 * Resolution order for a run: the input path with no paths known, then the output path with
 * `{inputFile}`, then command, script and sidecar paths with `{inputFile, outputFile}` (plus
 * `sidecarFile` for a processing step's script).
 */
export function resolveWildcards(text: string, ctx: WildcardContext, paths: WildcardPaths = {}): string {
  if (!text.includes('${')) return text;
  const values: Record<string, string> = { ...ctx.values };
  if (paths.inputFile !== undefined) Object.assign(values, computeFileValues('INPUT_FILE', paths.inputFile));
  if (paths.outputFile !== undefined)
    Object.assign(values, computeFileValues('OUTPUT_FILE', paths.outputFile));
  if (paths.sidecarFile !== undefined) values.SIDECAR_FILE = paths.sidecarFile;

  return text.replace(WILDCARD, (whole, name: string) => {
    if (name.startsWith(METADATA_PREFIX))
      return lookupMetadataPath(ctx.metadata, name.slice(METADATA_PREFIX.length));
    return Object.hasOwn(values, name) ? (values[name] as string) : whole;
  });
}
