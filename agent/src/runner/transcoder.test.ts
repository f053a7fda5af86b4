import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { withoutCredentials } from './child-env.ts';
import {
  findTranscoder,
  parseEncoders,
  parseHwaccels,
  parseVersion,
  probeTranscoder,
  resolveTranscoder,
} from './transcoder.ts';

const FIXTURES = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures');
const BUNDLED_SUFFIX = path.join('@ffmpeg-installer', `${process.platform}-${process.arch}`, 'ffmpeg');

let dir = '';
beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'ffleet-transcoder-'));
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

function file(relative: string, mode: number): string {
  const p = path.join(dir, relative);
  mkdirSync(path.dirname(p), { recursive: true });
  writeFileSync(p, '#!/bin/sh\nexit 0\n');
  chmodSync(p, mode);
  return p;
}

describe('resolveTranscoder', () => {
  it('uses FFLEET_TRANSCODER when it is an executable path', async () => {
    expect(await resolveTranscoder({ FFLEET_TRANSCODER: '/usr/bin/ffmpeg', PATH: '' })).toEqual({
      ok: true,
      path: '/usr/bin/ffmpeg',
      source: 'FFLEET_TRANSCODER',
    });
  });

  it('makes a relative FFLEET_TRANSCODER path absolute', async () => {
    const exe = file('bin/my-ffmpeg', 0o755);
    const relative = path.relative(process.cwd(), exe);
    expect(await resolveTranscoder({ FFLEET_TRANSCODER: relative })).toEqual({
      ok: true,
      path: exe,
      source: 'FFLEET_TRANSCODER',
    });
  });

  it('looks a bare FFLEET_TRANSCODER name up on PATH', async () => {
    const exe = file('bin/ffmpeg7', 0o755);
    expect(
      await resolveTranscoder({ FFLEET_TRANSCODER: 'ffmpeg7', PATH: `/nonexistent:${path.dirname(exe)}` }),
    ).toEqual({
      ok: true,
      path: exe,
      source: 'FFLEET_TRANSCODER',
    });
  });

  it('reports a broken FFLEET_TRANSCODER instead of falling back', async () => {
    const notExecutable = file('bin/ffmpeg', 0o644);
    const result = await resolveTranscoder({ FFLEET_TRANSCODER: notExecutable, PATH: '/usr/bin' });
    expect(result).toEqual({
      ok: false,
      error: `FFLEET_TRANSCODER=${notExecutable}: ${notExecutable} is not executable (no x permission)`,
    });
    const missing = path.join(dir, 'not-mounted', 'ffmpeg');
    expect(await resolveTranscoder({ FFLEET_TRANSCODER: missing })).toEqual({
      ok: false,
      error: `FFLEET_TRANSCODER=${missing}: ${missing} does not exist`,
    });
    mkdirSync(path.join(dir, 'a-dir', 'ffmpeg'), { recursive: true });
    const folder = path.join(dir, 'a-dir', 'ffmpeg');
    expect(await resolveTranscoder({ FFLEET_TRANSCODER: folder })).toEqual({
      ok: false,
      error: `FFLEET_TRANSCODER=${folder}: ${folder} is not a file`,
    });
    expect(await resolveTranscoder({ FFLEET_TRANSCODER: 'nope-ffmpeg', PATH: '/usr/bin' })).toEqual({
      ok: false,
      error: 'FFLEET_TRANSCODER=nope-ffmpeg: no executable of that name on PATH',
    });
  });

  it('finds the first executable ffmpeg on PATH, skipping non-executable files, directories and relative entries', async () => {
    file('a/ffmpeg', 0o644);
    mkdirSync(path.join(dir, 'b', 'ffmpeg'), { recursive: true });
    const exe = file('c/ffmpeg', 0o755);
    const PATH = ['', '.', path.join(dir, 'a'), path.join(dir, 'b'), path.join(dir, 'c'), '/usr/bin'].join(
      ':',
    );
    expect(await resolveTranscoder({ PATH })).toEqual({ ok: true, path: exe, source: 'PATH' });
    expect(await resolveTranscoder({ PATH: '/usr/bin' })).toEqual({
      ok: true,
      path: '/usr/bin/ffmpeg',
      source: 'PATH',
    });
  });

  it('falls back to the @ffmpeg-installer/ffmpeg binary when ffmpeg is not on PATH', async () => {
    const result = await resolveTranscoder({ PATH: dir });
    expect(result.ok).toBe(true);
    if (result.ok) {
      expect(result.source).toBe('bundled');
      expect(result.path.endsWith(BUNDLED_SUFFIX)).toBe(true);
      expect(path.isAbsolute(result.path)).toBe(true);
    }
  });

  it('reports clearly when the bundled binary is not executable or missing', async () => {
    const notExecutable = file('bundled/ffmpeg', 0o644);
    const result = await resolveTranscoder({ PATH: dir }, { loadBundledPath: async () => notExecutable });
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.error).toContain(`the bundled binary ${notExecutable} is not executable`);

    const missing = await resolveTranscoder(
      { PATH: dir },
      {
        loadBundledPath: async () => {
          throw 'Could not find ffmpeg executable';
        },
      },
    );
    expect(missing).toEqual({
      ok: false,
      error:
        'no transcoder: FFLEET_TRANSCODER is not set, ffmpeg is not on PATH, and the bundled @ffmpeg-installer/ffmpeg is unavailable (Could not find ffmpeg executable)',
    });
  });
});

describe('probeTranscoder', () => {
  it('reads the version, encoders and hwaccels of the system ffmpeg', async () => {
    const result = await probeTranscoder('/usr/bin/ffmpeg');
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    expect(result.version).toMatch(/^5\.1/);
    expect(result.encoders).toEqual(expect.arrayContaining(['libx264', 'aac', 'mpeg4', 'pcm_s16le']));
    expect(result.encoders.length).toBeGreaterThan(100);
    expect(result.encoders).not.toContain('=');
    expect(Array.isArray(result.hwaccels)).toBe(true);
    expect(result.hwaccels.every((h) => /^[a-z0-9_]+$/.test(h))).toBe(true);
  });

  it('reads the bundled 2018 ffmpeg too', async () => {
    const resolved = await resolveTranscoder({ PATH: dir });
    if (!resolved.ok) throw new Error(resolved.error);
    const result = await probeTranscoder(resolved.path);
    expect(result).toMatchObject({ ok: true, version: expect.stringMatching(/^N-\d+/) });
  });

  it('fails with a reason for a missing, failing or non-ffmpeg executable', async () => {
    const missing = await probeTranscoder('/nonexistent/ffmpeg');
    expect(missing.ok === false && missing.error).toContain('ENOENT');
    const failing = await probeTranscoder(path.join(FIXTURES, 'fail.sh'));
    expect(failing.ok === false && failing.error).toContain(
      '-version failed: exit code 1: fatal: the fixture failed on purpose',
    );
    const other = await probeTranscoder(path.join(FIXTURES, 'ok.sh'));
    expect(other.ok === false && other.error).toContain('printed no version line');
  });
});

/** A box with a GPU (or one passed into this container) may keep some hardware: the test is for one without. */
const GPU_LESS = !['/dev/dri', '/dev/nvidiactl', '/dev/dxg'].some((p) => existsSync(p));

describe('findTranscoder', () => {
  it("runs the probe commands with the environment it is given (the agent's runs': its mark, no credentials)", async () => {
    const seen = path.join(dir, 'seen');
    const wrapper = path.join(dir, 'ffmpeg-wrapper');
    writeFileSync(
      wrapper,
      `#!/bin/sh\necho "mark=$FFLEET_AGENT_RUN token=$FFLEET_AGENT_TOKEN" >> ${seen}\nexec ffmpeg "$@"\n`,
    );
    chmodSync(wrapper, 0o755);
    const env = { ...process.env, FFLEET_TRANSCODER: wrapper, FFLEET_AGENT_TOKEN: 'secret-token' };
    const found = await findTranscoder(env, {
      childEnv: { ...withoutCredentials(env), FFLEET_AGENT_RUN: 'box-1:boot:123:456' },
    });
    expect(found.ok).toBe(true);
    const lines = readFileSync(seen, 'utf8').trim().split('\n');
    expect(lines.length).toBeGreaterThanOrEqual(3); // -version, -encoders, -hwaccels
    expect(new Set(lines)).toEqual(new Set(['mark=box-1:boot:123:456 token=']));
  });
});

describe('probeTranscoder: hardware', () => {
  it.skipIf(!GPU_LESS)(
    "drops the system ffmpeg's compiled-in hardware encoders and hwaccels on a GPU-less box",
    async () => {
      const result = await probeTranscoder('/usr/bin/ffmpeg');
      expect(result.ok).toBe(true);
      if (!result.ok) return;
      expect(result.encoders).toEqual(expect.arrayContaining(['libx264', 'libx265', 'aac', 'mpeg4']));
      for (const hw of [
        'h264_nvenc',
        'hevc_nvenc',
        'h264_qsv',
        'hevc_vaapi',
        'h264_vaapi',
        'h264_v4l2m2m',
        'h264_omx',
      ]) {
        expect(result.encoders).not.toContain(hw);
      }
      expect(result.hwaccels).toEqual([]);
      expect(result.hardware.hardwareEncoders).toEqual([]);
      const dropped = new Map(result.hardware.dropped.map((d) => [d.name, d.reason]));
      expect(dropped.get('hevc_nvenc')).toBe('its device (hwaccel cuda) does not initialise');
      expect(dropped.get('h264_omx')).toMatch(/Error while opening encoder/);
      expect([...dropped.keys()]).toEqual(
        expect.arrayContaining(['cuda', 'vaapi', 'qsv', 'vdpau', 'drm', 'opencl', 'vulkan']),
      );
      // Every software encoder is still there: only hardware ones went.
      const listed = parseEncoders(
        execFileSync('/usr/bin/ffmpeg', ['-hide_banner', '-encoders'], { encoding: 'utf8' }),
      );
      const droppedEncoders = result.hardware.dropped.filter((d) => d.kind === 'encoder').map((d) => d.name);
      expect(droppedEncoders.length).toBeGreaterThanOrEqual(20);
      expect([...result.encoders, ...droppedEncoders].sort()).toEqual([...listed].sort());
    },
    30_000,
  );

  it('keeps the hardware whose probe works, drops the one that fails, times out or is software', async () => {
    const log = path.join(dir, 'probes.log');
    const fake = path.join(dir, 'fake-ffmpeg');
    // Answers the listing like ffmpeg; each probe is logged, then works, fails or hangs by its arguments.
    writeFileSync(
      fake,
      `#!/bin/sh
case "$*" in
  -version) echo 'ffmpeg version 9.9-fake Copyright (c) the tests'; exit 0 ;;
  *-encoders*) printf '%s\n' 'Encoders:' ' V..... = Video' ' ------' \
    ' V....D libx264  H.264' ' V....D h264_nvenc  NVENC H.264' ' V....D hevc_nvenc  NVENC HEVC' \
    ' V....D h264_amf  AMF H.264' ' V....D h264_vaapi  VAAPI H.264' ' V....D h264_vulkan  Vulkan H.264' \
    ' A....D aac_mf  MediaFoundation AAC'; exit 0 ;;
  *-hwaccels*) printf '%s\n' 'Hardware acceleration methods:' cuda opencl vulkan ''; exit 0 ;;
esac
echo "$*" >> '${log}'
case "$*" in
  *'-init_hw_device cuda '*) exit 0 ;;
  *'-init_hw_device opencl'*) echo 'Device creation failed: -19.' >&2; exit 1 ;;
  *'-init_hw_device vulkan '*) echo 'Device 0 selected: llvmpipe (LLVM 15.0.6, 256 bits) (software) (0x0)' >&2; exit 0 ;;
  *'-c:v h264_nvenc '*) exit 0 ;;
  *'-c:v hevc_nvenc '*) printf 'x\nOpenEncodeSessionEx failed: unsupported device (2): (no details)\n' >&2; exit 1 ;;
  *'-c:v h264_amf '*) exec sleep 30 ;;
  *'-vf format=nv12,hwupload -c:v h264_vaapi '*) exit 0 ;;
esac
echo "unexpected probe: $*" >&2
exit 1
`,
    );
    chmodSync(fake, 0o755);

    const started = Date.now();
    const result = await probeTranscoder(fake, { timeoutMs: 500 });
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(result).toMatchObject({
      ok: true,
      version: '9.9-fake',
      encoders: ['libx264', 'h264_nvenc', 'h264_vaapi', 'aac_mf'],
      hwaccels: ['cuda'],
    });
    if (!result.ok) return;
    expect(result.hardware.hardwareEncoders).toEqual(['h264_nvenc', 'h264_vaapi']);
    expect(new Map(result.hardware.dropped.map((d) => [`${d.kind}:${d.name}`, d.reason]))).toEqual(
      new Map([
        ['hwaccel:opencl', 'exit code 1: Device creation failed: -19.'],
        ['hwaccel:vulkan', 'only a software device: llvmpipe (LLVM 15.0.6, 256 bits)'],
        [
          'encoder:hevc_nvenc',
          'exit code 1: OpenEncodeSessionEx failed: unsupported device (2): (no details)',
        ],
        ['encoder:h264_amf', 'no answer within 500 ms'],
        ['encoder:h264_vulkan', 'its device (hwaccel vulkan) does not initialise'],
      ]),
    );
    // Software encoders are not probed, nor encoders whose device did not initialise.
    const probes = readFileSync(log, 'utf8');
    expect(probes).not.toMatch(/libx264|aac_mf|h264_vulkan/);
    expect(probes.trim().split('\n')).toHaveLength(7);
  }, 15_000);
});

describe('parsers', () => {
  it('parse version, encoder and hwaccel listings', () => {
    expect(parseVersion('ffmpeg version 5.1.9-0+deb12u1 Copyright (c) 2000-2026')).toBe('5.1.9-0+deb12u1');
    expect(
      parseEncoders('Encoders:\n V..... = Video\n ------\n V....D libx264  H.264\n A....D aac  AAC\n'),
    ).toEqual(['libx264', 'aac']);
    expect(parseHwaccels('Hardware acceleration methods:\nvdpau\ncuda\n\n')).toEqual(['vdpau', 'cuda']);
  });
});
