// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${NAME} wildcards are literal text here, not template placeholders.
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, extname } from 'node:path';
import { archName, osName, type Task, tokenize } from '@ffleet/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FFMPEG, RunFixture } from './fixtures/run-fixture.ts';
import { makeStep } from './fixtures/sample-task.ts';
import { LOG_OMITTED_TAIL_BYTES, LOG_STEP_BUDGET_BYTES } from './log-batcher.ts';
import { nativeSpawnCount, nativeSpawnStatus } from './native-spawn.ts';
import { protectedDirs } from './protected-paths.ts';

let fx: RunFixture;
beforeAll(() => {
  fx = new RunFixture();
});
afterAll(() => {
  fx.remove();
});

/** A script that records its arguments, environment and sidecar into files next to it. */
function recordingScript(name: string): string {
  return fx.script(
    `${name}.sh`,
    [
      `out="${fx.dir}/${name}"`,
      'mkdir -p "$out"',
      'for a in "$@"; do printf "%s\\n" "$a"; done > "$out/args"',
      'printf "%s\\n" "$SIDECAR_FILE" "$TASK_UUID" "$SOURCE" "$INPUT_FILE" "$OUTPUT_FILE" "$TRANSCODER" "$ATTEMPT" > "$out/env"',
      'cp "$SIDECAR_FILE" "$out/sidecar.json"',
      `if [ -e "$OUTPUT_FILE" ]; then echo yes > "$out/output-existed"; fi`,
      `echo "${name} says hello"`,
      `echo "${name} warns" >&2`,
    ].join('\n'),
  );
}

describe('runTask: success', () => {
  it("takes a watchfolder task's input path literally, wildcard-like text and spaces included", async () => {
    const dropped = fx.file('drop', ' clip ${DATE_YEAR} $(id).mp4');
    mkdirSync(fx.file('drop'), { recursive: true });
    copyFileSync(fx.clip, dropped);
    const { result, reporter } = await fx.run({
      source: 'watchfolder',
      inputFile: { raw: dropped, resolved: '' },
      command: { raw: '-i ${INPUT_FILE} -c:v mpeg4 -y ${OUTPUT_FILE}', resolved: '' },
      outputFile: { raw: '${INPUT_FILE_DIR}/out/${INPUT_FILE_BASENAME}.mp4', resolved: '' },
    });
    expect(result).toEqual({ status: 'DONE_SUCCESSFUL', error: '' });
    const output = fx.file('drop', 'out', ' clip ${DATE_YEAR} $(id).mp4');
    expect(existsSync(output)).toBe(true);
    expect(reporter.first('status', (p) => p.status === 'RUNNING')).toMatchObject({
      inputFile: { resolved: dropped },
      outputFile: { resolved: output },
    });
  });

  it('transcodes with every wildcard resolved and ends DONE_SUCCESSFUL at 100 %', async () => {
    const { result, reporter } = await fx.run({
      command: {
        raw: '-i ${INPUT_FILE} -c:v mpeg4 -metadata "title=${METADATA_show.title}" -metadata "comment=${OS_NAME}/${OS_ARCH}" -y ${OUTPUT_FILE}',
        resolved: '',
      },
      outputFile: {
        raw: '${INPUT_FILE_DIR}/plain/${INPUT_FILE_BASENAME}-${DATE_YEAR}${INPUT_FILE_EXTENSION}',
        resolved: '',
      },
    });
    expect(result).toEqual({ status: 'DONE_SUCCESSFUL', error: '' });
    expect(reporter.statuses()).toEqual(['RUNNING', 'DONE_SUCCESSFUL']);

    const year = new Date().getFullYear();
    const output = fx.file('plain', `in-${year}.mp4`);
    expect(existsSync(output)).toBe(true);

    const running = reporter.first('status', (p) => p.status === 'RUNNING');
    expect(running).toMatchObject({
      inputFile: { raw: fx.clip, resolved: fx.clip },
      outputFile: { resolved: output },
      // ${OS_NAME} / ${OS_ARCH} as FFmate (Go) names them: linux/amd64 on an x64 Linux box.
      command: {
        resolved: `-i ${fx.clip} -c:v mpeg4 -metadata title=Pilot -metadata comment=${osName()}/${archName()} -y ${output}`,
      },
      progress: 0,
      remaining: -1,
    });
    expect(running?.startedAt).toBeGreaterThan(0);
    expect(reporter.last()).toMatchObject({
      status: 'DONE_SUCCESSFUL',
      progress: 100,
      remaining: 0,
      error: '',
    });
    expect(reporter.last()?.finishedAt).toBeGreaterThanOrEqual(running?.startedAt ?? 0);
    expect(reporter.text('transcoder')).toContain('Duration: 00:00:01.00');
    expect(reporter.text('agent')).toContain(`transcoder: $ ${FFMPEG} -nostdin -progress pipe:1 -nostats -i`);
    if (process.platform === 'linux' && process.arch === 'x64')
      expect(running?.command?.resolved).toContain('comment=linux/amd64');
  });

  it('measures progress against the input also when the command hides its Duration line (-loglevel error)', async () => {
    const clip = fx.makeClip('quiet-in.mp4', 3);
    const { result, reporter } = await fx.run({
      inputFile: { raw: clip, resolved: '' },
      command: { raw: '-loglevel error -re -i ${INPUT_FILE} -c:v mpeg4 -y ${OUTPUT_FILE}', resolved: '' },
      outputFile: { raw: '${INPUT_FILE_DIR}/quiet/${INPUT_FILE_BASENAME}.mp4', resolved: '' },
    });
    expect(result).toEqual({ status: 'DONE_SUCCESSFUL', error: '' });
    // Nothing on stderr to read a duration from: the input was read once more for it.
    expect(reporter.text('transcoder')).not.toContain('Duration:');
    expect(reporter.text('agent')).toContain(`transcoder: printed no input duration; read it from ${clip}`);
    const midway = reporter.updates
      .map((u) => u.patch)
      .filter((p) => p.progress !== undefined && p.progress > 0 && p.progress < 100);
    expect(midway.length).toBeGreaterThan(0);
    expect(midway.every((p) => p.remaining !== undefined && p.remaining >= 0 && p.remaining <= 3)).toBe(true);
  });

  it.runIf(nativeSpawnStatus().available)(
    'starts no duration probe for a command that prints its Duration line, also with reads during the run',
    async () => {
      const clip = fx.makeClip('loud-in.mp4', 2);
      const before = nativeSpawnCount();
      const { result, reporter } = await fx.run({
        inputFile: { raw: clip, resolved: '' },
        command: { raw: '-re -i ${INPUT_FILE} -c:v mpeg4 -y ${OUTPUT_FILE}', resolved: '' },
        outputFile: { raw: '${INPUT_FILE_DIR}/loud/${INPUT_FILE_BASENAME}.mp4', resolved: '' },
      });
      expect(result).toEqual({ status: 'DONE_SUCCESSFUL', error: '' });
      expect(reporter.text('transcoder')).toContain('Duration: 00:00:02.00');
      // The transcoder only: progress read in the middle of the run did not start a probe.
      expect(nativeSpawnCount() - before).toBe(1);
    },
  );

  it('reads the duration of each segment of a chain that hides it, for that segment', async () => {
    const clip = fx.makeClip('quiet-chain.mp4', 2);
    const { result, reporter } = await fx.run({
      inputFile: { raw: clip, resolved: '' },
      command: {
        raw: '-loglevel error -re -i ${INPUT_FILE} -c:v mpeg4 -y ${INPUT_FILE_DIR}/first.mp4 && ${TRANSCODER} -loglevel error -re -i ${INPUT_FILE_DIR}/first.mp4 -t 1.5 -c:v mpeg4 -y ${OUTPUT_FILE}',
        resolved: '',
      },
      outputFile: { raw: '${INPUT_FILE_DIR}/quiet-chain/out.mp4', resolved: '' },
    });
    expect(result).toEqual({ status: 'DONE_SUCCESSFUL', error: '' });
    const reads = reporter.text('agent').match(/transcoder: printed no input duration; read it from \S+/g);
    expect(reads).toEqual([
      `transcoder: printed no input duration; read it from ${clip}`,
      `transcoder: printed no input duration; read it from ${fx.file('first.mp4')}`,
    ]);
    // Progress never went back.
    const progress = reporter.updates.map((u) => u.patch.progress).filter((p) => p !== undefined);
    expect(progress).toEqual([...progress].sort((a, b) => a - b));
  });

  it('runs pre-processing, the transcoder and post-processing with sidecars, arguments and environment', async () => {
    const pre = recordingScript('pre');
    const post = recordingScript('post');
    const { result, reporter, task } = await fx.run({
      metadata: { show: { title: `It's "a" test; $(touch ${fx.dir}/pwned) \`id\` && x` } },
      source: 'watchfolder',
      command: {
        raw: '-i ${INPUT_FILE} -c:v mpeg4 -metadata title=${METADATA_show.title} -y ${OUTPUT_FILE}',
        resolved: '',
      },
      outputFile: { raw: `${fx.dir}/full/\${UUID}.mp4`, resolved: '' },
      preProcessing: makeStep(
        `${pre} \${SIDECAR_FILE} \${METADATA_show.title} '\${UUID}'`,
        `${fx.dir}/side/pre-\${UUID}.json`,
      ),
      postProcessing: makeStep(`${post} \${OUTPUT_FILE_BASE}`, `${fx.dir}/side/post-\${TASK_UUID}.json`),
    });
    expect(result).toEqual({ status: 'DONE_SUCCESSFUL', error: '' });
    expect(reporter.statuses()).toEqual(['PRE_PROCESSING', 'RUNNING', 'DONE_SUCCESSFUL']);
    expect(existsSync(fx.file('pwned'))).toBe(false);

    const final = reporter.first('outputFile', (p) => p.status === 'RUNNING');
    const output = final?.outputFile?.resolved ?? '';
    const uuid = /full\/(.+)\.mp4$/.exec(output)?.[1] ?? '';
    expect(uuid).toMatch(/^[0-9a-f-]{36}$/);
    expect(existsSync(output)).toBe(true);

    // Pre-processing: one argument per word even with quotes, `;`, `$(…)` and backticks in metadata.
    const preSidecarPath = `${fx.dir}/side/pre-${uuid}.json`;
    const title = task.metadata.show as { title: string };
    expect(readFileSync(fx.file('pre', 'args'), 'utf8').split('\n').slice(0, -1)).toEqual([
      preSidecarPath,
      title.title,
      uuid,
    ]);
    expect(readFileSync(fx.file('pre', 'env'), 'utf8').split('\n').slice(0, -1)).toEqual([
      preSidecarPath,
      task.uuid,
      'watchfolder',
      fx.clip,
      output,
      FFMPEG,
      '2',
    ]);
    const preSidecar = JSON.parse(readFileSync(fx.file('pre', 'sidecar.json'), 'utf8'));
    expect(preSidecar).toMatchObject({
      uuid: task.uuid,
      status: 'PRE_PROCESSING',
      command: { raw: task.command.raw, resolved: '' },
      inputFile: { raw: fx.clip, resolved: '' },
      outputFile: { raw: task.outputFile.raw, resolved: '' },
      postProcessing: null,
      preProcessing: { sidecarPath: { resolved: preSidecarPath } },
    });
    expect(preSidecar.preProcessing.startedAt).toBeGreaterThan(0);
    // The snapshot is the task as it is now, its updatedAt too (not the claim's).
    expect(preSidecar.updatedAt).toBeGreaterThanOrEqual(preSidecar.preProcessing.startedAt);
    expect(existsSync(fx.file('pre', 'output-existed'))).toBe(false);

    // Post-processing: every path resolved, status RUNNING, the output already written.
    const postSidecarPath = `${fx.dir}/side/post-${task.uuid}.json`;
    expect(readFileSync(fx.file('post', 'args'), 'utf8')).toBe(`${uuid}.mp4\n`);
    expect(readFileSync(fx.file('post', 'env'), 'utf8').split('\n')[0]).toBe(postSidecarPath);
    const postSidecar = JSON.parse(readFileSync(fx.file('post', 'sidecar.json'), 'utf8'));
    expect(postSidecar).toMatchObject({
      status: 'RUNNING',
      progress: 100,
      inputFile: { resolved: fx.clip },
      outputFile: { resolved: output },
      postProcessing: {
        sidecarPath: { raw: task.postProcessing?.sidecarPath.raw, resolved: postSidecarPath },
      },
      preProcessing: { error: '' },
    });
    expect(postSidecar.command.resolved).toContain('-metadata');
    expect(postSidecar.preProcessing.finishedAt).toBeGreaterThan(0);
    expect(postSidecar.postProcessing.startedAt).toBeGreaterThan(0);
    expect(postSidecar.updatedAt).toBeGreaterThanOrEqual(postSidecar.postProcessing.startedAt);
    expect(postSidecar.remaining).toBe(0);
    expect(readFileSync(fx.file('post', 'output-existed'), 'utf8')).toBe('yes\n');

    // The resolved command is a faithful, re-tokenizable picture of what ran.
    const tokens = tokenize(postSidecar.command.resolved);
    expect(tokens.ok && tokens.tokens.map((t) => t.value)).toEqual([
      '-i',
      fx.clip,
      '-c:v',
      'mpeg4',
      '-metadata',
      `title=${title.title}`,
      '-y',
      output,
    ]);

    // Captured output of each step reaches the log.
    expect(reporter.text('pre')).toContain('pre says hello\n');
    expect(reporter.text('pre')).toContain('pre warns\n');
    expect(reporter.text('post')).toContain('post says hello\n');
    // …in the order it was printed: each script's output between the agent's lines around it.
    const at = (step: string, text: string) =>
      reporter.logs.findIndex((l) => l.step === step && l.text.includes(text));
    expect(at('agent', 'pre-processing: $')).toBeLessThan(at('pre', 'pre says hello'));
    expect(at('pre', 'pre says hello')).toBeLessThan(at('agent', 'transcoder: $'));
    expect(at('agent', 'transcoder: $')).toBeLessThan(at('transcoder', 'Duration:'));
    expect(at('agent', 'post-processing: $')).toBeLessThan(at('post', 'post says hello'));
    const lastPost = reporter.updates.map((u) => u.patch).findLast((p) => p.postProcessing);
    expect(lastPost?.postProcessing).toMatchObject({
      error: '',
      scriptPath: { resolved: `${post} ${uuid}.mp4` },
    });
    expect(lastPost?.postProcessing?.finishedAt).toBeGreaterThan(0);
  });

  it("passes the agent's environment to scripts without ffleet's credentials", async () => {
    const script = fx.script('env.sh', `env > "${fx.dir}/env-seen"`);
    const { result } = await fx.run(
      {
        command: { raw: '-i ${INPUT_FILE} -c:v mpeg4 -y ${OUTPUT_FILE}', resolved: '' },
        outputFile: { raw: `${fx.dir}/env/out.mp4`, resolved: '' },
        preProcessing: makeStep(script, `${fx.dir}/side/env-\${UUID}.json`),
      },
      {
        env: {
          PATH: process.env.PATH,
          STUDIO_UPLOAD_SECRET: 'kept-for-the-script',
          FFLEET_AGENT_NAME: 'box-1',
          FFLEET_AGENT_TOKEN: 'agent-token-not-for-scripts',
          FFLEET_API_TOKENS: 'api-token-not-for-scripts',
          DATABASE_URL: 'postgres://ffleet:db-password@db/ffleet',
          MQTT_URL: 'mqtt://ffleet:broker-password@broker:1883',
        },
      },
    );
    expect(result).toEqual({ status: 'DONE_SUCCESSFUL', error: '' });
    const seen = readFileSync(fx.file('env-seen'), 'utf8');
    expect(seen).toContain('STUDIO_UPLOAD_SECRET=kept-for-the-script\n');
    expect(seen).toContain('FFLEET_AGENT_NAME=box-1\n');
    expect(seen).toContain('SIDECAR_FILE=');
    for (const secret of ['agent-token', 'api-token', 'db-password', 'broker-password'])
      expect(seen).not.toContain(secret);
  });

  it('uses one instant and one ${UUID} for every field of the run', async () => {
    const instant = new Date(2021, 0, 3, 12, 0, 0, 123);
    const script = fx.script('instant.sh', `printf "%s\\n" "$@" > ${fx.dir}/instant-args`);
    const { result, reporter } = await fx.run(
      {
        outputFile: {
          raw: `${fx.dir}/instant/\${DATE_YEAR}-\${DATE_WEEK}-\${TIMESTAMP_SECONDS}-\${UUID}.mp4`,
          resolved: '',
        },
        command: {
          raw: '-i ${INPUT_FILE} -c:v mpeg4 -metadata comment=${UUID} -y ${OUTPUT_FILE}',
          resolved: '',
        },
        postProcessing: makeStep(
          `${script} \${UUID} \${TIMESTAMP_MILLISECONDS} \${TIMESTAMP_NANOSECONDS} \${TIME_HOUR}\${TIME_MINUTE}`,
          `${fx.dir}/instant/\${UUID}.json`,
        ),
      },
      { now: () => instant },
    );
    expect(result.status).toBe('DONE_SUCCESSFUL');
    const output = reporter.first('outputFile', (p) => p.status === 'RUNNING')?.outputFile?.resolved ?? '';
    const match = /instant\/2021-53-(\d+)-([0-9a-f-]{36})\.mp4$/.exec(output);
    expect(match?.[1]).toBe(String(Math.floor(instant.getTime() / 1000)));
    const uuid = match?.[2] ?? '';
    const [argUuid, ms, ns, hhmm] = readFileSync(fx.file('instant-args'), 'utf8').split('\n');
    expect(argUuid).toBe(uuid);
    expect(ms).toBe(String(instant.getTime()));
    expect(ns?.startsWith(String(instant.getTime()))).toBe(true);
    expect(ns).toHaveLength(String(instant.getTime()).length + 6);
    expect(hhmm).toBe('1200');
    expect(existsSync(fx.file('instant', `${uuid}.json`))).toBe(true);
    expect(reporter.first('command', (p) => p.status === 'RUNNING')?.command?.resolved).toContain(
      `comment=${uuid}`,
    );
    expect(reporter.first('status', (p) => p.status === 'RUNNING')?.startedAt).toBe(instant.getTime());
  });

  it('runs every && segment, the later ones through ${TRANSCODER} and ${FFMPEG}', async () => {
    const { result, reporter } = await fx.run({
      command: {
        raw: '-i ${INPUT_FILE} -c:v mpeg4 -y ${OUTPUT_FILE_DIR}/a.mp4 && ${TRANSCODER} -i ${OUTPUT_FILE_DIR}/a.mp4 -y ${OUTPUT_FILE_DIR}/b.mp4 && ${FFMPEG} -i ${OUTPUT_FILE_DIR}/b.mp4 -metadata "title=&&" -y ${OUTPUT_FILE}',
        resolved: '',
      },
      outputFile: { raw: `${fx.dir}/chain/c.mp4`, resolved: '' },
    });
    expect(result.status).toBe('DONE_SUCCESSFUL');
    for (const name of ['a', 'b', 'c']) expect(existsSync(fx.file('chain', `${name}.mp4`))).toBe(true);
    const running = reporter.first('command', (p) => p.status === 'RUNNING');
    expect(running?.command?.resolved).toBe(
      `-i ${fx.clip} -c:v mpeg4 -y ${fx.dir}/chain/a.mp4 && ${FFMPEG} -i ${fx.dir}/chain/a.mp4 -y ${fx.dir}/chain/b.mp4 && ${FFMPEG} -i ${fx.dir}/chain/b.mp4 -metadata 'title=&&' -y ${fx.dir}/chain/c.mp4`,
    );
    expect(reporter.text('agent').match(/transcoder: \$/g)).toHaveLength(3);
  });

  it("logs what the transcoder prints to stdout besides its progress (-version, a muxer writing to '-')", async () => {
    const { result, reporter } = await fx.run({
      command: {
        raw: '-hide_banner -version && ${TRANSCODER} -i ${INPUT_FILE} -frames:v 2 -f framemd5 - && ${TRANSCODER} -f lavfi -i sine=duration=0.2 -f ffmetadata -metadata title=hello -',
        resolved: '',
      },
      outputFile: { raw: '', resolved: '' },
    });
    expect(result.status).toBe('DONE_SUCCESSFUL');
    const out = reporter.text('transcoder');
    expect(out).toMatch(/^ffmpeg version /m);
    expect(out).toContain('#format: frame checksums');
    // A muxer's own key=value lines are output, not progress.
    expect(out).toMatch(/^;FFMETADATA1$/m);
    expect(out).toMatch(/^title=hello$/m);
    expect(out.match(/^0, +[01], +[01], +1, +\d+, [0-9a-f]{32}$/gm)).toHaveLength(2);
    // The progress blocks stay out of the log.
    expect(out).not.toMatch(/^progress=/m);
  });
});

describe('runTask: failures', () => {
  it('fails in pre-processing without ever running the transcoder', async () => {
    const pre = fx.script('pre-fail.sh', 'echo "checking"\necho "input rejected: too short" >&2\nexit 3');
    const post = fx.script('post-marker.sh', `touch ${fx.dir}/post-ran-1`);
    const { result, reporter } = await fx.run({
      outputFile: { raw: `${fx.dir}/prefail/out.mp4`, resolved: '' },
      preProcessing: makeStep(pre, ''),
      postProcessing: makeStep(post, ''),
    });
    expect(result).toEqual({
      status: 'DONE_ERROR',
      error: 'pre-processing script exited with code 3: input rejected: too short',
    });
    expect(reporter.statuses()).toEqual(['PRE_PROCESSING', 'DONE_ERROR']);
    expect(reporter.text('transcoder')).toBe('');
    expect(reporter.text('agent')).not.toContain('transcoder: $');
    expect(existsSync(fx.file('prefail'))).toBe(false);
    expect(existsSync(fx.file('post-ran-1'))).toBe(false);
    const step = reporter.updates.map((u) => u.patch).findLast((p) => p.preProcessing)?.preProcessing;
    expect(step?.error).toBe(result.error);
    expect(step?.finishedAt).toBeGreaterThan(0);
    expect(reporter.last()).toMatchObject({ status: 'DONE_ERROR', error: result.error });
    expect(reporter.text('pre')).toBe('checking\ninput rejected: too short\n');
    // The failure is in the agent's log once.
    expect(reporter.text('agent').split(result.error)).toHaveLength(2);
  });

  it("sends the first MiB of a chatty script's output and its last lines, saying what it left out", async () => {
    // ~2.9 MB of output, then a failure: the agent sends ~1 MiB and the end, not all of it.
    const pre = fx.script('pre-chatty.sh', 'seq 1 400000\necho "the real problem" >&2\nexit 4');
    const { result, reporter } = await fx.run({
      outputFile: { raw: `${fx.dir}/chatty/out.mp4`, resolved: '' },
      preProcessing: makeStep(pre, ''),
    });
    expect(result).toMatchObject({ status: 'DONE_ERROR' });
    expect(result.error).toMatch(/^pre-processing script exited with code 4: .*the real problem$/s);
    const text = reporter.text('pre');
    expect(text.startsWith('1\n2\n3\n')).toBe(true);
    expect(text.endsWith('399999\n400000\nthe real problem\n')).toBe(true);
    expect(text).toMatch(/\n\[ffleet: \d+ lines \([\d.]+ MiB\) of output left out\]\n/);
    expect(Buffer.byteLength(text)).toBeGreaterThan(LOG_STEP_BUDGET_BYTES);
    expect(Buffer.byteLength(text)).toBeLessThan(LOG_STEP_BUDGET_BYTES + LOG_OMITTED_TAIL_BYTES + 200);
  });

  it('fails when the pre-processing script cannot be started', async () => {
    const { result } = await fx.run({ preProcessing: makeStep(`${fx.dir}/missing.sh`, '') });
    expect(result.status).toBe('DONE_ERROR');
    expect(result.error).toMatch(/^pre-processing script could not be started: .*ENOENT/);
  });

  it('tells the caller when the transcoder cannot be started because its binary is gone, not when a task cannot start it', async () => {
    const lost: string[] = [];
    const gone = await fx.run(
      { command: { raw: '-i ${INPUT_FILE} -c:v mpeg4 -y ${OUTPUT_FILE}', resolved: '' } },
      { transcoderPath: `${fx.dir}/unmounted/ffmpeg`, onTranscoderLost: (e) => lost.push(e) },
    );
    expect(gone.result.status).toBe('DONE_ERROR');
    expect(lost).toEqual([gone.result.error]);
    expect(lost[0]).toMatch(/^transcoder could not be started: .*ENOENT/);
    expect(gone.reporter.text('agent')).toContain(`${fx.dir}/unmounted/ffmpeg no longer answers -version`);

    // A wrapper that is still there while the ffmpeg it runs is gone: the shell's 127.
    const wrapper = fx.script('wrapper-ffmpeg.sh', `exec ${fx.dir}/unmounted/ffmpeg "$@"`);
    const orphaned = await fx.run(
      { command: { raw: '-i ${INPUT_FILE} -c:v mpeg4 -y ${OUTPUT_FILE}', resolved: '' } },
      { transcoderPath: wrapper, onTranscoderLost: (e) => lost.push(e) },
    );
    expect(orphaned.result.error).toMatch(/^transcoder exited with code 127/);
    expect(lost).toEqual([gone.result.error, orphaned.result.error]);

    // The binary is there but this task's command cannot be started (a NUL byte in an argument): the
    // task's own failure.
    const own = await fx.run(
      {
        command: { raw: '-i ${INPUT_FILE} -metadata title=${METADATA_t} -y ${OUTPUT_FILE}', resolved: '' },
        metadata: { t: 'a\u0000b' },
      },
      { onTranscoderLost: (e) => lost.push(e) },
    );
    expect(own.result.status).toBe('DONE_ERROR');
    expect(own.result.error).toMatch(/^transcoder could not be started/);
    expect(lost).toHaveLength(2);
  });

  it('fails when the transcoder fails, and post-processing never runs', async () => {
    const post = fx.script('post-marker-2.sh', `touch ${fx.dir}/post-ran-2`);
    const { result, reporter } = await fx.run({
      inputFile: { raw: `${fx.dir}/does-not-exist.mp4`, resolved: '' },
      outputFile: { raw: `${fx.dir}/tfail/out.mp4`, resolved: '' },
      postProcessing: makeStep(post, ''),
    });
    expect(result.status).toBe('DONE_ERROR');
    expect(result.error).toMatch(
      /^transcoder exited with code 1: .*does-not-exist\.mp4: No such file or directory/s,
    );
    expect(reporter.statuses()).toEqual(['RUNNING', 'DONE_ERROR']);
    expect(existsSync(fx.file('post-ran-2'))).toBe(false);
    expect(reporter.first('postProcessing')).toBeUndefined();
  });

  it('names the failing segment of a chain and stops there', async () => {
    const { result } = await fx.run({
      command: {
        raw: '-i ${INPUT_FILE} -c:v nope_codec -y ${OUTPUT_FILE} && ${TRANSCODER} -i ${OUTPUT_FILE} -y ${OUTPUT_FILE_DIR}/second.mp4',
        resolved: '',
      },
      outputFile: { raw: `${fx.dir}/segfail/out.mp4`, resolved: '' },
    });
    expect(result.error).toMatch(/^transcoder \(segment 1 of 2\) exited with code \d+: .*nope_codec/s);
    expect(existsSync(fx.file('segfail', 'second.mp4'))).toBe(false);
  });

  it('fails in post-processing with the transcoded output kept', async () => {
    const post = fx.script('post-fail.sh', 'echo "upload refused" >&2\nexit 2');
    const { result, reporter } = await fx.run({
      outputFile: { raw: `${fx.dir}/postfail/out.mp4`, resolved: '' },
      postProcessing: makeStep(post, ''),
    });
    expect(result).toEqual({
      status: 'DONE_ERROR',
      error: 'post-processing script exited with code 2: upload refused',
    });
    expect(reporter.statuses()).toEqual(['RUNNING', 'DONE_ERROR']);
    expect(existsSync(fx.file('postfail', 'out.mp4'))).toBe(true);
    expect(reporter.first('postProcessing')).toMatchObject({ status: 'RUNNING', progress: 100 });
  });

  it('fails a post-processing script killed by a signal', async () => {
    const post = fx.script('post-crash.sh', 'kill -KILL $$');
    const { result } = await fx.run({
      outputFile: { raw: `${fx.dir}/postcrash/out.mp4`, resolved: '' },
      postProcessing: makeStep(post, ''),
    });
    expect(result).toEqual({ status: 'DONE_ERROR', error: 'post-processing script was killed by SIGKILL' });
  });

  it.each([
    ['an unterminated quote', `-i '\${INPUT_FILE}`, 'command: unterminated single quote at position 3'],
    ['an empty command', '  ', 'command: command is empty'],
    [
      'a later segment that is not the transcoder',
      '-i a b && rm -rf /',
      'command: command segment 2 must start with',
    ],
  ])('fails on %s without running anything', async (_label, raw, message) => {
    const { result, reporter } = await fx.run({ command: { raw, resolved: '' } });
    expect(result.status).toBe('DONE_ERROR');
    expect(result.error).toContain(message);
    expect(reporter.statuses()).toEqual(['DONE_ERROR']);
  });

  it("refuses an output or sidecar path inside the agent's data directory, writing nothing there", async () => {
    // An API client must not overwrite ffleet's own state (security QA: a sidecar replaced the agent token).
    const data = fx.file('agent-data');
    mkdirSync(data, { recursive: true });
    writeFileSync(`${data}/agent-token`, 'secret-token');
    const guarded = { protectedDirs: protectedDirs([data]) };
    const pre = recordingScript('guarded-pre');
    const cases: Array<[Partial<Task>, RegExp]> = [
      [
        { outputFile: { raw: `${data}/agent-token`, resolved: '' } },
        /^output file .*agent-data\/agent-token is inside the agent's data directory .*\(FFLEET_DATA_DIR\)/,
      ],
      [{ outputFile: { raw: `${data}/x/../pglite/out.mp4`, resolved: '' } }, /^output file /],
      [
        { preProcessing: makeStep(pre, `${fx.dir}/../${fx.dir.split('/').pop()}/agent-data/agent-token`) },
        /^pre-processing: sidecar /,
      ],
      [
        { postProcessing: makeStep('', `${data}/journal.log`) },
        /^post-processing: sidecar .*journal\.log is inside/,
      ],
    ];
    for (const [overrides, error] of cases) {
      const { result } = await fx.run(
        { outputFile: { raw: fx.file('guarded/out.mp4'), resolved: '' }, ...overrides },
        guarded,
      );
      expect(result.status).toBe('DONE_ERROR');
      expect(result.error).toMatch(error);
    }
    expect(readFileSync(`${data}/agent-token`, 'utf8')).toBe('secret-token');
    expect(readdirSync(data)).toEqual(['agent-token']);
    expect(existsSync(fx.file('guarded-pre'))).toBe(false);
    // Next to it is fine.
    const ok = await fx.run(
      { outputFile: { raw: fx.file('agent-data-sibling/out.mp4'), resolved: '' } },
      guarded,
    );
    expect(ok.result.status).toBe('DONE_SUCCESSFUL');
  });

  it("fails an input or output path that starts with '-' instead of passing the transcoder an option", async () => {
    for (const [overrides, error] of [
      [{ outputFile: { raw: '-version', resolved: '' } }, /^output file "-version" starts with '-'/],
      [
        { metadata: { o: '-f' }, outputFile: { raw: '${METADATA_o}', resolved: '' } },
        /^output file "-f" starts/,
      ],
      [{ inputFile: { raw: '-i', resolved: '' } }, /^input file "-i" starts with '-'.*\.\/-i/],
    ] as const) {
      const { result, reporter } = await fx.run(overrides);
      expect(result.status).toBe('DONE_ERROR');
      expect(result.error).toMatch(error);
      expect(reporter.text('agent')).not.toContain('transcoder: $');
    }
  });

  it('fails when the output directory cannot be created, showing what the command and paths resolved to', async () => {
    const { result, reporter } = await fx.run({
      command: { raw: '-i ${INPUT_FILE} -c:v mpeg4 -y ${OUTPUT_FILE}', resolved: '' },
      outputFile: { raw: `${fx.clip}/sub/\${INPUT_FILE_BASENAME}.mp4`, resolved: '' },
    });
    expect(result.status).toBe('DONE_ERROR');
    expect(result.error).toContain(`failed to create output directory ${fx.clip}/sub`);
    // The error is about these values: they are on the failed task, not left empty.
    const output = `${fx.clip}/sub/${basename(fx.clip, extname(fx.clip))}.mp4`;
    expect(Object.assign({}, ...reporter.updates.map((u) => u.patch))).toMatchObject({
      status: 'DONE_ERROR',
      outputFile: { resolved: output },
      inputFile: { resolved: fx.clip },
      command: { resolved: `-i ${fx.clip} -c:v mpeg4 -y ${output}` },
    });
  });

  it.skipIf(process.platform !== 'linux')(
    "fails at once for an output under /proc, where Node's recursive mkdir would spin forever",
    async () => {
      const started = Date.now();
      const { result } = await fx.run({ outputFile: { raw: '/proc/ffleet-no-such/out.mp4', resolved: '' } });
      expect(result.status).toBe('DONE_ERROR');
      expect(result.error).toContain('failed to create output directory /proc/ffleet-no-such: ENOENT');
      expect(Date.now() - started).toBeLessThan(5_000);
    },
    10_000,
  );
});
