/**
 * The names ffleet gives an agent's operating system and CPU architecture: `${OS_NAME}`, `${OS_ARCH}`,
 * the agent's `os` and `arch`, and the `os:<os>` / `arch:<arch>` capabilities tasks can require. They
 * are FFmate's (Go's GOOS / GOARCH: `linux`, `darwin`, `windows` / `amd64`, `arm64`), so commands and
 * scripts written for FFmate resolve the same here, and one vocabulary serves all four places.
 */

/** Node's `process.platform` → GOOS. */
const OS_NAMES: Readonly<Record<string, string>> = { win32: 'windows', sunos: 'solaris' };

/** Node's `process.arch` → GOARCH (Node says `ppc64` for little-endian POWER, as Linux runs it). */
const ARCH_NAMES: Readonly<Record<string, string>> = {
  x64: 'amd64',
  ia32: '386',
  mipsel: 'mipsle',
  ppc64: 'ppc64le',
};

export const osName = (platform: string = process.platform): string => OS_NAMES[platform] ?? platform;

export const archName = (arch: string = process.arch): string => ARCH_NAMES[arch] ?? arch;
