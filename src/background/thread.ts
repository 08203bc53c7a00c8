/**
 * The background thread of a process on PostgreSQL (docs/architecture.md "Background thread"): the
 * sealer of the tamper-evident log, the follower of the deferred projections (the AuditEvent
 * view) and the keeper of planner statistics run in a worker thread with their own small pool on the same schema, so that reading the
 * log, canonicalising, hashing and indexing every event costs the serving thread nothing (together
 * 5–15 % of its work under a load of audited reads, docs/performance.md "Background thread"). A thread that ends
 * unexpectedly is started again after a second.
 */
import { once } from 'node:events';
import { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import type { Position } from '../eventstore/port.js';

/** What the worker gets: where to connect (its own pool on the same schema), what to run, how to log. */
export interface BackgroundWorkerData {
  readonly connectionString: string;
  readonly searchPath?: string;
  readonly logLevel: string;
  /** Run the sealer (elected among the cluster's processes). */
  readonly seal: boolean;
  /** Follow the log for the deferred projections. */
  readonly followDeferred: boolean;
  /** Keep the planner statistics of the schema's tables (src/db/statistics.ts). */
  readonly keepStatistics: boolean;
}

/** A message of the worker to the serving thread. */
export type BackgroundMessage =
  | { readonly active: boolean }
  | { readonly stopped: true }
  | { readonly deferred: { readonly name: string; readonly position: Position } };

/** What serving needs of a background sealer, in this thread or in its own. */
export interface BackgroundSealer {
  /** Whether it is the active sealer of the cluster (false for a standby). */
  readonly active: boolean;
  /** Stops it and waits for the pass under way. */
  stop(): Promise<void>;
}

const RESTART_MS = 1000;
const STOP_TIMEOUT_MS = 10_000;

// The worker runs the TypeScript source as this process does: tsx's hooks are registered per
// thread, so the worker registers them before importing its entry (resolved here, not from the cwd).
const WORKER_URL = new URL(
  `./worker${import.meta.url.slice(import.meta.url.lastIndexOf('.'))}`,
  import.meta.url,
);
const BOOT = import.meta.url.endsWith('.ts')
  ? `import(${JSON.stringify(import.meta.resolve('tsx/esm/api'))}).then(({ register }) => { register(); return import(${JSON.stringify(WORKER_URL.href)}); })`
  : `import(${JSON.stringify(WORKER_URL.href)})`;

export class BackgroundThread implements BackgroundSealer {
  private worker: Worker | undefined;
  private activeNow = false;
  private stopping = false;
  private restart: NodeJS.Timeout | undefined;

  /**
   * @param onDeferred told what a deferred projection has applied and committed, up to where.
   */
  constructor(
    private readonly data: BackgroundWorkerData,
    private readonly logger: Logger,
    private readonly onDeferred: (name: string, position: Position) => void = () => undefined,
  ) {}

  get active(): boolean {
    return this.activeNow;
  }

  /** Starts the thread (once). */
  start(): void {
    if (this.worker || this.stopping) return;
    const worker = new Worker(BOOT, { eval: true, workerData: this.data });
    this.worker = worker;
    worker.on('message', (message: BackgroundMessage) => {
      if ('active' in message) this.activeNow = message.active;
      else if ('deferred' in message) this.onDeferred(message.deferred.name, message.deferred.position);
      // Its pool is closed: nothing left to wait for.
      else if ('stopped' in message) void worker.terminate();
    });
    worker.on('error', (error) => this.logger.error({ err: error }, 'the background thread failed'));
    worker.on('exit', (code) => {
      this.worker = undefined;
      this.activeNow = false;
      if (this.stopping) return;
      this.logger.error({ code }, 'the background thread ended; starting it again');
      this.restart = setTimeout(() => this.start(), RESTART_MS);
      this.restart.unref();
    });
  }

  /** Asks the deferred projections' follower to skip its pause: a reader waits for it. */
  hurry(): void {
    this.worker?.postMessage({ type: 'hurry' });
  }

  /** Asks the thread to stop and waits for it (terminated after 10 s). */
  async stop(): Promise<void> {
    this.stopping = true;
    clearTimeout(this.restart);
    const worker = this.worker;
    if (!worker) return;
    const exited = once(worker, 'exit');
    worker.postMessage({ type: 'stop' });
    const timer = setTimeout(() => void worker.terminate(), STOP_TIMEOUT_MS);
    await exited;
    clearTimeout(timer);
  }
}
