import { randomUUID } from 'node:crypto';
import type { Task } from '../schemas/task.ts';
import { computeDateValues } from './date-values.ts';

/** What {@link createWildcardContext} needs: the task and the facts of the agent running it. */
export interface WildcardContextOptions {
  /** The task being run; its `metadata`, `source` and `uuid` feed wildcards. */
  task: Pick<Task, 'uuid' | 'source' | 'metadata'>;
  /** Absolute path of the transcoder the agent resolved (`${TRANSCODER}`, `${FFMPEG}`). */
  transcoderPath: string;
  /** The single instant every date, time and timestamp wildcard of this run comes from. */
  now: Date;
  /** Sub-millisecond part of `now` in nanoseconds (0..999999) for the µs/ns timestamps; default 0. */
  subMillisecondNanos?: number;
  /** Operating system name in Go's GOOS form (FFmate's), e.g. `linux`, `windows` (`${OS_NAME}`; osName()). */
  os: string;
  /** CPU architecture in Go's GOARCH form (FFmate's), e.g. `amd64`, `arm64` (`${OS_ARCH}`; archName()). */
  arch: string;
  /** `${UUID}` of this run; generated (v4) when omitted. Pass the previous value to keep it. */
  uuid?: string;
}

/**
 * Everything fixed for one run of a task. Built once per run so that `${UUID}` and every date/time
 * value are identical in every field of that run; rebuild it with the same `now`, `uuid` and
 * `subMillisecondNanos` when the task's metadata changes (sidecar re-import).
 */
export interface WildcardContext {
  /** The run's instant. */
  readonly now: Date;
  /** Sub-millisecond part of the instant used for the µs/ns timestamps. */
  readonly subMillisecondNanos: number;
  /** The run's `${UUID}`. */
  readonly uuid: string;
  /** Values of the wildcards that do not depend on the input, output or sidecar path. */
  readonly values: Readonly<Record<string, string>>;
  /** The task metadata `${METADATA_…}` walks. */
  readonly metadata: unknown;
}

/** Build the {@link WildcardContext} of one run. Pure except for generating `uuid` when omitted. */
export function createWildcardContext(options: WildcardContextOptions): WildcardContext {
  const uuid = options.uuid ?? randomUUID();
  const subMillisecondNanos = options.subMillisecondNanos ?? 0;
  const values: Record<string, string> = {
    ...computeDateValues(options.now, subMillisecondNanos),
    SOURCE: options.task.source,
    TRANSCODER: options.transcoderPath,
    FFMPEG: options.transcoderPath,
    UUID: uuid,
    TASK_UUID: options.task.uuid,
    OS_NAME: options.os,
    OS_ARCH: options.arch,
  };
  return {
    now: new Date(options.now.getTime()),
    subMillisecondNanos,
    uuid,
    values: Object.freeze(values),
    metadata: options.task.metadata,
  };
}
