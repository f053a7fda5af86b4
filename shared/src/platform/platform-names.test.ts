import { describe, expect, it } from 'vitest';
import { archName, osName } from './platform-names.ts';

describe("platform names (FFmate's: Go GOOS / GOARCH)", () => {
  it('names the operating system as Go does', () => {
    expect(['linux', 'darwin', 'win32', 'freebsd', 'sunos'].map((p) => osName(p))).toEqual([
      'linux',
      'darwin',
      'windows',
      'freebsd',
      'solaris',
    ]);
  });

  it('names the architecture as Go does', () => {
    expect(['x64', 'arm64', 'ia32', 'arm', 'ppc64', 's390x', 'riscv64'].map((a) => archName(a))).toEqual([
      'amd64',
      'arm64',
      '386',
      'arm',
      'ppc64le',
      's390x',
      'riscv64',
    ]);
  });

  it('defaults to this process', () => {
    expect(osName()).toBe(osName(process.platform));
    expect(archName()).toBe(archName(process.arch));
  });
});
