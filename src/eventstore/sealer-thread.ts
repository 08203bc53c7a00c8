/**
 * The background sealer of a process on PostgreSQL, in a worker thread (docs/architecture.md
 * "Tamper-evident log"): the same {@link Sealer}, elected the same way, but its reads of the log,
 * RFC 8785 canonicalisation and hashing run beside the serving thread instead of on it (3–10 % of
 * the serving thread's work under a load of audited reads, bench/README.md). A thread
 * that ends unexpectedly is started again after a second.
 */
import { once } from 'node:events';
import { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';

/** What the worker gets: where to connect (its own pool on the same schema) and how to log. */
export interface SealerWorkerData {
  readonly connectionString: string;
  readonly searchPath?: string;
  readonly logLevel: string;
}

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
  `./sealer-worker${import.meta.url.slice(import.meta.url.lastIndexOf('.'))}`,
  import.meta.url,
);
const BOOT = import.meta.url.endsWith('.ts')
  ? `import(${JSON.stringify(import.meta.resolve('tsx/esm/api'))}).then(({ register }) => { register(); return import(${JSON.stringify(WORKER_URL.href)}); })`
  : `import(${JSON.stringify(WORKER_URL.href)})`;

export class SealerThread implements BackgroundSealer {
  private worker: Worker | undefined;
  private activeNow = false;
  private stopping = false;
  private restart: NodeJS.Timeout | undefined;

  constructor(
    private readonly data: SealerWorkerData,
    private readonly logger: Logger,
  ) {}

  get active(): boolean {
    return this.activeNow;
  }

  /** Starts the thread (once). */
  start(): void {
    if (this.worker || this.stopping) return;
    const worker = new Worker(BOOT, { eval: true, workerData: this.data });
    this.worker = worker;
    worker.on('message', (message: { active?: boolean; stopped?: boolean }) => {
      if (typeof message?.active === 'boolean') this.activeNow = message.active;
      // Its pool is closed: nothing left to wait for.
      if (message?.stopped) void worker.terminate();
    });
    worker.on('error', (error) => this.logger.error({ err: error }, 'the sealer thread failed'));
    worker.on('exit', (code) => {
      this.worker = undefined;
      this.activeNow = false;
      if (this.stopping) return;
      this.logger.error({ code }, 'the sealer thread ended; starting it again');
      this.restart = setTimeout(() => this.start(), RESTART_MS);
      this.restart.unref();
    });
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
