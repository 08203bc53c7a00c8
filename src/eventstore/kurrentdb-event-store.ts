/**
 * The KurrentDB (formerly EventStoreDB) adapter of the event store port (docs/architecture.md "Event store"), over the
 * official gRPC client `@kurrent/kurrentdb-client`. Selected by `KURRENTDB_URL`
 * (e.g. `kurrentdb://localhost:2113?tls=false`).
 *
 * What is atomic, and what is not:
 * - `append` is one server write: all of its events or none, checked against the expected state by
 *   the server. Idempotency by event id is the server's: replaying the same ids on the same stream
 *   succeeds without writing (guaranteed for an exact expected state, best effort with `any`).
 *   The server does not make ids unique across streams, so unlike the SQL adapters an id stored on
 *   another stream is not reported as {@link EventIdConflict}.
 * - `appendMany` is one `multiStreamAppend` (KurrentDB ≥ 25.1; older servers throw the client's
 *   UnsupportedError): all streams or none. Requests without events are only state checks and are
 *   checked by reading the stream first, outside that atomic write (they write nothing).
 * - The `$all` position of an append is read back from the last event written (one extra read),
 *   so it is exactly the position a subscriber sees for that event.
 *
 * Metadata is stored as a flat JSON object with string values (multiStreamAppend accepts nothing
 * else): `tenantId`, `actorType`, `actorId`, `correlationId`, `causationId`, `requestId`,
 * `recordedAt`; null fields are omitted. Events that are system events (type starting with `$`),
 * links, or not JSON are skipped on every read.
 *
 * Every read is bounded and drained (issue 34): the adapter asks the server for `maxCount` events
 * (one more where the first may be skipped), reads all it asked for, and pages on. It never leaves
 * a read early: the client does not cancel a server stream it stops reading, and on a growing log
 * the open streams exhaust the connection's window until every read hangs.
 *
 * No KurrentDB server runs on the development machines: this adapter is only typechecked there,
 * its reads are driven against a stubbed client (test/eventstore/kurrentdb-reads.test.ts), and its
 * contract tests run when `KURRENTDB_URL` is set.
 */
import {
  type AllStreamSubscription,
  type AppendStreamState,
  BACKWARDS,
  END,
  type EventData,
  excludeSystemEvents,
  type JSONType,
  jsonEvent,
  KurrentDBClient,
  type AllStreamResolvedEvent as KurrentResolvedAllEvent,
  type ResolvedEvent as KurrentResolvedEvent,
  START,
  STREAM_EXISTS,
  StreamNotFoundError,
  WrongExpectedVersionError,
} from '@kurrent/kurrentdb-client';
import {
  type Actor,
  type AppendManyResult,
  type AppendOptions,
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
import { decodeSome, type EventCodec } from './shredding/codec.js';

const DEFAULT_MAX_COUNT = 1000;
/** The most events one server read is asked for: a longer read goes on in pages of this size. */
export const READ_PAGE = 500;
/** Reported when the server does not return a position (servers older than 22.6). */
const UNKNOWN_POSITION: Position = { commit: 0n, prepare: 0n };

const toStreamState = (expected: ExpectedState): AppendStreamState =>
  expected === 'exists' ? STREAM_EXISTS : expected;

const encodeMetadata = (metadata: EventMetadata): Record<string, string> => {
  const out: Record<string, string> = {
    actorType: metadata.actor.type,
    actorId: metadata.actor.id,
    correlationId: metadata.correlationId,
    recordedAt: metadata.recordedAt,
  };
  if (metadata.tenantId !== null) out.tenantId = String(metadata.tenantId);
  if (metadata.causationId !== null) out.causationId = metadata.causationId;
  if (metadata.requestId !== null) out.requestId = metadata.requestId;
  return out;
};

const ACTOR_TYPES: readonly Actor['type'][] = ['client', 'session', 'system'];

/** Reads our flat metadata back; fields missing (events written by other tools) get defaults. */
const decodeMetadata = (raw: unknown, eventId: string, created: Date): EventMetadata => {
  const m = (typeof raw === 'object' && raw !== null && !(raw instanceof Uint8Array) ? raw : {}) as Record<
    string,
    unknown
  >;
  const text = (key: string): string | null => (typeof m[key] === 'string' ? (m[key] as string) : null);
  const tenant = m.tenantId;
  const tenantId =
    typeof tenant === 'number' ? tenant : typeof tenant === 'string' && tenant !== '' ? Number(tenant) : null;
  const actorType = text('actorType');
  return {
    tenantId: tenantId !== null && Number.isFinite(tenantId) ? tenantId : null,
    actor: {
      type: ACTOR_TYPES.includes(actorType as Actor['type']) ? (actorType as Actor['type']) : 'system',
      id: text('actorId') ?? '',
    },
    correlationId: text('correlationId') ?? eventId,
    causationId: text('causationId'),
    requestId: text('requestId'),
    recordedAt: text('recordedAt') ?? created.toISOString(),
  };
};

const toEventData = (event: NewEvent): EventData =>
  jsonEvent({
    id: event.id,
    type: event.type,
    // The client JSON.stringifies data; any JSON value works although its type says object/array/string.
    data: (event.data ?? null) as JSONType,
    metadata: encodeMetadata(event.metadata),
  });

/** Events a subscription decodes with one keyring before it makes a new one. */
const DECODER_EVENTS = 256;
/** Longest a subscription's keyring is used, in milliseconds (a key destroyed is seen after at most this). */
const DECODER_MS = 1000;

/** Our view of a stored event, or undefined for links, system events and non-JSON events. */
const toRecordedEvent = (
  resolved: KurrentResolvedEvent | KurrentResolvedAllEvent,
): RecordedEvent | undefined => {
  const event = resolved.event;
  if (!event || resolved.link || event.type.startsWith('$') || !event.isJson) return undefined;
  if (event.data instanceof Uint8Array) return undefined;
  return {
    id: event.id,
    type: event.type,
    data: event.data,
    metadata: decodeMetadata(event.metadata, event.id, event.created),
    streamName: event.streamId,
    revision: event.revision,
    position: event.position
      ? { commit: event.position.commit, prepare: event.position.prepare }
      : UNKNOWN_POSITION,
  };
};

const toActual = (actual: 'no_stream' | bigint | undefined): bigint | 'no_stream' | undefined => {
  if (actual === 'no_stream' || actual === -1n) return 'no_stream';
  return typeof actual === 'bigint' && actual >= 0n ? actual : undefined;
};

/**
 * Maps the client's errors to the port's. An `any` append can only fail the version check when the
 * server finds the ids partly stored (its idempotency check), hence {@link EventIdConflict}.
 */
const mapAppendError = (error: unknown, requests: readonly AppendRequest[]): unknown => {
  if (!(error instanceof WrongExpectedVersionError)) return error;
  const request = requests.find((r) => r.streamName === error.streamName) ?? requests[0];
  if (!request) return error;
  if (request.expectedState === 'any') return new EventIdConflict(request.events[0]?.id ?? 'unknown');
  return new WrongExpectedVersion(request.streamName, request.expectedState, toActual(error.actualState));
};

/** Event store on a KurrentDB server (docs/architecture.md "Event store"). Open with {@link KurrentDbEventStore.open}. */
export class KurrentDbEventStore implements EventStore {
  readonly kind = 'kurrentdb' as const;
  private readonly subscriptions = new Set<AllStreamSubscription>();
  private closed = false;

  private constructor(
    private readonly client: KurrentDBClient,
    /** Encrypts what holds a patient's PHI, decrypts what is read (docs/architecture.md "Erasure"). */
    private readonly codec?: EventCodec,
  ) {}

  /** An adapter over `client` as it is (tests stub its reads; {@link open} is the way in otherwise). */
  static fromClient(client: KurrentDBClient, options: { codec?: EventCodec } = {}): KurrentDbEventStore {
    return new KurrentDbEventStore(client, options.codec);
  }

  /** The events as the server is to store them: data encoded by the codec when there is one. */
  private async toStored(events: readonly NewEvent[]): Promise<EventData[]> {
    if (!this.codec) return events.map(toEventData);
    const data = await this.codec.encode(events);
    return events.map((event, i) => toEventData({ ...event, data: data[i] }));
  }

  /** `events` as read: decrypted (or erased) by the codec when there is one. */
  private decode(events: RecordedEvent[]): Promise<RecordedEvent[]> | RecordedEvent[] {
    return this.codec ? this.codec.decode(events) : events;
  }

  /**
   * Connects lazily (the first call opens the gRPC channel) to `connectionString`,
   * e.g. `kurrentdb://localhost:2113?tls=false`.
   * @throws {Error} the connection string is malformed.
   */
  static async open(
    connectionString: string,
    options: { codec?: EventCodec } = {},
  ): Promise<KurrentDbEventStore> {
    return new KurrentDbEventStore(KurrentDBClient.connectionString(connectionString), options.codec);
  }

  /**
   * Appends `events` to `streamName` when it is in `expectedState` (one server write).
   * @throws {WrongExpectedVersion} the stream is not in the expected state; nothing written.
   * @throws {EventIdConflict} an `any` append whose ids are partly stored on the stream.
   */
  async append(
    streamName: string,
    events: readonly NewEvent[],
    expectedState: ExpectedState,
  ): Promise<AppendResult> {
    const request: AppendRequest = { streamName, events, expectedState };
    if (events.length === 0) return this.checkState(request);
    try {
      const result = await this.client.appendToStream(streamName, await this.toStored(events), {
        streamState: toStreamState(expectedState),
      });
      const nextRevision = result.nextExpectedRevision;
      return { nextRevision, position: await this.positionOf(streamName, nextRevision, result.position) };
    } catch (error) {
      throw mapAppendError(error, [request]);
    }
  }

  /**
   * Appends to several streams atomically with `multiStreamAppend` (KurrentDB ≥ 25.1).
   * `position` is that of the last event of the last request with events.
   * @throws {WrongExpectedVersion} a stream is not in its expected state; nothing written.
   */
  /** KurrentDB pushes to its subscriptions itself: `options.wakeOthers` changes nothing here. */
  async appendMany(requests: readonly AppendRequest[], _options?: AppendOptions): Promise<AppendManyResult> {
    const revisions = new Map<string, bigint>();
    let position: Position = UNKNOWN_POSITION;
    for (const request of requests) {
      if (request.events.length > 0) continue;
      const checked = await this.checkState(request);
      revisions.set(request.streamName, checked.nextRevision);
      if (comparePositions(checked.position, position) > 0) position = checked.position;
    }
    const writes = requests.filter((r) => r.events.length > 0);
    if (writes.length > 0) {
      // One codec call (one keyring) for the whole append.
      const stored = await this.toStored(writes.flatMap((r) => r.events));
      const starts = writes.map((_, i) => writes.slice(0, i).reduce((n, w) => n + w.events.length, 0));
      try {
        const result = await this.client.multiStreamAppend(
          writes.map((r, i) => ({
            streamName: r.streamName,
            events: stored.slice(starts[i], starts[i]! + r.events.length),
            expectedState: toStreamState(r.expectedState),
          })),
        );
        for (const response of result.responses) revisions.set(response.streamName, response.revision);
      } catch (error) {
        throw mapAppendError(error, writes);
      }
      const last = writes[writes.length - 1]!;
      const lastRevision = revisions.get(last.streamName);
      if (lastRevision !== undefined)
        position = await this.positionOf(last.streamName, lastRevision, undefined);
    }
    return {
      position,
      streams: requests.map((r) => ({
        streamName: r.streamName,
        nextRevision: revisions.get(r.streamName) ?? -1n,
      })),
    };
  }

  /**
   * Reads a stream forwards from `fromRevision` (default its start), at most `maxCount` events
   * (default all), in bounded pages; an absent stream reads as [].
   */
  async readStream(streamName: string, options: ReadStreamOptions = {}): Promise<RecordedEvent[]> {
    if (options.maxCount !== undefined && options.maxCount <= 0) return [];
    const events: RecordedEvent[] = [];
    let fromRevision: bigint | typeof START = options.fromRevision ?? START;
    // Counted in stored events (links and non-JSON ones included), as the server counts them.
    let remaining = options.maxCount ?? Number.POSITIVE_INFINITY;
    try {
      while (remaining > 0) {
        const asked = Math.min(remaining, READ_PAGE);
        let received = 0;
        let last: bigint | undefined;
        for await (const resolved of this.client.readStream(streamName, { fromRevision, maxCount: asked })) {
          received += 1;
          last = (resolved.event ?? resolved.link)?.revision ?? last;
          const event = toRecordedEvent(resolved);
          if (event) events.push(event);
        }
        remaining -= received;
        if (received < asked || last === undefined) break;
        fromRevision = last + 1n;
      }
    } catch (error) {
      if (error instanceof StreamNotFoundError) return [];
      throw error;
    }
    return this.decode(events);
  }

  /** Reads several whole streams (one read each, concurrently). */
  async readStreams(streamNames: readonly string[]): Promise<Map<string, RecordedEvent[]>> {
    const names = [...new Set(streamNames)];
    const read = await Promise.all(names.map((name) => this.readStream(name)));
    return new Map(names.map((name, i) => [name, read[i]!]));
  }

  /**
   * Reads `$all` strictly after `from`, at most `maxCount` events (default 1000), no system events
   * nor `excludeTypes`. Bounded pages, each drained: the server is asked for what is still missing
   * plus one (a page starts at the last position read, which it gives again), and events skipped
   * here (the one at `from`, non-JSON ones, `excludeTypes`) make another page.
   */
  async readAll(options: ReadAllOptions = {}): Promise<RecordedEvent[]> {
    const maxCount = options.maxCount ?? DEFAULT_MAX_COUNT;
    if (maxCount <= 0) return [];
    const { from } = options;
    const excluded = new Set(options.excludeTypes ?? []);
    const events: RecordedEvent[] = [];
    let cursor = from;
    while (events.length < maxCount) {
      const asked = Math.min(maxCount - events.length, READ_PAGE) + 1;
      let received = 0;
      let last: Position | undefined;
      for await (const resolved of this.client.readAll({
        fromPosition: cursor ?? START,
        maxCount: asked,
        filter: excludeSystemEvents(),
      })) {
        received += 1;
        const position = resolved.event?.position;
        if (position) last = { commit: position.commit, prepare: position.prepare };
        const event = toRecordedEvent(resolved);
        if (!event || (cursor && comparePositions(event.position, cursor) <= 0) || excluded.has(event.type))
          continue;
        if (events.length < maxCount) events.push(event);
      }
      if (received < asked || last === undefined || (cursor && comparePositions(last, cursor) <= 0)) break;
      cursor = last;
    }
    if (options.stored || !this.codec) return events;
    return decodeSome(this.codec, events, options.decodeTypes);
  }

  /**
   * Catch-up subscription to `$all` (system events excluded server-side) strictly after `from`,
   * until `signal` aborts, the consumer stops iterating, or the store is closed.
   */
  async *subscribeToAll(options: SubscribeOptions = {}): AsyncGenerator<RecordedEvent> {
    const { from, signal } = options;
    if (signal?.aborted || this.closed) return;
    const subscription = this.client.subscribeToAll({
      fromPosition: from ?? START,
      filter: excludeSystemEvents(),
    });
    this.subscriptions.add(subscription);
    const stop = () => {
      subscription.unsubscribe().catch(() => undefined);
    };
    signal?.addEventListener('abort', stop, { once: true });
    // One keyring for many events, not one per event (docs/architecture.md "Erasure"), renewed
    // every DECODER_EVENTS events or DECODER_MS so that a key destroyed meanwhile is seen.
    let decode: ReturnType<EventCodec['decoder']> | undefined;
    let decoded = 0;
    let since = 0;
    try {
      for await (const resolved of subscription) {
        if (signal?.aborted || this.closed) return;
        const event = toRecordedEvent(resolved);
        if (!event || (from && comparePositions(event.position, from) <= 0)) continue;
        if (!this.codec || (options.decodeTypes && !options.decodeTypes(event.type))) {
          yield event;
          continue;
        }
        if (!decode || decoded >= DECODER_EVENTS || Date.now() - since > DECODER_MS) {
          decode = this.codec.decoder();
          decoded = 0;
          since = Date.now();
        }
        decoded++;
        yield (await decode([event]))[0]!;
      }
    } catch (error) {
      // Unsubscribing may surface as a cancellation error: that is the requested end.
      if (signal?.aborted || this.closed) return;
      throw error;
    } finally {
      signal?.removeEventListener('abort', stop);
      this.subscriptions.delete(subscription);
      await subscription.unsubscribe().catch(() => undefined);
    }
  }

  /**
   * Position of the last non-system JSON event in `$all`, or undefined for an empty log. Reads
   * backwards from the end in bounded pages, each drained, until a page holds such an event.
   */
  async headPosition(): Promise<Position | undefined> {
    let cursor: Position | undefined;
    for (;;) {
      // After the first page, a page starts at the last position read, which it gives again.
      const asked = cursor ? READ_PAGE + 1 : READ_PAGE;
      let received = 0;
      let last: Position | undefined;
      let head: Position | undefined;
      for await (const resolved of this.client.readAll({
        fromPosition: cursor ?? END,
        direction: BACKWARDS,
        maxCount: asked,
        filter: excludeSystemEvents(),
      })) {
        received += 1;
        const position = resolved.event?.position;
        if (position) last = { commit: position.commit, prepare: position.prepare };
        const event = toRecordedEvent(resolved);
        if (!event || (cursor && comparePositions(event.position, cursor) >= 0)) continue;
        head ??= event.position;
      }
      if (head) return head;
      if (received < asked || last === undefined || (cursor && comparePositions(last, cursor) >= 0))
        return undefined;
      cursor = last;
    }
  }

  /** Ends every subscription and closes the gRPC channel. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all([...this.subscriptions].map((s) => s.unsubscribe().catch(() => undefined)));
    this.subscriptions.clear();
    await this.client.dispose();
  }

  /** Checks an append without events by reading the stream's last revision (writes nothing). */
  private async checkState(request: AppendRequest): Promise<AppendResult> {
    let last: RecordedEvent | undefined;
    let revision = -1n;
    try {
      for await (const resolved of this.client.readStream(request.streamName, {
        fromRevision: END,
        direction: BACKWARDS,
        maxCount: 1,
      })) {
        revision = resolved.event?.revision ?? revision;
        last = toRecordedEvent(resolved);
      }
    } catch (error) {
      if (!(error instanceof StreamNotFoundError)) throw error;
    }
    const { expectedState: expected, streamName } = request;
    const exists = revision >= 0n;
    const ok =
      expected === 'any' ||
      (expected === 'no_stream' && !exists) ||
      (expected === 'exists' && exists) ||
      (typeof expected === 'bigint' && expected === revision);
    if (!ok) throw new WrongExpectedVersion(streamName, expected, exists ? revision : 'no_stream');
    return { nextRevision: revision, position: last?.position ?? UNKNOWN_POSITION };
  }

  /** The `$all` position of the event at `revision` in `streamName` (read back after an append). */
  private async positionOf(
    streamName: string,
    revision: bigint,
    fallback: Position | undefined,
  ): Promise<Position> {
    let found: Position | undefined;
    // Drained, not left at the first event (see the header: every read is drained).
    for await (const resolved of this.client.readStream(streamName, {
      fromRevision: revision,
      maxCount: 1,
    })) {
      const position = resolved.event?.position;
      if (position) found ??= { commit: position.commit, prepare: position.prepare };
    }
    return found ?? fallback ?? UNKNOWN_POSITION;
  }
}
