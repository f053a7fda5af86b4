import { appendFileSync, mkdirSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { WatchfolderFilter } from '@ffleet/shared';
import { describe, expect, it } from 'vitest';
import { assignmentFor, sleep, UNIT_MS, useWatchFolder, waitFor } from './test-harness.ts';

const dirs = useWatchFolder({ sub: 'watch' });
const { harness } = dirs;

const put = (rel: string, content = 'x'): void => {
  mkdirSync(join(dirs.root, rel, '..'), { recursive: true });
  writeFileSync(join(dirs.root, rel), content);
};

describe('WatchScanner growth checks', () => {
  it.each([1, 3])(
    'submits a file written in chunks exactly growthChecks=%i scans after the scan that saw its last change',
    async (growthChecks) => {
      put('clip.mov', 'chunk0');
      const h = harness(assignmentFor(dirs.root, { growthChecks }));
      // Scan 1 sees the file; after scans 1..4 another chunk is appended, so scan 5 is the first to see
      // the final size and the file is finished at scan 5 + growthChecks.
      h.afterScan = (scan) => {
        if (scan <= 4) appendFileSync(join(dirs.root, 'clip.mov'), `chunk${scan}`);
      };
      h.start();
      await waitFor(() => h.submits.length === 1, 'the submit');
      await h.scans(3);
      expect(h.submits).toHaveLength(1);
      expect(h.submits[0]).toMatchObject({
        watchfolderId: 'wf-1',
        relativePath: 'clip.mov',
        absolutePath: join(dirs.root, 'clip.mov'),
        size: 'chunk0chunk1chunk2chunk3chunk4'.length,
        scan: 5 + growthChecks,
      });
    },
  );

  it('scans at the configured interval and reports lastCheck after every scan', async () => {
    const h = harness(assignmentFor(dirs.root, { interval: 2 }), { clock: () => 1234 });
    h.start();
    await h.scans(4);
    // Reports come at the end of a scan, so single gaps jitter with scan duration; three together cannot
    // be shorter than three intervals minus one scan's duration, which on a loaded machine exceeded 50 ms
    // (544 ms measured for 600): two intervals are the bound, still above any scan at the wrong interval.
    expect(h.states[3]!.at - h.states[0]!.at).toBeGreaterThanOrEqual(2 * 2 * UNIT_MS);
    expect(h.states[0]).toEqual({
      watchfolderId: 'wf-1',
      lastCheck: 1234,
      error: '',
      unreadable: false,
      at: h.states[0]!.at,
    });
  });
});

describe('WatchScanner file selection', () => {
  const cases: [string, WatchfolderFilter, string[]][] = [
    ['include only', { extensions: { include: ['mov', 'mp4'] } }, ['a.mov', 'b.MOV', 'f.Mp4']],
    ['exclude only', { extensions: { exclude: ['txt'] } }, ['a.mov', 'b.MOV', 'c.mxf', 'f.Mp4', 'noext']],
    ['both, exclude first', { extensions: { include: ['mov', 'mxf'], exclude: ['MOV'] } }, ['c.mxf']],
    ['case-insensitive include', { extensions: { include: ['MXF'] } }, ['c.mxf']],
  ];
  it.each(cases)('applies the filter: %s', async (_name, filter, expected) => {
    for (const n of ['a.mov', 'b.MOV', 'c.mxf', 'd.txt', 'f.Mp4', 'noext']) put(n);
    const h = harness(assignmentFor(dirs.root, { filter })).start();
    await h.scans(3);
    expect(h.submitted()).toEqual(expected);
  });

  it('walks subdirectories but skips hidden entries, lock files and symlinks', async () => {
    const outside = join(dirs.tmp, 'outside');
    mkdirSync(outside);
    writeFileSync(join(outside, 'real.mov'), 'x');
    put('top.mov');
    put('show/reel 1/deep.mov');
    put('.hidden.mov');
    put('.cache/inner.mov');
    put('stray.lock', '');
    symlinkSync(join(outside, 'real.mov'), join(dirs.root, 'link.mov'));
    symlinkSync(outside, join(dirs.root, 'linkdir'));
    const h = harness(assignmentFor(dirs.root)).start();
    await h.scans(3);
    expect(h.submitted()).toEqual(['show/reel 1/deep.mov', 'top.mov']);
    expect(h.submits.find((s) => s.relativePath === 'show/reel 1/deep.mov')?.absolutePath).toBe(
      join(dirs.root, 'show/reel 1/deep.mov'),
    );
  });

  it('works for a watchfolder that itself lives below a dot-directory', async () => {
    const hiddenRoot = join(dirs.tmp, '.parent', 'watch');
    mkdirSync(hiddenRoot, { recursive: true });
    writeFileSync(join(hiddenRoot, 'a.mov'), 'x');
    const h = harness(assignmentFor(hiddenRoot)).start();
    await waitFor(() => h.submits.length === 1, 'the submit');
    expect(h.submits[0]?.relativePath).toBe('a.mov');
  });
});

describe('WatchScanner path problems', () => {
  it('reports a missing path and recovers when the directory appears', async () => {
    const later = join(dirs.tmp, 'later');
    const h = harness(assignmentFor(later)).start();
    await h.scans(1);
    expect(h.lastError()).toBe(`watchfolder path does not exist: ${later}`);
    expect(h.states.at(-1)?.unreadable).toBe(true);
    mkdirSync(later);
    writeFileSync(join(later, 'a.mov'), 'x');
    await waitFor(() => h.submits.length === 1, 'the submit after recovery');
    expect(h.lastError()).toBe('');
    expect(h.states.at(-1)?.unreadable).toBe(false);
  });

  it('reports a path that is a file, and a directory removed while watched', async () => {
    put('file.mov');
    const h = harness(assignmentFor(join(dirs.root, 'file.mov'))).start();
    await h.scans(1);
    expect(h.lastError()).toBe(`watchfolder path is not a directory: ${join(dirs.root, 'file.mov')}`);
    h.scanner.update(assignmentFor(join(dirs.root, 'sub')));
    mkdirSync(join(dirs.root, 'sub'));
    await waitFor(() => h.lastError() === '', 'a clean scan');
    rmSync(join(dirs.root, 'sub'), { recursive: true });
    await waitFor(() => h.lastError()?.includes('does not exist') === true, 'the error');
  });

  it('submits the other files and reports names that are not valid UTF-8 until they are renamed', async () => {
    const latin1 = Buffer.concat([Buffer.from(`${dirs.root}/`), Buffer.from('caf\u00e9.mov', 'latin1')]);
    writeFileSync(latin1, 'x');
    put('good.mov');
    const h = harness(assignmentFor(dirs.root)).start();
    await waitFor(() => h.submits.length === 1, 'the good file');
    expect(h.submits[0]).toMatchObject({ relativePath: 'good.mov' });
    expect(h.lastError()).toBe(
      '1 name(s) are not valid UTF-8 and cannot be processed until renamed (first: caf\uFFFD.mov)',
    );
    renameSync(latin1, join(dirs.root, 'cafe.mov'));
    await waitFor(() => h.submits.length === 2, 'the renamed file');
    expect(h.submits[1]).toMatchObject({ relativePath: 'cafe.mov' });
    expect(h.lastError()).toBe('');
  });
});

describe('WatchScanner lifecycle', () => {
  it('suspends and resumes through update()', async () => {
    put('first.mov');
    const h = harness(assignmentFor(dirs.root)).start();
    await waitFor(() => h.submits.length === 1, 'the first submit');
    h.scanner.update(assignmentFor(dirs.root, { suspended: true }));
    const reported = h.states.length;
    put('second.mov');
    await sleep(5 * UNIT_MS);
    expect(h.states.length).toBeLessThanOrEqual(reported + 1); // at most a scan already under way
    expect(h.submitted()).toEqual(['first.mov']);
    h.scanner.update(assignmentFor(dirs.root, { suspended: false }));
    await waitFor(() => h.submits.length === 2, 'the submit after resume');
    expect(h.submitted()).toEqual(['first.mov', 'second.mov']);
  });

  it('does not scan an assignment that starts suspended', async () => {
    put('a.mov');
    const h = harness(assignmentFor(dirs.root, { suspended: true })).start();
    await sleep(4 * UNIT_MS);
    expect(h.states).toHaveLength(0);
    expect(h.submits).toHaveLength(0);
  });

  it('applies a new interval at once', async () => {
    const h = harness(assignmentFor(dirs.root, { interval: 50 })).start();
    await h.scans(1);
    const changedAt = performance.now();
    h.scanner.update(assignmentFor(dirs.root, { interval: 1 }));
    await h.scans(4);
    // 4 scans at 100 ms instead of one every 5 s
    expect(performance.now() - changedAt).toBeLessThan(2000);
  });

  it('moves to a new path, forgetting the old one', async () => {
    const other = join(dirs.tmp, 'other');
    mkdirSync(other);
    writeFileSync(join(other, 'b.mov'), 'x');
    put('a.mov');
    const h = harness(assignmentFor(dirs.root, { growthChecks: 3 })).start();
    await h.scans(1);
    h.scanner.update(assignmentFor(other, { growthChecks: 3 }));
    await waitFor(() => h.submits.length === 1, 'the submit from the new path');
    await h.scans(4);
    expect(h.submits.map((s) => s.absolutePath)).toEqual([join(other, 'b.mov')]);
  });

  it('ignores an update that changes nothing', async () => {
    const h = harness(assignmentFor(dirs.root, { interval: 2 })).start();
    await h.scans(1);
    const before = h.states.length;
    for (let i = 0; i < 5; i++)
      h.scanner.update(assignmentFor(dirs.root, { interval: 2, name: `renamed ${i}` }));
    await sleep(UNIT_MS);
    // a restart would have scanned at once
    expect(h.states.length).toBe(before);
  });

  it('stops: no more scans or submits, and stop() is idempotent', async () => {
    const h = harness(assignmentFor(dirs.root)).start();
    await h.scans(1);
    await h.scanner.stop();
    await h.scanner.stop();
    const reported = h.states.length;
    put('late.mov');
    await sleep(4 * UNIT_MS);
    expect(h.states.length).toBe(reported);
    expect(h.submits).toHaveLength(0);
  });
});
