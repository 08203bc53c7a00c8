/**
 * One contract for every event store adapter (docs/architecture.md "Event store"): pglite, postgres, and kurrentdb when
 * KURRENTDB_URL is set. Stream names are unique per test so the kurrentdb leg can share a server;
 * `$all` assertions therefore look only at the streams their test wrote.
 */
import { expect } from 'chai';
import { v4 as uuid } from 'uuid';
import { KurrentDbEventStore } from '../../src/eventstore/kurrentdb-event-store.js';
import {
  comparePositions,
  EventIdConflict,
  type EventMetadata,
  type EventStore,
  type NewEvent,
  type Position,
  type RecordedEvent,
  WrongExpectedVersion,
} from '../../src/eventstore/port.js';
import { SqlEventStore } from '../../src/eventstore/sql-event-store.js';
import { testDatabases } from '../support/databases.js';

interface ContractSubject {
  readonly store: EventStore;
  readonly dispose: () => Promise<void>;
}

interface ContractOptions {
  /** The SQL adapters refuse an event id stored on another stream; KurrentDB does not check. */
  readonly idsUniqueAcrossStreams: boolean;
}

const metadata = (overrides: Partial<EventMetadata> = {}): EventMetadata => ({
  tenantId: 7,
  actor: { type: 'client', id: 'ehr-backend' },
  correlationId: uuid(),
  causationId: uuid(),
  requestId: 'req-0001',
  recordedAt: '2025-03-04T05:06:07.089Z',
  ...overrides,
});

const newEvent = (type = 'ThingHappened', data: unknown = { n: 1 }, meta = metadata()): NewEvent => ({
  id: uuid(),
  type,
  data,
  metadata: meta,
});

const events = (count: number, type = 'ThingHappened'): NewEvent[] =>
  Array.from({ length: count }, (_, i) => newEvent(type, { n: i }));

const streamName = (prefix = 'contract') => `${prefix}-${uuid()}`;

const ids = (list: readonly { id: string }[]) => list.map((e) => e.id);

const rejection = async (promise: Promise<unknown>): Promise<unknown> => {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected the promise to reject');
};

const waitUntil = async (condition: () => boolean, timeoutMs = 5000): Promise<void> => {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
};

const expectStrictlyIncreasing = (positions: readonly Position[]) => {
  for (let i = 1; i < positions.length; i++) {
    expect(comparePositions(positions[i - 1]!, positions[i]!), `position ${i}`).to.be.lessThan(0);
  }
};

/** Reads `$all` from `from` to the end, in pages of `pageSize`. */
const readAllFrom = async (store: EventStore, from: Position | undefined, pageSize = 500) => {
  const out: RecordedEvent[] = [];
  let position = from;
  for (;;) {
    const page = await store.readAll({ ...(position ? { from: position } : {}), maxCount: pageSize });
    out.push(...page);
    if (page.length < pageSize) return out;
    position = page[page.length - 1]!.position;
  }
};

function contract(name: string, factory: () => Promise<ContractSubject>, options: ContractOptions): void {
  describe(`event store contract on ${name}`, () => {
    let subject: ContractSubject;
    let store: EventStore;

    before(async () => {
      subject = await factory();
      store = subject.store;
    });
    after(async () => {
      await subject?.dispose();
    });

    it(`reports kind ${name}`, () => {
      expect(store.kind).to.equal(name);
    });

    describe('append with no_stream', () => {
      it('creates a new stream and returns the revision of its last event', async () => {
        const stream = streamName();
        const written = events(2);
        const result = await store.append(stream, written, 'no_stream');
        expect(result.nextRevision).to.equal(1n);
        const read = await store.readStream(stream);
        expect(ids(read)).to.deep.equal(ids(written));
        expect(read.map((e) => e.revision)).to.deep.equal([0n, 1n]);
        expect(result.position).to.deep.equal(read[1]!.position);
      });

      it('refuses an existing stream with WrongExpectedVersion carrying the actual revision', async () => {
        const stream = streamName();
        const first = events(2);
        await store.append(stream, first, 'no_stream');
        const error = await rejection(store.append(stream, events(1), 'no_stream'));
        expect(error).to.be.instanceOf(WrongExpectedVersion);
        const wrong = error as WrongExpectedVersion;
        expect(wrong.streamName).to.equal(stream);
        expect(wrong.expected).to.equal('no_stream');
        expect(wrong.actual).to.equal(1n);
        expect(ids(await store.readStream(stream))).to.deep.equal(ids(first));
      });

      it('gives a new stream of 120 events revisions 0–119 in order and the position of the last', async () => {
        const stream = streamName();
        const written = events(120);
        const result = await store.append(stream, written, 'no_stream');
        const read = await store.readStream(stream);
        expect(ids(read)).to.deep.equal(ids(written));
        expect(read.map((e) => e.revision)).to.deep.equal(written.map((_, i) => BigInt(i)));
        expect(result.nextRevision).to.equal(119n);
        expect(result.position).to.deep.equal(read[119]!.position);
      });

      it('lets one of ten concurrent appends create a stream; the others get WrongExpectedVersion', async () => {
        const stream = streamName();
        const batches = Array.from({ length: 10 }, () => events(2));
        const outcomes = await Promise.allSettled(batches.map((b) => store.append(stream, b, 'no_stream')));
        const won = outcomes.flatMap((o, i) => (o.status === 'fulfilled' ? [i] : []));
        expect(won).to.have.length(1);
        for (const outcome of outcomes)
          if (outcome.status === 'rejected') {
            expect(outcome.reason).to.be.instanceOf(WrongExpectedVersion);
            expect((outcome.reason as WrongExpectedVersion).actual).to.equal(1n);
          }
        const read = await store.readStream(stream);
        expect(ids(read)).to.deep.equal(ids(batches[won[0]!]!));
        expect(read.map((e) => e.revision)).to.deep.equal([0n, 1n]);
      });

      it('answers the same events appended again to their new stream as a replay, not a conflict', async () => {
        const stream = streamName();
        const written = events(3);
        const first = await store.append(stream, written, 'no_stream');
        const again = await store.append(stream, written, 'no_stream');
        expect(again).to.deep.equal(first);
        const other = await rejection(store.append(streamName(), written, 'no_stream'));
        expect(other).to.be.instanceOf(EventIdConflict);
        expect(ids(await store.readStream(stream))).to.deep.equal(ids(written));
      });
    });

    describe('append with exists', () => {
      it('refuses a missing stream with actual no_stream and writes nothing', async () => {
        const stream = streamName();
        const error = await rejection(store.append(stream, events(1), 'exists'));
        expect(error).to.be.instanceOf(WrongExpectedVersion);
        expect((error as WrongExpectedVersion).expected).to.equal('exists');
        expect((error as WrongExpectedVersion).actual).to.equal('no_stream');
        expect(await store.readStream(stream)).to.deep.equal([]);
      });

      it('appends to an existing stream', async () => {
        const stream = streamName();
        const first = events(1);
        const second = events(2);
        await store.append(stream, first, 'no_stream');
        const result = await store.append(stream, second, 'exists');
        expect(result.nextRevision).to.equal(2n);
        expect(ids(await store.readStream(stream))).to.deep.equal(ids([...first, ...second]));
      });
    });

    describe('append with any', () => {
      it('appends to a missing and then to an existing stream', async () => {
        const stream = streamName();
        const first = events(1);
        const second = events(1);
        expect((await store.append(stream, first, 'any')).nextRevision).to.equal(0n);
        expect((await store.append(stream, second, 'any')).nextRevision).to.equal(1n);
        expect(ids(await store.readStream(stream))).to.deep.equal(ids([...first, ...second]));
      });
    });

    describe('append with an exact revision', () => {
      it('appends when the revision matches', async () => {
        const stream = streamName();
        await store.append(stream, events(1), 'no_stream');
        const result = await store.append(stream, events(3), 0n);
        expect(result.nextRevision).to.equal(3n);
        expect((await store.readStream(stream)).map((e) => e.revision)).to.deep.equal([0n, 1n, 2n, 3n]);
      });

      it('refuses a stale revision and writes nothing', async () => {
        const stream = streamName();
        const first = events(1);
        const second = events(1);
        await store.append(stream, first, 'no_stream');
        await store.append(stream, second, 0n);
        const stale = events(2);
        const error = await rejection(store.append(stream, stale, 0n));
        expect(error).to.be.instanceOf(WrongExpectedVersion);
        expect((error as WrongExpectedVersion).expected).to.equal(0n);
        expect((error as WrongExpectedVersion).actual).to.equal(1n);
        expect(ids(await store.readStream(stream))).to.deep.equal(ids([...first, ...second]));
      });

      it('refuses a revision on a missing stream with actual no_stream', async () => {
        const stream = streamName();
        const error = await rejection(store.append(stream, events(1), 0n));
        expect(error).to.be.instanceOf(WrongExpectedVersion);
        expect((error as WrongExpectedVersion).actual).to.equal('no_stream');
        expect(await store.readStream(stream)).to.deep.equal([]);
      });
    });

    describe('idempotency by event id', () => {
      it('treats appending the same ids again as a no-op returning the stored result', async () => {
        const stream = streamName();
        const written = events(2);
        const first = await store.append(stream, written, 'no_stream');
        const again = await store.append(stream, written, 'no_stream');
        expect(again.nextRevision).to.equal(1n);
        expect(comparePositions(again.position, first.position)).to.equal(0);
        const read = await store.readStream(stream);
        expect(ids(read)).to.deep.equal(ids(written));
        // Later appends are unaffected by the replay.
        const next = await store.append(stream, events(1), 1n);
        expect(next.nextRevision).to.equal(2n);
      });

      it('refuses ids of which only some are stored with EventIdConflict, writing nothing', async () => {
        const stream = streamName();
        const [a, b] = events(2) as [NewEvent, NewEvent];
        const c = newEvent();
        await store.append(stream, [a, b], 'no_stream');
        const error = await rejection(store.append(stream, [b, c], 'any'));
        expect(error).to.be.instanceOf(EventIdConflict);
        expect((error as EventIdConflict).eventId).to.equal(b.id);
        expect(ids(await store.readStream(stream))).to.deep.equal([a.id, b.id]);
      });

      if (options.idsUniqueAcrossStreams) {
        it('refuses an id stored on another stream with EventIdConflict, writing nothing', async () => {
          const one = streamName();
          const other = streamName();
          const [a] = events(1) as [NewEvent];
          await store.append(one, [a], 'no_stream');
          const error = await rejection(store.append(other, [a], 'any'));
          expect(error).to.be.instanceOf(EventIdConflict);
          expect((error as EventIdConflict).eventId).to.equal(a.id);
          expect(await store.readStream(other)).to.deep.equal([]);
        });
      }
    });

    describe('append without events', () => {
      it('writes nothing but still checks the expected state', async () => {
        const stream = streamName();
        const error = await rejection(store.append(stream, [], 'exists'));
        expect(error).to.be.instanceOf(WrongExpectedVersion);
        const written = events(2);
        const appended = await store.append(stream, written, 'no_stream');
        const result = await store.append(stream, [], 1n);
        expect(result.nextRevision).to.equal(1n);
        expect(result.position).to.deep.equal(appended.position);
        expect(ids(await store.readStream(stream))).to.deep.equal(ids(written));
      });
    });

    describe('readStream', () => {
      it('reads in revision order, from a revision, up to maxCount; a missing stream reads as []', async () => {
        const stream = streamName();
        // 12 events, so that revision 10 must sort after revision 9.
        const written = events(12);
        await store.append(stream, written.slice(0, 2), 'no_stream');
        await store.append(stream, written.slice(2), 1n);
        const all = await store.readStream(stream);
        expect(ids(all)).to.deep.equal(ids(written));
        expect(all.map((e) => e.revision)).to.deep.equal(written.map((_, i) => BigInt(i)));
        expect(all.map((e) => e.streamName)).to.deep.equal(Array(12).fill(stream));
        expect(all.map((e) => e.data)).to.deep.equal(written.map((_, n) => ({ n })));
        expectStrictlyIncreasing(all.map((e) => e.position));
        expect(ids(await store.readStream(stream, { fromRevision: 9n }))).to.deep.equal(
          ids(written.slice(9)),
        );
        expect(ids(await store.readStream(stream, { maxCount: 2 }))).to.deep.equal(ids(written.slice(0, 2)));
        const one = await store.readStream(stream, { fromRevision: 10n, maxCount: 1 });
        expect(one.map((e) => [e.id, e.revision])).to.deep.equal([[written[10]!.id, 10n]]);
        expect(await store.readStream(stream, { fromRevision: 12n })).to.deep.equal([]);
        expect(await store.readStream(streamName('missing'))).to.deep.equal([]);
      });
    });

    describe('metadata and data', () => {
      it('round-trip every metadata field, set and null, and the data', async () => {
        const stream = streamName();
        const full = newEvent(
          'PatientRegistered',
          { patientId: 42, name: [{ family: 'Müller', given: ['Anna'] }], active: true, note: null },
          {
            tenantId: 3,
            actor: { type: 'session', id: '1234' },
            correlationId: 'corr-1',
            causationId: 'cause-1',
            requestId: 'req-1',
            recordedAt: '2025-01-02T03:04:05.678Z',
          },
        );
        const sparse = newEvent(
          'TenantCreated',
          { tenantId: 9 },
          {
            tenantId: null,
            actor: { type: 'system', id: 'operator' },
            correlationId: 'corr-2',
            causationId: null,
            requestId: null,
            recordedAt: '2025-01-02T03:04:06.000Z',
          },
        );
        await store.append(stream, [full, sparse], 'no_stream');
        for (const read of [
          await store.readStream(stream),
          (await readAllFrom(store, undefined)).filter((e) => e.streamName === stream),
        ]) {
          expect(read.map(({ id, type, data, metadata }) => ({ id, type, data, metadata }))).to.deep.equal([
            { id: full.id, type: full.type, data: full.data, metadata: full.metadata },
            { id: sparse.id, type: sparse.type, data: sparse.data, metadata: sparse.metadata },
          ]);
        }
      });
    });

    describe('readAll', () => {
      it('reads strictly after a position, in increasing position order, up to maxCount', async () => {
        const one = streamName();
        const two = streamName();
        const a = events(3);
        const b = events(2);
        await store.append(one, a.slice(0, 2), 'no_stream');
        await store.append(two, b.slice(0, 1), 'no_stream');
        await store.append(one, a.slice(2), 1n);
        const last = await store.append(two, b.slice(1), 0n);
        const order = [a[0]!, a[1]!, b[0]!, a[2]!, b[1]!].map((e) => e.id);
        const ours = (list: RecordedEvent[]) =>
          list.filter((e) => e.streamName === one || e.streamName === two);

        const everything = ours(await readAllFrom(store, undefined));
        expect(ids(everything)).to.deep.equal(order);
        expectStrictlyIncreasing(everything.map((e) => e.position));
        expect(everything[4]!.position).to.deep.equal(last.position);

        const second = everything[1]!.position;
        const after = ours(await readAllFrom(store, second));
        expect(ids(after)).to.deep.equal(order.slice(2));
        const page = await store.readAll({ from: second, maxCount: 2 });
        expect(ids(page)).to.deep.equal(order.slice(2, 4));
        expect(await store.readAll({ from: last.position })).to.deep.equal([]);
        expect(comparePositions((await store.headPosition())!, last.position)).to.equal(0);
      });

      it('leaves out the excluded types, which do not count against maxCount', async () => {
        const stream = streamName();
        const noise = `Noise${uuid().slice(0, 8)}`;
        const kept = events(3, 'ThingHappened');
        const mixed = [kept[0]!, ...events(2, noise), kept[1]!, ...events(3, noise), kept[2]!];
        const first = await store.append(stream, mixed.slice(0, 1), 'no_stream');
        await store.append(stream, mixed.slice(1), 0n);
        const before = (await readAllFrom(store, undefined)).filter((e) => e.streamName === stream);
        expect(before.map((e) => e.type)).to.include(noise);
        const from = before[0]!.position;
        expect(comparePositions(from, first.position)).to.equal(0);

        // Two events after the first: the two kept ones, the five between and after them skipped.
        const page = await store.readAll({ from, maxCount: 2, excludeTypes: [noise, 'NeverWritten'] });
        expect(ids(page)).to.deep.equal(ids(kept.slice(1)));
        const all = (await readAllFrom(store, undefined)).filter((e) => e.streamName === stream);
        expect(ids(all)).to.deep.equal(ids(mixed));
        expect(await store.readAll({ from: page.at(-1)!.position, excludeTypes: [noise] })).to.deep.equal(
          await store.readAll({ from: page.at(-1)!.position }),
        );
      });

      it('returns positions strictly increasing over the whole log', async () => {
        await store.append(streamName(), events(3), 'no_stream');
        const all = await readAllFrom(store, undefined, 7);
        expect(all.length).to.be.greaterThanOrEqual(3);
        expectStrictlyIncreasing(all.map((e) => e.position));
        expect(all.some((e) => e.type.startsWith('$'))).to.equal(false);
      });
    });

    describe('appendMany', () => {
      it('writes nothing on any stream when a later stream is in the wrong state', async () => {
        const fresh = streamName();
        const existing = streamName();
        const prior = events(1);
        await store.append(existing, prior, 'no_stream');
        const error = await rejection(
          store.appendMany([
            { streamName: fresh, events: events(2), expectedState: 'no_stream' },
            { streamName: existing, events: events(1), expectedState: 'no_stream' },
          ]),
        );
        expect(error).to.be.instanceOf(WrongExpectedVersion);
        expect((error as WrongExpectedVersion).streamName).to.equal(existing);
        expect((error as WrongExpectedVersion).actual).to.equal(0n);
        expect(await store.readStream(fresh)).to.deep.equal([]);
        expect(ids(await store.readStream(existing))).to.deep.equal(ids(prior));
      });

      it('appends to 300 existing streams at once at their revisions, mixed with new and empty requests, or refuses all', async () => {
        const existing = Array.from({ length: 300 }, () => streamName());
        for (const [i, stream] of existing.entries())
          await store.append(stream, events(1 + (i % 3)), 'no_stream');
        const fresh = streamName();
        const request = (stale: boolean) => [
          ...existing.map((stream, i) => ({
            streamName: stream,
            events: i % 7 === 0 ? [] : events(1),
            expectedState: BigInt(i % 3) - (stale && i === 299 ? 1n : 0n),
          })),
          { streamName: fresh, events: events(2), expectedState: 'no_stream' as const },
        ];
        const error = await rejection(store.appendMany(request(true)));
        expect(error).to.be.instanceOf(WrongExpectedVersion);
        expect((error as WrongExpectedVersion).streamName).to.equal(existing[299]);
        expect((error as WrongExpectedVersion).actual).to.equal(2n);
        expect(await store.readStream(fresh)).to.deep.equal([]);
        expect((await store.readStream(existing[1]!)).length).to.equal(2);
        const accepted = request(false);
        const result = await store.appendMany(accepted);
        const revisions = [
          ...existing.map((stream, i) => [stream, BigInt(i % 3) + (i % 7 === 0 ? 0n : 1n)]),
          [fresh, 1n],
        ];
        expect(result.streams.map((s) => [s.streamName, s.nextRevision])).to.deep.equal(revisions);
        const lengths = async () =>
          [...(await store.readStreams([...existing, fresh])).values()].map((events) => events.length);
        const stored = await lengths();
        expect(stored).to.deep.equal(revisions.map(([, r]) => Number(r) + 1));
        // The same append again is a replay: the stored result, nothing written.
        const replay = await store.appendMany(accepted);
        expect(replay.streams.map((s) => [s.streamName, s.nextRevision])).to.deep.equal(revisions);
        expect(await lengths()).to.deep.equal(stored);
      });

      it('creates several new streams in one append, each from revision 0, in request order in $all', async () => {
        const head = await store.headPosition();
        const streams = [streamName(), streamName(), streamName()];
        const written = [events(1), events(3), events(2)];
        const result = await store.appendMany(
          streams.map((name, i) => ({
            streamName: name,
            events: written[i]!,
            expectedState: 'no_stream' as const,
          })),
        );
        expect(result.streams).to.deep.equal([
          { streamName: streams[0], nextRevision: 0n },
          { streamName: streams[1], nextRevision: 2n },
          { streamName: streams[2], nextRevision: 1n },
        ]);
        for (const [i, name] of streams.entries()) {
          const read = await store.readStream(name);
          expect(ids(read)).to.deep.equal(ids(written[i]!));
          expect(read.map((e) => e.revision)).to.deep.equal(written[i]!.map((_, r) => BigInt(r)));
        }
        const all = (await readAllFrom(store, head)).filter((e) => streams.includes(e.streamName));
        expect(ids(all)).to.deep.equal(ids(written.flat()));
        expect(result.position).to.deep.equal(all.at(-1)!.position);
        // Each stream goes on from its last revision.
        await store.append(streams[1]!, events(1), 2n);
        expect(await rejection(store.append(streams[2]!, events(1), 0n))).to.be.instanceOf(
          WrongExpectedVersion,
        );
      });

      it('writes new streams beside the replay of a create already stored, from revision 0', async () => {
        const stored = streamName();
        const replayed = events(2);
        const first = await store.append(stored, replayed, 'no_stream');
        const fresh = streamName();
        const x = events(2);
        const result = await store.appendMany([
          { streamName: fresh, events: x, expectedState: 'no_stream' },
          { streamName: stored, events: replayed, expectedState: 'no_stream' },
        ]);
        expect(result.streams).to.deep.equal([
          { streamName: fresh, nextRevision: 1n },
          { streamName: stored, nextRevision: 1n },
        ]);
        const read = await store.readStream(fresh);
        expect(ids(read)).to.deep.equal(ids(x));
        expect(read.map((e) => e.revision)).to.deep.equal([0n, 1n]);
        expect(ids(await store.readStream(stored))).to.deep.equal(ids(replayed));
        expect((await store.readStream(stored)).at(-1)!.position).to.deep.equal(first.position);
        await store.append(fresh, events(1), 1n);
      });

      if (options.idsUniqueAcrossStreams) {
        it('refuses new streams when an event id is stored on another stream, writing nothing', async () => {
          const one = streamName();
          const [a] = events(1) as [NewEvent];
          await store.append(one, [a], 'no_stream');
          const fresh = [streamName(), streamName()];
          const error = await rejection(
            store.appendMany([
              { streamName: fresh[0]!, events: events(1), expectedState: 'no_stream' },
              { streamName: fresh[1]!, events: [a], expectedState: 'no_stream' },
            ]),
          );
          expect(error).to.be.instanceOf(EventIdConflict);
          expect((error as EventIdConflict).eventId).to.equal(a.id);
          for (const name of fresh) expect(await store.readStream(name)).to.deep.equal([]);
          await store.append(fresh[0]!, events(1), 'no_stream');
        });
      }

      it('writes every stream and returns each revision and the last position', async () => {
        const fresh = streamName();
        const existing = streamName();
        await store.append(existing, events(1), 'no_stream');
        const x = events(2);
        const y = events(1);
        const result = await store.appendMany([
          { streamName: fresh, events: x, expectedState: 'no_stream' },
          { streamName: existing, events: y, expectedState: 0n },
        ]);
        expect(result.streams).to.deep.equal([
          { streamName: fresh, nextRevision: 1n },
          { streamName: existing, nextRevision: 1n },
        ]);
        const [lastOfExisting] = await store.readStream(existing, { fromRevision: 1n });
        expect(lastOfExisting!.id).to.equal(y[0]!.id);
        expect(result.position).to.deep.equal(lastOfExisting!.position);
        expect(ids(await store.readStream(fresh))).to.deep.equal(ids(x));
      });
    });

    describe('subscribeToAll', () => {
      it('delivers the events after a position, then later appends in order, and stops on abort', async () => {
        const stream = streamName();
        const [e1, e2, e3, e4, e5] = events(5) as [NewEvent, NewEvent, NewEvent, NewEvent, NewEvent];
        await store.append(stream, [e1], 'no_stream');
        await store.append(stream, [e2, e3], 0n);
        const [first] = await store.readStream(stream, { maxCount: 1 });

        const controller = new AbortController();
        const seen: RecordedEvent[] = [];
        let ended = false;
        const consuming = (async () => {
          for await (const event of store.subscribeToAll({
            from: first!.position,
            signal: controller.signal,
          })) {
            if (event.streamName === stream) seen.push(event);
          }
          ended = true;
        })();

        await waitUntil(() => seen.length >= 2);
        // Let the subscription go idle before appending, so live delivery is what is tested.
        await new Promise((resolve) => setTimeout(resolve, 300));
        await store.append(stream, [e4], 2n);
        await store.append(stream, [e5], 3n);
        await waitUntil(() => seen.length >= 4);
        await new Promise((resolve) => setTimeout(resolve, 300));
        expect(ids(seen)).to.deep.equal([e2.id, e3.id, e4.id, e5.id]);
        expect(seen.map((e) => e.revision)).to.deep.equal([1n, 2n, 3n, 4n]);
        expectStrictlyIncreasing([first!.position, ...seen.map((e) => e.position)]);
        expect(ended).to.equal(false);

        const abortedAt = Date.now();
        controller.abort();
        await consuming;
        expect(ended).to.equal(true);
        expect(Date.now() - abortedAt).to.be.lessThan(1000);
      });

      it('ends when the consumer breaks out, and at once when the signal is already aborted', async () => {
        const stream = streamName();
        await store.append(stream, events(3), 'no_stream');
        const [first] = await store.readStream(stream, { maxCount: 1 });
        const iterator = store.subscribeToAll({ from: first!.position })[Symbol.asyncIterator]();
        const next = await iterator.next();
        expect(next.done).to.equal(false);
        const returned = await iterator.return?.();
        expect(returned?.done).to.equal(true);
        expect((await iterator.next()).done).to.equal(true);

        const aborted = new AbortController();
        aborted.abort();
        const delivered: RecordedEvent[] = [];
        for await (const event of store.subscribeToAll({ signal: aborted.signal })) delivered.push(event);
        expect(delivered).to.deep.equal([]);
      });

      it('ends live subscriptions when the store is closed', async () => {
        const other = await factory();
        try {
          await other.store.append(streamName(), events(1), 'no_stream');
          let count = 0;
          let ended = false;
          const consuming = (async () => {
            for await (const _ of other.store.subscribeToAll()) count++;
            ended = true;
          })();
          await waitUntil(() => count >= 1);
          await new Promise((resolve) => setTimeout(resolve, 50));
          const closedAt = Date.now();
          await other.store.close();
          await consuming;
          expect(ended).to.equal(true);
          expect(Date.now() - closedAt).to.be.lessThan(1000);
        } finally {
          await other.dispose();
        }
      });
    });
  });
}

for (const database of testDatabases) {
  contract(
    database.name,
    async () => {
      const db = await database.open();
      const store = await SqlEventStore.open(db.sql);
      return {
        store,
        dispose: async () => {
          await store.close();
          await db.dispose();
        },
      };
    },
    { idsUniqueAcrossStreams: true },
  );
}

const kurrentDbUrl = process.env.KURRENTDB_URL;
if (kurrentDbUrl) {
  contract(
    'kurrentdb',
    async () => {
      const store = await KurrentDbEventStore.open(kurrentDbUrl);
      return { store, dispose: () => store.close() };
    },
    { idsUniqueAcrossStreams: false },
  );
} else {
  describe('event store contract on kurrentdb', () => {
    before(function () {
      console.log(
        '  kurrentdb contract skipped: KURRENTDB_URL is not set (no KurrentDB server on this machine)',
      );
      this.skip();
    });
    it('runs the event store contract against a KurrentDB server', () => {
      expect.fail('runs only when KURRENTDB_URL is set');
    });
  });
}
