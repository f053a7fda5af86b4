import { defineConfig } from 'vitest/config';
import type { TestSpecification } from 'vitest/node';
import { BaseSequencer } from 'vitest/node';

/**
 * Files that take 20 s or more (most of it waiting: leases, retry delays, restarts), measured in
 * `.ci/run`. They start first, so that none of them is left running alone at the end of a run; on a
 * clean checkout vitest has no durations of its own and would start the largest files first, which
 * put the two retry-schedule files (small, 30 s each) last. The rest keep vitest's order.
 */
const LONG_FILES = [
  'test/fleet/faults.test.ts',
  'test/watch/watchfolders.test.ts',
  'test/fleet/restarts.test.ts',
  'test/cli/agent-token.test.ts',
  'test/webhooks/retry-schedule-pglite.test.ts',
  'test/webhooks/retry-schedule-postgres.test.ts',
  'test/webhooks/coalescing.test.ts',
  'test/webhooks/webhook-changes.test.ts',
  'test/fleet/all-in-one.test.ts',
  'control-plane/src/webhooks/delivery-dispatcher.test.ts',
];

class LongFilesFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const rank = (f: TestSpecification) => {
      const i = LONG_FILES.findIndex((name) => f.moduleId.endsWith(`/${name}`));
      return i === -1 ? LONG_FILES.length : i;
    };
    // Array.prototype.sort is stable: files outside the list keep the base order.
    return sorted.sort((a, b) => rank(a) - rank(b));
  }
}

export default defineConfig({
  test: {
    include: [
      'shared/src/**/*.test.ts',
      'control-plane/src/**/*.test.ts',
      'agent/src/**/*.test.ts',
      'test/**/*.test.ts',
    ],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // Workers run file after file in one process: node's start, the imports and PGlite's WebAssembly
    // compile once per worker instead of once per file (control-plane/src embedded on a 2-vCPU VM:
    // 277 → 166 s, 8.7 → 4.9 min of CPU). No test file mocks modules; the few that fake timers or set
    // an environment variable restore them.
    isolate: false,
    fileParallelism: true,
    // Most suites wait more than they compute (real processes, leases, retries): three workers keep
    // two cores busier than two did (.ci/run's embedded pass: 419 → 332 s on a 2-vCPU VM).
    maxWorkers: 3,
    sequence: { sequencer: LongFilesFirst },
  },
});
