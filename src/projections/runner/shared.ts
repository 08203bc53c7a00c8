/**
 * What every mode of the projection runner shares (docs/architecture.md "Projections"): the
 * `projection_state` table (its rows, a stop), the context a mode is given ({@link RunnerContext}),
 * the runner's advisory lock, and small helpers (batching a subscription, classifying a failure).
 */

import type { Logger } from 'pino';
import type { Subject } from 'rxjs';
import { migrate, migrationsIn } from '../../db/migrations.js';
import type { Sql } from '../../db/sql.js';
import {
  comparePositions,
  type EventStore,
  type Position,
  parsePosition,
  positionToString,
  type RecordedEvent,
} from '../../eventstore/port.js';
import type { TransactionalAppends } from '../../eventstore/sql-capability.js';
import type { Projection } from '../projection.js';

/** How often an idle runner looks for projections to build, milliseconds. */
export const IDLE_POLL_MS = 2000;
/** How long a following runner waits, after the first event of a batch, for more to batch with it, milliseconds. */
export const FOLLOW_BATCH_WAIT_MS = 5;
/** Longest error text kept in `projection_state.detail`. */
const MAX_ERROR_LENGTH = 500;
/** Session advisory lock of the process that builds projections (or, on KurrentDB, follows the log). */
const RUNNER_LOCK_KEY = `hashtext('casebook-projections:' || current_schema())`;

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

/**
 * What a mode of the runner works with: the runner's store, database and projections, and the
 * few shared services it offers (its modes are in the files beside this one).
 */
export interface RunnerContext {
  readonly store: EventStore;
  /** The runner's database (a rebuild's runner: a handle that sees the rebuild schema first). */
  readonly sql: Sql;
  /** `inline` on the SQL stores, `async` on KurrentDB. */
  readonly mode: 'inline' | 'async';
  /** The projections, in the order they are applied. */
  readonly projections: readonly Projection[];
  readonly byName: ReadonlyMap<string, Projection>;
  /** Inline mode: the projections applied after the append by the deferred follower. */
  readonly deferred: ReadonlySet<string>;
  readonly logger: Logger;
  readonly clock: () => Date;
  /** Events per catch-up page and per followed batch. */
  readonly pageSize: number;
  /** Told after projections applied events (see `ProjectionRunner.applied$`). */
  readonly applied$: Subject<ReadonlySet<string> | undefined>;
  /** Every projection's state, in the runner's order ({@link readStates}); `sql` defaults to the runner's. */
  states(sql?: Sql): Promise<ProjectionState[]>;
  /** The store's SQL-transaction capabilities (inline mode). @throws {TypeError} on KurrentDB. */
  appends(): TransactionalAppends;
}

/** Creates `projection_state` in the current schema if missing (src/projections/sql/projection-state/). */
export const migrateState = async (sql: Sql): Promise<void> => {
  await migrate(sql, 'projection-state', migrationsIn(new URL('../sql/projection-state/', import.meta.url)));
};

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

/**
 * The state of each of `projections` in `sql`'s `projection_state`, in their order; one without a
 * row is `building` from the start of the log.
 */
export const readStates = async (
  sql: Sql,
  projections: readonly Projection[],
): Promise<ProjectionState[]> => {
  const rows = await sql.query<{
    name: string;
    status: string;
    checkpoint: string | null;
    detail: unknown;
    updated_at: string | Date;
  }>(`SELECT name, status, checkpoint, detail, updated_at FROM projection_state`);
  const byName = new Map(rows.map((r) => [r.name, toState(r)]));
  return projections.map(
    (p) =>
      byName.get(p.name) ?? {
        name: p.name,
        status: 'building',
        checkpoint: undefined,
        failure: undefined,
        updatedAt: new Date(0),
      },
  );
};

/**
 * Marks projection `name` stopped at `failure`, in `sql` (the transaction that found it); with a
 * `checkpoint`, the events up to it stay applied.
 */
export const markStopped = async (
  sql: Sql,
  name: string,
  failure: ProjectionFailure,
  checkpoint: Position | undefined,
): Promise<void> => {
  await sql.query(
    `UPDATE projection_state SET status = 'stopped', detail = $2::jsonb, updated_at = now(),
       checkpoint = coalesce($3, checkpoint) WHERE name = $1`,
    [name, JSON.stringify(failure), checkpoint ? positionToString(checkpoint) : null],
  );
};

/** The failure to keep for `event` (its position and names, the error's message: never its data). */
export const failureOf = (event: RecordedEvent, error: unknown, now: Date): ProjectionFailure => ({
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

/**
 * The least of `positions`: where reading must start for all of them (undefined: one is at the
 * start of the log, or there is none).
 */
export const leastPosition = (positions: Iterable<Position | undefined>): Position | undefined => {
  let least: Position | undefined;
  for (const position of positions) {
    if (position === undefined) return undefined;
    if (least === undefined || comparePositions(position, least) < 0) least = position;
  }
  return least;
};

/**
 * Runs `locked` on one connection holding the runner's session advisory lock (one process builds,
 * or on KurrentDB follows, per schema), or `busy` on it when another process holds the lock.
 */
export const withRunnerLock = <T>(sql: Sql, locked: () => Promise<T>, busy: () => Promise<T>): Promise<T> =>
  sql.withConnection(async (conn) => {
    const [lock] = await conn.query<{ ok: boolean }>(`SELECT pg_try_advisory_lock(${RUNNER_LOCK_KEY}) AS ok`);
    if (!lock?.ok) return busy();
    try {
      return await locked();
    } finally {
      await conn.query(`SELECT pg_advisory_unlock(${RUNNER_LOCK_KEY})`).catch(() => undefined);
    }
  });

/** Resolves after `ms` milliseconds, or as soon as `signal` aborts. */
export const sleep = (ms: number, signal?: AbortSignal) =>
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
export const signalled = (): { promise: Promise<void>; resolve: () => void } => {
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
