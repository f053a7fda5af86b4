import { readFileSync } from 'node:fs';

/** The ffleet version, from the root package.json (one place to bump). */
export const VERSION: string = (
  JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
).version;
