import { appendFileSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { assignmentFor, sleep, UNIT_MS, useWatchFolder, waitFor } from './test-harness.ts';

const watchHandles = (): number => process.getActiveResourcesInfo().filter((r) => r === 'FSEventWrap').length;

const dirs = useWatchFolder({ sub: 'watch' });
const { harness } = dirs;

describe.each(['native', 'chokidar'] as const)('WatchScanner with the %s watcher', (watcher) => {
  it('sees a new file at once and submits it one interval after its last write', async () => {
    // interval 10 × 100 ms = 1 s. Scans alone would first see the file at the next scan and submit it
    // one scan later (1–2 s after the write); the event starts the clock at the write.
    mkdirSync(join(dirs.root, 'sub'));
    const h = harness(assignmentFor(dirs.root, { interval: 10 }), { watcher }).start();
    await h.scans(1);
    await sleep(400); // chokidar ready, and well away from the next scan
    writeFileSync(join(dirs.root, 'sub', 'a.mov'), 'x');
    const writtenAt = performance.now();
    await waitFor(() => h.submits.length === 1, 'the submit');
    const latency = h.submits[0]!.at - writtenAt;
    expect(latency).toBeGreaterThanOrEqual(10 * UNIT_MS - 50);
    expect(latency).toBeLessThan(10 * UNIT_MS + 500);
  });

  it('never shortens the stability window: growthChecks intervals after the last write', async () => {
    const h = harness(assignmentFor(dirs.root, { interval: 3, growthChecks: 2 }), { watcher }).start();
    await h.scans(1);
    await sleep(200);
    let lastWriteAt = 0;
    for (let i = 0; i < 12; i++) {
      appendFileSync(join(dirs.root, 'grow.mov'), 'chunk');
      lastWriteAt = performance.now();
      await sleep(50);
    }
    await waitFor(() => h.submits.length === 1, 'the submit');
    // each check ≥ interval − tolerance (30 ms) after the previous observation
    expect(h.submits[0]!.at - lastWriteAt).toBeGreaterThanOrEqual(2 * (3 * UNIT_MS - 30));
    expect(h.submits[0]!.size).toBe(12 * 'chunk'.length);
  });

  it('does not submit symlinks, hidden files or locked files that appear while watching', async () => {
    const outside = join(dirs.tmp, 'outside');
    mkdirSync(outside);
    writeFileSync(join(outside, 'real.mov'), 'x');
    const h = harness(assignmentFor(dirs.root, { interval: 2 }), { watcher }).start();
    await h.scans(1);
    await sleep(300);
    symlinkSync(join(outside, 'real.mov'), join(dirs.root, 'link.mov'));
    writeFileSync(join(dirs.root, '.hidden.mov'), 'x');
    writeFileSync(join(dirs.root, 'done.mov.lock'), '');
    writeFileSync(join(dirs.root, 'done.mov'), 'x');
    writeFileSync(join(dirs.root, 'marker.mov'), 'x');
    await waitFor(() => h.submits.length === 1, 'the marker');
    await h.scans(3);
    expect(h.submitted()).toEqual(['marker.mov']);
  });

  it('closes its watches on stop, on suspend, and while the path is missing', async () => {
    // Closed handles are released a moment after close(); start from none.
    await waitFor(() => watchHandles() === 0, 'earlier watches to be released');
    const h = harness(assignmentFor(dirs.root), { watcher }).start();
    await waitFor(() => watchHandles() > 0, 'the watcher');
    h.scanner.update(assignmentFor(dirs.root, { suspended: true }));
    await waitFor(() => watchHandles() === 0, 'the watcher to close on suspend');
    h.scanner.update(assignmentFor(dirs.root));
    await waitFor(() => watchHandles() > 0, 'the watcher again');
    h.scanner.update(assignmentFor(join(dirs.root, 'missing')));
    await waitFor(() => watchHandles() === 0, 'the watcher to close for a missing path');
    h.scanner.update(assignmentFor(dirs.root));
    await waitFor(() => watchHandles() > 0, 'the watcher again');
    await h.scanner.stop();
    await waitFor(() => watchHandles() === 0, 'every watch to be released after stop');
  });
});
