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
 * One append path (issue 34; docs/architecture.md "Event store"): every append is a call of the
 * SQL function `es_append` (src/eventstore/sql/002_one_append.sql) by {@link sendAppends}, its one
 * caller. Concurrent appends of this process share calls (group commit, {@link Batcher}); each
 * gets its own answer in the reply — written, a replay, a wrong expected version, an id conflict,
 * an unknown live projection — never an error to retry on. The inline read models' work goes in
 * the same call as SQL function calls ({@link InlineCall}); when the projection hook cannot say it
 * so, or a call's projection is not live, or a call fails, the append is the same call without
 * calls, in a transaction with the hook ({@link AppendHook.apply}), which decides what that means.
 */
import { Subject, type Subscription } from 'rxjs';
import { Batcher } from '../db/batcher.js';
import { migrate, readMigrations } from '../db/migrations.js';
import type { Sql } from '../db/sql.js';
import {
  type AppendManyResult,
  type AppendOptions,
  type AppendRequest,
  type AppendResult,
  comparePositions,
  EventIdConflict,
  type EventMetadata,
  type ExpectedState,
  type NewEvent,
  type PendingEvent,
  type Position,
  type ReadAllOptions,
  type ReadStreamOptions,
  type RecordedEvent,
  type SubscribeOptions,
  UnstorableEvent,
  WrongExpectedVersion,
} from './port.js';
import { decodeSome, type EventCodec } from './shredding/codec.js';
import {
  type AppendHook,
  AppendHookFailure,
  type InlineCall,
  type TransactionalAppends,
  type TransactionalEventStore,
} from './sql-capability.js';

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

/** The one append statement (src/eventstore/sql/002_one_append.sql describes its parameters). */
const ES_APPEND = `SELECT es_append($1::integer[], $2::text[], $3::bigint[], $4::integer[], $5::uuid[],
  $6::text[], $7::jsonb, $8::json, $9::text[], $10::integer[], $11::text[], $12::text[], $13::json) AS reply`;

/** Position reported for an append that wrote nothing to a stream that has no events. */
const START: Position = { commit: 0n, prepare: 0n };
const DEFAULT_MAX_COUNT = 1000;
const SUBSCRIPTION_PAGE = 500;
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
}

interface AppendOutcome {
  readonly streams: StreamOutcome[];
  readonly recorded: RecordedEvent[];
}

/**
 * One append as {@link sendAppends} sends it: its requests, every event's data as one JSON array
 * text (in request order), the projections the process knows (null: no check) and the inline
 * read models' calls (null: none, and the answer carries every projection's status for the hook).
 */
interface Append {
  readonly requests: readonly AppendRequest[];
  readonly data: string;
  readonly known: readonly string[] | null;
  readonly calls: readonly InlineCall[] | null;
}

/** es_append's reply (src/eventstore/sql/002_one_append.sql). */
interface Reply {
  readonly commit: string | null;
  readonly status: readonly string[];
  readonly detail: readonly (string | null)[];
  readonly outcome?: readonly string[];
  readonly revision?: readonly string[];
  readonly commits?: readonly (string | null)[];
  readonly positions?: readonly (string | null)[];
  readonly event_positions?: readonly (string | null)[];
  readonly projections?: Record<string, string> | null;
}

/** One append's part of a reply: per request and per event of that append only. */
interface Answer {
  readonly status: 'ok' | 'wrong' | 'conflict' | 'unknown' | 'not_live';
  /** wrong: the index of the refused request in the append; conflict: the id; else a projection. */
  readonly detail: string | null;
  readonly commit: string | null;
  readonly outcome: readonly string[];
  readonly revision: readonly string[];
  readonly commits: readonly (string | null)[];
  readonly positions: readonly (string | null)[];
  readonly eventPositions: readonly (string | null)[];
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

/** Whether `error` is one {@link storeError} turns into the port's. */
const isStoreAnswer = (error: unknown): boolean => {
  const { code } = pgError(error);
  return code === '22P05' || code === '22021' || isEventIdUniqueViolation(error);
};

/**
 * The port's error for what the database raised while appending: a unique violation on an event
 * id (a concurrent append stored that id on another stream first) is an {@link EventIdConflict};
 * \u0000 in a JSON string, or bytes that are not UTF-8 (Postgres text cannot hold them), an
 * {@link UnstorableEvent}. Other errors pass unchanged.
 */
const storeError = (error: unknown, requests: readonly AppendRequest[]): unknown => {
  const { code, detail } = pgError(error);
  if (isEventIdUniqueViolation(error)) {
    const id = typeof detail === 'string' ? /\(event_id\)=\(([^)]+)\)/.exec(detail)?.[1] : undefined;
    return new EventIdConflict(id ?? requests.find((r) => r.events.length > 0)?.events[0]?.id ?? 'unknown');
  }
  if (code === '22P05' || code === '22021')
    return new UnstorableEvent('an event holds a character the store cannot keep (U+0000)');
  return error;
};

/** es_append's code of an expected state: -1 no stream, -2 any, -3 exists, else the revision. */
const expectedCode = (expected: ExpectedState): string =>
  expected === 'no_stream'
    ? '-1'
    : expected === 'any'
      ? '-2'
      : expected === 'exists'
        ? '-3'
        : String(expected);

/** The elements of a JSON array text (`[…]`, as JSON.stringify writes it), or '' for `[]`. */
const arrayItems = (json: string): string => json.slice(1, -1);

/**
 * Sends `appends` as one call of es_append on `sql` (one statement, one transaction unless `sql`
 * is one) and splits its reply into each append's {@link Answer}, in order. The one caller of
 * es_append (docs/architecture.md "Event store"). Every append must know the same projections, and
 * no stream may appear in two of them (the {@link Batcher} of the store sees to both).
 * @throws what the database raises: a call that failed, a concurrent append that stored one of the
 *   ids on another stream (a unique violation), data PostgreSQL cannot keep; nothing is written.
 */
const sendAppends = async (sql: Sql, appends: readonly Append[]): Promise<Answer[]> => {
  const requestAppends: number[] = [];
  const streams: string[] = [];
  const expected: string[] = [];
  const counts: number[] = [];
  const ids: string[] = [];
  const types: string[] = [];
  const metadata: EventMetadata[] = [];
  const callAppends: number[] = [];
  const callProjections: string[] = [];
  const callFunctions: string[] = [];
  const callArguments: string[] = [];
  for (const [i, append] of appends.entries()) {
    for (const request of append.requests) {
      requestAppends.push(i + 1);
      streams.push(request.streamName);
      expected.push(expectedCode(request.expectedState));
      counts.push(request.events.length);
      for (const event of request.events) {
        ids.push(event.id);
        types.push(event.type);
        metadata.push(event.metadata);
      }
    }
    for (const call of append.calls ?? []) {
      callAppends.push(i + 1);
      callProjections.push(call.projection);
      callFunctions.push(call.function);
      callArguments.push(call.argument);
    }
  }
  const withCalls = appends.some((a) => a.calls !== null);
  const data = appends.map((a) => arrayItems(a.data)).filter((d) => d !== '');
  const [row] = await sql.query<{ reply: unknown }>(ES_APPEND, [
    requestAppends,
    streams,
    expected,
    counts,
    ids,
    types,
    JSON.stringify(metadata),
    `[${data.join(',')}]`,
    appends[0]?.known ?? null,
    withCalls ? callAppends : null,
    withCalls ? callProjections : null,
    withCalls ? callFunctions : null,
    withCalls ? `[${callArguments.join(',')}]` : null,
  ]);
  const reply = (typeof row!.reply === 'string' ? JSON.parse(row!.reply) : row!.reply) as Reply;
  let requestAt = 0;
  let eventAt = 0;
  return appends.map((append, i) => {
    const requests = append.requests.length;
    const events = append.requests.reduce((n, r) => n + r.events.length, 0);
    const status = reply.status[i] as Answer['status'];
    const detail = reply.detail[i] ?? null;
    const answer: Answer = {
      status,
      detail: status === 'wrong' ? String(Number(detail) - 1 - requestAt) : detail,
      commit: reply.commit,
      outcome: reply.outcome?.slice(requestAt, requestAt + requests) ?? [],
      revision: reply.revision?.slice(requestAt, requestAt + requests) ?? [],
      commits: reply.commits?.slice(requestAt, requestAt + requests) ?? [],
      positions: reply.positions?.slice(requestAt, requestAt + requests) ?? [],
      eventPositions: reply.event_positions?.slice(eventAt, eventAt + events) ?? [],
      projections: reply.projections ?? {},
    };
    requestAt += requests;
    eventAt += events;
    return answer;
  });
};

/**
 * The port's result of an append from its {@link Answer}, or 'not_live' when a call's projection
 * is not live (the hook then decides).
 * @throws {WrongExpectedVersion} {@link EventIdConflict}, or the hook's error for an unknown live
 *   projection: the append was refused and nothing of it written.
 */
const outcomeOf = (
  append: Append,
  answer: Answer,
  hook: AppendHook | undefined,
): AppendOutcome | 'not_live' => {
  const { requests } = append;
  switch (answer.status) {
    case 'ok':
      break;
    case 'not_live':
      return 'not_live';
    case 'wrong': {
      const index = Number(answer.detail);
      const request = requests[index]!;
      const actual = BigInt(answer.revision[index]!);
      throw new WrongExpectedVersion(
        request.streamName,
        request.expectedState,
        actual < 0n ? 'no_stream' : actual,
      );
    }
    case 'conflict':
      throw new EventIdConflict(answer.detail ?? 'unknown');
    case 'unknown':
      throw (
        hook?.unknownProjection(answer.detail ?? 'unknown') ??
        new Error(`a newer casebook runs projection ${answer.detail}`)
      );
    default:
      throw new Error(`es_append answered ${String(answer.status)}`);
  }
  const streams: StreamOutcome[] = [];
  const recorded: RecordedEvent[] = [];
  let eventAt = 0;
  for (const [i, request] of requests.entries()) {
    const revision = BigInt(answer.revision[i]!);
    streams.push({
      streamName: request.streamName,
      nextRevision: revision,
      position: { commit: BigInt(answer.commits[i] ?? '0'), prepare: BigInt(answer.positions[i] ?? '0') },
    });
    if (answer.outcome[i] === 'write') {
      const first = revision - BigInt(request.events.length) + 1n;
      for (const [k, event] of request.events.entries())
        recorded.push({
          ...event,
          streamName: request.streamName,
          revision: first + BigInt(k),
          position: { commit: BigInt(answer.commit!), prepare: BigInt(answer.eventPositions[eventAt + k]!) },
        });
    }
    eventAt += request.events.length;
  }
  return { streams, recorded };
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

/** Whether `append` may be sent in one call with `batch`: the same projections known, no stream in common. */
const joinsBatch = (batch: readonly Append[], append: Append): boolean => {
  const known = append.known?.join('\n') ?? null;
  const streams = new Set(append.requests.map((r) => r.streamName));
  return batch.every(
    (other) =>
      (other.known?.join('\n') ?? null) === known && !other.requests.some((r) => streams.has(r.streamName)),
  );
};

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

/**
 * The hook's work for `requests` as calls es_append runs, or undefined when it cannot be said so:
 * a stream's revisions are not known before the append, the hook has no calls or cannot fold the
 * events, or an argument is not a JSON array of rows.
 */
const inlineCallsOf = (
  hook: AppendHook,
  requests: readonly AppendRequest[],
): readonly InlineCall[] | undefined => {
  const pending = hook.calls ? pendingEvents(requests) : undefined;
  if (!pending) return undefined;
  try {
    const calls = hook.calls?.(pending);
    return calls?.every((c) => c.argument.startsWith('[') && c.argument.endsWith(']')) ? calls : undefined;
  } catch {
    // A projection cannot fold these events: the hook's apply stops it (and only it).
    return undefined;
  }
};

/**
 * Event store on Postgres or PGlite (docs/architecture.md "Event store"). Open with
 * {@link SqlEventStore.open}; the caller owns the {@link Sql} and closes it after
 * {@link SqlEventStore.close}.
 */
export class SqlEventStore implements TransactionalEventStore {
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
  /** The group commit of appends on a shared handle (a pool, PGlite): one es_append call a batch. */
  private readonly appends = new Batcher<Append, Answer>(
    (appends) => sendAppends(this.sql, appends),
    undefined,
    // Bytes: the data and the calls' rows, and about 200 for each event's structure.
    (a) =>
      a.data.length +
      (a.calls ?? []).reduce((n, c) => n + c.argument.length, 0) +
      200 * a.requests.reduce((n, r) => n + r.events.length, 0),
    undefined,
    joinsBatch,
  );

  /**
   * Whole-stream reads of concurrent callers on a shared handle, one query a batch (as the reads of
   * resources, src/projections/resources.ts): a command's loads are a round trip each otherwise.
   */
  private readonly streamReads = new Batcher<readonly string[], Map<string, RecordedEvent[]> | Error>(
    (batch) => this.readStreamsBatch(batch),
  );

  private constructor(
    private readonly sql: Sql,
    /** Encrypts what holds a patient's PHI, decrypts what is read (docs/architecture.md "Erasure"). */
    private readonly codec?: EventCodec,
  ) {
    this.kind = sql.kind;
    // On postgres a NOTIFY can arrive while an older transaction still holds the xmin horizon
    // below the new events, so an idle subscription must look again soon after. PGlite has a
    // single connection: every append is in-process and wakes subscriptions directly.
    this.pollMs = sql.kind === 'postgres' ? 100 : 250;
  }

  /**
   * Opens the store on `sql`, bringing its schema (tables, index, the append function:
   * src/eventstore/sql/*.sql) to the current version with the migrations when behind (idempotent,
   * safe when several processes start at once; one query when current). `sql` may also be a
   * transaction handle: appends then join that transaction and commit with it.
   * @param options.codec what the store keeps of each event's data and how it reads it back (the
   *   crypto-shredding codec, docs/architecture.md "Erasure"); without it, data as it is.
   * @throws {Error} the schema is newer than this casebook (src/db/migrations.ts).
   */
  static async open(sql: Sql, options: { codec?: EventCodec } = {}): Promise<SqlEventStore> {
    await migrate(sql, 'eventstore', EVENT_STORE_MIGRATIONS);
    return new SqlEventStore(sql, options.codec);
  }

  /** Installs the code every append runs in its transaction (the inline projections). */
  setAppendHook(hook: AppendHook | undefined): void {
    this.hook = hook;
  }

  /** The SQL capability (src/eventstore/sql-capability.ts): the hook, the append lock, `$all` in a transaction. */
  readonly transactional: TransactionalAppends = {
    setAppendHook: (hook) => this.setAppendHook(hook),
    lockAppends: async (tx) => {
      await tx.query(`SELECT pg_advisory_xact_lock(${APPEND_LOCK_KEY})`);
    },
    readAllIn: (tx, options, committedOnly) =>
      SqlEventStore.readAllOn(tx, options, committedOnly, this.codec),
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
    if (this.sql.shared && !options.fromRevision && options.maxCount === undefined)
      return (await this.readStreams([streamName])).get(streamName) ?? [];
    const rows = await this.sql.query<EventRow>(
      `SELECT ${EVENT_COLUMNS} FROM es_events
        WHERE stream_name = $1 AND revision >= $2::bigint
        ORDER BY revision LIMIT $3::bigint`,
      [streamName, String(options.fromRevision ?? 0n), options.maxCount ?? null],
    );
    return this.decode(rows.map(toRecordedEvent));
  }

  /**
   * Reads several whole streams in one query; on a shared handle, in one query with the whole-stream
   * reads of concurrent callers.
   */
  async readStreams(streamNames: readonly string[]): Promise<Map<string, RecordedEvent[]>> {
    if (streamNames.length === 0) return new Map();
    const read = this.sql.shared
      ? await this.streamReads.submit(streamNames)
      : (await this.readStreamsBatch([streamNames]))[0]!;
    if (read instanceof Error) throw read;
    return read;
  }

  /**
   * Each of `batch`'s stream lists read by one query of every name, decoded together (one
   * {@link EventCodec.decode}: a key several lists need is looked up once). When that decode
   * throws (an envelope that does not authenticate, a key the key store lacks), each list is
   * decoded on its own: only the lists holding such an event get its error.
   * @returns per list, each of its names with its events in revision order ([] when absent), or
   *   the error its decode threw.
   */
  private async readStreamsBatch(
    batch: readonly (readonly string[])[],
  ): Promise<(Map<string, RecordedEvent[]> | Error)[]> {
    const names = [...new Set(batch.flat())];
    const rows = await this.sql.query<EventRow>(
      `SELECT ${EVENT_COLUMNS} FROM es_events WHERE stream_name = ANY($1::text[]) ORDER BY stream_name, revision`,
      [names],
    );
    const stored = rows.map(toRecordedEvent);
    const byStream = (events: readonly RecordedEvent[]) => {
      const grouped = new Map<string, RecordedEvent[]>();
      for (const event of events) {
        const read = grouped.get(event.streamName);
        if (read) read.push(event);
        else grouped.set(event.streamName, [event]);
      }
      return grouped;
    };
    // Each list gets arrays of its own (two lists may name one stream).
    const pick = (grouped: Map<string, RecordedEvent[]>, list: readonly string[]) =>
      new Map(list.map((name) => [name, [...(grouped.get(name) ?? [])]]));
    try {
      const grouped = byStream(await this.decode(stored));
      return batch.map((list) => pick(grouped, list));
    } catch {
      return Promise.all(
        batch.map(async (list) => {
          const wanted = new Set(list);
          try {
            return pick(byStream(await this.decode(stored.filter((e) => wanted.has(e.streamName)))), list);
          } catch (error) {
            return error instanceof Error ? error : new Error(String(error));
          }
        }),
      );
    }
  }

  /**
   * Reads `$all` strictly after `from` in (transaction id, position) order, at most `maxCount`
   * events (default 1000), only from transactions below the snapshot's xmin: an event that is
   * still being committed can never appear later before one already returned.
   */
  async readAll(options: ReadAllOptions = {}): Promise<RecordedEvent[]> {
    return SqlEventStore.readAllOn(this.sql, options, true, this.codec);
  }

  /** `events` with their data as read (decrypted, or erased), unless the store keeps data as it is. */
  private decode(events: RecordedEvent[]): Promise<RecordedEvent[]> | RecordedEvent[] {
    return this.codec ? this.codec.decode(events) : events;
  }

  /**
   * `$all` on `sql` (a transaction, for instance). `committedOnly` false drops the snapshot-xmin
   * filter: only for a caller that knows no append is in flight (it holds {@link APPEND_LOCK_KEY}
   * exclusively). With `codec`, the data is decoded ({@link EventCodec.decode}) unless
   * `options.stored`.
   */
  static async readAllOn(
    sql: Sql,
    options: ReadAllOptions,
    committedOnly: boolean,
    codec?: EventCodec,
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
    const events = rows.map(toRecordedEvent);
    return codec && !options.stored ? decodeSome(codec, events, options.decodeTypes) : events;
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
      const page = await this.readAll({
        ...(from ? { from } : {}),
        maxCount: SUBSCRIPTION_PAGE,
        ...(options.decodeTypes ? { decodeTypes: options.decodeTypes } : {}),
      });
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
   * Appends `requests` (docs/architecture.md "Event store"): one es_append call, group-committed
   * with concurrent appends when the handle is shared, the inline read models' calls in it; or,
   * when the hook must decide (it has no calls for these events, a call's projection is not live,
   * a call failed, or the store joins a caller's transaction), the same call without calls in a
   * transaction with the hook. Wakes this process's subscriptions, and others' when `wakeOthers`.
   */
  private async appendRequests(
    requests: readonly AppendRequest[],
    wakeOthers = true,
  ): Promise<AppendOutcome> {
    validateRequests(requests);
    if (requests.length === 0) return { streams: [], recorded: [] };
    const plain = JSON.stringify(requests.flatMap((r) => r.events.map((e) => e.data ?? null)));
    // PostgreSQL text cannot hold U+0000, but a json value keeps the escape unread: refuse it here,
    // as a jsonb or text conversion of it later would fail (an escaped backslash before "u0000" is not one).
    if (plain.includes('\\u0000') && NUL_ESCAPE.test(plain))
      throw new UnstorableEvent('an event holds a character the store cannot keep (U+0000)');
    // What is stored: a patient's PHI encrypted under its data key (docs/architecture.md "Erasure").
    const data = this.codec
      ? JSON.stringify(await this.codec.encode(requests.flatMap((r) => r.events)))
      : plain;
    const hook = this.hook;
    const known = hook ? [...hook.known] : null;
    const needed = hook?.needed(new Set(requests.flatMap((r) => r.events.map((e) => e.type)))) ?? false;
    // No read-model work: no calls. Else the hook's calls, when it can say its work so.
    const calls = !needed || !hook ? [] : this.sql.inTransaction ? undefined : inlineCallsOf(hook, requests);
    let outcome: AppendOutcome | 'not_live' | undefined;
    if (calls) {
      const append: Append = { requests, data, known, calls };
      try {
        const answer = this.sql.shared
          ? await this.appends.submit(append)
          : (await sendAppends(this.sql, [append]))[0]!;
        outcome = outcomeOf(append, answer, hook);
        if (outcome !== 'not_live' && needed) hook?.called?.(calls);
      } catch (error) {
        // A call that failed (a poisoned event): the hook's apply tells what it means.
        if (calls.length === 0 || isStoreAnswer(error) || !pgError(error).code)
          throw storeError(error, requests);
        outcome = undefined;
      }
    }
    if (outcome === undefined || outcome === 'not_live')
      outcome = await this.appendWithHook(requests, data, known);
    if (outcome.recorded.length > 0) {
      this.wake();
      if (wakeOthers) this.notifyOthers();
    }
    return outcome;
  }

  /**
   * The append in a transaction with the hook: es_append without calls, then {@link AppendHook.apply}
   * on the events written and every projection's status. An {@link AppendHookFailure} runs it again
   * with the failure known to the hook (once per key).
   */
  private async appendWithHook(
    requests: readonly AppendRequest[],
    data: string,
    known: readonly string[] | null,
  ): Promise<AppendOutcome> {
    const failures = new Map<string, unknown>();
    const append: Append = { requests, data, known, calls: null };
    for (;;) {
      try {
        return await this.sql.transaction(async (tx) => {
          const [answer] = await sendAppends(tx, [append]);
          const outcome = outcomeOf(append, answer!, this.hook);
          if (outcome === 'not_live') throw new Error('es_append answered not_live without calls');
          await this.hook?.apply(
            tx,
            outcome.recorded,
            new Map(Object.entries(answer!.projections)),
            failures,
          );
          return outcome;
        });
      } catch (error) {
        if (error instanceof AppendHookFailure && !failures.has(error.key)) {
          failures.set(error.key, error.detail);
          continue;
        }
        throw storeError(error, requests);
      }
    }
  }
}
