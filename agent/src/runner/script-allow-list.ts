import { constants } from 'node:fs';
import { access, realpath } from 'node:fs/promises';
import path from 'node:path';

export type AllowedScript = { ok: true; file: string } | { ok: false; error: string };

/**
 * Check a pre/post-processing script against the agent's allow-list (`FFLEET_AGENT_SCRIPT_DIRS`,
 * ARCHITECTURE.md "Security model"). `file` is the script's first argument after wildcard
 * substitution: a path, or a bare name looked up in `PATH` as the process runner would. The check is
 * made on the real path (symlinks and `..` resolved), and that real path is what runs, so a link
 * inside an allowed directory cannot lead outside it and the file cannot be swapped between check and
 * start by changing a link. An empty list allows everything (the spec's default: scripts run with the
 * permissions of the service).
 */
export async function allowScript(
  file: string,
  allowedDirs: readonly string[],
  env: NodeJS.ProcessEnv,
): Promise<AllowedScript> {
  if (!allowedDirs.length) return { ok: true, file };
  const found = await locate(file, env.PATH ?? '');
  if (!found) return { ok: false, error: `script ${file} not found` };
  let real: string;
  try {
    real = await realpath(found);
  } catch (err) {
    return { ok: false, error: `script ${found}: ${(err as Error).message}` };
  }
  for (const dir of allowedDirs) {
    const base = await realpath(dir).catch(() => path.resolve(dir));
    const rel = path.relative(base, real);
    if (rel !== '' && !rel.startsWith('..') && !path.isAbsolute(rel)) return { ok: true, file: real };
  }
  return {
    ok: false,
    error: `script ${real} is outside the directories this agent may run scripts from (FFLEET_AGENT_SCRIPT_DIRS: ${allowedDirs.join(path.delimiter)})`,
  };
}

/** Like execvp: a name with a slash is a path (relative to the working directory), else searched in PATH. */
async function locate(file: string, pathVar: string): Promise<string | null> {
  if (file.includes('/')) return path.resolve(file);
  for (const dir of pathVar.split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.resolve(dir, file);
    try {
      await access(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return null;
}
