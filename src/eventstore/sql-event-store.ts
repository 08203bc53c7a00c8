/**
 * The SQL event store adapter (DESIGN.md §2): one implementation for both the `postgres` (pg pool)
 * and the `pglite` (in-process WASM Postgres) engines, over the {@link Sql} abstraction.
 *
 * Storage: `es_streams` holds one row per stream with its last revision (-1 = no event yet) and is
 * the row lock that serialises appends to a stream; `es_events` holds every event with the xid8 of
 * the transaction that appended it and a global `bigserial` position.
 *
 * `$all` order is (transaction id, position), and readers only return events of transactions
 * below `pg_snapshot_xmin(pg_current_snapshot())`, i.e. transactions that have all finished. A
 * transaction that took its xid early but commits late therefore holds back every later event
 * until it is done, so a subscriber that resumes from the last position it saw can never skip an
 * event (sequence numbers alone are handed out before commit and would allow that).
 */
import { Subject, type Subscription } from 'rxjs';
import type { Sql } from '../db/sql.js';
import {
  type AppendManyResult,
  type AppendRequest,
  type AppendResult,
  comparePositions,
  EventIdConflict,
  type EventMetadata,
  type EventStore,
  type ExpectedState,
  type NewEvent,
  type Position,
  type ReadAllOptions,
  type ReadStreamOptions,
  type RecordedEvent,
  type SubscribeOptions,
  WrongExpectedVersion,
} from './port.js';

/** NOTIFY channel on which every append announces itself (payload empty). */
export const EVENTS_CHANNEL = 'casebook_events';

const SCHEMA = `
CREATE TABLE IF NOT EXISTS es_streams (
  stream_name text PRIMARY KEY,
  revision bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS es_events (
  position bigserial PRIMARY KEY,
  transaction_id xid8 NOT NULL DEFAULT pg_current_xact_id(),
  event_id uuid NOT NULL UNIQUE,
  stream_name text NOT NULL,
  revision bigint NOT NULL,
  type text NOT NULL,
  -- json, not jsonb: an event's data is kept exactly as written (FHIR element order included).
  data json NOT NULL,
  metadata jsonb NOT NULL,
  UNIQUE (stream_name, revision)
);
CREATE INDEX IF NOT EXISTS es_events_transaction_position_idx ON es_events (transaction_id, position);
`;

/** Position reported for an append that wrote nothing to a stream that has no events. */
const START: Position = { commit: 0n, prepare: 0n };
const DEFAULT_MAX_COUNT = 1000;
const SUBSCRIPTION_PAGE = 500;
/** Rows per INSERT statement: 6 parameters each stays far below Postgres' 65535 limit. */
const INSERT_CHUNK = 1000;
/** Attempts of an append that collided with a concurrent append of the same event id. */
const UNIQUE_VIOLATION_ATTEMPTS = 3;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

// int8 and xid8 columns are selected as text: pg returns int8 as string, PGlite as number (lossy).
// The aliases differ from the column names on purpose: ORDER BY resolves a bare name to an output
// column first, and ordering by the text would put position 1000 before 999.
const EVENT_COLUMNS = `transaction_id::text AS commit_text, position::text AS position_text,
  event_id::text AS id, stream_name, revision::text AS revision_text, type, data, metadata`;

type EventRow = {
  commit_text: string;
  position_text: string;
  id: string;
  stream_name: string;
  revision_text: string;
  type: string;
  data: unknown;
  metadata: EventMetadata;
};

type StoredIdRow = { id: string; stream_name: string; revision: string; commit: string; position: string };

interface StreamAppendOutcome {
  readonly streamName: string;
  readonly nextRevision: bigint;
  readonly position: Position;
  readonly written: boolean;
}

const toRecordedEvent = (row: EventRow): RecordedEvent => ({
  id: row.id,
  type: row.type,
  data: row.data,
  metadata: row.metadata,
  streamName: row.stream_name,
  revision: BigInt(row.revision_text),
  position: { commit: BigInt(row.commit_text), prepare: BigInt(row.position_text) },
});

const isEventIdUniqueViolation = (error: unknown): boolean => {
  if (typeof error !== 'object' || error === null) return false;
  const { code, constraint, detail } = error as { code?: unknown; constraint?: unknown; detail?: unknown };
  if (code !== '23505') return false;
  return (
    (typeof constraint === 'string' && constraint.includes('event_id')) ||
    (typeof detail === 'string' && detail.includes('(event_id)'))
  );
};

const conflictingIdFromError = (error: unknown): string | undefined => {
  const detail = (error as { detail?: unknown }).detail;
  if (typeof detail !== 'string') return undefined;
  return /\(event_id\)=\(([^)]+)\)/.exec(detail)?.[1];
};

/** Checks `expected` against the stream's current revision (-1n = no stream). */
const checkExpectedState = (streamName: string, expected: ExpectedState, current: bigint): void => {
  const exists = current >= 0n;
  const ok =
    expected === 'any' ||
    (expected === 'no_stream' && !exists) ||
    (expected === 'exists' && exists) ||
    (typeof expected === 'bigint' && expected === current);
  if (!ok) throw new WrongExpectedVersion(streamName, expected, exists ? current : 'no_stream');
};

/**
 * Validates the shape of an append before touching the database.
 * @throws {TypeError} an event id is not a UUID, or a stream appears twice in one appendMany.
 * @throws {EventIdConflict} the same event id appears twice in one request.
 */
const validateRequests = (requests: readonly AppendRequest[]): void => {
  const streams = new Set<string>();
  const ids = new Set<string>();
  for (const request of requests) {
    if (streams.has(request.streamName)) {
      throw new TypeError(`appendMany: stream ${request.streamName} appears more than once`);
    }
    streams.add(request.streamName);
    for (const event of request.events) {
      if (!UUID.test(event.id)) throw new TypeError(`event id ${JSON.stringify(event.id)} is not a UUID`);
      const id = event.id.toLowerCase();
      if (ids.has(id)) throw new EventIdConflict(event.id);
      ids.add(id);
    }
  }
};

/**
 * Event store on Postgres or PGlite (DESIGN.md §2). Open with {@link SqlEventStore.open}; the
 * caller owns the {@link Sql} and closes it after {@link SqlEventStore.close}.
 */
export class SqlEventStore implements EventStore {
  readonly kind: 'postgres' | 'pglite';
  /** Fallback poll interval of an idle subscription, in milliseconds. */
  private readonly pollMs: number;
  /** Wakes idle subscriptions: appends through this instance and NOTIFYs from other processes. */
  private readonly wake$ = new Subject<void>();
  /** Incremented on every wake, so a subscription sees wakes that happened while it was reading. */
  private wakeups = 0;
  private listening: Promise<(() => Promise<void>) | undefined> | undefined;
  private closed = false;

  private constructor(private readonly sql: Sql) {
    this.kind = sql.kind;
    // On postgres a NOTIFY can arrive while an older transaction still holds the xmin horizon
    // below the new events, so an idle subscription must look again soon after. PGlite has a
    // single connection: every append is in-process and wakes subscriptions directly.
    this.pollMs = sql.kind === 'postgres' ? 100 : 250;
  }

  /**
   * Opens the store on `sql`, creating the `es_` tables and index when missing (idempotent, safe
   * when several processes start at once). `sql` may also be a transaction handle: appends then
   * join that transaction and commit with it (tests use this to hold a transaction open).
   */
  static async open(sql: Sql): Promise<SqlEventStore> {
    const [present] = await sql.query<{ ready: boolean }>(
      `SELECT to_regclass('es_streams') IS NOT NULL AND to_regclass('es_events') IS NOT NULL
          AND to_regclass('es_events_transaction_position_idx') IS NOT NULL AS ready`,
    );
    if (!present?.ready) {
      await sql.transaction(async (tx) => {
        // Concurrent CREATE TABLE IF NOT EXISTS can still collide on the catalog; serialise them.
        await tx.query(`SELECT pg_advisory_xact_lock(hashtext('casebook.eventstore.schema'))`);
        await tx.exec(SCHEMA);
      });
    }
    return new SqlEventStore(sql);
  }

  /**
   * Appends `events` to `streamName` in one transaction when the stream is in `expectedState`.
   * Replaying ids that are all stored, consecutively and in order, on this stream returns the stored
   * result without writing (whatever `expectedState` says). An empty `events` writes nothing but
   * still checks `expectedState`; its result is the stream's last revision (-1n when absent) and
   * the position of its last event ({commit: 0n, prepare: 0n} when it has none).
   * @throws {WrongExpectedVersion} the stream is not in `expectedState`; nothing written.
   * @throws {EventIdConflict} some ids are already stored, or stored on another stream; nothing written.
   * @throws {TypeError} an event id is not a UUID.
   */
  async append(
    streamName: string,
    events: readonly NewEvent[],
    expectedState: ExpectedState,
  ): Promise<AppendResult> {
    const [outcome] = await this.appendRequests([{ streamName, events, expectedState }]);
    return { nextRevision: outcome!.nextRevision, position: outcome!.position };
  }

  /**
   * Appends to several streams in one transaction: all or nothing. Streams are locked in name
   * order so concurrent multi-stream appends cannot deadlock. `position` is the greatest position
   * among the streams' results. Same errors as {@link append}; also a TypeError when a stream
   * appears twice.
   */
  async appendMany(requests: readonly AppendRequest[]): Promise<AppendManyResult> {
    const outcomes = await this.appendRequests(requests);
    let position = START;
    for (const outcome of outcomes) {
      if (comparePositions(outcome.position, position) > 0) position = outcome.position;
    }
    return {
      position,
      streams: outcomes.map(({ streamName, nextRevision }) => ({ streamName, nextRevision })),
    };
  }

  /** Reads a stream forwards from `fromRevision` (default 0n); an absent stream reads as []. */
  async readStream(streamName: string, options: ReadStreamOptions = {}): Promise<RecordedEvent[]> {
    const rows = await this.sql.query<EventRow>(
      `SELECT ${EVENT_COLUMNS} FROM es_events
        WHERE stream_name = $1 AND revision >= $2::bigint
        ORDER BY revision LIMIT $3::bigint`,
      [streamName, String(options.fromRevision ?? 0n), options.maxCount ?? null],
    );
    return rows.map(toRecordedEvent);
  }

  /**
   * Reads `$all` strictly after `from` in (transaction id, position) order, at most `maxCount`
   * events (default 1000), only from transactions below the snapshot's xmin: an event that is
   * still being committed can never appear later before one already returned.
   */
  async readAll(options: ReadAllOptions = {}): Promise<RecordedEvent[]> {
    const maxCount = options.maxCount ?? DEFAULT_MAX_COUNT;
    const visible = 'transaction_id < pg_snapshot_xmin(pg_current_snapshot())';
    const rows = options.from
      ? await this.sql.query<EventRow>(
          `SELECT ${EVENT_COLUMNS} FROM es_events
            WHERE (transaction_id, position) > ($1::xid8, $2::bigint) AND ${visible}
            ORDER BY transaction_id, position LIMIT $3::bigint`,
          [String(options.from.commit), String(options.from.prepare), maxCount],
        )
      : await this.sql.query<EventRow>(
          `SELECT ${EVENT_COLUMNS} FROM es_events WHERE ${visible}
            ORDER BY transaction_id, position LIMIT $1::bigint`,
          [maxCount],
        );
    return rows.map(toRecordedEvent);
  }

  /**
   * Yields every event strictly after `from`, then later appends as they become visible, in
   * position order, until `signal` aborts, the consumer stops iterating, or the store is closed.
   * An idle subscription is woken by appends through this instance, by NOTIFY on
   * {@link EVENTS_CHANNEL} from other connections, and by a poll (100 ms postgres, 250 ms pglite).
   * Query errors (e.g. the Sql was closed) are thrown to the consumer.
   */
  async *subscribeToAll(options: SubscribeOptions = {}): AsyncGenerator<RecordedEvent> {
    const { signal } = options;
    let from = options.from;
    this.startListening();
    while (!signal?.aborted && !this.closed) {
      const seen = this.wakeups;
      const page = await this.readAll({ ...(from ? { from } : {}), maxCount: SUBSCRIPTION_PAGE });
      for (const event of page) {
        if (signal?.aborted || this.closed) return;
        yield event;
        from = event.position;
      }
      if (page.length === 0) await this.waitForWake(signal, seen);
    }
  }

  /** Position of the last visible event in `$all` (same visibility as {@link readAll}). */
  async headPosition(): Promise<Position | undefined> {
    const [row] = await this.sql.query<{ commit_text: string; position_text: string }>(
      `SELECT transaction_id::text AS commit_text, position::text AS position_text FROM es_events
        WHERE transaction_id < pg_snapshot_xmin(pg_current_snapshot())
        ORDER BY transaction_id DESC, position DESC LIMIT 1`,
    );
    return row ? { commit: BigInt(row.commit_text), prepare: BigInt(row.position_text) } : undefined;
  }

  /**
   * Stops listening and ends every subscription of this store (they return at their next wait).
   * Does not close the {@link Sql}: its owner does, after this.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.wake$.complete();
    const stop = await this.listening;
    this.listening = undefined;
    await stop?.().catch(() => undefined);
  }

  private wake(): void {
    this.wakeups++;
    this.wake$.next();
  }

  /** LISTENs once per store, on first subscription; without it subscriptions still poll. */
  private startListening(): void {
    if (this.listening || this.closed) return;
    this.listening = this.sql.listen(EVENTS_CHANNEL, () => this.wake()).catch(() => undefined);
  }

  /** Resolves on the next wake, poll tick, abort or close; leaves no timer or listener behind. */
  private waitForWake(signal: AbortSignal | undefined, seen: number): Promise<void> {
    if (this.wakeups !== seen || signal?.aborted || this.closed) return Promise.resolve();
    return new Promise<void>((resolve) => {
      let settled = false;
      let subscription: Subscription | undefined;
      const done = () => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        subscription?.unsubscribe();
        signal?.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, this.pollMs);
      signal?.addEventListener('abort', done, { once: true });
      subscription = this.wake$.subscribe({ next: done, complete: done });
      if (settled) subscription.unsubscribe();
    });
  }

  private async appendRequests(requests: readonly AppendRequest[]): Promise<StreamAppendOutcome[]> {
    validateRequests(requests);
    const outcomes = await this.retryOnConcurrentDuplicate(requests, () =>
      this.sql.transaction(async (tx) => {
        const current = new Map<string, bigint>();
        // A fixed lock order (by name) keeps concurrent multi-stream appends deadlock-free.
        const names = requests.map((r) => r.streamName).sort();
        for (const name of names) current.set(name, await this.lockStream(tx, name));
        const results: StreamAppendOutcome[] = [];
        for (const request of requests) {
          results.push(await this.appendToLockedStream(tx, request, current.get(request.streamName)!));
        }
        return results;
      }),
    );
    if (outcomes.some((o) => o.written)) {
      this.wake();
      // Notified after commit, not inside the append transaction: Postgres commits notifying
      // transactions one at a time cluster-wide, which capped concurrent appends (bench/README.md).
      // A lost notification only delays other processes' subscribers until their next poll.
      await this.sql.query(`SELECT pg_notify($1, '')`, [EVENTS_CHANNEL]).catch(() => undefined);
    }
    return outcomes;
  }

  /**
   * A concurrent transaction appending the same new event id makes our INSERT fail with a unique
   * violation once it commits. Running the append again lets the id check see the committed event
   * and answer as a replay or an {@link EventIdConflict}.
   */
  private async retryOnConcurrentDuplicate<T>(
    requests: readonly AppendRequest[],
    run: () => Promise<T>,
  ): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await run();
      } catch (error) {
        if (!isEventIdUniqueViolation(error)) throw error;
        if (attempt >= UNIQUE_VIOLATION_ATTEMPTS) {
          const firstId = requests.find((r) => r.events.length > 0)?.events[0]?.id ?? 'unknown';
          throw new EventIdConflict(conflictingIdFromError(error) ?? firstId);
        }
      }
    }
  }

  /** Locks the stream row (creating it with revision -1 if absent) and returns its revision. */
  private async lockStream(tx: Sql, streamName: string): Promise<bigint> {
    await tx.query('INSERT INTO es_streams (stream_name, revision) VALUES ($1, -1) ON CONFLICT DO NOTHING', [
      streamName,
    ]);
    const [row] = await tx.query<{ revision: string }>(
      'SELECT revision::text AS revision FROM es_streams WHERE stream_name = $1 FOR UPDATE',
      [streamName],
    );
    return BigInt(row!.revision);
  }

  private async appendToLockedStream(
    tx: Sql,
    request: AppendRequest,
    current: bigint,
  ): Promise<StreamAppendOutcome> {
    const { streamName, events, expectedState } = request;
    if (events.length === 0) {
      checkExpectedState(streamName, expectedState, current);
      const [last] = await tx.query<{ commit_text: string; position_text: string }>(
        `SELECT transaction_id::text AS commit_text, position::text AS position_text FROM es_events
          WHERE stream_name = $1 ORDER BY revision DESC LIMIT 1`,
        [streamName],
      );
      const position = last
        ? { commit: BigInt(last.commit_text), prepare: BigInt(last.position_text) }
        : START;
      return { streamName, nextRevision: current, position, written: false };
    }

    const replay = await this.replayedOutcome(tx, request);
    if (replay) return replay;

    checkExpectedState(streamName, expectedState, current);
    let commit = 0n;
    let last = 0n;
    for (let start = 0; start < events.length; start += INSERT_CHUNK) {
      const chunk = events.slice(start, start + INSERT_CHUNK);
      const params: unknown[] = [streamName];
      const values = chunk.map((event, i) => {
        params.push(
          event.id,
          String(current + 1n + BigInt(start + i)),
          event.type,
          JSON.stringify(event.data ?? null),
          JSON.stringify(event.metadata),
        );
        const n = params.length;
        return `($${n - 4}::uuid, $1, $${n - 3}::bigint, $${n - 2}, $${n - 1}::json, $${n}::jsonb)`;
      });
      const rows = await tx.query<{ commit: string; position: string }>(
        `INSERT INTO es_events (event_id, stream_name, revision, type, data, metadata)
         VALUES ${values.join(', ')}
         RETURNING transaction_id::text AS commit, position::text AS position`,
        params,
      );
      for (const row of rows) {
        commit = BigInt(row.commit);
        const position = BigInt(row.position);
        if (position > last) last = position;
      }
    }
    const nextRevision = current + BigInt(events.length);
    await tx.query('UPDATE es_streams SET revision = $2::bigint WHERE stream_name = $1', [
      streamName,
      String(nextRevision),
    ]);
    return { streamName, nextRevision, position: { commit, prepare: last }, written: true };
  }

  /**
   * Idempotency by event id: undefined when none of the ids is stored; the stored result when all
   * of them are stored consecutively, in order, on this stream.
   * @throws {EventIdConflict} only some ids are stored, or they are stored elsewhere.
   */
  private async replayedOutcome(tx: Sql, request: AppendRequest): Promise<StreamAppendOutcome | undefined> {
    const { streamName, events } = request;
    const ids = events.map((e) => e.id.toLowerCase());
    const rows = await tx.query<StoredIdRow>(
      `SELECT event_id::text AS id, stream_name, revision::text AS revision,
              transaction_id::text AS commit, position::text AS position
         FROM es_events
        WHERE event_id IN (SELECT jsonb_array_elements_text($1::jsonb)::uuid)`,
      [JSON.stringify(ids)],
    );
    if (rows.length === 0) return undefined;
    const byId = new Map(rows.map((row) => [row.id, row]));
    const first = byId.get(ids[0]!);
    const isReplay =
      first !== undefined &&
      rows.length === ids.length &&
      ids.every((id, i) => {
        const row = byId.get(id);
        return row?.stream_name === streamName && BigInt(row.revision) === BigInt(first.revision) + BigInt(i);
      });
    if (!isReplay) {
      const stored = events.find((e) => byId.has(e.id.toLowerCase()))!;
      throw new EventIdConflict(stored.id);
    }
    const lastRow = byId.get(ids[ids.length - 1]!)!;
    return {
      streamName,
      nextRevision: BigInt(lastRow.revision),
      position: { commit: BigInt(lastRow.commit), prepare: BigInt(lastRow.position) },
      written: false,
    };
  }
}
