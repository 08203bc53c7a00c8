/**
 * The projection runner (issue 2 §3, DESIGN.md §1–2): reads `$all` from the checkpoint, applies
 * every projection in order inside one transaction together with its checkpoint, then follows the
 * subscription. One active runner per database, elected with a Postgres advisory lock; standbys
 * wait for the lock. Commands wait on {@link ProjectionRunner.waitFor} for read-your-writes.
 */

import type { Logger } from 'pino';
import { BehaviorSubject, filter, firstValueFrom, timeout } from 'rxjs';
import type { Sql } from '../db/sql.js';
import {
  comparePositions,
  type EventStore,
  type Position,
  parsePosition,
  positionToString,
  type RecordedEvent,
} from '../eventstore/port.js';
import type { Projection } from './projection.js';

/**
 * Advisory lock key of the projection runner. Advisory locks are database-wide, so the key names
 * the schema: deployments (and test runs) in different schemas of one database elect separately.
 */
const RUNNER_LOCK_KEY = `hashtext('casebook-projections:' || current_schema())`;
const CATCH_UP_PAGE = 500;
const RETRY_DELAY_MS = 1000;

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    });
  });

export class ProjectionRunner {
  /** The position every projection has applied, once known. */
  readonly progress = new BehaviorSubject<Position | undefined>(undefined);
  private abort: AbortController | undefined;
  private loop: Promise<void> | undefined;
  private leader = false;

  constructor(
    private readonly store: EventStore,
    private readonly sql: Sql,
    readonly projections: readonly Projection[],
    private readonly logger: Logger,
  ) {}

  /** Creates the checkpoint table and every projection's tables if missing. */
  async migrate(): Promise<void> {
    await this.sql.exec(
      `CREATE TABLE IF NOT EXISTS projection_checkpoints (name text PRIMARY KEY, position text NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())`,
    );
    for (const projection of this.projections) await projection.migrate(this.sql);
  }

  /** Each projection's checkpoint (undefined = nothing applied yet). */
  async checkpoints(sql: Sql = this.sql): Promise<Map<string, Position | undefined>> {
    const rows = await sql.query<{ name: string; position: string }>(
      `SELECT name, position FROM projection_checkpoints`,
    );
    const byName = new Map(rows.map((r) => [r.name, parsePosition(r.position)]));
    return new Map(this.projections.map((p) => [p.name, byName.get(p.name)]));
  }

  /** The position all projections have reached: the least checkpoint (undefined if any is unset). */
  async position(sql: Sql = this.sql): Promise<Position | undefined> {
    let least: Position | undefined;
    for (const position of (await this.checkpoints(sql)).values()) {
      if (position === undefined) return undefined;
      if (least === undefined || comparePositions(position, least) < 0) least = position;
    }
    return least;
  }

  /**
   * Applies `events` (in `$all` order) in one transaction: each projection gets the events after
   * its own checkpoint, then its checkpoint moves to the last event.
   */
  async applyBatch(events: readonly RecordedEvent[]): Promise<void> {
    const last = events.at(-1);
    if (!last) return;
    await this.sql.transaction(async (tx) => {
      const checkpoints = await this.checkpoints(tx);
      for (const projection of this.projections) {
        const checkpoint = checkpoints.get(projection.name);
        // A projection already past this batch (others are catching up) keeps its checkpoint:
        // checkpoints only move forward, so no event is ever applied twice.
        if (checkpoint && comparePositions(checkpoint, last.position) >= 0) continue;
        for (const event of events) {
          if (checkpoint && comparePositions(event.position, checkpoint) <= 0) continue;
          await projection.apply(event, tx);
        }
        await tx.query(
          `INSERT INTO projection_checkpoints (name, position, updated_at) VALUES ($1, $2, now())
           ON CONFLICT (name) DO UPDATE SET position = EXCLUDED.position, updated_at = now()`,
          [projection.name, positionToString(last.position)],
        );
      }
    });
    this.progress.next(last.position);
  }

  /**
   * Reads `$all` from the least checkpoint to the end in pages, one transaction per page.
   * @param onProgress called after each page with the number of events applied so far.
   * @returns the number of events read.
   */
  async catchUp(
    onProgress?: (applied: number, position: Position) => void,
    signal?: AbortSignal,
  ): Promise<number> {
    let from = await this.position();
    this.progress.next(from);
    let applied = 0;
    while (!signal?.aborted) {
      const page = await this.store.readAll({ ...(from ? { from } : {}), maxCount: CATCH_UP_PAGE });
      if (page.length === 0) break;
      await this.applyBatch(page);
      applied += page.length;
      from = page.at(-1)!.position;
      onProgress?.(applied, from);
    }
    return applied;
  }

  /**
   * Drops every read model and its checkpoint, recreates them and rebuilds them from the log
   * (`casebook replay`). Must not run while a runner is active on the same database: it takes the
   * runner's advisory lock and fails if another process holds it.
   * @throws {Error} when another process's runner holds the lock.
   */
  async rebuild(onProgress?: (applied: number, position: Position) => void): Promise<number> {
    return this.sql.withConnection(async (conn) => {
      const [lock] = await conn.query<{ ok: boolean }>(
        `SELECT pg_try_advisory_lock(${RUNNER_LOCK_KEY}) AS ok`,
      );
      if (!lock?.ok)
        throw new Error('a projection runner is active on this database: stop it before replaying');
      try {
        await this.sql.transaction(async (tx) => {
          for (const projection of this.projections)
            for (const table of projection.tables) await tx.exec(`DROP TABLE IF EXISTS ${table} CASCADE`);
          await tx.exec(`DROP TABLE IF EXISTS projection_checkpoints`);
        });
        await this.migrate();
        return await this.catchUp(onProgress);
      } finally {
        await conn.query(`SELECT pg_advisory_unlock(${RUNNER_LOCK_KEY})`);
      }
    });
  }

  /** Starts the runner in the background: election, catch-up, then the live subscription. */
  start(): void {
    if (this.loop) return;
    const abort = new AbortController();
    this.abort = abort;
    this.loop = this.sql
      .withConnection(async (conn) => {
        while (!abort.signal.aborted) {
          const [lock] = await conn.query<{ ok: boolean }>(
            `SELECT pg_try_advisory_lock(${RUNNER_LOCK_KEY}) AS ok`,
          );
          if (lock?.ok) break;
          await sleep(2000, abort.signal);
        }
        if (abort.signal.aborted) return;
        this.leader = true;
        try {
          await this.follow(abort.signal);
        } finally {
          this.leader = false;
          await conn.query(`SELECT pg_advisory_unlock(${RUNNER_LOCK_KEY})`).catch(() => undefined);
        }
      })
      .catch((error: unknown) => {
        this.logger.error({ err: error }, 'projection runner stopped');
      });
  }

  private async follow(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      try {
        await this.catchUp(undefined, signal);
        const from = this.progress.value;
        for await (const event of this.store.subscribeToAll({ ...(from ? { from } : {}), signal })) {
          await this.applyBatch([event]);
        }
      } catch (error) {
        if (signal.aborted) return;
        // A failing projection is retried, never skipped: a skipped event would corrupt the model.
        this.logger.error({ err: error }, 'projection failed; retrying');
        await sleep(RETRY_DELAY_MS, signal);
      }
    }
  }

  /** Stops the background runner and waits for it. */
  async stop(): Promise<void> {
    this.abort?.abort();
    await this.loop;
    this.loop = undefined;
  }

  /**
   * Waits until every projection has applied `position` (read-your-writes, DESIGN.md §2). Follows
   * this process's runner when it is the active one; otherwise polls the checkpoints written by
   * the active runner in another process.
   * @param timeoutMs bound of the wait, milliseconds.
   * @returns true when reached, false when the bound passed first.
   */
  async waitFor(position: Position, timeoutMs = 5000): Promise<boolean> {
    const reached = (p: Position | undefined) => p !== undefined && comparePositions(p, position) >= 0;
    if (reached(this.progress.value)) return true;
    if (this.leader) {
      return firstValueFrom(this.progress.pipe(filter(reached), timeout(timeoutMs))).then(
        () => true,
        () => false,
      );
    }
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (this.leader) return this.waitFor(position, deadline - Date.now());
      if (reached(await this.position())) return true;
      await sleep(25);
    }
    return false;
  }
}
