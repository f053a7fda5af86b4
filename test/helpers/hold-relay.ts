/**
 * A TCP relay in front of a broker that holds traffic on demand, to stop time between "the control
 * plane answered" and "the agent heard it": what the broker sends (from the next time a client sends
 * given bytes, `holdAfterNext`, or from now, `holdDown`) until `release()`, and what the clients send
 * (`holdUp`) until `releaseUp()`. Held bytes go out in one write per connection.
 */
import { type TcpRelay, tcpRelay } from './tcp-relay.ts';

export type HoldRelay = TcpRelay & {
  /** Hold from the next time a client sends `bytes`; resolves when it did (the hold has started). */
  holdAfterNext(bytes: string): Promise<void>;
  /** Hold what the broker sends from now on. */
  holdDown(): void;
  /** Deliver what was held from the broker (in one write per client) and stop holding. */
  release(): void;
  /** Hold what the clients send to the broker from now on (their heartbeats, reports, claims). */
  holdUp(): void;
  /** Deliver what the clients sent meanwhile and stop holding it. */
  releaseUp(): void;
};

export async function holdRelay(brokerUrl: string): Promise<HoldRelay> {
  const { hostname, port } = new URL(brokerUrl);
  const releases: Array<() => void> = [];
  const releasesUp: Array<() => void> = [];
  let holding = false;
  let holdingUp = false;
  let armed: { bytes: string; onHeld: () => void } | null = null;

  const relay = await tcpRelay({ host: hostname, port: Number(port) }, (client, upstream) => {
    const queue: Buffer[] = [];
    const queueUp: Buffer[] = [];
    releases.push(() => {
      if (queue.length) client.write(Buffer.concat(queue.splice(0)));
    });
    releasesUp.push(() => {
      if (queueUp.length) upstream.write(Buffer.concat(queueUp.splice(0)));
    });
    client.on('data', (chunk: Buffer) => {
      if (armed && chunk.includes(armed.bytes)) {
        holding = true;
        armed.onHeld();
        armed = null;
      }
      if (holdingUp) queueUp.push(chunk);
      else upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (holding) queue.push(chunk);
      else client.write(chunk);
    });
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  return {
    ...relay,
    drop() {
      // Whatever was held is lost with the connections, as on a broken network.
      holding = false;
      holdingUp = false;
      armed = null;
      releases.length = 0;
      releasesUp.length = 0;
      relay.drop();
    },
    holdAfterNext(bytes) {
      return new Promise<void>((onHeld) => {
        armed = { bytes, onHeld };
      });
    },
    holdDown() {
      holding = true;
    },
    release() {
      holding = false;
      for (const flush of releases) flush();
    },
    holdUp() {
      holdingUp = true;
    },
    releaseUp() {
      holdingUp = false;
      for (const flush of releasesUp) flush();
    },
  };
}
