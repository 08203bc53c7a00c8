/**
 * Scheduling shared by the workers that deliver to systems outside casebook — the report exporter
 * and the subscription notifier (docs/architecture.md "Report export", "Subscriptions"): a sleep
 * that a wake or a stop ends early, and exponential backoff with full jitter.
 */

/**
 * Sleeps `ms` milliseconds, or less: until `signal` aborts, or until `wake` (given the function
 * that ends the sleep, returning the function that unregisters it) calls it.
 */
export const sleep = (ms: number, signal: AbortSignal, wake?: (resolve: () => void) => () => void) =>
  new Promise<void>((resolve) => {
    let unwake = () => {};
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      unwake();
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
    if (wake) unwake = wake(done);
  });

/**
 * Ceiling of the delay before attempt `failed + 1` after `failed` failures: base · 2^(failed-1),
 * capped at `maxMs` (milliseconds).
 */
export const backoff = (failed: number, baseMs: number, maxMs: number): number =>
  Math.min(maxMs, baseMs * 2 ** Math.max(0, Math.min(failed - 1, 30)));

/**
 * The delay before the next attempt, ms: full jitter — uniform in [0, {@link backoff}) — so
 * deliveries failing together do not retry together; at least 10 ms.
 */
export const jitteredBackoff = (
  failed: number,
  baseMs: number,
  maxMs: number,
  random: () => number,
): number => Math.max(10, Math.floor(random() * backoff(failed, baseMs, maxMs)));
