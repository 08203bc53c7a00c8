/**
 * The event store port (docs/architecture.md "Event store"): append to a stream with an expected stream state, read a
 * stream, read `$all` from a position, subscribe to `$all` from a position. Three adapters
 * implement it (postgres, pglite, kurrentdb) and one contract suite (test/eventstore) checks them.
 */

/**
 * A position in `$all`. Opaque and comparable: compare with {@link comparePositions}, never do
 * arithmetic on it. On the SQL adapters `commit` is the appending transaction's xid8 and `prepare`
 * the global sequence number; on KurrentDB they are the transaction-file commit/prepare positions.
 */
export interface Position {
  readonly commit: bigint;
  readonly prepare: bigint;
}

/** Orders two positions: negative when `a` comes before `b`, 0 when equal, positive after. */
export const comparePositions = (a: Position, b: Position): number => {
  if (a.commit !== b.commit) return a.commit < b.commit ? -1 : 1;
  if (a.prepare !== b.prepare) return a.prepare < b.prepare ? -1 : 1;
  return 0;
};

/** Serialises a position for checkpoints and CLI flags as `<commit>/<prepare>`. */
export const positionToString = (p: Position): string => `${p.commit}/${p.prepare}`;

/**
 * Parses the output of {@link positionToString}.
 * @throws {Error} when the text is not two non-negative integers separated by `/`.
 */
export const parsePosition = (text: string): Position => {
  const match = /^(\d+)\/(\d+)$/.exec(text.trim());
  if (!match) throw new Error(`not an event store position: ${JSON.stringify(text)}`);
  return { commit: BigInt(match[1]!), prepare: BigInt(match[2]!) };
};

/**
 * The state a stream must be in for an append to succeed:
 * `no_stream` (must not exist), `exists` (must exist), `any` (no check) or the revision of the
 * stream's last event (a bigint; the first event of a stream has revision 0n).
 */
export type ExpectedState = 'no_stream' | 'exists' | 'any' | bigint;

/** Who caused an event: an API client (by client_id), a session (by session id), or an operator. */
export interface Actor {
  readonly type: 'client' | 'session' | 'system';
  readonly id: string;
}

/** Metadata recorded with every event (docs/architecture.md "Event store"). */
export interface EventMetadata {
  /** The data tenant the event belongs to; null only for events outside any tenant. */
  readonly tenantId: number | null;
  readonly actor: Actor;
  /** Groups every event caused by one request or command chain. */
  readonly correlationId: string;
  /** The id of the event or request that directly caused this one; null for a first cause. */
  readonly causationId: string | null;
  /** The HTTP request id, when the event was caused by one. */
  readonly requestId: string | null;
  /** ISO-8601 UTC time at which the command was decided (the command's `now`). */
  readonly recordedAt: string;
}

/** An event to append. `id` is a UUID; appending the same id again is idempotent. */
export interface NewEvent<Type extends string = string, Data = unknown> {
  readonly id: string;
  readonly type: Type;
  readonly data: Data;
  readonly metadata: EventMetadata;
}

/** An event as stored. `revision` is its 0-based index in its stream. */
export interface RecordedEvent<Type extends string = string, Data = unknown> extends NewEvent<Type, Data> {
  readonly streamName: string;
  readonly revision: bigint;
  readonly position: Position;
  /**
   * True when the event's data was encrypted under a data key that has since been destroyed (its
   * patient was erased; docs/architecture.md "Erasure"): `data` is then null. Projections never
   * see such an event; its metadata, type, stream and position stay.
   */
  readonly erased?: true;
}

/** One stream's part of an append. */
/** How an append is announced; what it stores is the same either way. */
export interface AppendOptions {
  /**
   * false: other processes' subscriptions may see this append at their next poll (100 ms on
   * PostgreSQL) instead of being woken at once. For appends nobody waits on from another process
   * (the audit trail's batches): it spares one NOTIFY round trip per append. Default true.
   * Subscriptions of the appending process are woken either way.
   */
  readonly wakeOthers?: boolean;
}

export interface AppendRequest {
  readonly streamName: string;
  readonly events: readonly NewEvent[];
  readonly expectedState: ExpectedState;
}

/** Result of appending to one stream: the revision of its last event and the `$all` position. */
export interface AppendResult {
  readonly nextRevision: bigint;
  readonly position: Position;
}

/** Result of an atomic multi-stream append. `position` is that of the last event written. */
export interface AppendManyResult {
  readonly position: Position;
  readonly streams: readonly { readonly streamName: string; readonly nextRevision: bigint }[];
}

/** Thrown when a stream is not in the expected state; nothing was written. */
export class WrongExpectedVersion extends Error {
  override readonly name = 'WrongExpectedVersion';
  constructor(
    readonly streamName: string,
    readonly expected: ExpectedState,
    /** The stream's actual last revision, or 'no_stream'; undefined when the engine does not say. */
    readonly actual: bigint | 'no_stream' | undefined,
  ) {
    super(`stream ${streamName}: expected ${String(expected)}, actual ${String(actual ?? 'unknown')}`);
  }
}

/**
 * Thrown when an event id is already stored but the append is not a replay of the same events
 * on the same stream (a different stream, or only some of the ids); nothing was written.
 */
export class EventIdConflict extends Error {
  override readonly name = 'EventIdConflict';
  constructor(readonly eventId: string) {
    super(`event id ${eventId} is already stored elsewhere`);
  }
}

/**
 * Thrown when an event holds what the store cannot keep (on the SQL stores, U+0000 in a string of
 * its data); nothing was written. The edge refuses such input before (docs/interface.md §7).
 */
export class UnstorableEvent extends Error {
  override readonly name = 'UnstorableEvent';
}

export interface ReadStreamOptions {
  /** First revision to return (inclusive); default 0n. */
  readonly fromRevision?: bigint;
  /** Upper bound on the number of events returned. */
  readonly maxCount?: number;
}

export interface ReadAllOptions {
  /** Return events strictly after this position; default: from the start of the log. */
  readonly from?: Position;
  /** Upper bound on the number of events returned; default 1000. */
  readonly maxCount?: number;
  /**
   * Event types left out: they are not returned and do not count against `maxCount` (a rebuild
   * skips the types no read model handles, such as identifier reservations: a fifth of a log).
   */
  readonly excludeTypes?: readonly string[];
  /**
   * The events as stored: encrypted data left encrypted (docs/architecture.md "Erasure"). For the
   * sealer and `casebook verify`, whose chain is over the stored bytes, so that destroying a data
   * key changes no leaf.
   */
  readonly stored?: boolean;
  /** {@link DecodeTypes}. */
  readonly decodeTypes?: DecodeTypes;
}

/**
 * Whose data a reader reads (docs/architecture.md "Erasure"): only events of the types it answers
 * true for are decoded (decrypted, or read as erased); the others come back with their data as
 * stored (an envelope where encrypted), their type, stream, position and metadata as ever. For
 * readers that look at the data of a few types only — the deferred AuditEvent view follows every
 * event of the log but reads audit records — so that a patient's events cost them no key lookup
 * and no decryption. Default: every event is decoded.
 */
export type DecodeTypes = (type: string) => boolean;

export interface SubscribeOptions {
  /** Deliver events strictly after this position; default: from the start of the log. */
  readonly from?: Position;
  /** {@link DecodeTypes}. */
  readonly decodeTypes?: DecodeTypes;
  /** Ends the subscription: the iterator returns. */
  readonly signal?: AbortSignal;
}

/** The event store port. Implementations: postgres, pglite, kurrentdb. */
export interface EventStore {
  readonly kind: 'postgres' | 'pglite' | 'kurrentdb';
  /**
   * Appends events to one stream when it is in `expectedState`.
   * Appending events whose ids are all already stored, in order, on this stream is a no-op that
   * returns the stored result.
   * @throws {WrongExpectedVersion} the stream is not in the expected state; nothing written.
   * @throws {EventIdConflict} an id is stored elsewhere; nothing written.
   */
  append(
    streamName: string,
    events: readonly NewEvent[],
    expectedState: ExpectedState,
  ): Promise<AppendResult>;
  /**
   * Appends to several streams atomically: all streams are written or none (one DB transaction on
   * the SQL adapters; KurrentDB's multi-stream append). Same errors as {@link append}.
   */
  appendMany(requests: readonly AppendRequest[], options?: AppendOptions): Promise<AppendManyResult>;
  /** Reads a stream forwards; an absent stream reads as []. */
  readStream(streamName: string, options?: ReadStreamOptions): Promise<RecordedEvent[]>;
  /**
   * Reads several whole streams at once (one query on the SQL adapters): each name maps to its
   * events in revision order, [] for an absent stream.
   */
  readStreams(streamNames: readonly string[]): Promise<Map<string, RecordedEvent[]>>;
  /** Reads `$all` forwards, in position order, excluding engine-internal events. */
  readAll(options?: ReadAllOptions): Promise<RecordedEvent[]>;
  /**
   * Subscribes to `$all`: yields every event after `from`, in position order, then later appends
   * as they become visible, until `signal` aborts. Never skips an event that commits late.
   */
  subscribeToAll(options?: SubscribeOptions): AsyncIterable<RecordedEvent>;
  /**
   * Position of the last event committed so far in `$all` (a subscriber may show it only once
   * earlier transactions end), or undefined for an empty log. Waiting until a reader reaches it is
   * read-your-writes for everything committed before the call.
   */
  headPosition(): Promise<Position | undefined>;
  /** Releases connections. */
  close(): Promise<void>;
}

/** An event of an append not yet made: as it will be recorded, without its position. */
export type PendingEvent = Omit<RecordedEvent, 'position'>;
