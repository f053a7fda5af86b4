export { createWildcardContext, type WildcardContext, type WildcardContextOptions } from './context.ts';
export { computeDateValues, isoWeekOf, MAX_SUB_MILLISECOND_NANOS } from './date-values.ts';
export { computeFileValues, type FileWildcardPrefix } from './file-values.ts';
export { lookupMetadataPath } from './metadata-path.ts';
export { resolveWildcards, type WildcardPaths } from './resolve.ts';
