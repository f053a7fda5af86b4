/** Keeps the last `limit` bytes written to it (a process's output tail for error messages). */
export class TailBuffer {
  private chunks: Buffer[] = [];
  private size = 0;

  constructor(private readonly limit: number) {}

  /** Append bytes, dropping the oldest beyond the limit. */
  push(chunk: Buffer): void {
    if (this.limit <= 0) return;
    this.chunks.push(chunk);
    this.size += chunk.length;
    while (this.size - (this.chunks[0]?.length ?? 0) >= this.limit) {
      this.size -= this.chunks.shift()?.length ?? 0;
    }
  }

  /** The tail as UTF-8 text (a character cut at the start shows as U+FFFD). */
  toString(): string {
    const all = Buffer.concat(this.chunks, this.size);
    return all.subarray(Math.max(0, all.length - this.limit)).toString('utf8');
  }
}
