/**
 * Load generation for `npm run bench:http`: autocannon as a library, one request shape at a time,
 * with the server's CPU time read from /proc around the measured run.
 */
import autocannon from 'autocannon';
import { cpuMs, machineCpuMs, waitIdle } from './process.js';

/** One request shape: a fixed request, or one rebuilt before every send (unique bodies, random ids). */
export interface Shape {
  readonly method: 'GET' | 'POST';
  /** Builds the path and body of the next request. */
  readonly next: () => { path: string; body?: string };
  readonly headers: Record<string, string>;
}

/** What one measured run gives. */
export interface Measured {
  readonly rps: number;
  readonly p50: number;
  readonly p99: number;
  /** Responses that were not 2xx, plus connection errors and timeouts. */
  readonly failures: number;
  readonly requests: number;
  /** The server's CPU time (user + system) per answered request, ms. */
  readonly cpuPerRequest: number;
  /**
   * The whole machine's busy CPU time per answered request, ms: the server, its database, the load
   * generator, anything else running. Two cores allow at most 2,000 / this many requests a second.
   */
  readonly machinePerRequest: number;
  /** The fraction of the machine's CPU time left idle during the run (0–1). */
  readonly idle: number;
}

const run = (url: string, shape: Shape, connections: number, seconds: number) =>
  autocannon({
    url,
    connections,
    duration: seconds,
    requests: [
      {
        method: shape.method,
        headers: shape.headers,
        setupRequest: (request) => {
          const { path, body } = shape.next();
          return { ...request, path, ...(body === undefined ? {} : { body }) };
        },
      },
    ],
  });

/**
 * Waits until the server is idle (work an earlier run left behind is not charged to this one),
 * warms it up with `warmupSeconds` of the same load, then measures `seconds` of it.
 * RPS is answered requests over the measured duration; latencies are autocannon's (ms).
 */
export const measure = async (
  url: string,
  shape: Shape,
  options: { connections: number; seconds: number; warmupSeconds: number; pid: number },
): Promise<Measured> => {
  await waitIdle(options.pid);
  if (options.warmupSeconds > 0) await run(url, shape, options.connections, options.warmupSeconds);
  const cpuBefore = cpuMs(options.pid);
  const machineBefore = machineCpuMs();
  const result = await run(url, shape, options.connections, options.seconds);
  const cpu = cpuMs(options.pid) - cpuBefore;
  const machineAfter = machineCpuMs();
  const busy = machineAfter.busyMs - machineBefore.busyMs;
  const idle = machineAfter.idleMs - machineBefore.idleMs;
  const answered = result['2xx'] + result.non2xx;
  return {
    rps: result['2xx'] / result.duration,
    p50: result.latency.p50,
    p99: result.latency.p99,
    failures: result.non2xx + result.errors + result.timeouts,
    requests: answered,
    cpuPerRequest: answered > 0 ? cpu / answered : Number.NaN,
    machinePerRequest: answered > 0 ? busy / answered : Number.NaN,
    idle: busy + idle > 0 ? idle / (busy + idle) : Number.NaN,
  };
};
