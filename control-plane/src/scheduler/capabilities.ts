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
