import path from 'node:path';

/** Prefix of the wildcards derived from one file path. */
export type FileWildcardPrefix = 'INPUT_FILE' | 'OUTPUT_FILE';

/**
 * The `<PREFIX>`, `_BASE`, `_BASENAME`, `_EXTENSION` and `_DIR` wildcards of one path. An empty path
 * (a task without that file) gives empty strings for all five rather than `"."` for the directory.
 */
export function computeFileValues(prefix: FileWildcardPrefix, filePath: string): Record<string, string> {
  if (filePath === '') {
    return {
      [prefix]: '',
      [`${prefix}_BASE`]: '',
      [`${prefix}_BASENAME`]: '',
      [`${prefix}_EXTENSION`]: '',
      [`${prefix}_DIR`]: '',
    };
  }
  const extension = path.extname(filePath);
  return {
    [prefix]: filePath,
    [`${prefix}_BASE`]: path.basename(filePath),
    [`${prefix}_BASENAME`]: path.basename(filePath, extension),
    [`${prefix}_EXTENSION`]: extension,
    [`${prefix}_DIR`]: path.dirname(filePath),
  };
}
