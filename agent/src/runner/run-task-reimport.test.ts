// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${NAME} wildcards are literal text here, not template placeholders.
import { existsSync, writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RunFixture } from './fixtures/run-fixture.ts';
import { makeStep } from './fixtures/sample-task.ts';

let fx: RunFixture;
beforeAll(() => {
  fx = new RunFixture();
});
afterAll(() => {
  fx.remove();
});

/** A pre-processing script that rewrites its sidecar: node runs `edit` on the parsed JSON `j`. */
function editingScript(name: string, edit: string): string {
  const js = fx.file(`${name}.cjs`);
  writeFileSync(
    js,
    `const fs = require('fs');\nconst f = process.env.SIDECAR_FILE;\nconst j = JSON.parse(fs.readFileSync(f, 'utf8'));\n${edit};\nfs.writeFileSync(f, JSON.stringify(j));\n`,
  );
  return fx.script(`${name}.sh`, `exec '${process.execPath}' '${js}'`);
}

function preStep(script: string, sidecar = `${fx.dir}/sidecars/\${TASK_UUID}-\${UUID}.json`) {
  return makeStep(script, sidecar, true);
}

describe('runTask: sidecar re-import', () => {
  it('applies the changes a script makes to name, priority, metadata, webhooks and the raw fields', async () => {
    const script = editingScript(
      'edit-ok',
      [
        `j.name='renamed'`,
        'j.priority=7',
        `j.metadata.analysis={loudness:-23,title:'From script'}`,
        `j.webhooks=[{event:'task.updated',url:'http://127.0.0.1:9/x'}]`,
        `j.command.raw='-i \${INPUT_FILE} -c:v mpeg4 -metadata title=\${METADATA_analysis.title} -y \${OUTPUT_FILE}'`,
        `j.outputFile.raw=j.outputFile.raw.replace('first','second')`,
      ].join(';'),
    );
    const { result, reporter } = await fx.run({
      outputFile: { raw: `${fx.dir}/reimport/first/\${INPUT_FILE_BASENAME}.mp4`, resolved: '' },
      preProcessing: preStep(script),
    });
    expect(result).toEqual({ status: 'DONE_SUCCESSFUL', error: '' });
    expect(existsSync(fx.file('reimport', 'second', 'in.mp4'))).toBe(true);
    expect(existsSync(fx.file('reimport', 'first'))).toBe(false);

    const applied = reporter.first('name');
    expect(applied).toMatchObject({
      name: 'renamed',
      priority: 7,
      metadata: { show: { title: 'Pilot' }, analysis: { loudness: -23, title: 'From script' } },
      webhooks: [{ event: 'task.updated', url: 'http://127.0.0.1:9/x' }],
      command: {
        raw: '-i ${INPUT_FILE} -c:v mpeg4 -metadata title=${METADATA_analysis.title} -y ${OUTPUT_FILE}',
        resolved: '',
      },
      outputFile: { raw: `${fx.dir}/reimport/second/\${INPUT_FILE_BASENAME}.mp4`, resolved: '' },
    });
    expect(applied?.preProcessing?.finishedAt).toBeGreaterThan(0);
    const running = reporter.first('command', (p) => p.status === 'RUNNING');
    // The rewritten command is resolved with the re-imported metadata.
    expect(running?.command?.resolved).toContain("-metadata 'title=From script'");
    expect(running?.outputFile?.resolved).toBe(fx.file('reimport', 'second', 'in.mp4'));
  });

  it('accepts an untouched sidecar and changes nothing', async () => {
    const script = fx.script('noop.sh', 'exit 0');
    const { result, reporter } = await fx.run({
      outputFile: { raw: `${fx.dir}/reimport-noop/out.mp4`, resolved: '' },
      preProcessing: preStep(script),
    });
    expect(result.status).toBe('DONE_SUCCESSFUL');
    expect(reporter.first('name')).toBeUndefined();
  });

  it.each([
    ['an added key', 'j.extra=true', 'sidecar re-import failed at "extra": key was added'],
    ['a removed key', 'delete j.priority', 'sidecar re-import failed at "priority": key was removed'],
    [
      'a changed type',
      `j.priority='high'`,
      'sidecar re-import failed at "priority": changed type: expected number, found string',
    ],
    [
      'a changed read-only value',
      `j.status='DONE_SUCCESSFUL'`,
      'sidecar re-import failed at "status": read-only value was changed',
    ],
    [
      'a changed nested read-only value',
      `j.inputFile.resolved='/etc/passwd'`,
      'sidecar re-import failed at "inputFile.resolved": read-only value was changed',
    ],
    [
      'metadata replaced by a list',
      'j.metadata=[]',
      'sidecar re-import failed at "metadata": must be a JSON object',
    ],
    [
      'metadata grown past 1 MiB',
      `j.metadata.frames='x'.repeat(2*1024*1024)`,
      'sidecar re-import failed at "metadata": is 2097190 bytes as JSON; a script may make it at most 1048576 bytes',
    ],
  ])('fails the task on %s without running the transcoder', async (label, edit, message) => {
    const script = editingScript(`edit-${label.replaceAll(' ', '-')}`, edit);
    const post = fx.script('post-never.sh', `touch ${fx.dir}/post-ran`);
    const { result, reporter } = await fx.run({
      outputFile: { raw: `${fx.dir}/reimport-fail/out.mp4`, resolved: '' },
      preProcessing: preStep(script),
      postProcessing: makeStep(post, ''),
    });
    expect(result).toEqual({ status: 'DONE_ERROR', error: `pre-processing: ${message}` });
    expect(reporter.statuses()).toEqual(['PRE_PROCESSING', 'DONE_ERROR']);
    expect(reporter.text('transcoder')).toBe('');
    expect(existsSync(fx.file('reimport-fail'))).toBe(false);
    expect(existsSync(fx.file('post-ran'))).toBe(false);
  });

  it('fails the task when the script leaves invalid JSON or deletes the sidecar', async () => {
    const garbage = fx.script('garbage.sh', 'printf "{not json" > "$SIDECAR_FILE"');
    const broken = await fx.run({ preProcessing: preStep(garbage) });
    expect(broken.result.status).toBe('DONE_ERROR');
    expect(broken.result.error).toMatch(/^pre-processing: sidecar is not valid JSON: /);

    const remover = fx.script('remover.sh', 'rm "$SIDECAR_FILE"');
    const removed = await fx.run({ preProcessing: preStep(remover) });
    expect(removed.result.status).toBe('DONE_ERROR');
    expect(removed.result.error).toMatch(/^pre-processing: cannot read sidecar .*ENOENT/);
  });

  it('fails the task on a sidecar larger than any report could carry, without reading it whole', async () => {
    const huge = fx.script('huge.sh', 'head -c 17000000 /dev/zero | tr "\\0" " " >> "$SIDECAR_FILE"');
    const { result, reporter } = await fx.run({ preProcessing: preStep(huge) });
    expect(result.status).toBe('DONE_ERROR');
    expect(result.error).toMatch(
      /^pre-processing: sidecar re-import failed: .*\.json is 170\d{5} bytes; a re-imported sidecar may have at most 16777216$/,
    );
    expect(reporter.statuses()).toEqual(['PRE_PROCESSING', 'DONE_ERROR']);
  });

  it.each([
    ['a link to /dev/zero (size 0, endless)', 'ln -s /dev/zero "$SIDECAR_FILE"'],
    ['a FIFO (no writer ever comes)', 'mkfifo "$SIDECAR_FILE"'],
  ])('fails the task on a sidecar replaced by %s, without reading it', async (label, make) => {
    const script = fx.script(`special-${label.split(' ')[2]}.sh`, `rm -f "$SIDECAR_FILE" && ${make}`);
    const { result } = await fx.run({ preProcessing: preStep(script) });
    expect(result.status).toBe('DONE_ERROR');
    expect(result.error).toMatch(
      /^pre-processing: sidecar re-import failed: .*\.json is not a regular file$/,
    );
  });

  it('fails a step that asks for a re-import without a sidecar path', async () => {
    const script = fx.script('no-sidecar.sh', 'exit 0');
    const { result } = await fx.run({ preProcessing: makeStep(script, '', true) });
    expect(result).toEqual({
      status: 'DONE_ERROR',
      error: 'pre-processing: importSidecar needs a sidecarPath',
    });
  });
});
