import { readdir } from 'node:fs/promises';
import { type RunProcessResult, runProcess } from './run-process.ts';

/**
 * Hardware probing. `-encoders` and `-hwaccels` list what the transcoder was compiled with, not what
 * this box has: one ffmpeg image built with NVENC, QSV and VAAPI would offer `encoder:h264_nvenc` on
 * every agent, and a task that requires it would be claimed by a GPU-less one and fail with "Error
 * while opening encoder". So each hardware encoder is tried on a one-frame encode and each hwaccel
 * is initialised, and only what works is advertised. Software encoders need no hardware and are kept
 * without a probe.
 */

/** How long one probe may take; a driver that hangs longer counts as not working. */
export const HW_PROBE_TIMEOUT_MS = 10_000;
/** Probes run at once: each is an ffmpeg start (~100 ms of CPU for Debian's build), not I/O. */
export const HW_PROBE_CONCURRENCY = 4;
/** SIGTERM → SIGKILL for a probe that timed out: it encodes nothing worth a trailer. */
const KILL_GRACE_MS = 200;
/**
 * After the kill, how long to wait for the process to be gone. A process stuck in the kernel (a
 * driver ioctl) outlives even SIGKILL until it returns; the agent's start does not wait for that.
 */
const EXIT_WAIT_MS = 1_000;

/** One frame of black, large enough for every hardware encoder (some refuse frames of a few pixels). */
const TEST_INPUT = ['-f', 'lavfi', '-i', 'color=black:s=256x144:r=25:d=0.2', '-frames:v', '1'];
/** What a device initialisation needs besides the device: some input and some output. */
const TINY_INPUT = ['-f', 'lavfi', '-i', 'nullsrc=s=16x16:d=0.04', '-frames:v', '1'];
const NULL_OUTPUT = ['-f', 'null', '-'];
/** A name for the device a probe initialises, as `-filter_hw_device` refers to it. */
const DEVICE_NAME = 'hw';

/** How a family of hardware encoders is fed, and which device it depends on. */
export interface HardwareFamily {
  /** The family, e.g. `nvenc`: the encoder name's suffix. */
  name: string;
  /**
   * The hw device type (a `-hwaccels` name) the encoders open themselves. When the transcoder lists
   * it and it does not initialise, the family's encoders cannot open either and are dropped without
   * a probe of their own: on a GPU-less box that saves most of the probes (and their start-up time).
   */
  device?: string;
  /**
   * True when the encoders take only frames in the device's memory: the probe creates the device
   * and uploads the software frame (`hwupload`). The others take ordinary frames and are given them.
   */
  upload?: boolean;
  /** See {@link Presence}. */
  present?: Presence;
}

/**
 * A look, without ffmpeg, at whether the hardware can be there at all: null when it may be, else why
 * it cannot. Each probe is an ffmpeg start (~100 ms of CPU for Debian's build; on a GPU-less box they
 * were most of the probing time), so where ffmpeg itself only ever looks in one place for a device,
 * the agent looks there first. Linux only: elsewhere the probe answers.
 */
type Presence = () => Promise<string | null>;

/**
 * VAAPI opens a DRM render node (/dev/dri/renderD*, also behind an X11 display), QSV a VAAPI device
 * on Linux, and the DRM hwaccel /dev/dri/card*: without /dev/dri none of them can initialise.
 */
const driNode: Presence = async () =>
  (await devEntries('/dev/dri', () => true)) === false ? 'no /dev/dri device' : null;

/**
 * The V4L2 M2M encoders look for their device among /dev/video* and fail without one
 * (libavcodec/v4l2_m2m.c).
 */
const videoNode: Presence = async () =>
  (await devEntries('/dev', (n) => n.startsWith('video'))) === false ? 'no /dev/video* device' : null;

/** VDPAU is reached through an X11 display only: the probe names none, so it opens $DISPLAY. */
const x11Display: Presence = async () =>
  process.platform === 'linux' && !process.env.DISPLAY
    ? 'DISPLAY is not set (VDPAU needs an X11 display)'
    : null;

/** Presence checks of hwaccels (device types); see {@link Presence}. */
const HWACCEL_PRESENCE: Readonly<Record<string, Presence>> = {
  vaapi: driNode,
  qsv: driNode,
  drm: driNode,
  vdpau: x11Display,
};

/** Whether `dir` has an entry `match` accepts; null when that cannot be told (not Linux, unreadable). */
async function devEntries(dir: string, match: (name: string) => boolean): Promise<boolean | null> {
  if (process.platform !== 'linux') return null;
  try {
    return (await readdir(dir)).some(match);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ENOENT' ? false : null;
  }
}

/** Why a hwaccel or an encoder family cannot work here, or null when it may: see {@link Presence}. */
async function absent(presence: Presence | undefined): Promise<string | null> {
  try {
    return (await presence?.()) ?? null;
  } catch {
    return null;
  }
}

/**
 * Hardware encoder families by name suffix. NVENC, QSV, AMF, VideoToolbox, MediaFoundation,
 * MediaCodec, OMX, V4L2 M2M and RKMPP encoders accept software frames (they upload themselves);
 * VAAPI, Vulkan and D3D12 ones take only their device's frames. NVENC opens a CUDA context (the same
 * calls as `-init_hw_device cuda`) and QSV an MFX session on the same device `-init_hw_device qsv`
 * creates, so they depend on those; AMF and the rest open devices of their own.
 */
const FAMILIES: readonly HardwareFamily[] = [
  { name: 'nvenc', device: 'cuda' },
  { name: 'qsv', device: 'qsv' },
  { name: 'vaapi', device: 'vaapi', upload: true },
  { name: 'vulkan', device: 'vulkan', upload: true },
  { name: 'd3d12va', device: 'd3d12va', upload: true },
  { name: 'amf' },
  { name: 'videotoolbox' },
  { name: 'mf' },
  { name: 'mediacodec' },
  { name: 'omx' },
  { name: 'v4l2m2m', present: videoNode },
  { name: 'rkmpp' },
  { name: 'oh' },
];

/** The hardware family of an encoder name, or null for a software encoder. */
export function hardwareFamily(encoder: string): HardwareFamily | null {
  // ffmpeg 3 and 4 also list NVENC under its old names: nvenc, nvenc_h264, nvenc_hevc.
  const suffix = /^nvenc(?:_|$)/.test(encoder) ? 'nvenc' : /_([a-z0-9]+)$/.exec(encoder)?.[1];
  return FAMILIES.find((f) => f.name === suffix) ?? null;
}

/** Arguments of the one-frame encode that shows whether a hardware encoder opens on this box. */
export function encoderProbeArgs(encoder: string, family: HardwareFamily): string[] {
  const upload =
    family.upload && family.device
      ? [
          '-init_hw_device',
          `${family.device}=${DEVICE_NAME}`,
          '-filter_hw_device',
          DEVICE_NAME,
          ...TEST_INPUT,
          '-vf',
          'format=nv12,hwupload',
        ]
      : TEST_INPUT;
  return ['-hide_banner', '-nostdin', '-v', 'error', ...upload, '-c:v', encoder, ...NULL_OUTPUT];
}

/**
 * Arguments that initialise one hw device type and nothing else. Vulkan is run verbose because a
 * box without a GPU may still initialise it on a CPU implementation (Mesa's llvmpipe): see
 * {@link softwareDevice}. OpenCL is asked for a GPU for the same reason (POCL runs on the CPU).
 */
export function hwaccelProbeArgs(type: string): string[] {
  const device = type === 'opencl' ? 'opencl:,device_type=gpu' : type;
  const level = type === 'vulkan' ? 'verbose' : 'error';
  return ['-hide_banner', '-nostdin', '-v', level, '-init_hw_device', device, ...TINY_INPUT, ...NULL_OUTPUT];
}

/**
 * The software device a hwaccel probe initialised, from its verbose log, or null. ffmpeg logs the
 * Vulkan device it picked as `Device 0 selected: llvmpipe (LLVM 15.0.6, 256 bits) (software) (0x0)`
 * (the type is `integrated`, `discrete`, `virtual`, `software` or `unknown`).
 */
export function softwareDevice(stderr: string): string | null {
  return /Device \d+ selected: (.*) \(software\) \(0x[0-9a-f]+\)/.exec(stderr)?.[1] ?? null;
}

/** A row of `-encoders`: the name and the type letter (`V`ideo, `A`udio, `S`ubtitle). */
export interface EncoderRow {
  name: string;
  type: string;
}

export interface HardwareProbeOptions {
  /** Default {@link HW_PROBE_TIMEOUT_MS}. */
  timeoutMs?: number;
  /** Default {@link HW_PROBE_CONCURRENCY}. */
  concurrency?: number;
  /** The probes' environment; default `process.env`. */
  env?: NodeJS.ProcessEnv;
  /** Aborted: the probes running are stopped (the agent is stopping). */
  signal?: AbortSignal;
}

export interface DroppedCapability {
  kind: 'encoder' | 'hwaccel';
  name: string;
  /** Why it does not work here: the probe's last stderr line, a timeout, or the device it depends on. */
  reason: string;
}

export interface HardwareProbeResult {
  /** The compiled-in encoders minus the hardware ones that do not work here, in listing order. */
  encoders: string[];
  /** The hwaccels that initialise here, in listing order. */
  hwaccels: string[];
  /** The hardware encoders kept (the rest of `encoders` is software). */
  hardwareEncoders: string[];
  dropped: DroppedCapability[];
  /** Wall time of the probing. */
  ms: number;
}

type Outcome = { ok: true } | { ok: false; reason: string };

/**
 * Probe every hardware encoder and hwaccel the transcoder lists; keep the ones that work. Never
 * rejects: a probe that cannot run, fails or times out drops only its own capability.
 */
export async function probeHardware(
  transcoderPath: string,
  listed: { encoders: readonly EncoderRow[]; hwaccels: readonly string[] },
  options: HardwareProbeOptions = {},
): Promise<HardwareProbeResult> {
  const started = performance.now();
  const timeoutMs = options.timeoutMs ?? HW_PROBE_TIMEOUT_MS;
  const limit = limiter(Math.max(1, options.concurrency ?? HW_PROBE_CONCURRENCY));
  const probe = (args: string[], check?: (stderr: string) => string | null) =>
    limit(() =>
      options.signal?.aborted
        ? Promise.resolve<Outcome>({ ok: false, reason: 'the probe was stopped' })
        : runProbe(transcoderPath, args, timeoutMs, options.env, check, options.signal),
    );

  // The encoders that depend on a device are tried only once it initialised.
  const devices = new Map<string, Promise<Outcome>>();
  for (const type of listed.hwaccels) {
    if (devices.has(type)) continue;
    devices.set(
      type,
      absent(HWACCEL_PRESENCE[type]).then((missing) =>
        missing !== null
          ? { ok: false, reason: missing }
          : probe(hwaccelProbeArgs(type), (stderr) => {
              const software = softwareDevice(stderr);
              return software === null ? null : `only a software device: ${software}`;
            }),
      ),
    );
  }
  const encoders = listed.encoders.map(async ({ name, type }): Promise<[string, Outcome | null]> => {
    // Only video encoders: aac_mf, say, is a MediaFoundation encoder, but one in software.
    const family = type === 'V' ? hardwareFamily(name) : null;
    if (!family) return [name, null];
    const device = family.device === undefined ? undefined : devices.get(family.device);
    if (device && !(await device).ok) {
      return [name, { ok: false, reason: `its device (hwaccel ${family.device}) does not initialise` }];
    }
    const missing = await absent(family.present);
    if (missing !== null) return [name, { ok: false, reason: missing }];
    return [name, await probe(encoderProbeArgs(name, family))];
  });

  const dropped: DroppedCapability[] = [];
  const hwaccels: string[] = [];
  for (const [name, outcome] of await Promise.all(
    [...devices].map(async ([n, p]) => [n, await p] as const),
  )) {
    if (outcome.ok) hwaccels.push(name);
    else dropped.push({ kind: 'hwaccel', name, reason: outcome.reason });
  }
  const kept: string[] = [];
  const hardwareEncoders: string[] = [];
  for (const [name, outcome] of await Promise.all(encoders)) {
    if (outcome === null) kept.push(name);
    else if (outcome.ok) {
      kept.push(name);
      hardwareEncoders.push(name);
    } else dropped.push({ kind: 'encoder', name, reason: outcome.reason });
  }
  return { encoders: kept, hwaccels, hardwareEncoders, dropped, ms: Math.round(performance.now() - started) };
}

/**
 * Run one probe. Its process group is killed when it outlasts `timeoutMs`; if the process still has
 * not gone {@link EXIT_WAIT_MS} after the kill, the probe is given up on without it.
 */
async function runProbe(
  file: string,
  args: string[],
  timeoutMs: number,
  env: NodeJS.ProcessEnv | undefined,
  check?: (stderr: string) => string | null,
  stop?: AbortSignal,
): Promise<Outcome> {
  const abort = new AbortController();
  const onStop = () => abort.abort();
  stop?.addEventListener('abort', onStop, { once: true });
  let timer: NodeJS.Timeout | undefined;
  const gaveUp = new Promise<'gave-up'>((resolve) => {
    timer = setTimeout(() => {
      abort.abort();
      timer = setTimeout(() => resolve('gave-up'), KILL_GRACE_MS + EXIT_WAIT_MS);
    }, timeoutMs);
  });
  try {
    const result = await Promise.race([
      runProcess({ file, args, signal: abort.signal, graceMs: KILL_GRACE_MS, ...(env ? { env } : {}) }),
      gaveUp,
    ]);
    if (result === 'gave-up' || result.canceled)
      return { ok: false, reason: `no answer within ${timeoutMs} ms` };
    if (!result.ok) return { ok: false, reason: failure(result) };
    const rejected = check?.(result.stderrTail) ?? null;
    return rejected === null ? { ok: true } : { ok: false, reason: rejected };
  } catch (err) {
    // runProcess does not reject; this keeps "never throws" true whatever it may do one day.
    return { ok: false, reason: err instanceof Error ? err.message : String(err) };
  } finally {
    clearTimeout(timer);
    stop?.removeEventListener('abort', onStop);
  }
}

function failure(result: RunProcessResult): string {
  if (result.error) return result.error;
  if (result.signal) return `killed by ${result.signal}`;
  const last = result.stderrTail.trim().split('\n').at(-1)?.trim() ?? '';
  return `exit code ${result.code}${last ? `: ${last}` : ''}`;
}

/** Run at most `n` of the given functions at once, in the order they were handed in. */
function limiter(n: number): <T>(fn: () => Promise<T>) => Promise<T> {
  let active = 0;
  const queue: (() => void)[] = [];
  const next = () => {
    if (active >= n) return;
    const start = queue.shift();
    if (start) {
      active++;
      start();
    }
  };
  return (fn) =>
    new Promise((resolve, reject) => {
      queue.push(() => {
        fn()
          .then(resolve, reject)
          .finally(() => {
            active--;
            next();
          });
      });
      next();
    });
}
