/** The comment patch-postgres.mjs writes into each file of the driver it patched. */
export const POSTGRES_PATCH_MARKER: string;
export function postgresRoot(): string;
export function patchPostgres(opts?: {
  check?: boolean;
  log?: (line: string) => void;
  root?: string;
}): number;
