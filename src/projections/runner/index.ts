/**
 * The projection runner (docs/architecture.md "Projections"): keeps every read model in step
 * with the log and reports on each.
 *
 * Each projection has a row in `projection_state`: `live`, `building` (catching up from its
 * checkpoint) or `stopped` (it failed on an event, named in `detail`).
 *
 * - On the SQL stores (`inline` mode) live projections are applied inside every append's own
 *   transaction ({@link ProjectionRunner.appendHook}): a write is readable as soon as it is
 *   acknowledged, from any replica. A projection that is `building` is caught up from the log in
 *   set-based batches; it turns `live` while holding the append lock exclusively, so no event
 *   falls between the catch-up and the first inline append.
 * - On KurrentDB (`async` mode) one elected runner follows `$all` in batches and checkpoints each
 *   projection; commands wait for it ({@link ProjectionRunner.waitFor}) for read-your-writes.
 *
 * A projection that throws on an event stops only itself: it is marked `stopped` with the event's
 * position, stream and error, logged, and reported on /readyz and /metrics. Appends that a stopped
 * projection would have to apply are refused ({@link ReadModelUnavailable}), so a write never
 * answers 2xx and then stays invisible. `casebook replay` rebuilds it.
 */

import type { Logger } from 'pino';
import { Subject } from 'rxjs';
import { forgetMigrations, migrate, migrationsIn } from '../../db/migrations.js';
import type { Sql } from '../../db/sql.js';
import {
  comparePositions,
  type EventStore,
  type Position,
  parsePosition,
  positionToString,
  type RecordedEvent,
} from '../../eventstore/port.js';
import {
  type AppendHook,
  AppendHookFailure,
  type InlineCall,
  type TransactionalAppends,
  transactionalOf,
} from '../../eventstore/sql-capability.js';
import { type Projection, readModelComponent } from '../projection.js';
import {
  createIndexesAndAnalyze,
  dropSecondaryIndexes,
  type RebuildResult,
  rebuildBeside,
} from '../rebuild-beside.js';

/** Session advisory lock of the process that builds projections (or, on KurrentDB, follows the log). */
const RUNNER_LOCK_KEY = `hashtext('casebook-projections:' || current_schema())`;
/** Events per catch-up transaction (a few pages are in memory at once: see buildInline). */
const CATCH_UP_PAGE = 2500;
/** Pages a projection may apply ahead of the slowest while building on PostgreSQL (pipelinedCatchUp). */
const PIPELINE_LEAD = 2;
/** How often an idle runner looks for projections to build, milliseconds. */
const IDLE_POLL_MS = 2000;
/** How long a following runner waits, after the first event of a batch, for more to batch with it, milliseconds. */
const FOLLOW_BATCH_WAIT_MS = 5;
/**
 * Pause of the deferred follower between batches while nobody waits for it, milliseconds: larger
 * batches of the AuditEvent view, fewer transactions and reads of the log (a reader who waits
 * cuts it short).
 */
const DEFERRED_BATCH_INTERVAL_MS = 200;
/** Longest error text kept in `projection_state.detail`. */
const MAX_ERROR_LENGTH = 500;

/** Creates `projection_state` in the current schema if missing (src/projections/sql/projection-state/). */
const migrateState = async (sql: Sql): Promise<void> => {
  await migrate(sql, 'projection-state', migrationsIn(new URL('../sql/projection-state/', import.meta.url)));
};

export type ProjectionStatus = 'live' | 'building' | 'stopped';

/** The event a projection stopped at, and why (no event data: it may hold patient data). */
export interface ProjectionFailure {
  readonly position: string;
  readonly stream: string;
  readonly eventId: string;
  readonly eventType: string;
  readonly error: string;
  readonly at: string;
}

export interface ProjectionState {
  readonly name: string;
  readonly status: ProjectionStatus;
  /** Last event applied while catching up or following (undefined: none, or inline only). */
  readonly checkpoint: Position | undefined;
  readonly failure: ProjectionFailure | undefined;
  readonly updatedAt: Date;
}

/**
 * A write needs a read model that is stopped (or unknown to this process): answered 503. With
 * `stored` the events were written (they stopped the projection); without, nothing was written.
 */
export class ReadModelUnavailable extends Error {
  override readonly name = 'ReadModelUnavailable';
  constructor(
    readonly projection: string,
    readonly stored: boolean,
    message: string,
  ) {
    super(message);
  }
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });

/** A promise with its resolve function (Promise.withResolvers, which Node 20 lacks). */
const signalled = (): { promise: Promise<void>; resolve: () => void } => {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
};

/**
 * Groups an event stream into batches: a batch is yielded when it holds `maxSize` events, or
 * `maxWaitMs` after its first event arrived, whichever comes first (and the last one when the
 * stream ends). The wait runs from the batch's first event, not from its latest: under a steady
 * stream of appends a window that restarted with every event never closed, and the follower read
 * the log once per append until the batch was full.
 */
export async function* batches<T>(
  source: AsyncIterable<T>,
  maxSize: number,
  maxWaitMs: number,
): AsyncGenerator<T[]> {
  const iterator = source[Symbol.asyncIterator]();
  let pending: Promise<IteratorResult<T>> | undefined;
  let batch: T[] = [];
  let timer: NodeJS.Timeout | undefined;
  let deadline: Promise<'timeout'> | undefined;
  try {
    for (;;) {
      pending ??= iterator.next();
      const next = deadline === undefined ? await pending : await Promise.race([pending, deadline]);
      if (next === 'timeout') {
        deadline = undefined;
        yield batch;
        batch = [];
        continue;
      }
      pending = undefined;
      if (next.done) break;
      batch.push(next.value);
      if (batch.length >= maxSize) {
        clearTimeout(timer);
        deadline = undefined;
        yield batch;
        batch = [];
      } else if (batch.length === 1) {
        deadline = new Promise<'timeout'>((resolve) => {
          timer = setTimeout(() => resolve('timeout'), maxWaitMs);
        });
      }
    }
    if (batch.length > 0) yield batch;
  } finally {
    clearTimeout(timer);
    await iterator.return?.();
  }
}

/**
 * Whether an error thrown by a projection is about the event (bad data, a bug: stop the
 * projection) rather than about the database connection (transient: fail the write, keep going).
 */
export const isPoison = (error: unknown): boolean => {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code))
    // data exception, integrity violation, syntax/undefined object, internal error
    return /^(22|23|42|XX)/.test(code);
  return (
    error instanceof TypeError ||
    error instanceof RangeError ||
    error instanceof SyntaxError ||
    error instanceof ReferenceError
  );
};

const failureOf = (event: RecordedEvent, error: unknown, now: Date): ProjectionFailure => ({
  position: positionToString(event.position),
  stream: event.streamName,
  eventId: event.id,
  eventType: event.type,
  error: (error instanceof Error ? error.message : String(error))
    // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is removed
    .replace(/[\u0000-\u001f\u007f]/g, ' ')
    .slice(0, MAX_ERROR_LENGTH),
  at: now.toISOString(),
});

const toState = (row: {
  name: string;
  status: string;
  checkpoint: string | null;
  detail: unknown;
  updated_at: string | Date;
}): ProjectionState => ({
  name: row.name,
  status: row.status as ProjectionStatus,
  checkpoint: row.checkpoint ? parsePosition(row.checkpoint) : undefined,
  failure: (row.detail as ProjectionFailure | null) ?? undefined,
  updatedAt: new Date(row.updated_at),
});

/** The least checkpoint of `states`: where reading must start for all of them (undefined: the start of the log). */
const leastCheckpoint = (states: readonly ProjectionState[]): Position | undefined => {
  let least: Position | undefined;
  for (const state of states) {
    if (state.checkpoint === undefined) return undefined;
    if (least === undefined || comparePositions(state.checkpoint, least) < 0) least = state.checkpoint;
  }
  return least;
};

/**
 * A build of the `building` projections under way ({@link ProjectionRunner.startBuild}), from
 * their checkpoints to the head of the log.
 */
export interface InlineBuild {
  /**
   * Applies the log in pages beside the appends, up to its last full page (the rest is for
   * `finish`). May be called again to catch up with what was appended meanwhile.
   * @returns the events of the pages applied.
   */
  pages(
    onProgress: ((read: number, position: Position) => void) | undefined,
    signal: AbortSignal | undefined,
  ): Promise<number>;
  /**
   * Applies the rest of the log in `tx`, which must hold the append lock (so the log is complete
   * to its end), and turns the projections live in it.
   * @returns the events applied.
   */
  finish(tx: Sql, onProgress: ((read: number, position: Position) => void) | undefined): Promise<number>;
  /**
   * The transaction given to the last `finish` was rolled back: the checkpoints go back to where
   * they were before it, so that the next `pages` or `finish` applies those events again.
   */
  undoFinish(): void;
  /** The projections still being built (one that stopped on an event has left). */
  names(): string[];
  /** Where projection `name` has applied the log to. */
  checkpoint(name: string): Position | undefined;
}

export interface ProjectionRunnerOptions {
  /** `inline` on the SQL stores, `async` on KurrentDB (default: from the store's kind). */
  readonly mode?: 'inline' | 'async';
  readonly clock?: () => Date;
  /** Events per catch-up transaction (default {@link CATCH_UP_PAGE}). */
  readonly pageSize?: number;
  /**
   * Inline mode: whether this runner applies its projections in every append (default true).
   * False for a runner that builds read models elsewhere than the live ones (a rebuild's schema):
   * it must not take the store's append hook from the live runner.
   */
  readonly appendHook?: boolean;
}

export class ProjectionRunner {
  readonly mode: 'inline' | 'async';
  /**
   * Emits after projections applied events: the names of those that applied some (an inline
   * append), or undefined when any may have (catch-up and follow batches).
   */
  readonly applied$ = new Subject<ReadonlySet<string> | undefined>();
  /** Async mode: the position every live projection has applied, once known. */
  private progress: Position | undefined;
  private readonly progress$ = new Subject<Position>();
  /** Events whose inline append stopped a projection (event id → projection), for the handler. */
  private readonly stoppedBy = new Map<string, string>();
  private abort: AbortController | undefined;
  private loop: Promise<void> | undefined;
  private readonly byName: ReadonlyMap<string, Projection>;
  /** Inline mode: projections applied after the append by {@link followDeferred}. */
  private readonly deferred: ReadonlySet<string>;
  /** Deferred projections: the position each has applied (in this process's view). */
  private readonly deferredAt = new Map<string, Position>();
  private readonly deferredWake$ = new Subject<void>();
  /**
   * A reader waits for the deferred follower: its next pause is skipped (and one under way cut
   * short). Readers say so on every poll, so the follower never pauses while one waits.
   */
  private hurried = false;
  private readonly hurry$ = new Subject<void>();
  /** What a deferred projection reached, once committed (told to another thread's runner). */
  readonly deferredReached$ = new Subject<{ name: string; position: Position }>();
  /** Set when another thread follows the log for the deferred projections: asks it to hurry. */
  private hurryElsewhere: (() => void) | undefined;
  private deferredLoop: Promise<void> | undefined;
  private readonly clock: () => Date;
  private readonly pageSize: number;

  constructor(
    private readonly store: EventStore,
    private readonly sql: Sql,
    readonly projections: readonly Projection[],
    private readonly logger: Logger,
    options: ProjectionRunnerOptions = {},
  ) {
    this.mode = options.mode ?? (transactionalOf(store) ? 'inline' : 'async');
    this.byName = new Map(projections.map((p) => [p.name, p]));
    this.deferred = new Set(
      this.mode === 'inline' ? projections.filter((p) => p.deferred === true).map((p) => p.name) : [],
    );
    this.clock = options.clock ?? (() => new Date());
    this.pageSize = options.pageSize ?? CATCH_UP_PAGE;
    if (this.mode === 'inline') {
      const transactional = transactionalOf(store);
      if (!transactional) throw new TypeError('inline projections need a store with SQL transactions');
      if (options.appendHook !== false) transactional.setAppendHook(this.appendHook());
    }
  }

  /** The store's SQL-transaction capabilities (inline mode only). */
  private appends(): TransactionalAppends {
    const transactional = transactionalOf(this.store);
    if (!transactional) throw new TypeError('inline projections need a store with SQL transactions');
    return transactional;
  }

  /**
   * Brings the state table and every projection's tables and functions to their last version (the
   * `.sql` files of src/projections/sql/, src/db/migrations.ts); a projection without a state row
   * starts `building` (from the start of the log).
   */
  async migrate(): Promise<void> {
    await migrateState(this.sql);
    for (const projection of this.projections) await projection.migrate(this.sql);
    // Inline: a new projection is built from the log before it goes live. Async: it is followed.
    const initial = this.mode === 'inline' ? 'building' : 'live';
    for (const projection of this.projections)
      await this.sql.query(
        `INSERT INTO projection_state (name, status) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`,
        [projection.name, initial],
      );
  }

  /** Every projection's state, in the runner's order. */
  async states(sql: Sql = this.sql): Promise<ProjectionState[]> {
    const rows = await sql.query<{
      name: string;
      status: string;
      checkpoint: string | null;
      detail: unknown;
      updated_at: string | Date;
    }>(`SELECT name, status, checkpoint, detail, updated_at FROM projection_state`);
    const byName = new Map(rows.map((r) => [r.name, toState(r)]));
    return this.projections.map(
      (p) =>
        byName.get(p.name) ?? {
          name: p.name,
          status: 'building',
          checkpoint: undefined,
          failure: undefined,
          updatedAt: new Date(0),
        },
    );
  }

  /**
   * Events of the log each projection has not applied: 0 for a live inline projection, the events
   * after its checkpoint otherwise (counted on the SQL stores; undefined on KurrentDB).
   */
  async lag(states?: readonly ProjectionState[]): Promise<Map<string, number | undefined>> {
    const result = new Map<string, number | undefined>();
    for (const state of states ?? (await this.states())) {
      if (this.mode === 'inline' && state.status === 'live' && !this.deferred.has(state.name)) {
        result.set(state.name, 0);
        continue;
      }
      if (!transactionalOf(this.store)) {
        result.set(state.name, undefined);
        continue;
      }
      const from = state.checkpoint;
      const [row] = from
        ? await this.sql.query<{ n: string }>(
            `SELECT count(*)::text AS n FROM es_events WHERE (transaction_id, position) > ($1::xid8, $2::bigint)`,
            [String(from.commit), String(from.prepare)],
          )
        : await this.sql.query<{ n: string }>(`SELECT count(*)::text AS n FROM es_events`);
      result.set(state.name, Number(row?.n ?? 0));
    }
    return result;
  }

  /**
   * The position every projection has caught up to: the least checkpoint (undefined when one has
   * none). Meaningful in async mode and while building; live inline projections keep no checkpoint.
   */
  async position(sql: Sql = this.sql): Promise<Position | undefined> {
    let least: Position | undefined;
    for (const state of await this.states(sql)) {
      if (state.checkpoint === undefined) return undefined;
      if (least === undefined || comparePositions(state.checkpoint, least) < 0) least = state.checkpoint;
    }
    return least;
  }

  /**
   * The hook the SQL store runs in every append transaction: applies the live projections to the
   * events they handle; skips building ones (their catch-up will); refuses the append when a
   * stopped projection (or one this process does not know, run live by a newer version) handles
   * one of its events; turns a poison failure into a stop of that projection only.
   */
  appendHook(): AppendHook {
    const inline = this.projections.filter((p) => !this.deferred.has(p.name));
    const unknown = (name: string) =>
      new ReadModelUnavailable(
        name,
        false,
        `read model ${name} is maintained by a newer casebook version; upgrade this process`,
      );
    return {
      known: this.projections.map((p) => p.name),
      needed: (types) => inline.some((p) => [...types].some((type) => p.handles(type))),
      unknownProjection: unknown,
      apply: async (tx, events, statuses, failures) => {
        if (events.length === 0) return;
        const applied = new Set<string>();
        for (const [name, status] of statuses)
          if (status === 'live' && !this.byName.has(name)) throw unknown(name);
        for (const projection of inline) {
          const relevant = events.filter((e) => projection.handles(e.type));
          if (relevant.length === 0) continue;
          const status = statuses.get(projection.name) ?? 'live';
          if (status === 'building') continue;
          if (status === 'stopped' && projection.refuseWritesWhenStopped === false) continue;
          if (status === 'stopped')
            throw new ReadModelUnavailable(
              projection.name,
              false,
              `read model ${projection.name} is stopped (see /readyz); this write was refused until it is rebuilt`,
            );
          applied.add(projection.name);
          if (failures.has(projection.name)) {
            await this.applyIsolating(projection, relevant, tx);
            continue;
          }
          try {
            await projection.apply(relevant, tx, 'inline');
          } catch (error) {
            if (isPoison(error)) throw new AppendHookFailure(projection.name, undefined, error);
            throw error;
          }
        }
        queueMicrotask(() => this.applied$.next(applied));
      },
      calls: (events) => {
        const calls: InlineCall[] = [];
        for (const projection of inline) {
          const relevant = events.filter((e) => projection.handles(e.type));
          if (relevant.length === 0) continue;
          if (!projection.inline) return undefined;
          const argument = projection.inline.argument(relevant);
          if (argument !== undefined)
            calls.push({ projection: projection.name, function: projection.inline.function, argument });
        }
        return calls;
      },
      called: (calls) => queueMicrotask(() => this.applied$.next(new Set(calls.map((c) => c.projection)))),
    };
  }

  /**
   * The retry of an append on which `projection` failed: applies its events one by one inside
   * savepoints, stops the projection at the first that fails (the ones before stay applied).
   */
  private async applyIsolating(
    projection: Projection,
    events: readonly RecordedEvent[],
    tx: Sql,
  ): Promise<void> {
    for (const event of events) {
      await tx.exec('SAVEPOINT casebook_projection');
      try {
        await projection.apply([event], tx, 'inline');
        await tx.exec('RELEASE SAVEPOINT casebook_projection');
      } catch (error) {
        await tx.exec('ROLLBACK TO SAVEPOINT casebook_projection');
        const failure = failureOf(event, error, this.clock());
        await this.markStopped(tx, projection.name, failure, undefined);
        if (projection.refuseWritesWhenStopped !== false) this.stoppedBy.set(event.id, projection.name);
        if (this.stoppedBy.size > 1000) this.stoppedBy.delete(this.stoppedBy.keys().next().value!);
        this.logger.error({ projection: projection.name, ...failure }, 'projection stopped on an event');
        return;
      }
    }
  }

  /**
   * The projection whose stop one of these (just appended) events caused, if any: the write was
   * stored but is not readable through it.
   */
  stoppedByEvents(eventIds: readonly string[]): string | undefined {
    for (const id of eventIds) {
      const name = this.stoppedBy.get(id);
      if (name !== undefined) return name;
    }
    return undefined;
  }

  private async markStopped(
    sql: Sql,
    name: string,
    failure: ProjectionFailure,
    checkpoint: Position | undefined,
  ): Promise<void> {
    await sql.query(
      `UPDATE projection_state SET status = 'stopped', detail = $2::jsonb, updated_at = now(),
         checkpoint = coalesce($3, checkpoint) WHERE name = $1`,
      [name, JSON.stringify(failure), checkpoint ? positionToString(checkpoint) : null],
    );
  }

  /**
   * Brings every `building` projection up to the head of the log and turns it live (inline mode),
   * or catches every projection up to the head (async mode). Waits while another process builds.
   * @param onProgress after each batch: events read so far and the position reached.
   * @returns the number of events read.
   */
  async catchUp(
    onProgress?: (read: number, position: Position) => void,
    signal?: AbortSignal,
  ): Promise<number> {
    for (;;) {
      const result = await this.sql.withConnection(async (conn) => {
        const [lock] = await conn.query<{ ok: boolean }>(
          `SELECT pg_try_advisory_lock(${RUNNER_LOCK_KEY}) AS ok`,
        );
        if (!lock?.ok) return undefined;
        try {
          return this.mode === 'inline'
            ? await this.buildInline(onProgress, signal)
            : await this.follow(onProgress, signal, false);
        } finally {
          await conn.query(`SELECT pg_advisory_unlock(${RUNNER_LOCK_KEY})`).catch(() => undefined);
        }
      });
      if (result !== undefined) return result;
      // Another process is building: wait until it is done.
      if (signal?.aborted) return 0;
      const states = await this.states();
      if (this.mode === 'inline' && !states.some((s) => s.status === 'building')) return 0;
      if (this.mode === 'async') return 0;
      await sleep(200, signal);
    }
  }

  /** Inline mode: catches `building` projections up in batches, then turns them live. */
  private async buildInline(
    onProgress: ((read: number, position: Position) => void) | undefined,
    signal: AbortSignal | undefined,
  ): Promise<number> {
    const build = await this.startBuild();
    if (!build) return 0;
    let read = await build.pages(onProgress, signal);
    if (signal?.aborted || build.names().length === 0) return read;
    // The last pages under the append lock, then live: no append can fall in between.
    read += await this.sql.transaction(async (tx) => {
      await this.appends().lockAppends(tx);
      return build.finish(tx, (n, position) => onProgress?.(read + n, position));
    });
    this.applied$.next(undefined);
    return read;
  }

  /**
   * Starts a build of the projections that are `building` in this runner's `projection_state`
   * (inline mode): the caller reads pages with `pages` beside the appends, then, holding the append
   * lock in a transaction, applies the rest with `finish`, which turns them live in that
   * transaction. A rebuild beside the live read models (see {@link rebuild}) runs it on a runner
   * whose handle sees its own schema first.
   * @returns undefined when no projection is building.
   */
  async startBuild(): Promise<InlineBuild | undefined> {
    const pending = (await this.states()).filter((s) => s.status === 'building');
    if (pending.length === 0) return undefined;
    const checkpoints = new Map(pending.map((s) => [s.name, s.checkpoint]));
    const least = () => {
      let from: Position | undefined;
      for (const position of checkpoints.values()) {
        if (position === undefined) return undefined;
        if (from === undefined || comparePositions(position, from) < 0) from = position;
      }
      return from;
    };
    // Types no building projection handles, learnt from the pages read: the next pages leave them
    // out (a log's identifier reservations: a fifth of its events, and of a rebuild's reading).
    const classified = new Set<string>();
    const excluded: string[] = [];
    const classify = (page: readonly RecordedEvent[]) => {
      for (const { type } of page)
        if (!classified.has(type)) {
          classified.add(type);
          if (![...checkpoints.keys()].some((name) => this.byName.get(name)!.handles(type)))
            excluded.push(type);
        }
    };
    const range = (from: Position | undefined) => ({
      ...(from ? { from } : {}),
      maxCount: this.pageSize,
      ...(excluded.length ? { excludeTypes: [...excluded] } : {}),
    });
    const readPage = (from: Position | undefined) => {
      const page = this.store.readAll(range(from));
      page.then(classify, () => undefined); // awaited below, or dropped when the loop ends early
      return page;
    };
    // Catch up without blocking appends while there is more than a page to read. On Postgres the
    // next page is read (on another pool connection) while this one is applied, and several
    // projections go through the pages each at its own pace; after a page every remaining
    // checkpoint is at its end, so that is where the next one starts.
    const pages = async (
      onProgress: ((read: number, position: Position) => void) | undefined,
      signal: AbortSignal | undefined,
    ): Promise<number> => {
      const prefetch = this.sql.kind === 'postgres';
      if (checkpoints.size === 0) return 0;
      if (prefetch && checkpoints.size > 1)
        return this.pipelinedCatchUp(readPage, least(), checkpoints, onProgress, signal);
      let read = 0;
      let next = readPage(least());
      while (!signal?.aborted && checkpoints.size > 0) {
        const page = await next;
        if (page.length < this.pageSize) break;
        const last = page.at(-1)!.position;
        if (prefetch) next = readPage(last);
        await this.applyCatchUp(page, checkpoints, this.sql);
        read += page.length;
        onProgress?.(read, last);
        // PGlite answers in microtasks: without a turn of the event loop between pages, a build in
        // a serving process (a projection added later) held every request until its end.
        if (!prefetch) await new Promise<void>((resolve) => setImmediate(resolve));
        if (!prefetch) next = readPage(least());
      }
      return read;
    };
    let beforeFinish: Map<string, Position | undefined> | undefined;
    const finish = async (
      tx: Sql,
      onProgress: ((read: number, position: Position) => void) | undefined,
    ): Promise<number> => {
      beforeFinish = new Map(checkpoints);
      let count = 0;
      for (;;) {
        if (checkpoints.size === 0) break;
        const page = await this.appends().readAllIn(tx, range(least()), false);
        if (page.length === 0) break;
        classify(page);
        await this.applyCatchUp(page, checkpoints, tx);
        count += page.length;
        onProgress?.(count, page.at(-1)!.position);
      }
      for (const name of checkpoints.keys())
        await tx.query(
          `UPDATE projection_state SET status = 'live', detail = NULL, updated_at = now() WHERE name = $1 AND status = 'building'`,
          [name],
        );
      return count;
    };
    const undoFinish = () => {
      if (!beforeFinish) return;
      checkpoints.clear();
      for (const [name, position] of beforeFinish) checkpoints.set(name, position);
      beforeFinish = undefined;
    };
    return {
      pages,
      finish,
      undoFinish,
      names: () => [...checkpoints.keys()],
      checkpoint: (name) => checkpoints.get(name),
    };
  }

  /**
   * The catch-up of {@link buildInline} on PostgreSQL, up to the last full page: the log is read
   * page after page once (the next page while the current one is applied), and each projection
   * applies the pages on its own, in its own transactions on the pool, up to
   * {@link PIPELINE_LEAD} pages ahead of the slowest. So one projection's long statement does not
   * hold the others, and this process folds the next page while the server writes the last one
   * (docs/architecture.md "Projections"). Moves each projection's entry of `checkpoints` to the end
   * of the pages it applied; removes a projection that stopped on an event.
   * @returns the events of the pages every projection has applied.
   * @throws the first failure that is not a projection's own (a lost connection): after every
   *   projection has stopped at its current page.
   */
  private async pipelinedCatchUp(
    readPage: (from: Position | undefined) => Promise<RecordedEvent[]>,
    from: Position | undefined,
    checkpoints: Map<string, Position | undefined>,
    onProgress: ((read: number, position: Position) => void) | undefined,
    signal: AbortSignal | undefined,
  ): Promise<number> {
    // Page k, read once, after page k - 1 (an empty page: the log ended before it).
    const pages = new Map<number, Promise<readonly RecordedEvent[]>>();
    const pageAt = (k: number): Promise<readonly RecordedEvent[]> => {
      let page = pages.get(k);
      if (page === undefined) {
        page =
          k === 0
            ? readPage(from)
            : pageAt(k - 1).then((before) =>
                before.length < this.pageSize ? [] : readPage(before.at(-1)!.position),
              );
        page.catch(() => undefined); // awaited by a projection, or dropped when they stop
        pages.set(k, page);
      }
      return page;
    };
    // Pages each running projection has applied; a page is dropped once every one has.
    const applied = new Map([...checkpoints.keys()].map((name) => [name, 0]));
    // The end of each full page, once read.
    const ends = new Map<number, Position>();
    let read = 0;
    let failed = false;
    // Resolved (and replaced) whenever a projection moves on: the ones ahead wait on it.
    let moved = signalled();
    const slowest = () => Math.min(...applied.values());
    const settle = () => {
      const done = slowest(); // +Infinity once none runs
      for (const k of pages.keys())
        if (k < done && ends.has(k)) {
          pages.delete(k);
          read += this.pageSize;
          onProgress?.(read, ends.get(k)!);
          ends.delete(k);
        }
      moved.resolve();
      moved = signalled();
    };
    const run = async (name: string) => {
      const own = new Map([[name, checkpoints.get(name)]]);
      try {
        for (let k = 0; !failed && !signal?.aborted; k++) {
          while (k - slowest() > PIPELINE_LEAD && !failed) await moved.promise;
          const page = await pageAt(k);
          if (page.length < this.pageSize || failed) return; // the rest: under the append lock
          ends.set(k, page.at(-1)!.position);
          void pageAt(k + 1);
          await this.applyCatchUp(page, own, this.sql);
          if (!own.has(name)) {
            checkpoints.delete(name); // stopped on an event of this page
            return;
          }
          checkpoints.set(name, page.at(-1)!.position);
          applied.set(name, k + 1);
          settle();
        }
      } catch (error) {
        failed = true;
        throw error;
      } finally {
        applied.delete(name);
        settle();
      }
    };
    const settled = await Promise.allSettled([...checkpoints.keys()].map(run));
    const failure = settled.find((r) => r.status === 'rejected');
    if (failure) throw failure.reason;
    return read;
  }

  /**
   * Applies one page to every projection in `checkpoints` (those after its checkpoint, of types it
   * handles) in one transaction of `sql`, moving each checkpoint to the page's end. A projection
   * that fails is found event by event, stopped there and removed from `checkpoints`; the page is
   * then applied again to the others.
   */
  private async applyCatchUp(
    page: readonly RecordedEvent[],
    checkpoints: Map<string, Position | undefined>,
    sql: Sql,
  ): Promise<void> {
    const last = page.at(-1)!.position;
    if (sql === this.sql && sql.kind === 'postgres' && checkpoints.size > 1) {
      // Outside a caller's transaction on PostgreSQL, each projection gets its own transaction
      // (with its checkpoint), all at once on the pool: one projection's statements run in the
      // server while the next one's rows are folded here (a rebuild of 200,000 events on 2 cores: 9.2 s
      // in one transaction per page, 6.4 s so; docs/performance.md "Rebuild and replay").
      const names = [...checkpoints];
      const alone = names.map(([name, checkpoint]) => new Map([[name, checkpoint]]));
      const settled = await Promise.allSettled(alone.map((one) => this.applyCatchUp(page, one, sql)));
      const failed = settled.find((r) => r.status === 'rejected');
      if (failed) throw failed.reason;
      names.forEach(([name], i) => {
        if (alone[i]!.has(name)) checkpoints.set(name, last);
        else checkpoints.delete(name);
      });
      return;
    }
    const run = async (tx: Sql) => {
      for (const [name, checkpoint] of checkpoints) {
        const projection = this.byName.get(name)!;
        const relevant = page.filter(
          (e) => projection.handles(e.type) && (!checkpoint || comparePositions(e.position, checkpoint) > 0),
        );
        if (relevant.length > 0) {
          try {
            await projection.apply(relevant, tx, 'catch-up');
          } catch (error) {
            throw new AppendHookFailure(name, undefined, error);
          }
        }
        await tx.query(`UPDATE projection_state SET checkpoint = $2, updated_at = now() WHERE name = $1`, [
          name,
          positionToString(last),
        ]);
      }
    };
    for (;;) {
      const savepoint = sql !== this.sql;
      try {
        if (savepoint) {
          await sql.exec('SAVEPOINT casebook_catch_up');
          await run(sql);
          await sql.exec('RELEASE SAVEPOINT casebook_catch_up');
        } else
          await sql.transaction(async (tx) => {
            // Without waiting for the WAL flush: the transaction holds the checkpoint with the
            // rows, so a crash that loses it loses both, and the events are applied again from
            // the log (a replay of 200,000 events commits ~400 such transactions).
            if (tx.kind === 'postgres') await tx.exec('SET LOCAL synchronous_commit = off');
            await run(tx);
          });
        for (const name of checkpoints.keys()) checkpoints.set(name, last);
        return;
      } catch (error) {
        if (savepoint) await sql.exec('ROLLBACK TO SAVEPOINT casebook_catch_up');
        if (!(error instanceof AppendHookFailure) || !isPoison(error.cause))
          throw error instanceof AppendHookFailure ? error.cause : error;
        await this.stopAtFailingEvent(error.key, page, checkpoints.get(error.key), sql);
        checkpoints.delete(error.key);
        if (checkpoints.size === 0) return;
      }
    }
  }

  /**
   * Finds the event of `page` that `name` fails on (each inside a savepoint of one transaction of
   * `sql`) and stops the projection there; the events before it stay applied.
   */
  private async stopAtFailingEvent(
    name: string,
    page: readonly RecordedEvent[],
    checkpoint: Position | undefined,
    sql: Sql,
  ): Promise<void> {
    const projection = this.byName.get(name)!;
    await sql.transaction(async (tx) => {
      let applied = checkpoint;
      for (const event of page) {
        if (
          !projection.handles(event.type) ||
          (checkpoint && comparePositions(event.position, checkpoint) <= 0)
        )
          continue;
        await tx.exec('SAVEPOINT casebook_isolate');
        try {
          await projection.apply([event], tx, 'catch-up');
          await tx.exec('RELEASE SAVEPOINT casebook_isolate');
          applied = event.position;
        } catch (error) {
          await tx.exec('ROLLBACK TO SAVEPOINT casebook_isolate');
          const failure = failureOf(event, error, this.clock());
          await this.markStopped(tx, name, failure, applied);
          this.logger.error({ projection: name, ...failure }, 'projection stopped on an event');
          return;
        }
      }
    });
  }

  /**
   * Async mode: applies `$all` to every live projection from its checkpoint, in batches; with
   * `live` it then follows the subscription until `signal` aborts.
   */
  private async follow(
    onProgress: ((read: number, position: Position) => void) | undefined,
    signal: AbortSignal | undefined,
    live: boolean,
  ): Promise<number> {
    const states = await this.states();
    const checkpoints = new Map(
      states.filter((s) => s.status !== 'stopped').map((s) => [s.name, s.checkpoint] as const),
    );
    const least = () => {
      let from: Position | undefined;
      for (const position of checkpoints.values()) {
        if (position === undefined) return undefined;
        if (from === undefined || comparePositions(position, from) < 0) from = position;
      }
      return from;
    };
    const reached = (position: Position) => {
      this.progress = position;
      this.progress$.next(position);
      this.applied$.next(undefined);
    };
    let read = 0;
    while (!signal?.aborted && checkpoints.size > 0) {
      const from = least();
      const page = await this.store.readAll({ ...(from ? { from } : {}), maxCount: this.pageSize });
      if (page.length === 0) break;
      await this.applyCatchUp(page, checkpoints, this.sql);
      read += page.length;
      onProgress?.(read, page.at(-1)!.position);
      reached(page.at(-1)!.position);
    }
    if (this.progress === undefined) {
      const from = least();
      if (from) reached(from);
    }
    if (!live) return read;
    const from = least();
    const events = this.store.subscribeToAll({ ...(from ? { from } : {}), ...(signal ? { signal } : {}) });
    for await (const batch of batches(events, this.pageSize, FOLLOW_BATCH_WAIT_MS)) {
      if (checkpoints.size === 0) break;
      await this.applyCatchUp(batch, checkpoints, this.sql);
      read += batch.length;
      reached(batch.at(-1)!.position);
    }
    return read;
  }

  /**
   * Rebuilds the read models of `names` (default: all) from the log (`casebook replay`).
   *
   * On the SQL stores they are built beside the live ones, in a schema of their own, and swapped in
   * once complete ({@link rebuildBeside}, docs/architecture.md "Projections"): the live read models
   * keep answering, and being written by the appends, until the swap. A projection whose build
   * stops on an event is not swapped in.
   *
   * On KurrentDB (async mode) the read models are dropped and recreated, then caught up; no runner
   * may follow the log meanwhile.
   * @returns the events read, and the projections whose rebuild stopped on an event.
   * @throws {Error} for an unknown name; what the database throws.
   */
  async rebuild(
    onProgress?: (read: number, position: Position) => void,
    names: readonly string[] = this.projections.map((p) => p.name),
  ): Promise<RebuildResult> {
    for (const name of names) if (!this.byName.has(name)) throw new Error(`no projection named ${name}`);
    await migrateState(this.sql);
    if (this.mode === 'async') return this.rebuildInPlace(onProgress, names);
    const projections = names.map((name) => this.byName.get(name)!);
    const result = await rebuildBeside({
      sql: this.sql,
      appends: this.appends(),
      projections,
      runnerOn: (sql) =>
        new ProjectionRunner(this.store, sql, projections, this.logger, {
          mode: 'inline',
          appendHook: false,
          clock: this.clock,
          pageSize: this.pageSize,
        }),
      ...(onProgress ? { onProgress } : {}),
    });
    for (const [name, failure] of result.stopped)
      this.logger.error(
        { projection: name, ...failure },
        'the rebuild of a read model stopped on an event; the live one was kept',
      );
    this.applied$.next(undefined);
    this.deferredWake$.next();
    return result;
  }

  /** Async mode's rebuild: drops and recreates the read models, then follows the log from its start. */
  private async rebuildInPlace(
    onProgress: ((read: number, position: Position) => void) | undefined,
    names: readonly string[],
  ): Promise<RebuildResult> {
    // A follower keeps its checkpoints in memory: it must not run while the read models reset.
    const free = await this.sql.withConnection(async (conn) => {
      const [lock] = await conn.query<{ ok: boolean }>(
        `SELECT pg_try_advisory_lock(${RUNNER_LOCK_KEY}) AS ok`,
      );
      if (lock?.ok) await conn.query(`SELECT pg_advisory_unlock(${RUNNER_LOCK_KEY})`);
      return lock?.ok === true;
    });
    if (!free) throw new Error('a projection runner is active on this database: stop it before replaying');
    const tables = names.flatMap((name) => this.byName.get(name)!.tables);
    const indexes = await this.sql.transaction(async (tx) => {
      for (const name of names) {
        const projection = this.byName.get(name)!;
        for (const table of projection.tables) await tx.exec(`DROP TABLE IF EXISTS ${table} CASCADE`);
        // Made again from version 1 of its migrations (their functions are replaced alike).
        await forgetMigrations(tx, readModelComponent(name));
        await projection.migrate(tx);
        await tx.query(
          `INSERT INTO projection_state (name, status, checkpoint, detail) VALUES ($1, 'live', NULL, NULL)
           ON CONFLICT (name) DO UPDATE SET status = 'live', checkpoint = NULL, detail = NULL, updated_at = now()`,
          [name],
        );
      }
      return dropSecondaryIndexes(tx, tables);
    });
    this.progress = undefined;
    const read = await this.catchUp(onProgress);
    await createIndexesAndAnalyze(this.sql, indexes, tables);
    const stopped = new Map(
      (await this.states())
        .filter((s) => names.includes(s.name) && s.status === 'stopped' && s.failure !== undefined)
        .map((s) => [s.name, s.failure!] as const),
    );
    return { read, stopped };
  }

  /**
   * Builds every projection from the log up to a point in time, into this runner's database (an
   * investigation schema; `casebook replay --until`): events recorded after `until` (an instant),
   * or after it in `$all` (a position), are left out. Runs in this process, once; the read models
   * are then as they stood at that point.
   * @returns the number of events applied.
   */
  async buildUntil(
    until: Date | Position,
    onProgress?: (read: number, position: Position) => void,
  ): Promise<number> {
    await this.migrate();
    const instant = until instanceof Date ? until.getTime() : undefined;
    const keep = (event: RecordedEvent): 'apply' | 'skip' | 'stop' => {
      if (instant !== undefined) return Date.parse(event.metadata.recordedAt) <= instant ? 'apply' : 'skip';
      return comparePositions(event.position, until as Position) <= 0 ? 'apply' : 'stop';
    };
    const checkpoints = new Map(this.projections.map((p) => [p.name, undefined as Position | undefined]));
    let from: Position | undefined;
    let read = 0;
    let applied = 0;
    for (;;) {
      const page = await this.store.readAll({ ...(from ? { from } : {}), maxCount: this.pageSize });
      if (page.length === 0) break;
      const stop = page.findIndex((e) => keep(e) === 'stop');
      const kept = (stop < 0 ? page : page.slice(0, stop)).filter((e) => keep(e) === 'apply');
      if (kept.length > 0) await this.applyCatchUp(kept, checkpoints, this.sql);
      applied += kept.length;
      read += stop < 0 ? page.length : stop;
      from = page.at(-1)!.position;
      onProgress?.(read, from);
      if (stop >= 0) break;
    }
    return applied;
  }

  /**
   * Inline mode: follows the log for the deferred projections, applying each batch in one
   * transaction from their checkpoints (locked, so several processes never apply a batch twice),
   * until `signal` aborts. A deferred projection that is not live (building, stopped) is left to
   * the build loop or to a replay.
   */
  private async followDeferred(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      try {
        const states = (await this.states()).filter((s) => this.deferred.has(s.name) && s.status === 'live');
        if (states.length === 0) {
          await sleep(IDLE_POLL_MS, signal);
          continue;
        }
        const from = leastCheckpoint(states);
        const inner = new AbortController();
        const stop = () => inner.abort();
        signal.addEventListener('abort', stop, { once: true });
        if (signal.aborted) inner.abort();
        try {
          const events = this.store.subscribeToAll({ ...(from ? { from } : {}), signal: inner.signal });
          for await (const batch of batches(events, this.pageSize, FOLLOW_BATCH_WAIT_MS)) {
            if (!(await this.applyDeferred(batch))) {
              this.deferredAt.clear();
              break;
            }
            this.deferredWake$.next();
            await this.pauseDeferred(signal);
          }
        } finally {
          signal.removeEventListener('abort', stop);
          inner.abort();
        }
      } catch (error) {
        if (signal.aborted) return;
        this.logger.error({ err: error }, 'deferred projections failed; retrying');
        await sleep(1000, signal);
      }
    }
  }

  /**
   * Applies one batch of the log to the live deferred projections, in one transaction that locks
   * their state rows: events at or before a checkpoint are skipped (another process applied them).
   * @returns false when a deferred projection is no longer live (the follower starts over).
   */
  private async applyDeferred(batch: readonly RecordedEvent[]): Promise<boolean> {
    if (batch.length === 0) return true;
    const last = batch.at(-1)!.position;
    // What each projection reached, told to read-your-writes waiters only once it is committed:
    // noted inside the transaction, a search could read the view before the rows are visible.
    const reached: [string, Position][] = [];
    const live = await this.sql.transaction(async (tx) => {
      const rows = await tx.query<{ name: string; status: string; checkpoint: string | null }>(
        `SELECT name, status, checkpoint FROM projection_state WHERE name = ANY ($1::text[]) ORDER BY name FOR UPDATE`,
        [[...this.deferred]],
      );
      if (rows.some((r) => r.status !== 'live') || rows.length === 0) return false;
      const checkpoints = new Map<string, Position | undefined>();
      for (const row of rows) {
        const checkpoint = row.checkpoint ? parsePosition(row.checkpoint) : undefined;
        if (checkpoint && comparePositions(checkpoint, last) >= 0) {
          reached.push([row.name, checkpoint]);
          continue;
        }
        checkpoints.set(row.name, checkpoint);
      }
      const names = [...checkpoints.keys()];
      if (names.length > 0) await this.applyCatchUp(batch, checkpoints, tx);
      for (const name of checkpoints.keys()) reached.push([name, last]);
      // A projection that failed on the batch was stopped (and left `checkpoints`).
      return names.every((name) => checkpoints.has(name));
    });
    for (const [name, position] of reached) this.noteDeferred(name, position);
    return live;
  }

  private noteDeferred(name: string, position: Position): void {
    this.advanceDeferred(name, position);
    this.deferredReached$.next({ name, position });
  }

  /** Moves what this process knows deferred projection `name` has applied forward (never back). */
  private advanceDeferred(name: string, position: Position): void {
    const known = this.deferredAt.get(name);
    if (!known || comparePositions(position, known) > 0) this.deferredAt.set(name, position);
  }

  /** The follower's pause between batches: {@link DEFERRED_BATCH_INTERVAL_MS}, none while a reader waits. */
  private async pauseDeferred(signal: AbortSignal): Promise<void> {
    if (!this.hurried) {
      const cut = new AbortController();
      const subscription = this.hurry$.subscribe(() => cut.abort());
      const stop = () => cut.abort();
      signal.addEventListener('abort', stop, { once: true });
      try {
        await sleep(DEFERRED_BATCH_INTERVAL_MS, cut.signal);
      } finally {
        subscription.unsubscribe();
        signal.removeEventListener('abort', stop);
      }
    }
    this.hurried = false;
  }

  /**
   * Hands the following of the deferred projections to another thread (docs/architecture.md
   * "Audit trail"): {@link start} no longer follows them here. That thread's runner reports what
   * it reached through {@link noteDeferredApplied}; `hurry` asks it to skip its next pause, called
   * on every poll of a reader waiting here. Call before {@link start}.
   */
  followDeferredElsewhere(hurry: () => void): void {
    this.hurryElsewhere = hurry;
  }

  /**
   * What another thread's runner reports through its {@link deferredReached$}: deferred projection
   * `name` has applied (and committed) the log up to `position`. Wakes the readers waiting for it.
   */
  noteDeferredApplied(name: string, position: Position): void {
    if (!this.deferred.has(name)) return;
    this.advanceDeferred(name, position);
    this.deferredWake$.next();
  }

  /** A reader waits for this thread's deferred follower: it skips its next pause. */
  hurryDeferred(): void {
    this.hurried = true;
    this.hurry$.next();
  }

  /**
   * Read-your-writes for a deferred projection (the AuditEvent search): waits until it has applied
   * the head of the log as it is when called.
   * @param timeoutMs bound of the wait, milliseconds.
   * @returns `current` (read away), `stopped` (the projection is stopped or building: its view is
   *   not complete) or `behind` (the bound passed first).
   */
  async waitForDeferred(name: string, timeoutMs = 5000): Promise<'current' | 'stopped' | 'behind'> {
    if (!this.deferred.has(name)) return 'current';
    const head = await this.store.headPosition();
    const deadline = Date.now() + timeoutMs;
    const reached = (p: Position | undefined) =>
      head === undefined || (p !== undefined && comparePositions(p, head) >= 0);
    for (;;) {
      if (reached(this.deferredAt.get(name))) return 'current';
      // The follower, here or in the background thread, skips its pause while someone waits.
      if (this.hurryElsewhere) this.hurryElsewhere();
      else this.hurryDeferred();
      const [row] = await this.sql.query<{ status: string; checkpoint: string | null }>(
        `SELECT status, checkpoint FROM projection_state WHERE name = $1`,
        [name],
      );
      if (!row || row.status !== 'live') return 'stopped';
      if (row.checkpoint && reached(parsePosition(row.checkpoint))) return 'current';
      const left = deadline - Date.now();
      if (left <= 0) return 'behind';
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, Math.min(25, left));
        const subscription = this.deferredWake$.subscribe(done);
        function done() {
          clearTimeout(timer);
          subscription.unsubscribe();
          resolve();
        }
      });
    }
  }

  /**
   * Applies every event of the log to the deferred projections now (tests, `casebook replay`):
   * one pass from their checkpoints to the head.
   */
  async catchUpDeferred(): Promise<void> {
    if (this.deferred.size === 0) return;
    for (;;) {
      const states = (await this.states()).filter((s) => this.deferred.has(s.name) && s.status === 'live');
      if (states.length === 0) return;
      const from = leastCheckpoint(states);
      const page = await this.store.readAll({ ...(from ? { from } : {}), maxCount: this.pageSize });
      if (page.length === 0) return;
      if (!(await this.applyDeferred(page))) return;
      this.deferredWake$.next();
    }
  }

  /**
   * Starts the background work: building projections (inline) or following the log (async), and
   * following it for the deferred projections unless another thread does
   * ({@link followDeferredElsewhere}).
   */
  start(): void {
    if (this.loop) return;
    const abort = new AbortController();
    this.abort = abort;
    if (this.deferred.size > 0 && !this.hurryElsewhere) this.deferredLoop = this.followDeferred(abort.signal);
    this.loop = (async () => {
      while (!abort.signal.aborted) {
        try {
          if (this.mode === 'inline') {
            await this.catchUp(undefined, abort.signal);
            await sleep(IDLE_POLL_MS, abort.signal);
          } else {
            await this.sql.withConnection(async (conn) => {
              const [lock] = await conn.query<{ ok: boolean }>(
                `SELECT pg_try_advisory_lock(${RUNNER_LOCK_KEY}) AS ok`,
              );
              if (!lock?.ok) return sleep(IDLE_POLL_MS, abort.signal);
              try {
                await this.follow(undefined, abort.signal, true);
              } finally {
                await conn.query(`SELECT pg_advisory_unlock(${RUNNER_LOCK_KEY})`).catch(() => undefined);
              }
            });
          }
        } catch (error) {
          if (abort.signal.aborted) return;
          this.logger.error({ err: error }, 'projection runner failed; retrying');
          await sleep(1000, abort.signal);
        }
      }
    })();
  }

  /**
   * Starts only the following of the log for the deferred projections (inline mode): the work of
   * the background thread (`src/background/worker.ts`), while the serving thread's runner builds.
   */
  startDeferred(): void {
    if (this.loop || this.deferredLoop || this.deferred.size === 0) return;
    const abort = new AbortController();
    this.abort = abort;
    this.deferredLoop = this.followDeferred(abort.signal);
  }

  /** Stops the background work and waits for it. */
  async stop(): Promise<void> {
    this.abort?.abort();
    await this.loop;
    await this.deferredLoop;
    this.loop = undefined;
    this.deferredLoop = undefined;
  }

  /**
   * Read-your-writes: resolves true once every live projection has applied `position`. Inline
   * mode is always true (the append applied them). Async mode follows this process's runner, or
   * the checkpoints another process writes.
   * @param timeoutMs bound of the wait, milliseconds.
   * @returns false when the bound passed first.
   */
  async waitFor(position: Position, timeoutMs = 5000): Promise<boolean> {
    if (this.mode === 'inline') return true;
    const reached = (p: Position | undefined) => p !== undefined && comparePositions(p, position) >= 0;
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (reached(this.progress)) return true;
      const states = (await this.states()).filter((s) => s.status !== 'stopped');
      if (states.length > 0 && states.every((s) => reached(s.checkpoint))) return true;
      await sleep(Math.min(25, Math.max(1, deadline - Date.now())));
    }
    return false;
  }
}
