/**
 * The limits of docs/interface.md §8 that a client's numbers and lists run into, on PGlite and
 * PostgreSQL: a number beyond the largest resource id (2,147,483,647) names nothing (it answered
 * 500 in searches, paging cursors and the AuditEvent search, where it overflowed PostgreSQL's
 * `integer`, and was stored unchecked as a reference), and the identifiers of one resource and of
 * one transaction Bundle are bounded (20,000 identifiers made one request hold the database for
 * seconds: a reservation stream each). A search date that is not on the calendar answers 400 (the
 * AuditEvent search answered 500). Each refusal writes nothing.
 */
import { expect } from 'chai';
import { MAX_BUNDLE_IDENTIFIERS } from '../../../src/commands/transaction.js';
import { allocateId } from '../../../src/db/sequences.js';
import { MAX_IDENTIFIERS } from '../../../src/fhir/common.schema.js';
import { MAX_RESOURCE_ID } from '../../../src/fhir/references.js';
import { seed, startTestApp, type TestApp, unique } from '../../support/app.js';
import { createResourcePastApi } from '../../support/commands.js';
import { testDatabases } from '../../support/databases.js';
import { expectOutcome, fhir } from '../../support/fhir.js';

const BEYOND = String(MAX_RESOURCE_ID + 1);
const TEN_NINES = '9999999999';

for (const database of testDatabases) {
  describe(`the limits of docs/interface.md §8 on ${database.name}`, function () {
    this.timeout(60_000);
    let app: TestApp;

    before(async () => {
      app = await startTestApp(database);
      await seed(app);
    });
    after(() => app?.close());

    const eventCount = async () => (await app.allEvents()).length;
    const identifiers = (n: number, system = unique('urn:limits')) =>
      Array.from({ length: n }, (_, i) => ({ system, value: `v${i}` }));
    const newPatient = async () => {
      const res = await fhir(app, 'POST', '/Patient', {
        body: { resourceType: 'Patient', identifier: identifiers(1) },
      });
      expect(res.status, JSON.stringify(res.body)).to.equal(201);
      return String(res.body.id);
    };
    /** The ids of a searchset Bundle's matches. */
    const matchIds = (body: { entry?: { resource: { id: string } }[] }) =>
      (body.entry ?? []).map((e) => e.resource.id);

    describe('a number beyond the largest resource id', () => {
      it('matches nothing as _id, alone or next to an id that exists', async () => {
        const id = await newPatient();
        for (const query of [`_id=${BEYOND}`, `_id=${TEN_NINES}`, `_id=${BEYOND},${id}`]) {
          const res = await fhir(app, 'GET', `/Patient?${query}`);
          expect(res.status, `${query}: ${JSON.stringify(res.body)}`).to.equal(200);
          expect(res.body.type).to.equal('searchset');
          expect(matchIds(res.body), query).to.deep.equal(query.endsWith(id) ? [id] : []);
        }
      });

      it('answers 404 as the id of a read, a history or $everything', async () => {
        for (const path of [
          `/Patient/${BEYOND}`,
          `/Encounter/${TEN_NINES}`,
          `/Patient/${BEYOND}/_history`,
          `/Patient/${BEYOND}/$everything`,
        ]) {
          const res = await fhir(app, 'GET', path);
          expect(expectOutcome(res, 404, 'not-found').diagnostics, path).to.match(/is not known/);
        }
      });

      it('matches nothing as a patient, encounter or subject reference, and in the AuditEvent search', async () => {
        for (const path of [
          `/Encounter?patient=Patient/${BEYOND}`,
          `/Encounter?patient=${TEN_NINES}`,
          `/Task?patient=${BEYOND}`,
          `/Task?encounter=Encounter/${TEN_NINES}`,
          `/QuestionnaireResponse?subject=Patient/${BEYOND}`,
          `/AuditEvent?patient=${BEYOND}`,
          `/AuditEvent?patient=Patient/${TEN_NINES}`,
        ]) {
          const res = await fhir(app, 'GET', path);
          expect(res.status, `${path}: ${JSON.stringify(res.body)}`).to.equal(200);
          expect(matchIds(res.body), path).to.deep.equal([]);
        }
      });

      it('answers 400 as the key of a paging cursor', async () => {
        const cursor = (value: unknown[]) => Buffer.from(JSON.stringify(value)).toString('base64url');
        for (const [query, name] of [
          [`_cursor=${cursor(['n', TEN_NINES, 1, ''])}`, 'next by _id'],
          [`_cursor=${cursor(['p', BEYOND, 5, ''])}`, 'previous by _id'],
          [`_sort=_id&_cursor=${cursor(['n', TEN_NINES, 1, '_id'])}`, 'explicit _sort=_id'],
        ] as const) {
          const res = await fhir(app, 'GET', `/Patient?${query}`);
          expect(expectOutcome(res, 400, 'invalid').expression, name).to.deep.equal(['_cursor']);
        }
      });

      it('answers 422 as a reference in a resource, naming the element, and writes nothing', async () => {
        const before = await eventCount();
        const encounter = await fhir(app, 'POST', '/Encounter', {
          body: { resourceType: 'Encounter', status: 'planned', subject: { reference: `Patient/${BEYOND}` } },
        });
        const issue = expectOutcome(encounter, 422, 'invalid');
        expect(issue.expression).to.deep.equal(['Encounter.subject.reference']);
        expect(issue.diagnostics).to.include(String(MAX_RESOURCE_ID));
        expect(await eventCount()).to.equal(before);
      });
    });

    describe('search dates', () => {
      it('answers 400 for a date that is not on the calendar (it answered 500, or searched the day Date rolled it to)', async () => {
        for (const path of [
          '/AuditEvent?date=2026-13-45',
          '/AuditEvent?date=ge2026-02-31',
          '/AuditEvent?date=2026-01-01T25:00:00Z',
          '/Patient/_history?_since=2026-02-31',
          '/Patient/_history?_since=2026-01-01T24:00:00Z',
        ]) {
          const res = await fhir(app, 'GET', path);
          expect(res.status, `${path}: ${JSON.stringify(res.body)}`).to.equal(400);
          expect(res.body.issue[0].code, path).to.equal('invalid');
        }
        for (const path of ['/AuditEvent?date=ge2026-02-28', '/Patient/_history?_since=2028-02-29']) {
          const res = await fhir(app, 'GET', path);
          expect(res.status, `${path}: ${JSON.stringify(res.body).slice(0, 300)}`).to.equal(200);
        }
      });
    });

    describe('identifiers per resource', () => {
      it(`stores ${MAX_IDENTIFIERS} and refuses ${MAX_IDENTIFIERS + 1} with 422 on Patient.identifier, writing nothing`, async () => {
        const ok = await fhir(app, 'POST', '/Patient', {
          body: { resourceType: 'Patient', identifier: identifiers(MAX_IDENTIFIERS) },
        });
        expect(ok.status, JSON.stringify(ok.body).slice(0, 300)).to.equal(201);
        expect(ok.body.identifier).to.have.length(MAX_IDENTIFIERS);
        const before = await eventCount();
        const tooMany = await fhir(app, 'POST', '/Patient', {
          body: { resourceType: 'Patient', identifier: identifiers(MAX_IDENTIFIERS + 1) },
        });
        expect(expectOutcome(tooMany, 422, 'invalid').expression).to.deep.equal(['Patient.identifier']);
        expect(await eventCount()).to.equal(before);
      });

      it('refuses 20,000 identifiers, repeats among them, with 422 and writes nothing', async () => {
        const list = identifiers(20_000);
        list.push(list[0]!);
        const before = await eventCount();
        const res = await fhir(app, 'POST', '/Patient', {
          body: { resourceType: 'Patient', identifier: list },
        });
        expect(expectOutcome(res, 422, 'invalid').diagnostics).to.match(/holds more than 100 identifiers/);
        expect(await eventCount()).to.equal(before);
      });

      it('refuses a conditional create whose match would be identifier 101, and a conditional update that would merge past 100', async () => {
        const system = unique('urn:limits:put');
        const before = await eventCount();
        const create = await fhir(app, 'PUT', `/Patient?identifier=${system}|match`, {
          body: { resourceType: 'Patient', identifier: identifiers(MAX_IDENTIFIERS, system) },
        });
        const issue = expectOutcome(create, 422, 'invalid');
        expect(issue.expression).to.deep.equal(['Patient.identifier']);
        expect(issue.diagnostics).to.match(/would hold 101 identifiers; at most 100/);
        expect(await eventCount()).to.equal(before);

        const held = await fhir(app, 'PUT', `/Patient?identifier=${system}|match`, {
          body: { resourceType: 'Patient', identifier: identifiers(MAX_IDENTIFIERS - 1, system) },
        });
        expect(held.status, JSON.stringify(held.body).slice(0, 300)).to.equal(200);
        expect(held.body.identifier).to.have.length(MAX_IDENTIFIERS);
        const afterCreate = await eventCount();
        const merge = await fhir(app, 'PUT', `/Patient?identifier=${system}|match`, {
          body: { resourceType: 'Patient', identifier: [{ system, value: 'one-more' }] },
        });
        expect(expectOutcome(merge, 422, 'invalid').diagnostics).to.match(/would hold 101 identifiers/);
        expect(await eventCount()).to.equal(afterCreate);
        const read = await fhir(app, 'GET', `/Patient/${held.body.id}`);
        expect(read.body.identifier).to.have.length(MAX_IDENTIFIERS);
      });
    });

    it('still updates a resource stored with more identifiers before the bound, as long as the update adds none', async () => {
      // Written past the API, as a resource from before the bound would have been.
      const id = await allocateId(app.casebook.sql, 'Patient');
      await createResourcePastApi(
        app.casebook.context({ tenantId: 1, actor: { type: 'system', id: 'test' } }),
        'Patient',
        id,
        { identifier: identifiers(MAX_IDENTIFIERS + 1) },
      );
      // A Patient update that omits identifier keeps them (docs/interface.md §4.3 rule 3).
      const res = await fhir(app, 'PUT', `/Patient/${id}`, {
        body: { resourceType: 'Patient', id: String(id), gender: 'female' },
      });
      expect(res.status, JSON.stringify(res.body).slice(0, 300)).to.equal(200);
      expect(res.body.gender).to.equal('female');
      expect(res.body.identifier).to.have.length(MAX_IDENTIFIERS + 1);
    });

    describe('identifiers in one transaction Bundle', () => {
      const bundle = (entries: number, perEntry: number) => ({
        resourceType: 'Bundle',
        type: 'transaction',
        entry: Array.from({ length: entries }, () => ({
          request: { method: 'POST', url: 'Patient' },
          resource: { resourceType: 'Patient', identifier: identifiers(perEntry) },
        })),
      });

      it(`takes ${MAX_BUNDLE_IDENTIFIERS} and refuses more with 400 on Bundle.entry, writing nothing`, async () => {
        const perEntry = MAX_BUNDLE_IDENTIFIERS / 10;
        const ok = await fhir(app, 'POST', '/', { body: bundle(10, perEntry) });
        expect(ok.status, JSON.stringify(ok.body).slice(0, 300)).to.equal(200);
        expect(ok.body.entry).to.have.length(10);
        const before = await eventCount();
        const tooMany = await fhir(app, 'POST', '/', { body: bundle(11, perEntry) });
        const issue = expectOutcome(tooMany, 400, 'invalid');
        expect(issue.expression).to.deep.equal(['Bundle.entry']);
        expect(issue.diagnostics).to.include(`${MAX_BUNDLE_IDENTIFIERS + perEntry} identifiers in all`);
        expect(await eventCount()).to.equal(before);
      });
    });
  });
}
