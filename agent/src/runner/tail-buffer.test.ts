import { describe, expect, it } from 'vitest';
import { TailBuffer } from './tail-buffer.ts';

describe('TailBuffer', () => {
  it('keeps the last bytes across chunks', () => {
    const tail = new TailBuffer(5);
    for (const chunk of ['abc', 'defg', 'h']) tail.push(Buffer.from(chunk));
    expect(tail.toString()).toBe('defgh');
  });

  it('keeps everything below the limit and nothing with a zero limit', () => {
    const tail = new TailBuffer(100);
    tail.push(Buffer.from('short'));
    expect(tail.toString()).toBe('short');
    const none = new TailBuffer(0);
    none.push(Buffer.from('x'));
    expect(none.toString()).toBe('');
  });
});
