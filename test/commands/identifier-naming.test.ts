/**
 * Keyed names of identifier reservation streams (docs/architecture.md "Erasure"; issue 36): a
 * store created now names them `reservation-<HMAC-SHA256 under the tenant's identifier secret>`,
 * recorded once as `IdentifierHashingChosen`, and still refuses a duplicate identifier; the
 * unkeyed SHA-256 name of the identifier appears nowhere. A store that held events before keeps
 * the unkeyed names and records nothing. On PGlite and PostgreSQL.
 */
import { expect } from 'chai';
import { openIdentifierNaming } from '../../src/commands/identifier-naming.js';
import { IDENTIFIER_HASHING_STREAM } from '../../src/domain/reservation/identifier-hashing.js';
import { identifierKey, reservationStream } from '../../src/domain/reservation/reservation.js';
import { FileKeyRecords } from '../../src/eventstore/shredding/file-key-store.js';
import { LocalKek } from '../../src/eventstore/shredding/kek.js';
import { KeyStore } from '../../src/eventstore/shredding/key-store.js';
import { seed, startTestApp } from '../support/app.js';
import { testCommandContext } from '../support/commands.js';
import { openStore, testDatabases } from '../support/databases.js';
import { testEvent } from '../support/events.js';
import { fhir } from '../support/fhir.js';

for (const database of testDatabases) {
  describe(`identifier reservation names on ${database.name}`, function () {
    this.timeout(60_000);

    it('a new store names reservations by a keyed hash and still refuses a duplicate identifier', async () => {
      const app = await startTestApp(database);
      try {
        await seed(app);
        const body = {
          resourceType: 'Patient',
          identifier: [{ system: 'urn:mrn', value: 'HMAC-0042' }],
          name: [{ family: 'Keyed' }],
        };
        const created = await fhir(app, 'POST', '/Patient', { body });
        expect(created.status).to.equal(201);
        expect((await fhir(app, 'POST', '/Patient', { body })).status).to.equal(409);
        const events = await app.allEvents();
        expect(events[0]!.streamName).to.equal(IDENTIFIER_HASHING_STREAM);
        expect(events[0]!.data).to.deep.include({ scheme: 'hmac-sha256' });
        const claims = events.filter(
          (e) => e.type === 'ReservationClaimed' && e.streamName.startsWith('reservation-'),
        );
        const unkeyed = reservationStream(identifierKey('Patient', 1, 'urn:mrn', 'HMAC-0042'));
        expect(claims.map((e) => e.streamName)).not.to.include(unkeyed);
        const keyed = claims.filter(
          (e) =>
            (e.data as { ownerType: string; ownerId: string }).ownerType === 'Patient' &&
            (e.data as { ownerId: string }).ownerId === String(created.body.id),
        );
        expect(keyed).to.have.length(1);
        expect(keyed[0]!.streamName).to.match(/^reservation-[0-9a-f]{40}$/);
        // The same identifier after a change of the Patient's MRN and back is still the same stream.
        const read = (await fhir(app, 'GET', `/Patient?identifier=urn:mrn%7CHMAC-0042`)).body;
        expect(read.entry).to.have.length(1);
      } finally {
        await app.close();
      }
    });

    it('a store that held events before keeps unkeyed names and records nothing; an empty one chooses keyed names once', async () => {
      const cleanups = [] as (() => Promise<void>)[];
      try {
        const keys = await KeyStore.open(FileKeyRecords.open(undefined), LocalKek.random());
        const open = async () => {
          const { opened, store } = await openStore(database, cleanups);
          return { store, ctx: testCommandContext(store, opened.sql, [], { tenantId: null }) };
        };
        // A log with events and no choice: a store from before.
        const old = await open();
        await old.store.append('legacy-marker', [testEvent('Marker', {})], 'no_stream');
        const unkeyed = await openIdentifierNaming(old.ctx, keys);
        expect(unkeyed.scheme).to.equal('sha256');
        expect(unkeyed.stream(1, 'k')).to.equal(reservationStream('k'));
        expect(await old.store.readStream(IDENTIFIER_HASHING_STREAM)).to.deep.equal([]);
        // An empty log: keyed, recorded; opened again (a second process), the same.
        const fresh = await open();
        const keyed = await openIdentifierNaming(fresh.ctx, keys);
        expect(keyed.scheme).to.equal('hmac-sha256');
        expect(() => keyed.stream(1, 'k')).to.throw(/not loaded/);
        await keyed.prepare(1);
        expect(keyed.stream(1, 'k'))
          .to.match(/^reservation-[0-9a-f]{40}$/)
          .and.not.equal(reservationStream('k'));
        await keyed.prepare(2);
        expect(keyed.stream(2, 'k')).not.to.equal(keyed.stream(1, 'k'));
        const again = await openIdentifierNaming(fresh.ctx, keys);
        expect(again.scheme).to.equal('hmac-sha256');
        expect(await fresh.store.readStream(IDENTIFIER_HASHING_STREAM)).to.have.length(1);
      } finally {
        while (cleanups.length > 0) await cleanups.pop()!();
      }
    });
  });
}
