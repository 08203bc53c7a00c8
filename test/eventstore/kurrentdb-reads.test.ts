/**
 * The KurrentDB adapter's reads are bounded and drained (issue 34; src/eventstore/kurrentdb-event-store.ts
 * header): driven against a client whose read iterators are stubbed over an in-memory log (no server
 * needed), every read the adapter starts must ask for a finite `maxCount` and be read to its end,
 * never left early (the client does not cancel a server stream it stops reading).
 */
import { randomUUID } from 'node:crypto';
import { BACKWARDS, END, type EventData, KurrentDBClient, START } from '@kurrent/kurrentdb-client';
import { expect } from 'chai';
import { KurrentDbEventStore, READ_PAGE } from '../../src/eventstore/kurrentdb-event-store.js';
import type { NewEvent, Position } from '../../src/eventstore/port.js';
import { type EventCodec, SubjectErased, shreddingCodec } from '../../src/eventstore/shredding/codec.js';
import { isEncrypted } from '../../src/eventstore/shredding/envelope.js';
import { FileKeyRecords } from '../../src/eventstore/shredding/file-key-store.js';
import { LocalKek } from '../../src/eventstore/shredding/kek.js';
import { KeyStore } from '../../src/eventstore/shredding/key-store.js';
import { createsPhiSubject, phiSubjectOf } from '../../src/fhir/phi.js';

interface StoredEvent {
  readonly id: string;
  readonly type: string;
  readonly streamId: string;
  readonly revision: bigint;
  readonly position: { commit: bigint; prepare: bigint };
  readonly isJson: boolean;
  readonly data: unknown;
  readonly metadata: Record<string, string>;
  readonly created: Date;
}

interface StartedRead {
  readonly kind: 'readAll' | 'readStream';
  readonly maxCount: number | bigint | undefined;
  yielded: number;
  drained: boolean;
  leftEarly: boolean;
}

/** `count` events: every 7th not JSON, every 11th of type `Noise`, every 13th a `$system` event. */
const makeLog = (count: number, json: (i: number) => boolean = (i) => i % 7 !== 3): StoredEvent[] =>
  Array.from({ length: count }, (_, i) => ({
    id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
    type: i % 13 === 5 ? '$system' : i % 11 === 4 ? 'Noise' : 'Happened',
    streamId: `s-${i % 3}`,
    revision: BigInt(Math.floor(i / 3)),
    position: { commit: BigInt(i * 10 + 10), prepare: BigInt(i * 10 + 10) },
    isJson: json(i),
    data: json(i) ? { i } : new Uint8Array([1]),
    metadata: {
      actorType: 'system',
      actorId: 'test',
      correlationId: 'c',
      recordedAt: '2026-03-01T10:00:00.000Z',
    },
    created: new Date('2026-03-01T10:00:00.000Z'),
  }));

/** A client whose `readAll` and `readStream` iterate `log`, recording every read they start. */
const stubbedClient = (log: StoredEvent[], codec?: EventCodec) => {
  const client = KurrentDBClient.connectionString('kurrentdb://127.0.0.1:1?tls=false');
  const reads: StartedRead[] = [];
  const iterate = (
    kind: StartedRead['kind'],
    selected: StoredEvent[],
    maxCount: number | bigint | undefined,
  ) => {
    const read: StartedRead = { kind, maxCount, yielded: 0, drained: false, leftEarly: false };
    reads.push(read);
    const limit = maxCount === undefined ? selected.length : Math.min(Number(maxCount), selected.length);
    let i = 0;
    return {
      [Symbol.asyncIterator]() {
        return {
          next: async () => {
            if (i >= limit) {
              read.drained = true;
              return { done: true as const, value: undefined };
            }
            read.yielded += 1;
            return { done: false as const, value: { event: selected[i++] } };
          },
          return: async () => {
            read.leftEarly = !read.drained;
            return { done: true as const, value: undefined };
          },
        };
      },
    };
  };
  const startAt = (
    events: readonly StoredEvent[],
    from: unknown,
    backwards: boolean,
    key: (e: StoredEvent) => bigint,
  ): StoredEvent[] => {
    const ordered = backwards ? [...events].reverse() : [...events];
    if (from === START || from === END || from === undefined) return ordered;
    const at = key({ position: from, revision: from } as unknown as StoredEvent);
    return ordered.filter((e) => (backwards ? key(e) <= at : key(e) >= at));
  };
  Object.assign(client, {
    readAll: (options: {
      fromPosition?: unknown;
      direction?: string;
      maxCount?: number | bigint;
      filter?: unknown;
    }) =>
      iterate(
        'readAll',
        startAt(
          options.filter ? log.filter((e) => !e.type.startsWith('$')) : log,
          options.fromPosition,
          options.direction === BACKWARDS,
          (e) => e.position.commit,
        ),
        options.maxCount,
      ),
    readStream: (
      stream: string,
      options: { fromRevision?: unknown; direction?: string; maxCount?: number | bigint },
    ) =>
      iterate(
        'readStream',
        startAt(
          log.filter((e) => e.streamId === stream),
          options.fromRevision,
          options.direction === BACKWARDS,
          (e) => e.revision,
        ),
        options.maxCount,
      ),
  });
  Object.assign(client, {
    // Appends as the server would store them (to any stream state): what the codec encoded.
    appendToStream: async (streamId: string, events: EventData[]) => {
      let revision = BigInt(log.filter((e) => e.streamId === streamId).length) - 1n;
      let position = log.at(-1)?.position ?? { commit: 0n, prepare: 0n };
      for (const e of events) {
        revision += 1n;
        position = { commit: position.commit + 10n, prepare: position.prepare + 10n };
        log.push({
          id: e.id,
          type: e.type,
          streamId,
          revision,
          position,
          isJson: true,
          data: JSON.parse(JSON.stringify(e.data)),
          metadata: e.metadata as Record<string, string>,
          created: new Date('2026-03-01T10:00:00.000Z'),
        });
      }
      return { success: true, nextExpectedRevision: revision, position };
    },
  });
  return { store: KurrentDbEventStore.fromClient(client, codec ? { codec } : {}), reads };
};

/** Every read was asked for a finite count of at most a page (and one), and read to its end. */
const expectBoundedAndDrained = (reads: readonly StartedRead[]) => {
  expect(reads.length).to.be.greaterThan(0);
  for (const read of reads) {
    expect(read.maxCount, `${read.kind} asked for no maxCount`).to.not.equal(undefined);
    expect(Number(read.maxCount)).to.be.within(1, READ_PAGE + 1);
    expect(read.drained, `${read.kind} not drained`).to.equal(true);
    expect(read.leftEarly, `${read.kind} left early`).to.equal(false);
  }
};

const positionOf = (e: StoredEvent): Position => ({ commit: e.position.commit, prepare: e.position.prepare });
const readable = (e: StoredEvent, excluded: readonly string[] = []) =>
  e.isJson && !e.type.startsWith('$') && !excluded.includes(e.type);

describe('KurrentDB adapter reads are bounded and drained (stubbed client)', () => {
  it('readAll after a position pages through skipped events and returns exactly maxCount', async () => {
    const log = makeLog(3 * READ_PAGE);
    const { store, reads } = stubbedClient(log);
    const from = positionOf(log[10]!);
    const events = await store.readAll({ from, maxCount: READ_PAGE + 100, excludeTypes: ['Noise'] });
    const expected = log
      .slice(11)
      .filter((e) => readable(e, ['Noise']))
      .slice(0, READ_PAGE + 100);
    expect(events.map((e) => e.id)).to.deep.equal(expected.map((e) => e.id));
    expect(reads.length).to.be.greaterThan(1);
    expectBoundedAndDrained(reads);
    await store.close();
  });

  it('readAll from the start to the end of a short log reads it all, with no read left open', async () => {
    const log = makeLog(40);
    const { store, reads } = stubbedClient(log);
    const events = await store.readAll();
    expect(events.map((e) => e.id)).to.deep.equal(log.filter((e) => readable(e)).map((e) => e.id));
    expectBoundedAndDrained(reads);
    expect(await store.readAll({ from: positionOf(log.at(-1)!) })).to.deep.equal([]);
    expectBoundedAndDrained(reads);
  });

  it('headPosition reads backwards in pages past a long tail of events it skips', async () => {
    const log = makeLog(2 * READ_PAGE + 50, (i) => i < 20);
    const { store, reads } = stubbedClient(log);
    const head = log.filter((e) => readable(e)).at(-1)!;
    expect(await store.headPosition()).to.deep.equal(positionOf(head));
    expect(reads.length).to.be.greaterThan(1);
    expectBoundedAndDrained(reads);
  });

  it('headPosition of a log with nothing readable is undefined; of an empty log too', async () => {
    for (const log of [makeLog(READ_PAGE + 3, () => false), []]) {
      const { store, reads } = stubbedClient(log);
      expect(await store.headPosition()).to.equal(undefined);
      expectBoundedAndDrained(reads);
    }
  });

  it('readStream reads a long stream in pages, and from a revision at most maxCount', async () => {
    const log = makeLog(3 * READ_PAGE + 30);
    const { store, reads } = stubbedClient(log);
    const stream = log.filter((e) => e.streamId === 's-1');
    expect((await store.readStream('s-1')).map((e) => e.id)).to.deep.equal(
      stream.filter((e) => readable(e, ['$system'])).map((e) => e.id),
    );
    expect(reads.length).to.be.greaterThan(1);
    const some = await store.readStream('s-1', { fromRevision: 5n, maxCount: 20 });
    expect(some.map((e) => e.id)).to.deep.equal(
      stream.filter((e) => e.revision >= 5n && e.revision < 25n && readable(e)).map((e) => e.id),
    );
    expectBoundedAndDrained(reads);
  });

  it('an append without events checks the stream with one bounded, drained read', async () => {
    const log = makeLog(30);
    const { store, reads } = stubbedClient(log);
    const last = log.filter((e) => e.streamId === 's-2').at(-1)!;
    const result = await store.append('s-2', [], last.revision);
    expect(result.nextRevision).to.equal(last.revision);
    expectBoundedAndDrained(reads);
  });
});

/** A resource version event of `type` (PatientRegistered, EncounterRegistered…) in tenant 1. */
const resourceEvent = (type: string, id: number, resource: Record<string, unknown>): NewEvent => ({
  id: randomUUID(),
  type,
  data: { id, tenantId: 1, resource, at: '2026-03-01T10:00:00.000Z' },
  metadata: {
    tenantId: 1,
    actor: { type: 'system', id: 'test' },
    correlationId: randomUUID(),
    causationId: null,
    requestId: null,
    recordedAt: '2026-03-01T10:00:00.000Z',
  },
});

// Issue 36 on KurrentDB without a server: what the adapter hands the client is encrypted, what it
// reads back is decrypted, an erased patient's events read as erased and take no new event.
describe('KurrentDB adapter with the crypto-shredding codec (stubbed client)', () => {
  it("stores a patient's PHI encrypted, reads it back, and reads it as erased once its key is destroyed", async () => {
    const keys = await KeyStore.open(FileKeyRecords.open(undefined), LocalKek.random());
    const codec = shreddingCodec(keys, phiSubjectOf, createsPhiSubject);
    const log: StoredEvent[] = [];
    const { store } = stubbedClient(log, codec);
    const patient = {
      name: [{ family: 'Quillfeather' }],
      identifier: [{ system: 'urn:mrn', value: 'KD-4711' }],
    };
    await store.append('Patient-1', [resourceEvent('PatientRegistered', 1, patient)], 'no_stream');
    await store.append(
      'Encounter-2',
      [resourceEvent('EncounterRegistered', 2, { status: 'planned', subject: { reference: 'Patient/1' } })],
      'no_stream',
    );
    await store.append(
      'Practitioner-3',
      [resourceEvent('PractitionerRegistered', 3, { name: [{ family: 'House' }] })],
      'no_stream',
    );

    // The server holds envelopes for the patient's events, the practitioner as it is.
    expect(log.map((e) => isEncrypted(e.data))).to.deep.equal([true, true, false]);
    const held = JSON.stringify(log.map((e) => e.data));
    expect(held).not.to.include('Quillfeather');
    expect(held).not.to.include('KD-4711');
    expect(held).to.include('House');

    const [read] = await store.readStream('Patient-1');
    expect((read!.data as { resource: unknown }).resource).to.deep.equal(patient);
    expect((await store.readAll()).map((e) => e.erased ?? false)).to.deep.equal([false, false, false]);
    // Stored bytes (what the chain seals) come back as stored.
    expect((await store.readAll({ stored: true })).map((e) => isEncrypted(e.data))).to.deep.equal([
      true,
      true,
      false,
    ]);

    // A reader of some types only: the others come back as stored.
    expect(
      (await store.readAll({ decodeTypes: (type) => type === 'EncounterRegistered' })).map((e) =>
        isEncrypted(e.data),
      ),
    ).to.deep.equal([true, false, false]);

    await keys.destroy(1, 'Patient/1');
    const after = await store.readAll();
    expect(after.map((e) => [e.streamName, e.erased ?? false])).to.deep.equal([
      ['Patient-1', true],
      ['Encounter-2', true],
      ['Practitioner-3', false],
    ]);
    expect(after[0]!.data).to.equal(null);
    const refused = await store
      .append(
        'Encounter-4',
        [resourceEvent('EncounterRegistered', 4, { status: 'planned', subject: { reference: 'Patient/1' } })],
        'no_stream',
      )
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    expect(refused).to.be.instanceOf(SubjectErased);
    expect(log).to.have.length(3);
  });

  it('a subscription decrypts what it yields, looking each key up once, not once per event', async () => {
    const records = FileKeyRecords.open(undefined);
    let lookups = 0;
    const keyById = records.keyById.bind(records);
    records.keyById = (tenant, keyId) => {
      lookups++;
      return keyById(tenant, keyId);
    };
    const keys = await KeyStore.open(records, LocalKek.random());
    const log: StoredEvent[] = [];
    const { store } = stubbedClient(log, shreddingCodec(keys, phiSubjectOf, createsPhiSubject));
    Object.assign((store as unknown as { client: object }).client, {
      subscribeToAll: () => {
        const events = log.map((event) => ({ event }));
        return Object.assign(
          (async function* () {
            yield* events;
          })(),
          { unsubscribe: async () => undefined },
        );
      },
    });
    await store.append(
      'Patient-1',
      [resourceEvent('PatientRegistered', 1, { name: [{ family: 'Once' }] })],
      'no_stream',
    );
    for (let i = 0; i < 20; i++)
      await store.append(
        `Encounter-${10 + i}`,
        [
          resourceEvent('EncounterRegistered', 10 + i, {
            status: 'planned',
            subject: { reference: 'Patient/1' },
          }),
        ],
        'no_stream',
      );
    const seen: unknown[] = [];
    for await (const event of store.subscribeToAll()) {
      seen.push(event.data);
      if (seen.length === 21) break;
    }
    expect((seen[0] as { resource: unknown }).resource).to.deep.equal({ name: [{ family: 'Once' }] });
    expect(seen.every((d) => !isEncrypted(d))).to.equal(true);
    expect(lookups).to.equal(1);
  });
});
