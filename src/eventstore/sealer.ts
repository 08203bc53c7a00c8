/**
 * The sealer (docs/architecture.md "Tamper-evident log"): seals the log in batches, after the
 * appends, so appends stay parallel and pay nothing for it. Every serving process runs one; the
 * seal transaction's advisory lock and its check of the last seal make one of them win each
 * batch, so the log is sealed once, in order.
 */
import type { Logger } from 'pino';
import type { Sql } from '../db/sql.js';
import type { EventStore } from './port.js';
import { lastSeal, migrateSeals, writeSeal } from './seal.js';

/** Most events per seal. */
const BATCH = 5000;
/** Pause between passes while the log is sealed up to its head, milliseconds. */
const INTERVAL_MS = 1000;

export class Sealer {
  private abort: AbortController | undefined;
  private loop: Promise<void> | undefined;

  /**
   * @param store the log (its `readAll` only shows committed events in order: no gap is sealed
   *   over while an earlier transaction may still commit).
   * @param sql the database of the seals.
   */
  constructor(
    private readonly store: EventStore,
    private readonly sql: Sql,
    private readonly logger: Logger,
    private readonly options: { batch?: number; intervalMs?: number } = {},
  ) {}

  /** Creates the seal tables. */
  migrate(): Promise<void> {
    return migrateSeals(this.sql);
  }

  /**
   * Seals the events after the last seal, one batch.
   * @returns the number of events sealed (0: nothing new, or another sealer sealed first).
   */
  async sealOnce(): Promise<number> {
    const previous = await lastSeal(this.sql);
    const events = await this.store.readAll({
      ...(previous ? { from: previous.to } : {}),
      maxCount: this.options.batch ?? BATCH,
    });
    if (events.length === 0) return 0;
    const seal = await writeSeal(this.sql, previous, events);
    return seal ? events.length : 0;
  }

  /** Seals the whole log as it is now. @returns the number of events sealed. */
  async sealAll(): Promise<number> {
    let sealed = 0;
    for (;;) {
      const n = await this.sealOnce();
      if (n === 0) {
        // Another sealer may have won this batch: stop only when nothing is left.
        const previous = await lastSeal(this.sql);
        const rest = await this.store.readAll({ ...(previous ? { from: previous.to } : {}), maxCount: 1 });
        if (rest.length === 0) return sealed;
        continue;
      }
      sealed += n;
    }
  }

  /** Seals in the background until {@link stop}. */
  start(): void {
    if (this.loop) return;
    const abort = new AbortController();
    this.abort = abort;
    this.loop = (async () => {
      while (!abort.signal.aborted) {
        try {
          await this.sealAll();
        } catch (error) {
          if (abort.signal.aborted) return;
          this.logger.error({ err: error }, 'sealing the log failed; retrying');
        }
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, this.options.intervalMs ?? INTERVAL_MS);
          abort.signal.addEventListener(
            'abort',
            () => {
              clearTimeout(timer);
              resolve();
            },
            { once: true },
          );
        });
      }
    })();
  }

  /** Stops the background sealing and waits for the pass under way. */
  async stop(): Promise<void> {
    this.abort?.abort();
    await this.loop;
    this.loop = undefined;
  }
}
