/**
 * The crypto-shredding codec in the SQL event store (docs/architecture.md "Erasure"), on PGlite
 * and PostgreSQL: a patient's PHI is stored encrypted under that patient's data key and read back
 * in the clear; what names nobody stays plaintext; the sealer's view is the stored bytes; once the
 * key is destroyed the events read as erased (data null), nothing more can be appended about the
 * patient, and the other patients are untouched. An envelope moved onto another event does not
 * decrypt.
 */
import { expect } from 'chai';
import { v4 as uuid } from 'uuid';
import { SqlEventStore } from '../../../src/eventstore/index.js';
import type { NewEvent } from '../../../src/eventstore/port.js';
import { SubjectErased, shreddingCodec } from '../../../src/eventstore/shredding/codec.js';
import { isEncrypted, UndecryptableData } from '../../../src/eventstore/shredding/envelope.js';
import { FileKeyRecords } from '../../../src/eventstore/shredding/file-key-store.js';
import { LocalKek } from '../../../src/eventstore/shredding/kek.js';
import { KeyStore } from '../../../src/eventstore/shredding/key-store.js';
import { phiSubjectOf } from '../../../src/fhir/phi.js';
import { closeAfterEach, testDatabases } from '../../support/databases.js';

const AT = '2026-03-01T10:00:00.000Z';
const metadata = (tenantId: number | null) => ({
  tenantId,
  actor: { type: 'system' as const, id: 'test' },
  correlationId: uuid(),
  causationId: null,
  requestId: null,
  recordedAt: AT,
});

const registered = (id: number, family: string, mrn: string, tenantId = 1): NewEvent => ({
  id: uuid(),
  type: 'PatientRegistered',
  data: {
    id,
    tenantId,
    resource: {
      name: [{ family }],
      identifier: [{ system: 'urn:mrn', value: mrn }],
      birthDate: '1961-04-12',
    },
    at: AT,
  },
  metadata: metadata(tenantId),
});

const encounter = (id: number, patient: number): NewEvent => ({
  id: uuid(),
  type: 'EncounterRegistered',
  data: {
    id,
    tenantId: 1,
    resource: { status: 'in-progress', subject: { reference: `Patient/${patient}` } },
    at: AT,
  },
  metadata: metadata(1),
});

const practitioner = (id: number, family: string): NewEvent => ({
  id: uuid(),
  type: 'PractitionerRegistered',
  data: { id, tenantId: 1, resource: { name: [{ family }] }, at: AT },
  metadata: metadata(1),
});

for (const database of testDatabases) {
  describe(`crypto-shredding codec on ${database.name}`, function () {
    this.timeout(60_000);
    const cleanups = closeAfterEach();

    const open = async () => {
      const opened = await database.open();
      cleanups.push(() => opened.dispose());
      const keys = await KeyStore.open(FileKeyRecords.open(undefined), LocalKek.random());
      cleanups.push(() => keys.close());
      const store = await SqlEventStore.open(opened.sql, { codec: shreddingCodec(keys, phiSubjectOf) });
      cleanups.push(() => store.close());
      return { sql: opened.sql, keys, store };
    };

    it("stores a patient's PHI encrypted, reads it back in the clear, and keeps what names nobody as it is", async () => {
      const { sql, store } = await open();
      await store.appendMany([
        {
          streamName: 'Patient-1',
          events: [registered(1, 'Zebedee', 'MRN-771')],
          expectedState: 'no_stream',
        },
        { streamName: 'Encounter-5', events: [encounter(5, 1)], expectedState: 'no_stream' },
        { streamName: 'Practitioner-9', events: [practitioner(9, 'Okafor')], expectedState: 'no_stream' },
      ]);
      const raw = (await sql.query<{ stream: string; data: string }>(
        `SELECT stream_name AS stream, data::text AS data FROM es_events ORDER BY position`,
      )) as { stream: string; data: string }[];
      expect(raw).to.have.length(3);
      const text = raw.map((r) => r.data).join('\n');
      for (const phi of ['Zebedee', 'MRN-771', '1961-04-12', 'Patient/1']) expect(text).not.to.include(phi);
      expect(isEncrypted(JSON.parse(raw[0]!.data))).to.equal(true);
      expect(isEncrypted(JSON.parse(raw[1]!.data))).to.equal(true);
      // The patient's events share one key; the Practitioner is nobody's PHI.
      expect(JSON.parse(raw[0]!.data).key).to.equal(JSON.parse(raw[1]!.data).key);
      expect(JSON.parse(raw[2]!.data).resource.name[0].family).to.equal('Okafor');

      const [patient] = await store.readStream('Patient-1');
      expect(
        (patient!.data as { resource: { name: { family: string }[] } }).resource.name[0]!.family,
      ).to.equal('Zebedee');
      const all = await store.readAll();
      expect(all.map((e) => isEncrypted(e.data))).to.deep.equal([false, false, false]);
      const stored = await store.readAll({ stored: true });
      expect(stored.map((e) => isEncrypted(e.data))).to.deep.equal([true, true, false]);
      // A reader of some types only (the deferred AuditEvent view): the others stay as stored.
      const some = await store.readAll({ decodeTypes: (type) => type === 'EncounterRegistered' });
      expect(some.map((e) => isEncrypted(e.data))).to.deep.equal([true, false, false]);
      expect(some.map((e) => e.type)).to.deep.equal(all.map((e) => e.type));
      const subscription = new AbortController();
      const followed: boolean[] = [];
      for await (const event of store.subscribeToAll({
        signal: subscription.signal,
        decodeTypes: (type) => type === 'PatientRegistered',
      })) {
        followed.push(isEncrypted(event.data));
        if (followed.length === 3) subscription.abort();
      }
      expect(followed).to.deep.equal([false, true, false]);
      const streams = await store.readStreams(['Encounter-5']);
      expect((streams.get('Encounter-5')![0]!.data as { resource: unknown }).resource).to.deep.equal({
        status: 'in-progress',
        subject: { reference: 'Patient/1' },
      });
    });

    it('erases a patient by destroying its key: its events read as erased, nothing more is appended, the others stay', async () => {
      const { keys, store } = await open();
      await store.append('Patient-1', [registered(1, 'Zebedee', 'MRN-771')], 'no_stream');
      await store.append('Encounter-5', [encounter(5, 1)], 'no_stream');
      await store.append('Patient-2', [registered(2, 'Abara', 'MRN-772')], 'no_stream');
      const before = await store.readAll({ stored: true });

      await keys.destroy(1, 'Patient/1');
      const after = await store.readAll();
      expect(after.map((e) => [e.streamName, e.erased ?? false])).to.deep.equal([
        ['Patient-1', true],
        ['Encounter-5', true],
        ['Patient-2', false],
      ]);
      expect(after[0]!.data).to.equal(null);
      expect(after[0]!.type).to.equal('PatientRegistered');
      expect(after[0]!.metadata.tenantId).to.equal(1);
      expect(
        (after[2]!.data as { resource: { name: { family: string }[] } }).resource.name[0]!.family,
      ).to.equal('Abara');
      // The stored bytes (what the chain seals) did not change.
      expect(await store.readAll({ stored: true })).to.deep.equal(before);
      const [erased] = await store.readStream('Patient-1');
      expect(erased!.erased).to.equal(true);

      let refused: unknown;
      try {
        await store.append('Encounter-6', [encounter(6, 1)], 'no_stream');
      } catch (error) {
        refused = error;
      }
      expect(refused).to.be.instanceOf(SubjectErased);
      expect((await store.readStream('Encounter-6')).length).to.equal(0);
    });

    it('refuses an envelope moved onto another event: it does not decrypt there', async () => {
      const { sql, store } = await open();
      await store.append('Patient-1', [registered(1, 'Zebedee', 'MRN-771')], 'no_stream');
      await store.append('Patient-2', [registered(2, 'Abara', 'MRN-772')], 'no_stream');
      await sql.query(
        `UPDATE es_events SET data = (SELECT data FROM es_events WHERE stream_name = 'Patient-1')
          WHERE stream_name = 'Patient-2'`,
      );
      let error: unknown;
      try {
        await store.readStream('Patient-2');
      } catch (e) {
        error = e;
      }
      expect(error).to.be.instanceOf(UndecryptableData);
    });

    it("reads concurrent callers' streams together, each caller its own streams, and a bad envelope fails only its readers", async () => {
      const { sql, keys, store: writer } = await open();
      for (const id of [1, 2, 3, 4])
        await writer.append(`Patient-${id}`, [registered(id, `Family${id}`, `MRN-80${id}`)], 'no_stream');
      await writer.append('Practitioner-9', [practitioner(9, 'House')], 'no_stream');
      // Patient-4's envelope moved onto Patient-3's event: Patient-3 no longer decrypts.
      await sql.query(
        `UPDATE es_events SET data = (SELECT data FROM es_events WHERE stream_name = 'Patient-4')
          WHERE stream_name = 'Patient-3'`,
      );
      const settle = <T>(read: Promise<T>) =>
        read.then(
          (value) => ({ value }),
          (error: unknown) => ({ error }),
        );
      const familyOf = (events: readonly { data: unknown }[]) =>
        events.map((e) => (e.data as { resource: { name: { family: string }[] } }).resource.name[0]!.family);
      // Started in one turn: on a shared handle the whole-stream reads go in one batch (after the
      // first, which goes alone); the read from a revision on its own.
      let reads = 0;
      const counted = new Proxy(sql, {
        get(target, property, receiver) {
          if (property !== 'query') return Reflect.get(target, property, receiver);
          return (text: string, params?: readonly unknown[]) => {
            if (text.includes('FROM es_events')) reads++;
            return target.query(text, params);
          };
        },
      });
      const store = await SqlEventStore.open(counted, { codec: shreddingCodec(keys, phiSubjectOf) });
      const [one, both, bad, absent, fromTwo] = await Promise.all([
        settle(store.readStream('Patient-1')),
        settle(store.readStreams(['Patient-2', 'Practitioner-9', 'Patient-1'])),
        settle(store.readStreams(['Patient-3', 'Patient-1'])),
        settle(store.readStream('Patient-77')),
        settle(store.readStream('Patient-2', { fromRevision: 1n })),
      ]);
      expect(familyOf((one as { value: { data: unknown }[] }).value)).to.deep.equal(['Family1']);
      const read = (both as { value: Map<string, { data: unknown }[]> }).value;
      expect([...read.keys()]).to.deep.equal(['Patient-2', 'Practitioner-9', 'Patient-1']);
      expect(familyOf(read.get('Patient-2')!)).to.deep.equal(['Family2']);
      expect(familyOf(read.get('Practitioner-9')!)).to.deep.equal(['House']);
      expect(familyOf(read.get('Patient-1')!)).to.deep.equal(['Family1']);
      // The same stream read by two callers: each its own array.
      expect(read.get('Patient-1')).to.not.equal((one as { value: unknown }).value);
      expect((bad as { error: unknown }).error).to.be.instanceOf(UndecryptableData);
      expect((absent as { value: unknown[] }).value).to.deep.equal([]);
      expect((fromTwo as { value: unknown[] }).value).to.deep.equal([]);
      expect(reads).to.equal(3);
      await store.close();
    });
  });
}
