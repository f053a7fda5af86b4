import { describe, expect, it } from 'vitest';
import {
  encoderProbeArgs,
  type HardwareFamily,
  hardwareFamily,
  hwaccelProbeArgs,
  probeHardware,
  softwareDevice,
} from './hw-probe.ts';
import { parseEncoderRows } from './transcoder.ts';

function family(encoder: string): HardwareFamily {
  const f = hardwareFamily(encoder);
  if (!f) throw new Error(`${encoder} is not a hardware encoder`);
  return f;
}

describe('hardwareFamily', () => {
  it("knows the hardware encoders of Debian's ffmpeg 5.1 and of other builds by their suffix", () => {
    const cases: [string, string | null][] = [
      ['h264_nvenc', 'nvenc'],
      ['hevc_nvenc', 'nvenc'],
      ['av1_nvenc', 'nvenc'],
      ['nvenc', 'nvenc'],
      ['nvenc_hevc', 'nvenc'],
      ['h264_qsv', 'qsv'],
      ['mjpeg_qsv', 'qsv'],
      ['hevc_vaapi', 'vaapi'],
      ['vp9_vaapi', 'vaapi'],
      ['h264_v4l2m2m', 'v4l2m2m'],
      ['h263_v4l2m2m', 'v4l2m2m'],
      ['mpeg4_omx', 'omx'],
      ['hevc_amf', 'amf'],
      ['prores_videotoolbox', 'videotoolbox'],
      ['h264_mf', 'mf'],
      ['h264_mediacodec', 'mediacodec'],
      ['h264_rkmpp', 'rkmpp'],
      ['h264_vulkan', 'vulkan'],
      ['hevc_d3d12va', 'd3d12va'],
      ['libx264', null],
      ['libx265', null],
      ['mpeg4', null],
      ['libvpx-vp9', null],
      ['libsvtav1', null],
      ['aac', null],
      ['pcm_s16le', null],
      ['h264_nvenc_x', null],
    ];
    for (const [encoder, expected] of cases)
      expect([encoder, hardwareFamily(encoder)?.name ?? null]).toEqual([encoder, expected]);
  });

  it('ties NVENC to CUDA and QSV, VAAPI and Vulkan to their devices', () => {
    expect(family('h264_nvenc').device).toBe('cuda');
    expect(family('hevc_qsv').device).toBe('qsv');
    expect(family('hevc_vaapi').device).toBe('vaapi');
    expect(family('h264_vulkan').device).toBe('vulkan');
    expect(family('h264_amf').device).toBeUndefined();
    expect(family('h264_v4l2m2m').device).toBeUndefined();
  });
});

describe('probe arguments', () => {
  it('gives software-frame encoders a one-frame encode and nothing else', () => {
    for (const encoder of ['h264_nvenc', 'hevc_qsv', 'h264_amf', 'h264_v4l2m2m', 'h264_omx']) {
      const args = encoderProbeArgs(encoder, family(encoder));
      expect(args).toEqual([
        '-hide_banner',
        '-nostdin',
        '-v',
        'error',
        '-f',
        'lavfi',
        '-i',
        'color=black:s=256x144:r=25:d=0.2',
        '-frames:v',
        '1',
        '-c:v',
        encoder,
        '-f',
        'null',
        '-',
      ]);
    }
  });

  it('uploads the frame to the device for VAAPI and Vulkan encoders', () => {
    const args = encoderProbeArgs('hevc_vaapi', family('hevc_vaapi')).join(' ');
    expect(args).toBe(
      '-hide_banner -nostdin -v error -init_hw_device vaapi=hw -filter_hw_device hw -f lavfi -i color=black:s=256x144:r=25:d=0.2 -frames:v 1 -vf format=nv12,hwupload -c:v hevc_vaapi -f null -',
    );
    expect(encoderProbeArgs('h264_vulkan', family('h264_vulkan')).join(' ')).toContain(
      '-init_hw_device vulkan=hw -filter_hw_device hw',
    );
  });

  it('initialises a hw device, asking OpenCL for a GPU and Vulkan to say which device it took', () => {
    expect(hwaccelProbeArgs('cuda').join(' ')).toBe(
      '-hide_banner -nostdin -v error -init_hw_device cuda -f lavfi -i nullsrc=s=16x16:d=0.04 -frames:v 1 -f null -',
    );
    expect(hwaccelProbeArgs('opencl')).toContain('opencl:,device_type=gpu');
    expect(hwaccelProbeArgs('vulkan').slice(0, 6)).toEqual([
      '-hide_banner',
      '-nostdin',
      '-v',
      'verbose',
      '-init_hw_device',
      'vulkan',
    ]);
  });

  it('recognises a software Vulkan device in the verbose log', () => {
    expect(
      softwareDevice(
        '[AVHWDeviceContext @ 0x5597449f1980] Device 0 selected: llvmpipe (LLVM 15.0.6, 256 bits) (software) (0x0)\n',
      ),
    ).toBe('llvmpipe (LLVM 15.0.6, 256 bits)');
    expect(
      softwareDevice(
        '[AVHWDeviceContext @ 0x1] Device 0 selected: NVIDIA GeForce RTX 3060 (discrete) (0x2503)',
      ),
    ).toBeNull();
    expect(softwareDevice('')).toBeNull();
  });

  it('reads the type of each encoder row', () => {
    expect(
      parseEncoderRows('Encoders:\n V..... = Video\n ------\n V....D h264_mf  H264\n A....D aac_mf  AAC\n'),
    ).toEqual([
      { type: 'V', name: 'h264_mf' },
      { type: 'A', name: 'aac_mf' },
    ]);
  });
});

describe('probeHardware', () => {
  it('does not throw when the transcoder cannot be run: the hardware is dropped, software kept', async () => {
    const result = await probeHardware('/nonexistent/ffmpeg', {
      encoders: [
        { type: 'V', name: 'libx264' },
        { type: 'V', name: 'h264_nvenc' },
        { type: 'A', name: 'aac_mf' },
      ],
      hwaccels: ['cuda'],
    });
    expect(result).toMatchObject({
      encoders: ['libx264', 'aac_mf'],
      hwaccels: [],
      hardwareEncoders: [],
      dropped: [
        { kind: 'hwaccel', name: 'cuda', reason: expect.stringContaining('ENOENT') },
        { kind: 'encoder', name: 'h264_nvenc', reason: 'its device (hwaccel cuda) does not initialise' },
      ],
    });
  });
});
