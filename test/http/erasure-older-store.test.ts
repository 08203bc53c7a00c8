/**
 * Erasure on a store whose patient events were written before encryption (issue 36 "An older store
 * keeps working"; docs/architecture.md "Erasure", Older stores): the erasure tombstones the
 * read-model rows and records `PatientErased`, while the log keeps what those plaintext events
 * said — as the docs say plainly — and still verifies.
 */
import { randomUUID } from 'node:crypto';
import { expect } from 'chai';
import { pino } from 'pino';
import type { NewEvent } from '../../src/eventstore/port.js';
import { Sealer } from '../../src/eventstore/sealer.js';
import { isEncrypted } from '../../src/eventstore/shredding/envelope.js';
import { SqlEventStore } from '../../src/eventstore/sql-event-store.js';
import { verifyLog } from '../../src/eventstore/verify.js';
import { seed, startTestApp, type TestApp } from '../support/app.js';
import { testDatabases } from '../support/databases.js';
import { fhir } from '../support/fhir.js';

const ID = 900_001;
const FAMILY = 'Oldenburgh';

/** The PatientRegistered an earlier casebook wrote: data in the clear. */
const plaintextPatient = (): NewEvent => ({
  id: randomUUID(),
  type: 'PatientRegistered',
  data: {
    id: ID,
    tenantId: 1,
    resource: { name: [{ family: FAMILY }], birthDate: '1944-02-29' },
    at: '2026-03-01T09:00:00.000Z',
  },
  metadata: {
    tenantId: 1,
    actor: { type: 'system', id: 'older-casebook' },
    correlationId: randomUUID(),
    causationId: null,
    requestId: null,
    recordedAt: '2026-03-01T09:00:00.000Z',
  },
});

for (const database of testDatabases)
  describe(`erasing a patient of an older store (plaintext events) on ${database.name}`, function () {
    this.timeout(120_000);
    let app: TestApp;
    before(async () => {
      app = await startTestApp(database);
      await seed(app);
    });
    after(async () => {
      await app?.close();
    });

    it('tombstones its rows and records the erasure; the log keeps the plaintext and still verifies', async () => {
      // Written as a casebook before encryption wrote it: a store without the codec.
      const older = await SqlEventStore.open(app.casebook.sql);
      await older.append(`Patient-${ID}`, [plaintextPatient()], 'no_stream');
      // Its read models held it (an upgrade keeps them): here, rebuilt from the log.
      await app.casebook.runner.rebuild();
      const read = await fhir(app, 'GET', `/Patient/${ID}`);
      expect(read.status).to.equal(200);
      expect(read.body.name).to.deep.equal([{ family: FAMILY }]);

      const erased = await fhir(app, 'POST', `/Patient/${ID}/$erase`, {
        body: {
          resourceType: 'Parameters',
          parameter: [{ name: 'reason', valueString: 'duplicate record' }],
        },
      });
      expect(erased.status).to.equal(200);
      expect((await fhir(app, 'GET', `/Patient/${ID}`)).status).to.equal(410);
      expect((await fhir(app, 'GET', `/Patient?_id=${ID}`)).body.entry ?? []).to.deep.equal([]);
      const rows = await app.casebook.sql.query<{ content: unknown }>(
        `SELECT content FROM rm_resources WHERE resource_type = 'Patient' AND id = $1`,
        [ID],
      );
      expect(JSON.stringify(rows)).not.to.include(FAMILY);
      const events = await app.allEvents();
      expect(events.filter((e) => e.type === 'PatientErased').map((e) => e.data)).to.have.length(1);

      // What the docs say it cannot forget: the plaintext event, stored as it was.
      const stored = (await app.casebook.store.readAll({ stored: true })).find(
        (e) => e.streamName === `Patient-${ID}`,
      );
      expect(isEncrypted(stored!.data)).to.equal(false);
      expect(JSON.stringify(stored!.data)).to.include(FAMILY);

      const sealer = new Sealer(app.casebook.store, app.casebook.sql, pino({ level: 'silent' }));
      await sealer.migrate();
      await sealer.sealAll();
      const verified = await verifyLog(app.casebook.store, app.casebook.sql, { now: new Date(Date.now()) });
      expect(verified.ok, JSON.stringify(verified.problem)).to.equal(true);

      // Erasing again succeeds and adds nothing.
      const again = await fhir(app, 'POST', `/Patient/${ID}/$erase`, {
        body: {
          resourceType: 'Parameters',
          parameter: [{ name: 'reason', valueString: 'duplicate record' }],
        },
      });
      expect(again.status).to.equal(200);
      expect((await app.allEvents()).filter((e) => e.type === 'PatientErased')).to.have.length(1);
    });
  });
