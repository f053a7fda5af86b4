#!/bin/sh
# A stand-in for ffmpeg, for bench:fleet (b) as BENCH_TRANSCODER: it answers the agent's probes
# (-version, -encoders, -hwaccels) through the real ffmpeg (BENCH_FFMPEG, default Debian's) and
# otherwise transcodes nothing: it writes as much to stderr as Debian's ffmpeg does for a clip (4.6 kB,
# which becomes the task's log row), waits BENCH_STAND_IN_SLEEP seconds (default 0) and ends with a
# progress block. With 0 the tasks run back to back; with 0.05 they take what a clip takes. Either way
# the CPU rows of (b) show ffleet's own cost per task without ffmpeg beside it (the ratio means nothing).
for a in "$@"; do
  case "$a" in -version | -encoders | -hwaccels) exec "${BENCH_FFMPEG:-/usr/bin/ffmpeg}" "$@" ;; esac
done
i=0
while [ $i -lt 46 ]; do
  printf '%s\n' "  stand-in transcoder: a line of about a hundred characters, as in ffmpeg's banner and stream list" >&2
  i=$((i + 1))
done
[ "${BENCH_STAND_IN_SLEEP:-0}" = 0 ] || sleep "$BENCH_STAND_IN_SLEEP"
printf 'frame=12\nout_time_us=480000\nspeed=70x\nprogress=end\n'
