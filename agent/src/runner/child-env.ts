/**
 * ffleet's own credentials and connection strings: the agent's token, the API tokens and the database
 * and broker URLs (which may carry a password) that an all-in-one process or an agent's unit file
 * holds. Scripts and the transcoder run with the agent's environment (the spec: "the environment and
 * permissions of the service process"), without these: a script's output becomes the task's logs,
 * which every API client reads, and a script that prints its environment must not hand out the token
 * that lets a machine join the fleet. Every other variable, the operator's own secrets included (a
 * post-processing upload's `AWS_SECRET_ACCESS_KEY`), is passed on unchanged.
 */
export const CREDENTIAL_VARIABLES: readonly string[] = [
  'FFLEET_AGENT_TOKEN',
  'FFLEET_API_TOKENS',
  'DATABASE_URL',
  'MQTT_URL',
];

/** `env` without {@link CREDENTIAL_VARIABLES} (a copy; `env` is not changed). */
export function withoutCredentials(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const out = { ...env };
  for (const name of CREDENTIAL_VARIABLES) delete out[name];
  return out;
}
