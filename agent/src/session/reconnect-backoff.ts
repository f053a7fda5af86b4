import { AGENT_RECONNECT_MAX_MS } from '@ffleet/shared';

/** Bounds of the reconnect delay; the defaults reconnect fast after a blip yet never hammer a broker. */
export interface BackoffOptions {
  minMs: number;
  maxMs: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = { minMs: 250, maxMs: AGENT_RECONNECT_MAX_MS };

/**
 * Delay before reconnect attempt number `attempt` (0-based): exponential from `minMs`, capped at
 * `maxMs`, with "equal jitter" (half fixed, half random) so a fleet that lost its broker at the same
 * moment does not come back in lockstep, yet no delay collapses to ~0.
 */
export function computeBackoffMs(
  attempt: number,
  opts: BackoffOptions,
  random: () => number = Math.random,
): number {
  const ceiling = Math.min(opts.maxMs, opts.minMs * 2 ** Math.min(attempt, 30));
  return Math.round(ceiling / 2 + random() * (ceiling / 2));
}
