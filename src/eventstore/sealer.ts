/**
 * The sealer (docs/architecture.md "Tamper-evident log"): seals the log in batches, after the
 * appends, so appends stay parallel and pay nothing for it. Every serving process runs one, and
 * one of them is active: on PostgreSQL the one holding the session advisory lock
 * {@link SEALER_LOCK_KEY} (the others wait as standbys and take over within
 * {@link INTERVAL_MS} of its end), like the projection runner. On PGlite the one process is the
 * active one. Besides, the seal transaction's advisory lock and its check of the last seal make
 * sure that even two sealers at once (`casebook seal`, a test) seal each event once, in order.
 */
import type { Logger } from 'pino';
import type { Sql } from '../db/sql.js';
import type { EventStore } from './port.js';
import { lastSeal, migrateSeals, writeSeal } from './seal.js';

/** Most events per seal. */
const BATCH = 5000;
/** Pause between passes while the log is sealed up to its head, milliseconds. */
const INTERVAL_MS = 1000;
/** Session advisory lock of the active sealer (one per schema). */
export const SEALER_LOCK_KEY = `hashtext('casebook-sealer:' || current_schema())`;

export class Sealer {
  private abort: AbortController | undefined;
  private loop: Promise<void> | undefined;
  private activeNow = false;

  /** Whether this sealer is the active one (it holds the election); false for a standby. */
  get active(): boolean {
    return this.activeNow;
  }

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
    // As stored: the chain is over the stored bytes, so destroying a data key changes no leaf
    // (docs/architecture.md "Erasure", "Tamper-evident log").
    const events = await this.store.readAll({
      ...(previous ? { from: previous.to } : {}),
      maxCount: this.options.batch ?? BATCH,
      stored: true,
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
        const rest = await this.store.readAll({
          ...(previous ? { from: previous.to } : {}),
          maxCount: 1,
          stored: true,
        });
        if (rest.length === 0) return sealed;
        continue;
      }
      sealed += n;
    }
  }

  /**
   * Seals in the background until {@link stop}: as the active sealer once elected (at once on
   * PGlite), as a standby trying the election every interval until then.
   */
  start(): void {
    if (this.loop) return;
    const abort = new AbortController();
    this.abort = abort;
    this.loop = (async () => {
      while (!abort.signal.aborted) {
        try {
          if (this.sql.kind === 'pglite') await this.sealWhileActive(abort.signal);
          else
            await this.sql.withConnection(async (conn) => {
              const [lock] = await conn.query<{ ok: boolean }>(
                `SELECT pg_try_advisory_lock(${SEALER_LOCK_KEY}) AS ok`,
              );
              if (!lock?.ok) return;
              try {
                await this.sealWhileActive(abort.signal);
              } finally {
                await conn.query(`SELECT pg_advisory_unlock(${SEALER_LOCK_KEY})`).catch(() => undefined);
              }
            });
        } catch (error) {
          if (abort.signal.aborted) return;
          this.logger.error({ err: error }, 'sealing the log failed; retrying');
        }
        await this.pause(abort.signal);
      }
    })();
  }

  /**
   * One background pass: seals full batches while the log has them, then what is left, once. It
   * does not chase the events appended meanwhile (as {@link sealAll} does): under a steady load
   * that made a seal, its reads and its writes for every few appends; the next pass, an interval
   * later, seals them together.
   * @returns the number of events sealed.
   */
  async sealPass(): Promise<number> {
    const batch = this.options.batch ?? BATCH;
    let sealed = 0;
    for (;;) {
      const n = await this.sealOnce();
      sealed += n;
      if (n < batch) return sealed;
    }
  }

  /** Seals every interval until `signal` aborts or a pass fails (it throws, the lock is given back). */
  private async sealWhileActive(signal: AbortSignal): Promise<void> {
    this.activeNow = true;
    try {
      while (!signal.aborted) {
        await this.sealPass();
        await this.pause(signal);
      }
    } finally {
      this.activeNow = false;
    }
  }

  private pause(signal: AbortSignal): Promise<void> {
    return new Promise<void>((resolve) => {
      if (signal.aborted) return resolve();
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, this.options.intervalMs ?? INTERVAL_MS);
      signal.addEventListener('abort', done, { once: true });
    });
  }

  /** Stops the background sealing and waits for the pass under way. */
  async stop(): Promise<void> {
    this.abort?.abort();
    await this.loop;
    this.loop = undefined;
  }
}
