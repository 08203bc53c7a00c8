/**
 * One bounded HTTP POST to a system outside casebook, shared by the export's HTTP sink and the
 * subscription notifier (docs/architecture.md "Report export", "Subscriptions"): a timeout on the
 * whole exchange, at most {@link MAX_ANSWER_BYTES} of the answer read, and no redirect followed
 * (a 3xx is a failed delivery: the receiver's address is the one configured, never one it names).
 */

/**
 * Most bytes of a receiver's answer casebook reads: the HTTP status decides, the body is read only
 * so the connection can be reused. A receiver that sends more (gigabytes, or bytes without end
 * until the timeout) is cut off there: read whole, such an answer could exhaust the memory of the
 * process.
 */
export const MAX_ANSWER_BYTES = 65_536;

/** Reads and drops at most {@link MAX_ANSWER_BYTES} of an HTTP answer's body, then cancels the rest. */
const discardBody = async (res: Response): Promise<void> => {
  const reader = res.body?.getReader();
  if (!reader) return;
  let read = 0;
  try {
    while (read <= MAX_ANSWER_BYTES) {
      const { done, value } = await reader.read();
      if (done) return;
      read += value.byteLength;
    }
    await reader.cancel();
  } catch {
    // The body failed or was cut off: the status has already been received.
  }
};

export interface BoundedPost {
  readonly headers: Record<string, string>;
  readonly body: string;
  /** Bound of the whole exchange, milliseconds. */
  readonly timeoutMs: number;
  /** Aborts the request (the worker is stopping). */
  readonly signal?: AbortSignal | undefined;
}

/**
 * POSTs `body` to `url` and returns the answer's status once at most {@link MAX_ANSWER_BYTES} of
 * its body were read. Redirects are not followed: a 3xx comes back as its status.
 * @throws {Error} when no answer came within `timeoutMs` (a `TimeoutError` DOMException), the
 *   connection failed, or `signal` aborted.
 */
export const postBounded = async (url: URL, request: BoundedPost): Promise<number> => {
  const { signal, timeoutMs } = request;
  // One controller with a plain timer: a signal from AbortSignal.any over AbortSignal.timeout
  // can be garbage-collected before it fires, and a hanging receiver then holds the delivery for ever.
  const controller = new AbortController();
  const timer = setTimeout(
    () => controller.abort(new DOMException(`no answer within ${timeoutMs} ms`, 'TimeoutError')),
    timeoutMs,
  );
  const stop = () => controller.abort(signal?.reason);
  signal?.addEventListener('abort', stop, { once: true });
  try {
    const res = await fetch(url, {
      method: 'POST',
      headers: request.headers,
      body: request.body,
      signal: controller.signal,
      redirect: 'manual',
    });
    await discardBody(res);
    return res.status;
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', stop);
  }
};
