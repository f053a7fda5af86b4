import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
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
      error: `FFLEET_TRANSCODER=${notExecutable}: ${notExecutable} is not an executable file`,
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

describe('parsers', () => {
  it('parse version, encoder and hwaccel listings', () => {
    expect(parseVersion('ffmpeg version 5.1.9-0+deb12u1 Copyright (c) 2000-2026')).toBe('5.1.9-0+deb12u1');
    expect(
      parseEncoders('Encoders:\n V..... = Video\n ------\n V....D libx264  H.264\n A....D aac  AAC\n'),
    ).toEqual(['libx264', 'aac']);
    expect(parseHwaccels('Hardware acceleration methods:\nvdpau\ncuda\n\n')).toEqual(['vdpau', 'cuda']);
  });
});
