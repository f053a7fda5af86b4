import { once } from 'node:events';
import { describe, expect, it } from 'vitest';
import { inProcessPipe } from './in-process-pipe.ts';

describe('inProcessPipe', () => {
  it('carries bytes both ways, in order, with backpressure', async () => {
    const [a, b] = inProcessPipe();
    const chunks = Array.from({ length: 200 }, (_, i) => Buffer.alloc(1024, i % 256));
    const received: Buffer[] = [];
    // Nothing reads yet: the writer must be held back instead of buffering without bound.
    let refused = 0;
    for (const c of chunks) if (!a.write(c)) refused++;
    expect(refused).toBeGreaterThan(0);
    b.on('data', (d: Buffer) => received.push(d));
    a.end();
    await once(b, 'end');
    expect(Buffer.concat(received).equals(Buffer.concat(chunks))).toBe(true);

    const back: Buffer[] = [];
    a.on('data', (d: Buffer) => back.push(d));
    b.end('pong');
    await once(a, 'end');
    expect(Buffer.concat(back).toString()).toBe('pong');
  });

  it('closes the other side when one side is destroyed, like a reset socket', async () => {
    const [a, b] = inProcessPipe();
    const closed = once(b, 'close');
    a.destroy();
    await closed;
    expect(b.destroyed).toBe(true);
    // Writing into a closed pipe fails instead of vanishing.
    const err = await new Promise<Error | null | undefined>((r) => {
      const [e, f] = inProcessPipe();
      f.destroy();
      setImmediate(() => e.write('x', (error) => r(error)));
      e.on('error', () => {});
    });
    expect(err).toBeInstanceOf(Error);
  });
});
