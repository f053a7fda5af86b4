import { reservedLabelProblem } from '@ffleet/shared';

/** Capabilities an agent offers to `requires`: its labels, `encoder:<n>`, `hwaccel:<n>`, `agent:<name>`, os/arch. */
export function agentCapabilities(a: {
  name: string;
  labels: readonly string[];
  encoders: readonly string[];
  hwaccels: readonly string[];
  os: string;
  arch: string;
}): string[] {
  return [
    // A label claiming a reserved prefix (an older agent's, or one set before they were refused) offers
    // nothing: what the box is and can do comes from its own report.
    ...a.labels.filter((l) => reservedLabelProblem(l) === null),
    ...a.encoders.map((e) => `encoder:${e}`),
    ...a.hwaccels.map((h) => `hwaccel:${h}`),
    `agent:${a.name}`,
    ...(a.os ? [`os:${a.os}`] : []),
    ...(a.arch ? [`arch:${a.arch}`] : []),
  ];
}

/**
 * Whether `a` offers requirement `r`: the same as `agentCapabilities(a).includes(r)` (a test holds them
 * equal), without building the list, which holds every encoder of the agent's ffmpeg (~230).
 */
export function offers(a: Parameters<typeof agentCapabilities>[0], r: string): boolean {
  const colon = r.indexOf(':');
  if (colon > 0) {
    const name = r.slice(colon + 1);
    switch (r.slice(0, colon + 1)) {
      case 'encoder:':
        return a.encoders.includes(name);
      case 'hwaccel:':
        return a.hwaccels.includes(name);
      case 'agent:':
        return a.name === name;
      case 'os:':
        return a.os !== '' && a.os === name;
      case 'arch:':
        return a.arch !== '' && a.arch === name;
    }
  }
  return a.labels.includes(r) && reservedLabelProblem(r) === null;
}

/**
 * Why an agent may not claim at all now, or '' when it may (how many tasks: its free slots, counted in
 * the claim statement). The fleet's gate before a claim, and the reason a queued task shows.
 */
export function claimBlocker(a: {
  online: boolean;
  shuttingDown: boolean;
  paused: boolean;
  transcoder: unknown;
}): '' | 'offline' | 'draining' | 'paused' | 'no working transcoder' {
  if (!a.online) return 'offline';
  if (a.shuttingDown) return 'draining';
  if (a.paused) return 'paused';
  if (!a.transcoder) return 'no working transcoder';
  return '';
}
