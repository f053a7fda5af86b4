import dns from 'node:dns';

/**
 * A host name that does not resolve, with the resolver's timing under the test's control: while it is
 * installed, `dns.lookup` of `host` (as net, http and undici call it at connect time) fails as
 * getaddrinfo fails for such a name (`getaddrinfo ENOTFOUND <host>`, errno -3008) after `delayMs`, at
 * most `parallel` at a time and the rest queued, as libuv runs getaddrinfo on its 4 threads. Every
 * other name is looked up for real.
 *
 * Why not the real resolver: on these machines a lookup of a missing name usually fails in ~12 ms, but
 * one in dozens waits 5 s for the nameserver's retransmit, so a test timing attempts against it fails at
 * random.
 */
export interface FailingResolver {
  /** Lookups of `host` so far (each one the resolver was asked for). */
  calls(): number;
  restore(): void;
}

export function installFailingResolver(
  host: string,
  opts: { delayMs?: number; parallel?: number } = {},
): FailingResolver {
  const delayMs = opts.delayMs ?? 100;
  const parallel = opts.parallel ?? 4;
  const real = dns.lookup;
  let calls = 0;
  let running = 0;
  const queue: Array<() => void> = [];
  const next = (): void => {
    while (running < parallel && queue.length) {
      running++;
      const answer = queue.shift()!;
      setTimeout(() => {
        running--;
        answer();
        next();
      }, delayMs);
    }
  };
  dns.lookup = ((name: string, ...rest: unknown[]) => {
    if (name !== host) return (real as (...a: unknown[]) => void)(name, ...rest);
    calls++;
    const callback = rest[rest.length - 1] as (err: NodeJS.ErrnoException) => void;
    queue.push(() =>
      callback(
        Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), {
          errno: -3008,
          code: 'ENOTFOUND',
          syscall: 'getaddrinfo',
          hostname: host,
        }),
      ),
    );
    next();
  }) as unknown as typeof dns.lookup;
  return {
    calls: () => calls,
    restore: () => {
      dns.lookup = real;
    },
  };
}
