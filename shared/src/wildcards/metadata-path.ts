const ARRAY_INDEX = /^(0|[1-9][0-9]*)$/;

/**
 * The value at a dotted path inside task metadata as wildcard text (`${METADATA_a.b.0.c}`).
 * Each segment is an object key or, on an array, a decimal index. A string is used as is, a number
 * or boolean in its JSON form, an object or array as its JSON text; `null`, a missing key, an index
 * out of range, a walk into a scalar and an empty path all give `""`.
 */
export function lookupMetadataPath(metadata: unknown, path: string): string {
  if (path === '') return '';
  let current: unknown = metadata;
  for (const segment of path.split('.')) {
    if (Array.isArray(current)) {
      if (!ARRAY_INDEX.test(segment)) return '';
      current = current[Number(segment)];
    } else if (typeof current === 'object' && current !== null) {
      // Own keys only: `constructor` or `__proto__` must not reach Object.prototype.
      if (!Object.hasOwn(current, segment)) return '';
      current = (current as Record<string, unknown>)[segment];
    } else {
      return '';
    }
    if (current === undefined) return '';
  }
  return formatMetadataValue(current);
}

function formatMetadataValue(value: unknown): string {
  if (value === null || value === undefined) return '';
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') {
    return String(value);
  }
  return JSON.stringify(value);
}
