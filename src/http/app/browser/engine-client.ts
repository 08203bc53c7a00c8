/**
 * The page's side of the form engine's Web Worker (issue 32), and its watchdog: a browser cannot
 * interrupt synchronous code, so the page terminates a worker that stays on one FHIRPath
 * evaluation (or regex) past twice its budget — the server's worst case, src/sdc/run-within-budget.ts
 * — and starts a new one in which that evaluation is refused (src/sdc/run-within-budget.browser.ts),
 * then runs the last request again. A worker that does not answer a run at all within
 * {@link RUN_TIMEOUT_MS} is stopped for good: the page keeps working without live checks.
 */
import { EVALUATION_BUDGET_MS } from '../../../sdc/budget.js';
import type { EditorData } from '../editor-form.js';
import type { EngineResult, Field, FromWorker, ToWorker } from './protocol.js';

/** How long one evaluation may run before the worker is replaced, in milliseconds. */
export const WATCHDOG_MS = 2 * EVALUATION_BUDGET_MS;
/** How long a whole run may take before the engine is given up, in milliseconds. */
export const RUN_TIMEOUT_MS = 5000;

/** Runs the engine in a worker; the newest request wins (older answers are dropped). */
export class EngineClient {
  private worker: Worker | undefined;
  private readonly refused = new Set<string>();
  private seq = 0;
  private pending:
    | { seq: number; fields: readonly Field[]; resolve: (r: EngineResult | undefined) => void }
    | undefined;
  private evaluating: { label: string; since: number } | undefined;
  private runSince = 0;
  private timer: number | undefined;
  private stopped = false;

  constructor(
    private readonly url: string,
    private readonly data: EditorData,
  ) {
    this.start();
  }

  /** Runs the engine on the page's fields; undefined when a newer run replaced this one or the engine stopped. */
  run(fields: readonly Field[]): Promise<EngineResult | undefined> {
    if (this.stopped) return Promise.resolve(undefined);
    this.pending?.resolve(undefined);
    return new Promise((resolve) => {
      this.pending = { seq: ++this.seq, fields, resolve };
      this.send();
    });
  }

  private start(): void {
    const worker = new Worker(this.url);
    worker.onmessage = (event: MessageEvent<FromWorker>) => this.receive(worker, event.data);
    worker.onerror = () => this.stop();
    const init: ToWorker = { type: 'init', data: this.data, refused: [...this.refused] };
    worker.postMessage(init);
    this.worker = worker;
    this.timer ??= window.setInterval(() => this.watch(), 50);
  }

  private send(): void {
    if (!this.worker || !this.pending) return;
    this.runSince = performance.now();
    this.evaluating = undefined;
    const message: ToWorker = { type: 'run', seq: this.pending.seq, fields: this.pending.fields };
    this.worker.postMessage(message);
  }

  private receive(worker: Worker, message: FromWorker): void {
    if (worker !== this.worker) return;
    if (message.type === 'evaluating') {
      this.evaluating =
        message.label === undefined ? undefined : { label: message.label, since: performance.now() };
      return;
    }
    if (!this.pending || message.seq !== this.pending.seq) return;
    const { resolve } = this.pending;
    this.pending = undefined;
    this.evaluating = undefined;
    resolve(message.type === 'result' ? message : undefined);
  }

  private watch(): void {
    if (!this.pending || !this.worker) return;
    const now = performance.now();
    if (this.evaluating && now - this.evaluating.since > WATCHDOG_MS) {
      // One evaluation overran: a new worker refuses it, and the request runs again.
      this.refused.add(this.evaluating.label);
      this.worker.terminate();
      this.worker = undefined;
      this.start();
      this.send();
    } else if (now - this.runSince > RUN_TIMEOUT_MS) this.stop();
  }

  private stop(): void {
    this.stopped = true;
    this.worker?.terminate();
    this.worker = undefined;
    if (this.timer !== undefined) window.clearInterval(this.timer);
    this.pending?.resolve(undefined);
    this.pending = undefined;
  }
}
