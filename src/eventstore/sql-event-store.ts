/**
 * The SQL event store adapter (docs/architecture.md "Event store"): one implementation for both the
 * `postgres` (pg pool) and the `pglite` (in-process WASM Postgres) engines, over the {@link Sql}
 * abstraction.
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
 *
 * An append is one round trip: the plpgsql function `es_append` locks the streams in name order,
 * checks idempotency and expected states, inserts the events and reports the state of every
 * projection. The {@link AppendHook} (casebook's inline projections) then runs in the same
 * transaction, so the read models commit together with the events. When the hook can say its
 * work as calls of SQL functions, the append and those calls are one autocommit statement
 * (`es_append_inline`), and such appends made concurrently share statements and commits
 * ({@link Batcher}, `es_append_batch`). An append to a new stream that no inline projection
 * needs is one plain statement instead (APPEND_NEW_STREAM). docs/architecture.md "Event store".
 */
import { Subject, type Subscription } from 'rxjs';
import { Batcher } from '../db/batcher.js';
import { migrate, readMigrations } from '../db/migrations.js';
import type { Sql } from '../db/sql.js';
import {
  type AppendHook,
  AppendHookFailure,
  type AppendManyResult,
  type AppendOptions,
  type AppendRequest,
  type AppendResult,
  comparePositions,
  EventIdConflict,
  type EventMetadata,
  type EventStore,
  type ExpectedState,
  type InlineCall,
  type NewEvent,
  type PendingEvent,
  type Position,
  type ReadAllOptions,
  type ReadStreamOptions,
  type RecordedEvent,
  type SubscribeOptions,
  type TransactionalAppends,
  UnstorableEvent,
  WrongExpectedVersion,
} from './port.js';

/** NOTIFY channel on which appends announce themselves (payload empty). */
export const EVENTS_CHANNEL = 'casebook_events';

/**
 * Advisory lock every append holds shared for its transaction. A projection turning live after a
 * catch-up takes it exclusively: no append is in flight while it reads the last events, and none
 * starts before it is live (docs/architecture.md "Projections").
 */
export const APPEND_LOCK_KEY = `hashtext('casebook-append:' || current_schema())`;

/** The event store's schema, version by version (src/db/migrations.ts). */
const EVENT_STORE_MIGRATIONS = readMigrations(new URL('./sql/', import.meta.url));

/**
 * The append of events to a new stream, when no inline projection has work to do (the audit
 * trail's batches), as one plain statement instead of `es_append`: it takes the same shared append
 * lock, refuses to write (no row back) when a live projection is unknown to the appending process,
 * and creates the stream at its last revision. When the stream or an event id exists already, a
 * unique violation rolls it all back and `es_append` answers instead (a wrong expected version, a
 * replay, an id conflict). About half of `es_append`'s cost in PostgreSQL and in the appending
 * process (docs/performance.md "Appends: group commit, set-based, parallel arrays").
 * $1 stream, $2 events [{id, type, metadata}] (jsonb), $3 their data (json array), $4 known
 * projections (NULL: no check).
 */
const APPEND_NEW_STREAM = `WITH guard AS (
    SELECT pg_advisory_xact_lock_shared(${APPEND_LOCK_KEY}) IS NOT NULL AS locked,
           ($4::text[] IS NULL OR NOT EXISTS (SELECT 1 FROM projection_state p
             WHERE p.status = 'live' AND NOT (p.name = ANY ($4::text[])))) AS ok),
  stream AS (
    INSERT INTO es_streams (stream_name, revision)
    SELECT $1, jsonb_array_length($2::jsonb) - 1 FROM guard WHERE guard.ok),
  inserted AS (
    INSERT INTO es_events (event_id, stream_name, revision, type, data, metadata)
    SELECT (x.value->>'id')::uuid, $1, x.n - 1, x.value->>'type', d.value, x.value->'metadata'
      FROM guard, jsonb_array_elements($2::jsonb) WITH ORDINALITY AS x(value, n)
      JOIN json_array_elements($3::json) WITH ORDINALITY AS d(value, n) ON d.n = x.n
     WHERE guard.ok
    RETURNING revision, transaction_id, position)
  SELECT i.revision::text AS revision_text, i.transaction_id::text AS commit_text,
         i.position::text AS position_text
    FROM inserted i ORDER BY i.revision`;

/** Position reported for an append that wrote nothing to a stream that has no events. */
const START: Position = { commit: 0n, prepare: 0n };
const DEFAULT_MAX_COUNT = 1000;
const SUBSCRIPTION_PAGE = 500;
/** Attempts of an append that collided with a concurrent append of the same event id. */
const UNIQUE_VIOLATION_ATTEMPTS = 3;
/** Coalescing delay of the NOTIFY that wakes other processes' subscriptions, milliseconds. */
const NOTIFY_DELAY_MS = 5;
/** A JSON \u0000 escape: "\u0000" preceded by an even number of backslashes (none included). */
const NUL_ESCAPE = /(?<!\\)(?:\\\\)*\\u0000/;
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

interface StreamOutcome {
  readonly streamName: string;
  readonly nextRevision: bigint;
  readonly position: Position;
  readonly written: boolean;
}

interface AppendOutcome {
  readonly streams: StreamOutcome[];
  readonly recorded: RecordedEvent[];
}

/** What es_append returns. */
interface AppendReply {
  readonly streams: {
    stream: string;
    revision: string;
    written: boolean;
    commit: string;
    position: string;
  }[];
  readonly events: { stream: string; revision: string; commit: string; position: string }[];
  readonly projections: Record<string, string>;
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

const pgError = (error: unknown) =>
  (typeof error === 'object' && error !== null ? error : {}) as {
    code?: unknown;
    constraint?: unknown;
    detail?: unknown;
  };

const isEventIdUniqueViolation = (error: unknown): boolean => {
  const { code, constraint, detail } = pgError(error);
  if (code !== '23505') return false;
  return (
    (typeof constraint === 'string' && constraint.includes('event_id')) ||
    (typeof detail === 'string' && detail.includes('(event_id)'))
  );
};

const conflictingIdFromError = (error: unknown): string | undefined => {
  const detail = pgError(error).detail;
  if (typeof detail !== 'string') return undefined;
  return /\(event_id\)=\(([^)]+)\)/.exec(detail)?.[1];
};

const expectedText = (expected: ExpectedState): string =>
  typeof expected === 'bigint' ? expected.toString() : expected;

const parseExpected = (text: string): ExpectedState =>
  text === 'no_stream' || text === 'exists' || text === 'any' ? text : BigInt(text);

/** Maps es_append's own errors to the port's; other errors pass unchanged. */
const mapAppendError = (error: unknown): unknown => {
  const { code, detail } = pgError(error);
  if (code === 'CBW01' && typeof detail === 'string') {
    const d = JSON.parse(detail) as { stream: string; expected: string; actual: string };
    const actual = BigInt(d.actual);
    return new WrongExpectedVersion(d.stream, parseExpected(d.expected), actual < 0n ? 'no_stream' : actual);
  }
  if (code === 'CBE01') return new EventIdConflict(typeof detail === 'string' ? detail : 'unknown');
  // \u0000 in a JSON string, or bytes that are not UTF-8: Postgres text cannot hold them.
  if (code === '22P05' || code === '22021')
    return new UnstorableEvent('an event holds a character the store cannot keep (U+0000)');
  return error;
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
 * Event store on Postgres or PGlite (docs/architecture.md "Event store"). Open with
 * {@link SqlEventStore.open}; the caller owns the {@link Sql} and closes it after
 * {@link SqlEventStore.close}.
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
  private notifyTimer: NodeJS.Timeout | undefined;
  private closed = false;
  private hook: AppendHook | undefined;
  /** Appends that run the inline projections in their own statement, group-committed. */
  private readonly inlineAppends = new Batcher<InlineAppend, AppendReply>(
    (appends) => this.sendInlineAppends(appends),
    undefined,
    // Bytes: the data and the calls' rows, and about 200 for each event's structure.
    (a) =>
      a.data.length +
      a.calls.reduce((n, c) => n + c.argument.length, 0) +
      200 * a.source.reduce((n, r) => n + r.events.length, 0),
  );

  private constructor(private readonly sql: Sql) {
    this.kind = sql.kind;
    // On postgres a NOTIFY can arrive while an older transaction still holds the xmin horizon
    // below the new events, so an idle subscription must look again soon after. PGlite has a
    // single connection: every append is in-process and wakes subscriptions directly.
    this.pollMs = sql.kind === 'postgres' ? 100 : 250;
  }

  /**
   * Opens the store on `sql`, bringing its schema (tables, index, append functions:
   * src/eventstore/sql/*.sql) to the current version with the migrations when behind (idempotent,
   * safe when several processes start at once; one query when current). `sql` may also be a
   * transaction handle: appends then join that transaction and commit with it.
   * @throws {Error} the schema is newer than this casebook (src/db/migrations.ts).
   */
  static async open(sql: Sql): Promise<SqlEventStore> {
    await migrate(sql, 'eventstore', EVENT_STORE_MIGRATIONS);
    return new SqlEventStore(sql);
  }

  /** Installs the code every append runs in its transaction (the inline projections). */
  setAppendHook(hook: AppendHook | undefined): void {
    this.hook = hook;
  }

  /** Appends in SQL transactions: the hook, the append lock, and `$all` read in a transaction. */
  readonly transactional: TransactionalAppends = {
    setAppendHook: (hook) => this.setAppendHook(hook),
    lockAppends: async (tx) => {
      await tx.query(`SELECT pg_advisory_xact_lock(${APPEND_LOCK_KEY})`);
    },
    readAllIn: (tx, options, committedOnly) => SqlEventStore.readAllOn(tx, options, committedOnly),
  };

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
    const { streams } = await this.appendRequests([{ streamName, events, expectedState }]);
    return { nextRevision: streams[0]!.nextRevision, position: streams[0]!.position };
  }

  /**
   * Appends to several streams in one transaction: all or nothing. `position` is the greatest
   * position among the streams' results. Same errors as {@link append}; also a TypeError when a
   * stream appears twice.
   */
  async appendMany(
    requests: readonly AppendRequest[],
    options: AppendOptions = {},
  ): Promise<AppendManyResult> {
    const { streams } = await this.appendRequests(requests, options.wakeOthers ?? true);
    let position = START;
    for (const outcome of streams) {
      if (comparePositions(outcome.position, position) > 0) position = outcome.position;
    }
    return {
      position,
      streams: streams.map(({ streamName, nextRevision }) => ({ streamName, nextRevision })),
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

  /** Reads several whole streams in one query. */
  async readStreams(streamNames: readonly string[]): Promise<Map<string, RecordedEvent[]>> {
    const result = new Map<string, RecordedEvent[]>(streamNames.map((name) => [name, []]));
    if (streamNames.length === 0) return result;
    const rows = await this.sql.query<EventRow>(
      `SELECT ${EVENT_COLUMNS} FROM es_events WHERE stream_name = ANY($1::text[]) ORDER BY stream_name, revision`,
      [[...new Set(streamNames)]],
    );
    for (const row of rows) result.get(row.stream_name)?.push(toRecordedEvent(row));
    return result;
  }

  /**
   * Reads `$all` strictly after `from` in (transaction id, position) order, at most `maxCount`
   * events (default 1000), only from transactions below the snapshot's xmin: an event that is
   * still being committed can never appear later before one already returned.
   */
  async readAll(options: ReadAllOptions = {}): Promise<RecordedEvent[]> {
    return SqlEventStore.readAllOn(this.sql, options, true);
  }

  /**
   * `$all` on `sql` (a transaction, for instance). `committedOnly` false drops the snapshot-xmin
   * filter: only for a caller that knows no append is in flight (it holds {@link APPEND_LOCK_KEY}
   * exclusively).
   */
  static async readAllOn(
    sql: Sql,
    options: ReadAllOptions,
    committedOnly: boolean,
  ): Promise<RecordedEvent[]> {
    const maxCount = options.maxCount ?? DEFAULT_MAX_COUNT;
    const visible = committedOnly ? 'AND transaction_id < pg_snapshot_xmin(pg_current_snapshot())' : '';
    const params: unknown[] = [maxCount];
    const where = [visible];
    if (options.from) {
      params.push(String(options.from.commit), String(options.from.prepare));
      where.push('AND (transaction_id, position) > ($2::xid8, $3::bigint)');
    }
    if (options.excludeTypes?.length) {
      params.push([...options.excludeTypes]);
      where.push(`AND type <> ALL($${params.length}::text[])`);
    }
    const rows = await sql.query<EventRow>(
      `SELECT ${EVENT_COLUMNS} FROM es_events WHERE true ${where.join(' ')}
        ORDER BY transaction_id, position LIMIT $1::bigint`,
      params,
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

  /** Position of the last committed event in `$all` (readers may show it only once earlier transactions end). */
  async headPosition(): Promise<Position | undefined> {
    // Every committed event, not only those below the snapshot's xmin: a transaction still open
    // anywhere in the cluster holds xmin back, and a head below events already committed would
    // let a read-your-writes wait (the AuditEvent search) end before them.
    const [row] = await this.sql.query<{ commit_text: string; position_text: string }>(
      `SELECT transaction_id::text AS commit_text, position::text AS position_text FROM es_events
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
    clearTimeout(this.notifyTimer);
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

  /**
   * Tells other processes' subscriptions that events were appended: one NOTIFY per
   * {@link NOTIFY_DELAY_MS} at most, after the commit. Postgres commits notifying transactions one
   * at a time cluster-wide (docs/performance.md "Notifications at most once per delay"), and a lost notification only delays a subscriber
   * until its next poll.
   */
  private notifyOthers(): void {
    if (this.notifyTimer || this.closed || this.sql.kind !== 'postgres') return;
    this.notifyTimer = setTimeout(() => {
      this.notifyTimer = undefined;
      if (this.closed) return;
      this.sql.query(`SELECT pg_notify($1, '')`, [EVENTS_CHANNEL]).catch(() => undefined);
    }, NOTIFY_DELAY_MS);
    this.notifyTimer.unref?.();
  }

  /**
   * One statement for one or several appends of es_append_inline (one transaction). Appends whose
   * revisions are known (every request expects no stream or a given revision, and has events) go
   * set-based (es_append_set), alone or together; other batches go append by append
   * (es_append_batch). An append alone whose stream is not where it expected, or whose event id is
   * stored, is sent again to es_append_inline, which answers what that means (a wrong expected
   * version, a replay, an id conflict); a batch that fails is sent again append by append by the
   * {@link Batcher}.
   */
  private async sendInlineAppends(appends: readonly InlineAppend[]): Promise<AppendReply[]> {
    const parse = (reply: unknown) => (typeof reply === 'string' ? JSON.parse(reply) : reply);
    const set = setOf(appends);
    if (set) {
      const rows = await this.sql
        .query<{ reply: unknown }>(ES_APPEND_SET, set.params)
        .catch((error: unknown) => {
          const { code } = pgError(error);
          if (appends.length === 1 && (code === 'CBC01' || code === '23505')) return undefined;
          throw error;
        });
      if (rows) return set.replies(parse(rows[0]!.reply) as SetReply);
    }
    if (appends.length === 1) {
      const [one] = appends as [InlineAppend];
      const [row] = await this.sql.query<{ reply: unknown }>(
        'SELECT es_append_inline($1::jsonb, $2::json, $3::text[], $4::json) AS reply',
        [one.requests(), one.data, one.known, callsParam(one.calls)],
      );
      return [parse(row!.reply) as AppendReply];
    }
    const batch = `[${appends
      .map(
        (a) =>
          `{"requests":${a.requests()},"data":${a.data},"known":${JSON.stringify(a.known)},"calls":${callsParam(a.calls)}}`,
      )
      .join(',')}]`;
    const [row] = await this.sql.query<{ replies: unknown }>('SELECT es_append_batch($1::json) AS replies', [
      batch,
    ]);
    return parse(row!.replies) as AppendReply[];
  }

  private async appendRequests(
    requests: readonly AppendRequest[],
    wakeOthers = true,
  ): Promise<AppendOutcome> {
    validateRequests(requests);
    // es_append's structure, built when that path is taken (the plain new-stream append has its own).
    let structure: string | undefined;
    const payload = () => {
      structure ??= JSON.stringify(
        requests.map((r) => ({
          stream: r.streamName,
          expected: expectedText(r.expectedState),
          events: r.events.map((e) => ({ id: e.id, type: e.type, metadata: e.metadata })),
        })),
      );
      return structure;
    };
    const data = JSON.stringify(requests.flatMap((r) => r.events.map((e) => e.data ?? null)));
    // PostgreSQL text cannot hold U+0000, but a json value keeps the escape unread: refuse it here,
    // as a jsonb or text conversion of it later would fail (an escaped backslash before "u0000" is not one).
    if (data.includes('\\u0000') && NUL_ESCAPE.test(data))
      throw new UnstorableEvent('an event holds a character the store cannot keep (U+0000)');
    const failures = new Map<string, unknown>();
    const hook = this.hook;
    const known = hook ? [...hook.known] : null;
    // One autocommit statement when no inline projection has work to do (the audit trail's
    // appends): es_append is atomic on its own.
    const alone =
      !this.sql.inTransaction &&
      (hook === undefined || !hook.needed(new Set(requests.flatMap((r) => r.events.map((e) => e.type)))));
    // A new stream and nobody's inline projection: one plain statement (APPEND_NEW_STREAM).
    let newStream =
      alone &&
      requests.length === 1 &&
      requests[0]!.expectedState === 'no_stream' &&
      requests[0]!.events.length > 0;
    // The inline projections as calls in the append's own statement: one round trip instead of
    // BEGIN, es_append, the hook's statements and COMMIT (es_append_inline). Only when every
    // stream's revisions are known before the append; undefined after a fall back.
    const pending = !alone && !this.sql.inTransaction && hook?.calls ? pendingEvents(requests) : undefined;
    let calls: readonly InlineCall[] | undefined;
    try {
      calls = pending && hook?.calls?.(pending);
    } catch {
      // A projection cannot fold these events: the transaction path stops it (and only it).
      calls = undefined;
    }
    /**
     * es_append_inline, in a group commit with concurrent appends; undefined when the append has to
     * run in a transaction with the hook instead.
     */
    const esAppendInline = async (inline: readonly InlineCall[]): Promise<AppendOutcome | undefined> => {
      const reply = await this.inlineAppends
        .submit({ requests: payload, data, known, calls: inline, source: requests })
        .catch((error: unknown) => {
          // es_append's own answers stand; anything else (a projection not live, a call that
          // failed) is the transaction path's to tell.
          if (isAppendAnswer(error)) throw error;
          return undefined;
        });
      return reply && toOutcome(requests, reply);
    };
    /** es_append on `sql`: the reply, and what it means for the port. */
    const esAppend = async (sql: Sql) => {
      const [row] = await sql.query<{ reply: AppendReply | string }>(
        'SELECT es_append($1::jsonb, $2::json, $3::text[]) AS reply',
        [payload(), data, known],
      );
      const reply = (typeof row!.reply === 'string' ? JSON.parse(row!.reply) : row!.reply) as AppendReply;
      return { reply, outcome: toOutcome(requests, reply) };
    };
    /** APPEND_NEW_STREAM; undefined when es_append has to answer instead. */
    const appendNewStream = async (request: AppendRequest): Promise<AppendOutcome | undefined> => {
      const rows = await this.sql
        .query<NewStreamRow>(APPEND_NEW_STREAM, [
          request.streamName,
          JSON.stringify(request.events.map((e) => ({ id: e.id, type: e.type, metadata: e.metadata }))),
          data,
          known,
        ])
        .catch((error: unknown) => {
          // The stream or an event id exists: es_append tells which, and what that means.
          if (pgError(error).code === '23505') return undefined;
          throw error;
        });
      // No row: a live projection this process does not know (es_append refuses it with CBP01).
      return rows?.length === request.events.length ? newStreamOutcome(request, rows) : undefined;
    };
    for (let attempt = 1; ; attempt++) {
      try {
        let outcome: AppendOutcome | undefined;
        if (newStream) {
          outcome = await appendNewStream(requests[0]!);
          newStream = false;
        }
        if (!outcome && alone) outcome = (await esAppend(this.sql)).outcome;
        if (!outcome && calls) {
          outcome = await esAppendInline(calls);
          if (outcome) hook?.called?.(calls);
          else calls = undefined;
        }
        outcome ??= await this.sql.transaction(async (tx) => {
          const { reply, outcome } = await esAppend(tx);
          if (this.hook)
            await this.hook.apply(tx, outcome.recorded, new Map(Object.entries(reply.projections)), failures);
          return outcome;
        });
        if (outcome.recorded.length > 0) {
          this.wake();
          if (wakeOthers) this.notifyOthers();
        }
        return outcome;
      } catch (error) {
        if (error instanceof AppendHookFailure && !failures.has(error.key)) {
          failures.set(error.key, error.detail);
          continue;
        }
        // A concurrent transaction appending the same new event id makes our INSERT fail with a
        // unique violation once it commits; running the append again lets the id check answer.
        if (isEventIdUniqueViolation(error)) {
          if (attempt < UNIQUE_VIOLATION_ATTEMPTS) continue;
          const firstId = requests.find((r) => r.events.length > 0)?.events[0]?.id ?? 'unknown';
          throw new EventIdConflict(conflictingIdFromError(error) ?? firstId);
        }
        const { code, detail } = pgError(error);
        if (code === 'CBP01' && hook) throw hook.unknownProjection(String(detail));
        throw mapAppendError(error);
      }
    }
  }
}

/**
 * The events of `requests` as they will be recorded (revisions from each expected state), or
 * undefined when a stream's revision is not known before the append ('any', 'exists').
 */
const pendingEvents = (requests: readonly AppendRequest[]): PendingEvent[] | undefined => {
  const pending: PendingEvent[] = [];
  for (const request of requests) {
    const { expectedState } = request;
    const last =
      expectedState === 'no_stream' ? -1n : typeof expectedState === 'bigint' ? expectedState : undefined;
    if (last === undefined) return undefined;
    for (const [i, event] of request.events.entries())
      pending.push({ ...event, streamName: request.streamName, revision: last + BigInt(i + 1) });
  }
  return pending;
};

/** es_append_inline's calls parameter: each argument is JSON text already, embedded as it is. */
const callsParam = (calls: readonly InlineCall[]): string =>
  `[${calls
    .map(
      (c) =>
        `{"projection":${JSON.stringify(c.projection)},"function":${JSON.stringify(c.function)},"argument":${c.argument}}`,
    )
    .join(',')}]`;

/** An error that is es_append's answer (a wrong expected version, an id conflict, an unknown live projection). */
const isAppendAnswer = (error: unknown): boolean => {
  const { code } = pgError(error);
  return code === 'CBW01' || code === 'CBE01' || code === 'CBP01' || isEventIdUniqueViolation(error);
};

/**
 * One append of es_append_inline: its requests (`source`) and their structure as JSON text
 * (`requests`, built when needed), every event's data as one JSON array text, the hook's
 * projections (`known`) and the inline projections' calls.
 */
interface InlineAppend {
  readonly source: readonly AppendRequest[];
  readonly requests: () => string;
  readonly data: string;
  readonly known: readonly string[] | null;
  readonly calls: readonly InlineCall[];
}

/** es_append_set's statement (its parameters, with their types). */
const ES_APPEND_SET = `SELECT es_append_set($1::text[], $2::bigint[], $3::bigint[], $4::uuid[], $5::text[],
  $6::bigint[], $7::text[], $8::jsonb, $9::json, $10::text[], $11::text[], $12::text[], $13::json) AS reply`;

/** What es_append_set returns: its transaction's id, and each event's position by id. */
interface SetReply {
  readonly commit: string;
  readonly ids: readonly string[];
  readonly positions: readonly string[];
}

/** The elements of a JSON array text (`[…]`, as JSON.stringify writes it), or '' for `[]`. */
const arrayItems = (json: string): string => json.slice(1, -1);

/** The revision a request expects its stream at (-1: no stream), or undefined when not known. */
const expectedRevision = (request: AppendRequest): bigint | undefined =>
  request.expectedState === 'no_stream'
    ? -1n
    : typeof request.expectedState === 'bigint'
      ? request.expectedState
      : undefined;

/**
 * Appends for es_append_set, when in every one each request knows its stream's revision (no
 * stream, or a given revision) and has events, all of them know the same projections and every
 * inline call's argument is a JSON array of rows; undefined otherwise. `params` are the
 * statement's, `replies` turns its reply into each append's own, in the appends' order.
 */
const setOf = (appends: readonly InlineAppend[]) => {
  const known = appends[0]!.known;
  const sameKnown = (k: readonly string[] | null) =>
    k === known ||
    (k !== null && known !== null && k.length === known.length && k.every((x, i) => x === known[i]));
  for (const a of appends) {
    if (!sameKnown(a.known)) return undefined;
    if (a.source.some((r) => expectedRevision(r) === undefined || r.events.length === 0)) return undefined;
    if (a.calls.some((c) => !c.argument.startsWith('[') || !c.argument.endsWith(']'))) return undefined;
  }
  const streams: string[] = [];
  const expected: string[] = [];
  const lastRevisions: string[] = [];
  const ids: string[] = [];
  const eventStreams: string[] = [];
  const revisions: string[] = [];
  const types: string[] = [];
  const metadata: EventMetadata[] = [];
  for (const a of appends)
    for (const r of a.source) {
      const from = expectedRevision(r)!;
      streams.push(r.streamName);
      expected.push(String(from));
      lastRevisions.push(String(from + BigInt(r.events.length)));
      for (const [i, e] of r.events.entries()) {
        ids.push(e.id);
        eventStreams.push(r.streamName);
        revisions.push(String(from + BigInt(i + 1)));
        types.push(e.type);
        metadata.push(e.metadata);
      }
    }
  // Each inline function once, in the order of its first call; its rows in the appends' order.
  const calls = new Map<string, { projection: string; rows: string[] }>();
  for (const a of appends)
    for (const c of a.calls) {
      const call = calls.get(c.function) ?? { projection: c.projection, rows: [] };
      calls.set(c.function, call);
      const rows = arrayItems(c.argument);
      if (rows !== '') call.rows.push(rows);
    }
  const data = appends.map((a) => arrayItems(a.data)).filter((d) => d !== '');
  const params = [
    streams,
    expected,
    lastRevisions,
    ids,
    eventStreams,
    revisions,
    types,
    JSON.stringify(metadata),
    `[${data.join(',')}]`,
    known,
    [...calls.values()].map((c) => c.projection),
    [...calls.keys()],
    `[${[...calls.values()].map((c) => `[${c.rows.join(',')}]`).join(',')}]`,
  ];
  const replies = (reply: SetReply): AppendReply[] => {
    const positions = new Map(reply.ids.map((id, i) => [id, reply.positions[i]!]));
    let n = 0;
    return appends.map((a) => {
      const events: AppendReply['events'][number][] = [];
      const written: AppendReply['streams'][number][] = [];
      for (const r of a.source) {
        for (const e of r.events)
          events.push({
            stream: r.streamName,
            revision: revisions[n++]!,
            commit: reply.commit,
            position: positions.get(e.id.toLowerCase())!,
          });
        const last = events[events.length - 1]!;
        written.push({ ...last, written: true });
      }
      return { streams: written, events, projections: {} };
    });
  };
  return { params, replies };
};

/** A row of APPEND_NEW_STREAM (int8 and xid8 as text; aliased apart from the columns: see EVENT_COLUMNS). */
type NewStreamRow = { revision_text: string; commit_text: string; position_text: string };

/** The port's results for an append of `request` to a new stream (APPEND_NEW_STREAM's rows, by revision). */
const newStreamOutcome = (request: AppendRequest, rows: readonly NewStreamRow[]): AppendOutcome => {
  const recorded = request.events.map(
    (event, i): RecordedEvent => ({
      id: event.id,
      type: event.type,
      data: event.data,
      metadata: event.metadata,
      streamName: request.streamName,
      revision: BigInt(rows[i]!.revision_text),
      position: { commit: BigInt(rows[i]!.commit_text), prepare: BigInt(rows[i]!.position_text) },
    }),
  );
  const last = recorded[recorded.length - 1]!;
  return {
    streams: [
      { streamName: request.streamName, nextRevision: last.revision, position: last.position, written: true },
    ],
    recorded,
  };
};

/** Builds the port's results and the recorded events from es_append's reply. */
const toOutcome = (requests: readonly AppendRequest[], reply: AppendReply): AppendOutcome => {
  const byStream = new Map(requests.map((r) => [r.streamName, r]));
  const streams = reply.streams.map(
    (s): StreamOutcome => ({
      streamName: s.stream,
      nextRevision: BigInt(s.revision),
      position: { commit: BigInt(s.commit ?? '0'), prepare: BigInt(s.position ?? '0') },
      written: s.written,
    }),
  );
  // es_append returns the written events per stream in request order, revisions ascending.
  const cursor = new Map<string, number>();
  const recorded = reply.events.map((e): RecordedEvent => {
    const request = byStream.get(e.stream)!;
    const index = cursor.get(e.stream) ?? 0;
    cursor.set(e.stream, index + 1);
    const event = request.events[index]!;
    return {
      id: event.id,
      type: event.type,
      data: event.data,
      metadata: event.metadata,
      streamName: e.stream,
      revision: BigInt(e.revision),
      position: { commit: BigInt(e.commit), prepare: BigInt(e.position) },
    };
  });
  return { streams, recorded };
};
