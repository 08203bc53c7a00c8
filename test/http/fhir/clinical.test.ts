/**
 * Patient (spec §2.5, §4.3, §7), Encounter and Practitioner on the FHIR R5 data server (issue 3),
 * with history, versions, ETag/If-Match, the CapabilityStatement, content types, authentication
 * and tenant isolation, asserted over HTTP against a real casebook on PGlite and on the Postgres
 * server: status, body, headers and the events each request wrote (or did not write).
 */
import { expect } from 'chai';
import type { RecordedEvent } from '../../../src/eventstore/port.js';
import { basic, GENERAL, MANAGED, seed, startTestApp, type TestApp } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import { FHIR_JSON, type FhirResponse, fhir } from '../../support/fhir.js';

const MRN = 'urn:oid:1.2.840.99999.1.1';
const SECOND = 1000;

interface ExpectedIssue {
  readonly code: string;
  /** The issue's expression; omitted = the issue must have none. */
  readonly expression?: string[];
}

for (const database of testDatabases) {
  describe(`FHIR Patient, Encounter and Practitioner on ${database.name}`, () => {
    let app: TestApp;
    let base: string;
    let seq = 0;
    const unique = (prefix: string) => `${prefix}-${++seq}-${Math.random().toString(36).slice(2, 8)}`;
    const mrn = (value = unique('mrn')) => ({ system: MRN, value });
    const now = () => app.casebook.clock().toISOString();
    const q = (identifier: { system: string; value: string }) =>
      `identifier=${encodeURIComponent(`${identifier.system}|${identifier.value}`)}`;

    before(async () => {
      app = await startTestApp(database);
      await seed(app);
      base = app.casebook.config.fhirUrl;
    });
    after(() => app?.close());

    const eventCount = async () => (await app.allEvents()).length;
    const eventsSince = async (count: number) => (await app.allEvents()).slice(count);

    /** Asserts an OperationOutcome answer with exactly `issues` (code and expression of each). */
    const expectIssues = (res: FhirResponse, status: number, issues: readonly ExpectedIssue[]) => {
      expect(res.status, JSON.stringify(res.body)).to.equal(status);
      expect(res.headers.get('content-type')).to.match(/^application\/fhir\+json/);
      expect(res.body.resourceType).to.equal('OperationOutcome');
      expect(
        res.body.issue.map((i: { code: string; expression?: string[] }) => ({
          code: i.code,
          ...(i.expression ? { expression: i.expression } : {}),
        })),
      ).to.deep.equal(issues);
      for (const issue of res.body.issue) {
        expect(issue.severity).to.equal('error');
        expect(issue.diagnostics).to.be.a('string').and.not.equal('');
      }
    };

    /** Runs `request`, asserts the OperationOutcome and that no event was written. */
    const refused = async (
      request: () => Promise<FhirResponse>,
      status: number,
      issues: readonly ExpectedIssue[],
    ): Promise<FhirResponse> => {
      const before = await eventCount();
      const res = await request();
      expectIssues(res, status, issues);
      expect(await eventCount(), 'events written by a refused request').to.equal(before);
      return res;
    };

    /**
     * A 422 for a reference to a Patient that is not live in the tenant: one `not-found` issue on
     * the subject, nothing written. The exact expression is asserted once, in its own test.
     */
    const refusedSubject = async (request: () => Promise<FhirResponse>) => {
      const before = await eventCount();
      const res = await request();
      expect(res.status, JSON.stringify(res.body)).to.equal(422);
      expect(res.body.resourceType).to.equal('OperationOutcome');
      expect(res.body.issue).to.have.length(1);
      expect(res.body.issue[0].code).to.equal('not-found');
      expect(res.body.issue[0].expression).to.have.length(1);
      expect(res.body.issue[0].expression[0]).to.match(/(^|\.)subject$/);
      expect(await eventCount(), 'events written by a refused request').to.equal(before);
    };

    const post = (type: string, body: unknown, auth = GENERAL) =>
      fhir(app, 'POST', `/${type}`, { body, auth });

    /** Creates a resource, asserting 201; returns its body. */
    const created = async (type: string, body: Record<string, unknown>, auth = GENERAL) => {
      const res = await post(type, { resourceType: type, ...body }, auth);
      expect(res.status, JSON.stringify(res.body)).to.equal(201);
      return res.body;
    };
    const createPatient = (body: Record<string, unknown> = {}, auth = GENERAL) =>
      created('Patient', { identifier: [mrn()], ...body }, auth);
    const createEncounter = (patientId: string, body: Record<string, unknown> = {}, auth = GENERAL) =>
      created(
        'Encounter',
        {
          identifier: [{ system: 'urn:test:visit', value: unique('visit') }],
          status: 'in-progress',
          subject: { reference: `Patient/${patientId}` },
          ...body,
        },
        auth,
      );

    const read = (type: string, id: string, auth = GENERAL) => fhir(app, 'GET', `/${type}/${id}`, { auth });

    const fhirResource = (
      type: string,
      id: string,
      versionId: number,
      lastUpdated: string,
      content: Record<string, unknown>,
    ) => ({ resourceType: type, id, meta: { versionId: String(versionId), lastUpdated }, ...content });

    describe('POST /Patient', () => {
      it('answers 201 with the created Patient, a server-assigned id, meta, Location, ETag and Last-Modified', async () => {
        app.advance(SECOND);
        const identifier = mrn();
        const content = {
          identifier: [identifier],
          name: [{ family: 'Doe', given: ['Jane', 'Q'] }],
          gender: 'female',
          birthDate: '1980-04-12',
        };
        const res = await post('Patient', {
          resourceType: 'Patient',
          id: '999999',
          meta: { versionId: '7', lastUpdated: '2000-01-01T00:00:00Z' },
          ...content,
        });
        expect(res.status, JSON.stringify(res.body)).to.equal(201);
        expect(res.headers.get('content-type')).to.match(/^application\/fhir\+json/);
        const id = res.body.id;
        expect(id).to.match(/^\d+$/);
        expect(id).not.to.equal('999999');
        expect(res.body).to.deep.equal(fhirResource('Patient', id, 1, now(), content));
        expect(res.headers.get('location')).to.equal(`${base}/Patient/${id}/_history/1`);
        expect(res.headers.get('etag')).to.equal('W/"1"');
        expect(res.headers.get('last-modified')).to.equal(new Date(now()).toUTCString());

        const got = await read('Patient', id);
        expect(got.status).to.equal(200);
        expect(got.headers.get('content-type')).to.match(/^application\/fhir\+json/);
        expect(got.headers.get('etag')).to.equal('W/"1"');
        expect(got.headers.get('last-modified')).to.equal(new Date(now()).toUTCString());
        expect(got.body).to.deep.equal(res.body);
      });

      it('writes ReservationClaimed and PatientRegistered with the tenant and the client as actor', async () => {
        app.advance(SECOND);
        const before = await eventCount();
        const identifier = mrn();
        const res = await fhir(app, 'POST', '/Patient', {
          body: { resourceType: 'Patient', identifier: [identifier], gender: 'male' },
          headers: { 'X-Request-Id': 'req-patient-post-1' },
        });
        expect(res.status).to.equal(201);
        const events = await eventsSince(before);
        expect(events.map((e) => e.type)).to.deep.equal(['ReservationClaimed', 'PatientRegistered']);
        const [claim, registered] = events as [RecordedEvent, RecordedEvent];
        expect(claim.streamName).to.match(/^reservation-[0-9a-f]{40}$/);
        expect(claim.data).to.deep.equal({
          key: `Patient-identifier:1:${identifier.system}|${identifier.value}`,
          ownerType: 'Patient',
          ownerId: res.body.id,
          at: now(),
        });
        expect(registered.streamName).to.equal(`Patient-${res.body.id}`);
        expect(registered.revision).to.equal(0n);
        expect(registered.data).to.deep.equal({
          id: Number(res.body.id),
          tenantId: 1,
          resource: { identifier: [identifier], gender: 'male' },
          at: now(),
        });
        for (const event of events)
          expect(event.metadata).to.deep.equal({
            tenantId: 1,
            actor: { type: 'client', id: 'ehr-backend' },
            correlationId: 'req-patient-post-1',
            causationId: 'req-patient-post-1',
            requestId: 'req-patient-post-1',
            recordedAt: now(),
          });
      });

      it("records the other tenant and its client on the other tenant's writes", async () => {
        const before = await eventCount();
        const body = await createPatient({}, MANAGED);
        const events = await eventsSince(before);
        expect(events.map((e) => e.type)).to.deep.equal(['ReservationClaimed', 'PatientRegistered']);
        expect((events[1]!.data as { tenantId: number }).tenantId).to.equal(2);
        expect((events[1]!.data as { id: number }).id).to.equal(Number(body.id));
        for (const event of events) {
          expect(event.metadata.tenantId).to.equal(2);
          expect(event.metadata.actor).to.deep.equal({ type: 'client', id: 'managed-ehr' });
        }
      });

      it('stores only the first name, and only its prefix, given, family and text (spec §2.5)', async () => {
        const before = await eventCount();
        const body = await createPatient({
          name: [
            {
              use: 'official',
              prefix: ['Dr'],
              given: ['Jane', 'Quinn'],
              family: 'Doe',
              text: 'Dr Jane Quinn Doe Jr',
              suffix: ['Jr'],
              period: { start: '2000-01-01' },
            },
            { use: 'maiden', family: 'Smith' },
          ],
        });
        const name = [
          { prefix: ['Dr'], given: ['Jane', 'Quinn'], family: 'Doe', text: 'Dr Jane Quinn Doe Jr' },
        ];
        expect(body.name).to.deep.equal(name);
        expect((await read('Patient', body.id)).body.name).to.deep.equal(name);
        const registered = (await eventsSince(before)).find((e) => e.type === 'PatientRegistered')!;
        expect((registered.data as { resource: { name: unknown } }).resource.name).to.deep.equal(name);
      });

      it('keeps the R5 elements beyond spec §2.5 (issue 35: active, telecom, address…)', async () => {
        const identifier = mrn();
        const body = await createPatient({
          identifier: [identifier],
          active: true,
          telecom: [{ system: 'phone', value: '555' }],
          address: [{ city: 'Springfield' }],
          gender: 'unknown',
        });
        expect(body).to.deep.equal(
          fhirResource('Patient', body.id, 1, now(), {
            identifier: [identifier],
            active: true,
            telecom: [{ system: 'phone', value: '555' }],
            address: [{ city: 'Springfield' }],
            gender: 'unknown',
          }),
        );
      });

      it('accepts the four gender codes', async () => {
        for (const gender of ['male', 'female', 'other', 'unknown']) {
          const body = await createPatient({ gender });
          expect(body.gender).to.equal(gender);
        }
      });

      it('refuses any other gender with 422 invalid at Patient.gender', async () => {
        for (const gender of ['M', 'Male', 'f', 'diverse', '', 1])
          await refused(
            () => post('Patient', { resourceType: 'Patient', identifier: [mrn()], gender }),
            422,
            [{ code: 'invalid', expression: ['Patient.gender'] }],
          );
      });

      it('accepts birthDate as a FHIR date (YYYY, YYYY-MM, YYYY-MM-DD, 29 February of a leap year)', async () => {
        for (const birthDate of ['1975', '1975-06', '1975-06-30', '2024-02-29', '2000-02-29']) {
          const body = await createPatient({ birthDate });
          expect(body.birthDate).to.equal(birthDate);
        }
      });

      it('refuses a birthDate that is not a valid date with 422 invalid at Patient.birthDate', async () => {
        for (const birthDate of [
          '2023-02-29',
          '1900-02-29',
          '1980-04-31',
          '1980-13-01',
          '1980-00-10',
          '1980-1-1',
          '12.04.1980',
          '1980-04-12T10:00:00Z',
          'yesterday',
          '',
          19800412,
        ])
          await refused(
            () => post('Patient', { resourceType: 'Patient', identifier: [mrn()], birthDate }),
            422,
            [{ code: 'invalid', expression: ['Patient.birthDate'] }],
          );
      });

      it('refuses Identifier entries with fields other than system and value (422, spec §7)', async () => {
        const extras: Record<string, unknown> = {
          use: 'official',
          type: { text: 'MRN' },
          period: { start: '2020-01-01' },
          assigner: { display: 'General Hospital' },
          id: 'x1',
          extension: [],
        };
        for (const [field, value] of Object.entries(extras))
          await refused(
            () =>
              post('Patient', {
                resourceType: 'Patient',
                identifier: [mrn(), { ...mrn(), [field]: value }],
              }),
            422,
            [{ code: 'invalid', expression: [`Patient.identifier[1].${field}`] }],
          );
      });

      it('requires system and value on every Identifier entry (422 required)', async () => {
        await refused(
          () => post('Patient', { resourceType: 'Patient', identifier: [{ value: unique('v') }] }),
          422,
          [{ code: 'required', expression: ['Patient.identifier[0].system'] }],
        );
        await refused(
          () => post('Patient', { resourceType: 'Patient', identifier: [{ system: MRN }] }),
          422,
          [{ code: 'required', expression: ['Patient.identifier[0].value'] }],
        );
        await refused(() => post('Patient', { resourceType: 'Patient', identifier: [{}] }), 422, [
          { code: 'required', expression: ['Patient.identifier[0].system'] },
          { code: 'required', expression: ['Patient.identifier[0].value'] },
        ]);
        await refused(
          () => post('Patient', { resourceType: 'Patient', identifier: [{ system: '', value: '' }] }),
          422,
          [
            { code: 'invalid', expression: ['Patient.identifier[0].system'] },
            { code: 'invalid', expression: ['Patient.identifier[0].value'] },
          ],
        );
        await refused(
          () => post('Patient', { resourceType: 'Patient', identifier: [{ system: 7, value: 12345 }] }),
          422,
          [
            { code: 'invalid', expression: ['Patient.identifier[0].system'] },
            { code: 'invalid', expression: ['Patient.identifier[0].value'] },
          ],
        );
        await refused(() => post('Patient', { resourceType: 'Patient', identifier: mrn() }), 422, [
          { code: 'invalid', expression: ['Patient.identifier'] },
        ]);
      });

      it('refuses the same identifier twice in one list (422 at the repeat) instead of failing', async () => {
        const a = mrn();
        await refused(
          () => post('Patient', { resourceType: 'Patient', identifier: [a, mrn(), { ...a }] }),
          422,
          [{ code: 'invalid', expression: ['Patient.identifier[2]'] }],
        );
        const existing = await createPatient();
        await refused(
          () =>
            fhir(app, 'PUT', `/Patient/${existing.id}`, {
              body: { resourceType: 'Patient', identifier: [a, a] },
            }),
          422,
          [{ code: 'invalid', expression: ['Patient.identifier[1]'] }],
        );
        await refused(
          () =>
            fhir(app, 'PUT', `/Patient?${q(a)}`, { body: { resourceType: 'Patient', identifier: [a, a] } }),
          422,
          [{ code: 'invalid', expression: ['Patient.identifier[1]'] }],
        );
        expect((await createPatient({ identifier: [a] })).identifier).to.deep.equal([a]);
      });

      it('reports every problem of the body, each with its expression', async () => {
        await refused(
          () =>
            post('Patient', {
              resourceType: 'Patient',
              identifier: [{ system: MRN, value: unique('v'), use: 'usual' }],
              gender: 'M',
              birthDate: '2023-02-30',
            }),
          422,
          [
            { code: 'invalid', expression: ['Patient.identifier[0].use'] },
            { code: 'invalid', expression: ['Patient.gender'] },
            { code: 'invalid', expression: ['Patient.birthDate'] },
          ],
        );
      });

      it('answers 400 invalid for a body that is not a Patient resource', async () => {
        await refused(() => post('Patient', { resourceType: 'Practitioner', identifier: [mrn()] }), 400, [
          { code: 'invalid', expression: ['resourceType'] },
        ]);
        await refused(() => post('Patient', { identifier: [mrn()] }), 400, [
          { code: 'invalid', expression: ['resourceType'] },
        ]);
        await refused(() => post('Patient', [{ resourceType: 'Patient' }]), 400, [{ code: 'invalid' }]);
      });

      it('answers 409 duplicate with the Location of the existing Patient (spec §4.3 rule 1, §7)', async () => {
        const identifier = mrn();
        const existing = await createPatient({ identifier: [identifier], gender: 'male' });
        const res = await refused(
          () =>
            post('Patient', { resourceType: 'Patient', identifier: [mrn(), identifier], gender: 'female' }),
          409,
          [{ code: 'duplicate', expression: ['Patient.identifier'] }],
        );
        expect(res.headers.get('location')).to.equal(`${base}/Patient/${existing.id}`);
        expect((await read('Patient', existing.id)).body).to.deep.equal(existing);
      });

      it('treats the same value under another system as another identifier', async () => {
        const value = unique('shared');
        await createPatient({ identifier: [{ system: 'urn:test:a', value }] });
        const other = await createPatient({ identifier: [{ system: 'urn:test:b', value }] });
        expect(other.identifier).to.deep.equal([{ system: 'urn:test:b', value }]);
      });

      it('lets another tenant register the same identifier', async () => {
        const identifier = mrn();
        const general = await createPatient({ identifier: [identifier] });
        const managed = await createPatient({ identifier: [identifier] }, MANAGED);
        expect(managed.id).not.to.equal(general.id);
        expect(managed.identifier).to.deep.equal([identifier]);
      });

      it('If-None-Exist answers 200 with the matching Patient and writes nothing, or creates (201)', async () => {
        const identifier = mrn();
        const existing = await createPatient({ identifier: [identifier], gender: 'male' });
        const before = await eventCount();
        const found = await fhir(app, 'POST', '/Patient', {
          body: { resourceType: 'Patient', identifier: [identifier], gender: 'female' },
          headers: { 'If-None-Exist': q(identifier) },
        });
        expect(found.status).to.equal(200);
        expect(found.body).to.deep.equal(existing);
        expect(found.headers.get('etag')).to.equal('W/"1"');
        expect(await eventCount()).to.equal(before);
        const other = mrn();
        const createdOne = await fhir(app, 'POST', '/Patient', {
          body: { resourceType: 'Patient', identifier: [other] },
          headers: { 'If-None-Exist': q(other) },
        });
        expect(createdOne.status).to.equal(201);
        expect(createdOne.body.identifier).to.deep.equal([other]);
        await refused(
          () =>
            fhir(app, 'POST', '/Patient', {
              body: { resourceType: 'Patient', identifier: [mrn()] },
              headers: { 'If-None-Exist': 'name=Doe' },
            }),
          400,
          [{ code: 'invalid', expression: ['If-None-Exist'] }],
        );
      });

      it('is race-free: of 5 concurrent POSTs with one identifier exactly one is created', async () => {
        const identifier = mrn();
        const before = await eventCount();
        const results = await Promise.all(
          [1, 2, 3, 4, 5].map((n) =>
            post('Patient', {
              resourceType: 'Patient',
              identifier: [identifier],
              name: [{ text: `racer ${n}` }],
            }),
          ),
        );
        expect(results.map((r) => r.status).sort()).to.deep.equal([201, 409, 409, 409, 409]);
        const winner = results.find((r) => r.status === 201)!;
        for (const loser of results.filter((r) => r.status === 409)) {
          expectIssues(loser, 409, [{ code: 'duplicate', expression: ['Patient.identifier'] }]);
          expect(loser.headers.get('location')).to.equal(`${base}/Patient/${winner.body.id}`);
        }
        const events = await eventsSince(before);
        expect(events.filter((e) => e.type === 'PatientRegistered').map((e) => e.streamName)).to.deep.equal([
          `Patient-${winner.body.id}`,
        ]);
        expect(events.filter((e) => e.type === 'ReservationClaimed')).to.have.length(1);
        const search = await fhir(app, 'GET', `/Patient?${q(identifier)}`);
        expect(search.body.entry.map((e: any) => e.resource.id)).to.deep.equal([winner.body.id]);
      });
    });

    describe('PUT /Patient?identifier=system|value (conditional update, spec §4.3 rule 2)', () => {
      const conditional = (query: string, body: unknown, auth = GENERAL) =>
        fhir(app, 'PUT', `/Patient${query}`, { body, auth });

      it('creates the Patient when none matches and still answers 200 (not 201)', async () => {
        app.advance(SECOND);
        const identifier = mrn();
        const before = await eventCount();
        const res = await conditional(`?${q(identifier)}`, {
          resourceType: 'Patient',
          name: [{ family: 'New' }],
          gender: 'other',
        });
        expect(res.status, JSON.stringify(res.body)).to.equal(200);
        expect(res.headers.get('content-type')).to.match(/^application\/fhir\+json/);
        const id = res.body.id;
        expect(res.body).to.deep.equal(
          fhirResource('Patient', id, 1, now(), {
            name: [{ family: 'New' }],
            gender: 'other',
            identifier: [identifier],
          }),
        );
        expect(res.headers.get('etag')).to.equal('W/"1"');
        expect(res.headers.get('location')).to.equal(`${base}/Patient/${id}/_history/1`);
        expect((await eventsSince(before)).map((e) => e.type)).to.deep.equal([
          'ReservationClaimed',
          'PatientRegistered',
        ]);
        expect((await read('Patient', id)).body).to.deep.equal(res.body);
      });

      it('updates the matching Patient, keeping omitted elements and merging identifiers', async () => {
        const first = mrn();
        const existing = await createPatient({
          identifier: [first],
          name: [{ family: 'Kept' }],
          birthDate: '1970-01-01',
          gender: 'male',
        });
        app.advance(SECOND);
        const second = { system: 'urn:test:insurance', value: unique('ins') };
        const before = await eventCount();
        const res = await conditional(`?${q(first)}`, {
          resourceType: 'Patient',
          identifier: [second],
          gender: 'female',
        });
        expect(res.status, JSON.stringify(res.body)).to.equal(200);
        expect(res.body).to.deep.equal(
          fhirResource('Patient', existing.id, 2, now(), {
            identifier: [first, second],
            name: [{ family: 'Kept' }],
            birthDate: '1970-01-01',
            gender: 'female',
          }),
        );
        expect(res.headers.get('etag')).to.equal('W/"2"');
        const events = await eventsSince(before);
        expect(events.map((e) => e.type)).to.deep.equal(['ReservationClaimed', 'PatientUpdated']);
        expect(events[1]!.streamName).to.equal(`Patient-${existing.id}`);
        expect(events[1]!.revision).to.equal(1n);
        expect(events[1]!.data).to.deep.equal({
          id: Number(existing.id),
          resource: {
            identifier: [first, second],
            name: [{ family: 'Kept' }],
            birthDate: '1970-01-01',
            gender: 'female',
          },
          at: now(),
        });
        // The merged identifier is claimed: a POST with it is a duplicate of this Patient.
        const dup = await post('Patient', { resourceType: 'Patient', identifier: [second] });
        expectIssues(dup, 409, [{ code: 'duplicate', expression: ['Patient.identifier'] }]);
        expect(dup.headers.get('location')).to.equal(`${base}/Patient/${existing.id}`);
      });

      it('never drops existing identifiers (merge, not replace)', async () => {
        const a = mrn();
        const b = { system: 'urn:test:other', value: unique('b') };
        const existing = await createPatient({ identifier: [a, b] });
        const res = await conditional(`?${q(b)}`, { resourceType: 'Patient', identifier: [b] });
        expect(res.status).to.equal(200);
        expect(res.body.id).to.equal(existing.id);
        expect(res.body.identifier).to.deep.equal([a, b]);
        expect(res.body.meta.versionId).to.equal('1');
      });

      it('finds the Patient of the tenant by a value-only identifier when it matches one', async () => {
        const identifier = mrn();
        const existing = await createPatient({ identifier: [identifier] });
        const res = await conditional(`?identifier=${encodeURIComponent(identifier.value)}`, {
          resourceType: 'Patient',
          gender: 'male',
        });
        expect(res.status, JSON.stringify(res.body)).to.equal(200);
        expect(res.body.id).to.equal(existing.id);
        expect(res.body.identifier).to.deep.equal([identifier]);
        expect(res.body.gender).to.equal('male');
      });

      it('answers 422 required when a value-only identifier matches nothing (nothing to create with)', async () => {
        await refused(
          () => conditional(`?identifier=${unique('none')}`, { resourceType: 'Patient', gender: 'male' }),
          422,
          [{ code: 'required', expression: ['identifier'] }],
        );
      });

      it('answers 422 required without the identifier query parameter (spec §7)', async () => {
        const body = { resourceType: 'Patient', identifier: [mrn()] };
        await refused(() => conditional('', body), 422, [{ code: 'required', expression: ['identifier'] }]);
        await refused(() => conditional('?identifier=', body), 422, [
          { code: 'required', expression: ['identifier'] },
        ]);
      });

      it('answers 412 multiple-matches when the identifier matches more than one Patient', async () => {
        const value = unique('ambiguous');
        await createPatient({ identifier: [{ system: 'urn:test:x', value }] });
        await createPatient({ identifier: [{ system: 'urn:test:y', value }] });
        await refused(
          () => conditional(`?identifier=${value}`, { resourceType: 'Patient', gender: 'male' }),
          412,
          [{ code: 'multiple-matches', expression: ['identifier'] }],
        );
      });

      it('answers 400 for other conditions or a repeated identifier', async () => {
        const body = { resourceType: 'Patient' };
        await refused(() => conditional(`?name=Doe`, body), 400, [{ code: 'invalid' }]);
        await refused(() => conditional(`?${q(mrn())}&gender=male`, body), 400, [{ code: 'invalid' }]);
        await refused(() => conditional(`?${q(mrn())}&${q(mrn())}`, body), 400, [
          { code: 'invalid', expression: ['identifier'] },
        ]);
      });

      it('validates the body like a create (422)', async () => {
        const identifier = mrn();
        await refused(
          () =>
            conditional(`?${q(identifier)}`, {
              resourceType: 'Patient',
              identifier: [{ ...identifier, use: 'official' }],
            }),
          422,
          [{ code: 'invalid', expression: ['Patient.identifier[0].use'] }],
        );
        await refused(() => conditional(`?${q(identifier)}`, { resourceType: 'Patient', gender: 'x' }), 422, [
          { code: 'invalid', expression: ['Patient.gender'] },
        ]);
        await refused(() => conditional(`?${q(identifier)}`, { resourceType: 'Encounter' }), 400, [
          { code: 'invalid', expression: ['resourceType'] },
        ]);
      });

      it("answers 409 duplicate when the body carries another Patient's identifier", async () => {
        const a = mrn();
        const b = mrn();
        await createPatient({ identifier: [a] });
        const holder = await createPatient({ identifier: [b] });
        const res = await refused(
          () => conditional(`?${q(a)}`, { resourceType: 'Patient', identifier: [b] }),
          409,
          [{ code: 'duplicate', expression: ['Patient.identifier'] }],
        );
        expect(res.headers.get('location')).to.equal(`${base}/Patient/${holder.id}`);
        const created = await fhir(app, 'PUT', `/Patient?${q(mrn())}`, {
          body: { resourceType: 'Patient', identifier: [b] },
        });
        expectIssues(created, 409, [{ code: 'duplicate', expression: ['Patient.identifier'] }]);
      });

      it('creates in the caller tenant only: the same identifier in another tenant is another Patient', async () => {
        const identifier = mrn();
        const general = await createPatient({ identifier: [identifier], gender: 'male' });
        const res = await conditional(
          `?${q(identifier)}`,
          { resourceType: 'Patient', gender: 'female' },
          MANAGED,
        );
        expect(res.status).to.equal(200);
        expect(res.body.id).not.to.equal(general.id);
        expect(res.body.meta.versionId).to.equal('1');
        expect((await read('Patient', general.id)).body).to.deep.equal(general);
      });

      it('is race-free: 5 concurrent conditional PUTs of a new identifier all answer 200 with one Patient', async () => {
        const identifier = mrn();
        const before = await eventCount();
        const results = await Promise.all(
          [1, 2, 3, 4, 5].map(() =>
            conditional(`?${q(identifier)}`, { resourceType: 'Patient', gender: 'male' }),
          ),
        );
        expect(
          results.map((r) => r.status),
          JSON.stringify(results.map((r) => r.body)),
        ).to.deep.equal([200, 200, 200, 200, 200]);
        expect(new Set(results.map((r) => r.body.id)).size).to.equal(1);
        const events = await eventsSince(before);
        expect(events.filter((e) => e.type === 'PatientRegistered')).to.have.length(1);
        expect(events.filter((e) => e.type === 'PatientUpdated')).to.have.length(0);
      });
    });

    describe('PUT /Patient/{id} (partial update, spec §4.3 rule 3)', () => {
      const put = (id: string, body: unknown, headers: Record<string, string> = {}, auth = GENERAL) =>
        fhir(app, 'PUT', `/Patient/${id}`, { body, headers, auth });

      it('keeps omitted elements unchanged and changes the given ones', async () => {
        const identifier = mrn();
        const existing = await createPatient({
          identifier: [identifier],
          name: [{ family: 'Stay', given: ['Put'] }],
          gender: 'male',
          birthDate: '1990-09-09',
        });
        app.advance(SECOND);
        const before = await eventCount();
        const res = await put(existing.id, { resourceType: 'Patient', id: existing.id, gender: 'other' });
        expect(res.status, JSON.stringify(res.body)).to.equal(200);
        expect(res.headers.get('content-type')).to.match(/^application\/fhir\+json/);
        const content = {
          identifier: [identifier],
          name: [{ family: 'Stay', given: ['Put'] }],
          gender: 'other',
          birthDate: '1990-09-09',
        };
        expect(res.body).to.deep.equal(fhirResource('Patient', existing.id, 2, now(), content));
        expect(res.headers.get('etag')).to.equal('W/"2"');
        expect(res.headers.get('last-modified')).to.equal(new Date(now()).toUTCString());
        const events = await eventsSince(before);
        expect(events.map((e) => e.type)).to.deep.equal(['PatientUpdated']);
        expect(events[0]!.streamName).to.equal(`Patient-${existing.id}`);
        expect(events[0]!.revision).to.equal(1n);
        expect(events[0]!.data).to.deep.equal({ id: Number(existing.id), resource: content, at: now() });
        expect(events[0]!.metadata.tenantId).to.equal(1);
        expect(events[0]!.metadata.actor).to.deep.equal({ type: 'client', id: 'ehr-backend' });
        expect((await read('Patient', existing.id)).body).to.deep.equal(res.body);
      });

      it('accepts the body without an id', async () => {
        const existing = await createPatient({ gender: 'male' });
        const res = await put(existing.id, { resourceType: 'Patient', birthDate: '2001-01-01' });
        expect(res.status).to.equal(200);
        expect(res.body.birthDate).to.equal('2001-01-01');
        expect(res.body.gender).to.equal('male');
      });

      it('replaces the identifier list when one is given, releasing the old identifiers', async () => {
        const a = mrn();
        const b = mrn();
        const c = mrn();
        const existing = await createPatient({ identifier: [a, b], gender: 'female' });
        const before = await eventCount();
        const res = await put(existing.id, { resourceType: 'Patient', identifier: [c] });
        expect(res.status, JSON.stringify(res.body)).to.equal(200);
        expect(res.body.identifier).to.deep.equal([c]);
        expect(res.body.gender).to.equal('female');
        const events = await eventsSince(before);
        expect(events.map((e) => e.type)).to.deep.equal([
          'ReservationClaimed',
          'ReservationReleased',
          'ReservationReleased',
          'PatientUpdated',
        ]);
        expect(events.slice(0, 3).map((e) => (e.data as { key: string }).key)).to.deep.equal(
          [c, a, b].map((i) => `Patient-identifier:1:${i.system}|${i.value}`),
        );
        // Released: a is free for a new Patient, b for a conditional create; c is taken.
        const reused = await createPatient({ identifier: [a] });
        expect(reused.id).not.to.equal(existing.id);
        const conditional = await fhir(app, 'PUT', `/Patient?${q(b)}`, { body: { resourceType: 'Patient' } });
        expect(conditional.status).to.equal(200);
        expect(conditional.body.id).not.to.equal(existing.id);
        expect(conditional.body.id).not.to.equal(reused.id);
        const dup = await post('Patient', { resourceType: 'Patient', identifier: [c] });
        expect(dup.status).to.equal(409);
        expect(dup.headers.get('location')).to.equal(`${base}/Patient/${existing.id}`);
      });

      it('an empty identifier list removes every identifier', async () => {
        const a = mrn();
        const existing = await createPatient({ identifier: [a] });
        const res = await put(existing.id, { resourceType: 'Patient', identifier: [] });
        expect(res.status).to.equal(200);
        expect(res.body).not.to.have.property('identifier'); // absent: FHIR JSON has no empty arrays
        expect((await createPatient({ identifier: [a] })).identifier).to.deep.equal([a]);
      });

      it('replaces the name with the first given name only', async () => {
        const existing = await createPatient({ name: [{ family: 'Old', given: ['A'] }] });
        const res = await put(existing.id, {
          resourceType: 'Patient',
          name: [{ family: 'New', use: 'official', suffix: ['III'] }, { family: 'Second' }],
        });
        expect(res.status).to.equal(200);
        expect(res.body.name).to.deep.equal([{ family: 'New' }]);
      });

      it("answers 409 duplicate with the holder's Location when the list holds another Patient's identifier", async () => {
        const taken = mrn();
        const holder = await createPatient({ identifier: [taken] });
        const existing = await createPatient();
        const res = await refused(
          () => put(existing.id, { resourceType: 'Patient', identifier: [mrn(), taken] }),
          409,
          [{ code: 'duplicate', expression: ['Patient.identifier'] }],
        );
        expect(res.headers.get('location')).to.equal(`${base}/Patient/${holder.id}`);
        expect((await read('Patient', existing.id)).body).to.deep.equal(existing);
      });

      it('writes no event and keeps the version when nothing changes', async () => {
        const existing = await createPatient({ gender: 'male', name: [{ family: 'Same' }] });
        app.advance(SECOND);
        const before = await eventCount();
        const res = await put(existing.id, { resourceType: 'Patient', gender: 'male' });
        expect(res.status).to.equal(200);
        expect(res.body).to.deep.equal(existing);
        expect(res.headers.get('etag')).to.equal('W/"1"');
        expect(await eventCount()).to.equal(before);
      });

      it('validates the body (422) and writes nothing', async () => {
        const existing = await createPatient();
        await refused(
          () => put(existing.id, { resourceType: 'Patient', identifier: [{ ...mrn(), period: {} }] }),
          422,
          [{ code: 'invalid', expression: ['Patient.identifier[0].period'] }],
        );
        await refused(() => put(existing.id, { resourceType: 'Patient', gender: 'f' }), 422, [
          { code: 'invalid', expression: ['Patient.gender'] },
        ]);
        await refused(() => put(existing.id, { resourceType: 'Patient', birthDate: '1999-02-29' }), 422, [
          { code: 'invalid', expression: ['Patient.birthDate'] },
        ]);
      });

      it("answers 400 when the body's id differs from the URL's", async () => {
        const existing = await createPatient();
        await refused(
          () => put(existing.id, { resourceType: 'Patient', id: '1234567', gender: 'male' }),
          400,
          [{ code: 'invalid', expression: ['Patient.id'] }],
        );
      });

      it('answers 404 not-found for an unknown id (no update-as-create)', async () => {
        await refused(() => put('987654', { resourceType: 'Patient', gender: 'male' }), 404, [
          { code: 'not-found' },
        ]);
        await refused(() => put('abc', { resourceType: 'Patient', gender: 'male' }), 404, [
          { code: 'not-found' },
        ]);
      });
    });

    describe('GET /Patient/{id}', () => {
      it('answers the stored JSON as the create answered it, byte for byte, with its version headers', async () => {
        // The read sends the stored text as it is (src/projections/resources.ts readResource).
        const base = app.casebook.config.fhirUrl.replace('localhost', '127.0.0.1');
        const body = {
          resourceType: 'Patient',
          identifier: [mrn()],
          name: [{ family: 'Ünlü', given: ['Zoë', '李'] }],
          gender: 'female',
        };
        const create = await fetch(`${base}/Patient`, {
          method: 'POST',
          headers: { Authorization: GENERAL, 'Content-Type': FHIR_JSON },
          body: JSON.stringify(body),
        });
        expect(create.status).to.equal(201);
        const createdText = await create.text();
        const id = (JSON.parse(createdText) as { id: string }).id;
        const res = await fetch(`${base}/Patient/${id}`, { headers: { Authorization: GENERAL } });
        expect(res.status).to.equal(200);
        expect(res.headers.get('content-type')).to.match(/^application\/fhir\+json/);
        expect(res.headers.get('etag')).to.equal('W/"1"');
        expect(res.headers.get('last-modified')).to.equal(create.headers.get('last-modified'));
        expect(await res.text()).to.equal(createdText);
        const minimal = await fetch(`${base}/Patient/${id}`, {
          headers: { Authorization: GENERAL, Prefer: 'return=minimal' },
        });
        expect(minimal.status).to.equal(200);
        expect(await minimal.text()).to.equal('');
      });

      it('answers 404 not-found for an unknown or malformed id', async () => {
        expectIssues(await read('Patient', '987654'), 404, [{ code: 'not-found' }]);
        expectIssues(await read('Patient', 'abc'), 404, [{ code: 'not-found' }]);
        expectIssues(await read('Patient', '99999999999'), 404, [{ code: 'not-found' }]);
      });

      it('answers 404 for a resource type the server does not implement', async () => {
        expectIssues(await read('Procedure', '1'), 404, [{ code: 'not-supported' }]);
      });

      it("answers 404 for another tenant's Patient on every interaction and changes nothing", async () => {
        const identifier = mrn();
        const general = await createPatient({ identifier: [identifier], gender: 'male' });
        expectIssues(await read('Patient', general.id, MANAGED), 404, [{ code: 'not-found' }]);
        await refused(
          () =>
            fhir(app, 'PUT', `/Patient/${general.id}`, { body: { resourceType: 'Patient' }, auth: MANAGED }),
          404,
          [{ code: 'not-found' }],
        );
        await refused(() => fhir(app, 'DELETE', `/Patient/${general.id}`, { auth: MANAGED }), 404, [
          { code: 'not-found' },
        ]);
        expectIssues(await fhir(app, 'GET', `/Patient/${general.id}/_history`, { auth: MANAGED }), 404, [
          { code: 'not-found' },
        ]);
        expectIssues(await fhir(app, 'GET', `/Patient/${general.id}/_history/1`, { auth: MANAGED }), 404, [
          { code: 'not-found' },
        ]);
        const search = await fhir(app, 'GET', `/Patient?${q(identifier)}`, { auth: MANAGED });
        expect(search.status).to.equal(200);
        expect(search.body).not.to.have.property('entry'); // no empty arrays in FHIR JSON
        expect((await read('Patient', general.id)).body).to.deep.equal(general);
      });
    });

    describe('DELETE /Patient/{id} (spec §4.3 rule 4)', () => {
      const remove = (type: string, id: string, headers: Record<string, string> = {}) =>
        fhir(app, 'DELETE', `/${type}/${id}`, { headers });

      it('answers 204 with an empty body and writes PatientDeleted, releasing the identifiers', async () => {
        const a = mrn();
        const b = mrn();
        const existing = await createPatient({ identifier: [a, b] });
        app.advance(SECOND);
        const before = await eventCount();
        const res = await fhir(app, 'DELETE', `/Patient/${existing.id}`, {
          headers: { 'X-Request-Id': 'req-patient-delete-1' },
        });
        expect(res.status).to.equal(204);
        expect(res.body).to.equal(undefined);
        const events = await eventsSince(before);
        expect(events.map((e) => e.type)).to.deep.equal([
          'ReservationReleased',
          'ReservationReleased',
          'PatientDeleted',
        ]);
        expect(events[2]!.streamName).to.equal(`Patient-${existing.id}`);
        expect(events[2]!.revision).to.equal(1n);
        expect(events[2]!.data).to.deep.equal({ id: Number(existing.id), at: now() });
        for (const event of events)
          expect(event.metadata).to.deep.equal({
            tenantId: 1,
            actor: { type: 'client', id: 'ehr-backend' },
            correlationId: 'req-patient-delete-1',
            causationId: 'req-patient-delete-1',
            requestId: 'req-patient-delete-1',
            recordedAt: now(),
          });
      });

      it('is permanent: GET and PUT answer 410, DELETE again answers 204 and writes nothing', async () => {
        const existing = await createPatient();
        expect((await remove('Patient', existing.id)).status).to.equal(204);
        expectIssues(await read('Patient', existing.id), 410, [{ code: 'deleted' }]);
        await refused(
          () =>
            fhir(app, 'PUT', `/Patient/${existing.id}`, {
              body: { resourceType: 'Patient', gender: 'male' },
            }),
          410,
          [{ code: 'deleted' }],
        );
        const before = await eventCount();
        const again = await remove('Patient', existing.id);
        expect(again.status).to.equal(204);
        expect(again.body).to.equal(undefined);
        expect(await eventCount()).to.equal(before);
        expectIssues(await read('Patient', existing.id), 410, [{ code: 'deleted' }]);
      });

      it('releases the identifiers: POST and conditional PUT with them create new Patients', async () => {
        const a = mrn();
        const b = mrn();
        const existing = await createPatient({ identifier: [a, b] });
        expect((await remove('Patient', existing.id)).status).to.equal(204);
        const again = await post('Patient', { resourceType: 'Patient', identifier: [a] });
        expect(again.status, JSON.stringify(again.body)).to.equal(201);
        expect(again.body.id).not.to.equal(existing.id);
        const conditional = await fhir(app, 'PUT', `/Patient?${q(b)}`, {
          body: { resourceType: 'Patient', gender: 'female' },
        });
        expect(conditional.status).to.equal(200);
        expect(conditional.body.id).not.to.equal(existing.id);
        expect(conditional.body.id).not.to.equal(again.body.id);
        expect(conditional.body.meta.versionId).to.equal('1');
        expect(conditional.body.identifier).to.deep.equal([b]);
        const search = await fhir(app, 'GET', `/Patient?${q(a)}`);
        expect(search.body.entry.map((e: any) => e.resource.id)).to.deep.equal([again.body.id]);
      });

      it('answers 409 conflict while an Encounter references the Patient, and 204 once it is deleted', async () => {
        const patient = await createPatient();
        const encounter = await createEncounter(patient.id);
        await refused(() => remove('Patient', patient.id), 409, [{ code: 'conflict' }]);
        expect((await read('Patient', patient.id)).status).to.equal(200);
        expect((await remove('Encounter', encounter.id)).status).to.equal(204);
        expect((await remove('Patient', patient.id)).status).to.equal(204);
        expectIssues(await read('Patient', patient.id), 410, [{ code: 'deleted' }]);
      });

      it('no longer counts an Encounter that moved to another Patient', async () => {
        const patient = await createPatient();
        const other = await createPatient();
        const encounter = await createEncounter(patient.id);
        const moved = await fhir(app, 'PUT', `/Encounter/${encounter.id}`, {
          body: { resourceType: 'Encounter', subject: { reference: `Patient/${other.id}` } },
        });
        expect(moved.status).to.equal(200);
        expect((await remove('Patient', patient.id)).status).to.equal(204);
        await refused(() => remove('Patient', other.id), 409, [{ code: 'conflict' }]);
      });

      it('answers 409 while a Task references the Patient (Task.for)', async () => {
        const patient = await createPatient();
        const task = await created('Task', {
          status: 'draft',
          intent: 'order',
          for: { reference: `Patient/${patient.id}` },
        });
        await refused(() => remove('Patient', patient.id), 409, [{ code: 'conflict' }]);
        expect((await remove('Task', task.id)).status).to.equal(204);
        expect((await remove('Patient', patient.id)).status).to.equal(204);
      });

      it('answers 409 while a QuestionnaireResponse references the Patient (subject)', async () => {
        const patient = await createPatient();
        const response = await created('QuestionnaireResponse', {
          questionnaire: 'https://forms.example.org/Questionnaire/ct',
          status: 'in-progress',
          subject: { reference: `Patient/${patient.id}` },
        });
        await refused(() => remove('Patient', patient.id), 409, [{ code: 'conflict' }]);
        expect((await remove('QuestionnaireResponse', response.id)).status).to.equal(204);
        expect((await remove('Patient', patient.id)).status).to.equal(204);
      });

      it('answers 404 not-found for an unknown id', async () => {
        await refused(() => remove('Patient', '987654'), 404, [{ code: 'not-found' }]);
      });

      it('refuses an Encounter referencing the deleted Patient (422)', async () => {
        const patient = await createPatient();
        expect((await remove('Patient', patient.id)).status).to.equal(204);
        await refusedSubject(() =>
          post('Encounter', {
            resourceType: 'Encounter',
            status: 'planned',
            subject: { reference: `Patient/${patient.id}` },
          }),
        );
      });
    });

    describe('Encounter', () => {
      it('creates an Encounter of a Patient (201, Location, EncounterRegistered)', async () => {
        app.advance(SECOND);
        const patient = await createPatient();
        const identifier = { system: 'urn:test:visit', value: unique('visit') };
        const content = {
          identifier: [identifier],
          status: 'in-progress',
          subject: { reference: `Patient/${patient.id}` },
          actualPeriod: { start: '2026-03-01T09:00:00Z' },
        };
        const before = await eventCount();
        const res = await post('Encounter', { resourceType: 'Encounter', ...content });
        expect(res.status, JSON.stringify(res.body)).to.equal(201);
        expect(res.body).to.deep.equal(fhirResource('Encounter', res.body.id, 1, now(), content));
        expect(res.headers.get('location')).to.equal(`${base}/Encounter/${res.body.id}/_history/1`);
        expect(res.headers.get('etag')).to.equal('W/"1"');
        const events = await eventsSince(before);
        expect(events.map((e) => e.type)).to.deep.equal(['ReservationClaimed', 'EncounterRegistered']);
        expect(events[1]!.data).to.deep.equal({
          id: Number(res.body.id),
          tenantId: 1,
          resource: content,
          at: now(),
        });
        expect(events[1]!.metadata.actor).to.deep.equal({ type: 'client', id: 'ehr-backend' });
        expect((await read('Encounter', res.body.id)).body).to.deep.equal(res.body);
      });

      it('requires status and subject, and a known status (422)', async () => {
        const patient = await createPatient();
        const subject = { reference: `Patient/${patient.id}` };
        await refused(() => post('Encounter', { resourceType: 'Encounter', subject }), 422, [
          { code: 'required', expression: ['Encounter.status'] },
        ]);
        await refused(() => post('Encounter', { resourceType: 'Encounter', status: 'planned' }), 422, [
          { code: 'required', expression: ['Encounter.subject'] },
        ]);
        await refused(() => post('Encounter', { resourceType: 'Encounter', status: 'open', subject }), 422, [
          { code: 'invalid', expression: ['Encounter.status'] },
        ]);
        await refused(
          () =>
            post('Encounter', {
              resourceType: 'Encounter',
              status: 'planned',
              subject: { reference: `Practitioner/${patient.id}` },
            }),
          422,
          [{ code: 'invalid', expression: ['Encounter.subject.reference'] }],
        );
        // Issue 35: an Encounter takes any R5 Identifier; one the R5 schema refuses is a 422.
        await refused(
          () =>
            post('Encounter', {
              resourceType: 'Encounter',
              status: 'planned',
              subject,
              identifier: [{ system: 'urn:test:visit', value: unique('v'), use: 3 }],
            }),
          422,
          [{ code: 'invalid', expression: ['Encounter.identifier[0].use'] }],
        );
        await refused(() => post('Encounter', { resourceType: 'Encounter', status: 3, subject }), 422, [
          { code: 'invalid', expression: ['Encounter.status'] },
        ]);
        await refused(
          () =>
            post('Encounter', {
              resourceType: 'Encounter',
              status: 'planned',
              subject,
              actualPeriod: { start: '2026-03-01 09:00' },
            }),
          422,
          [{ code: 'invalid', expression: ['Encounter.actualPeriod.start'] }],
        );
      });

      it("answers 422 when the subject does not exist or is another tenant's Patient", async () => {
        await refusedSubject(() =>
          post('Encounter', {
            resourceType: 'Encounter',
            status: 'planned',
            subject: { reference: 'Patient/987654' },
          }),
        );
        const managed = await createPatient({}, MANAGED);
        await refusedSubject(() =>
          post('Encounter', {
            resourceType: 'Encounter',
            status: 'planned',
            subject: { reference: `Patient/${managed.id}` },
          }),
        );
      });

      it('names the unresolvable reference by its FHIRPath, Encounter.subject, like every other expression', async () => {
        await refused(
          () =>
            post('Encounter', {
              resourceType: 'Encounter',
              status: 'planned',
              subject: { reference: 'Patient/987654' },
            }),
          422,
          [{ code: 'not-found', expression: ['Encounter.subject'] }],
        );
      });

      it('answers 409 duplicate with the Location of the Encounter holding the identifier', async () => {
        const patient = await createPatient();
        const existing = await createEncounter(patient.id);
        const res = await refused(
          () =>
            post('Encounter', {
              resourceType: 'Encounter',
              status: 'planned',
              subject: { reference: `Patient/${patient.id}` },
              identifier: existing.identifier,
            }),
          409,
          [{ code: 'duplicate', expression: ['Encounter.identifier'] }],
        );
        expect(res.headers.get('location')).to.equal(`${base}/Encounter/${existing.id}`);
      });

      it('conditional update creates (201, FHIR; only Patient answers 200) and then updates, merging identifiers and keeping the subject', async () => {
        const patient = await createPatient();
        const visit = { system: 'urn:test:visit', value: unique('visit') };
        const first = await fhir(app, 'PUT', `/Encounter?${q(visit)}`, {
          body: {
            resourceType: 'Encounter',
            status: 'planned',
            subject: { reference: `Patient/${patient.id}` },
          },
        });
        expect(first.status, JSON.stringify(first.body)).to.equal(201);
        expect(first.body).to.deep.equal(
          fhirResource('Encounter', first.body.id, 1, now(), {
            status: 'planned',
            subject: { reference: `Patient/${patient.id}` },
            identifier: [visit],
          }),
        );
        app.advance(SECOND);
        const other = { system: 'urn:test:case', value: unique('case') };
        const before = await eventCount();
        const second = await fhir(app, 'PUT', `/Encounter?${q(visit)}`, {
          body: { resourceType: 'Encounter', status: 'in-progress', identifier: [other] },
        });
        expect(second.status, JSON.stringify(second.body)).to.equal(200);
        expect(second.body).to.deep.equal(
          fhirResource('Encounter', first.body.id, 2, now(), {
            status: 'in-progress',
            subject: { reference: `Patient/${patient.id}` },
            identifier: [visit, other],
          }),
        );
        expect((await eventsSince(before)).map((e) => e.type)).to.deep.equal([
          'ReservationClaimed',
          'EncounterUpdated',
        ]);
      });

      it('conditional update that creates validates like a create: status and subject are required (422)', async () => {
        const visit = { system: 'urn:test:visit', value: unique('visit') };
        await refused(
          () => fhir(app, 'PUT', `/Encounter?${q(visit)}`, { body: { resourceType: 'Encounter' } }),
          422,
          [
            { code: 'required', expression: ['Encounter.status'] },
            { code: 'required', expression: ['Encounter.subject'] },
          ],
        );
      });

      it('conditional update without the identifier parameter answers 422 required', async () => {
        await refused(
          () => fhir(app, 'PUT', '/Encounter', { body: { resourceType: 'Encounter', status: 'planned' } }),
          422,
          [{ code: 'required', expression: ['identifier'] }],
        );
      });

      it('update by id is partial: a new status keeps subject and identifiers', async () => {
        const patient = await createPatient();
        const existing = await createEncounter(patient.id, {
          actualPeriod: { start: '2026-03-01T08:00:00Z' },
        });
        app.advance(SECOND);
        const before = await eventCount();
        const res = await fhir(app, 'PUT', `/Encounter/${existing.id}`, {
          body: {
            resourceType: 'Encounter',
            id: existing.id,
            status: 'completed',
            actualPeriod: { start: '2026-03-01T08:00:00Z', end: '2026-03-01T10:00:00Z' },
          },
        });
        expect(res.status, JSON.stringify(res.body)).to.equal(200);
        expect(res.body).to.deep.equal(
          fhirResource('Encounter', existing.id, 2, now(), {
            identifier: existing.identifier,
            status: 'completed',
            subject: { reference: `Patient/${patient.id}` },
            actualPeriod: { start: '2026-03-01T08:00:00Z', end: '2026-03-01T10:00:00Z' },
          }),
        );
        expect((await eventsSince(before)).map((e) => e.type)).to.deep.equal(['EncounterUpdated']);
        expect((await read('Encounter', existing.id)).body).to.deep.equal(res.body);
      });

      it('update by id checks a new subject exists (422)', async () => {
        const patient = await createPatient();
        const existing = await createEncounter(patient.id);
        await refusedSubject(() =>
          fhir(app, 'PUT', `/Encounter/${existing.id}`, {
            body: { resourceType: 'Encounter', subject: { reference: 'Patient/987654' } },
          }),
        );
        expect((await read('Encounter', existing.id)).body).to.deep.equal(existing);
      });

      it('delete answers 204, then 410; refused with 409 while a Task references the Encounter', async () => {
        const patient = await createPatient();
        const encounter = await createEncounter(patient.id);
        const task = await created('Task', {
          status: 'draft',
          intent: 'order',
          encounter: { reference: `Encounter/${encounter.id}` },
        });
        await refused(() => fhir(app, 'DELETE', `/Encounter/${encounter.id}`), 409, [{ code: 'conflict' }]);
        expect((await fhir(app, 'DELETE', `/Task/${task.id}`)).status).to.equal(204);
        const before = await eventCount();
        expect((await fhir(app, 'DELETE', `/Encounter/${encounter.id}`)).status).to.equal(204);
        expect((await eventsSince(before)).map((e) => e.type)).to.deep.equal([
          'ReservationReleased',
          'EncounterDeleted',
        ]);
        expectIssues(await read('Encounter', encounter.id), 410, [{ code: 'deleted' }]);
      });

      it("answers 404 for another tenant's Encounter", async () => {
        const patient = await createPatient();
        const encounter = await createEncounter(patient.id);
        expectIssues(await read('Encounter', encounter.id, MANAGED), 404, [{ code: 'not-found' }]);
      });
    });

    describe('Practitioner', () => {
      const practitioner = (body: Record<string, unknown> = {}) =>
        created('Practitioner', {
          identifier: [{ system: 'urn:test:staff', value: unique('dr') }],
          name: [{ family: 'House', given: ['Gregory'], prefix: ['Dr'] }],
          ...body,
        });

      it('creates a Practitioner (201, Location, PractitionerRegistered) with every name (issue 35)', async () => {
        app.advance(SECOND);
        const identifier = { system: 'urn:test:staff', value: unique('dr') };
        const before = await eventCount();
        const res = await post('Practitioner', {
          resourceType: 'Practitioner',
          identifier: [identifier],
          name: [{ family: 'House', given: ['Gregory'], use: 'official' }, { family: 'Other' }],
          gender: 'male',
        });
        expect(res.status, JSON.stringify(res.body)).to.equal(201);
        const content = {
          identifier: [identifier],
          name: [{ family: 'House', given: ['Gregory'], use: 'official' }, { family: 'Other' }],
          gender: 'male',
        };
        expect(res.body).to.deep.equal(fhirResource('Practitioner', res.body.id, 1, now(), content));
        expect(res.headers.get('location')).to.equal(`${base}/Practitioner/${res.body.id}/_history/1`);
        const events = await eventsSince(before);
        expect(events.map((e) => e.type)).to.deep.equal(['ReservationClaimed', 'PractitionerRegistered']);
        expect(events[1]!.data).to.deep.equal({
          id: Number(res.body.id),
          tenantId: 1,
          resource: content,
          at: now(),
        });
        expect((await read('Practitioner', res.body.id)).body).to.deep.equal(res.body);
      });

      it('refuses an identifier the R5 schema refuses (422) and answers 409 duplicate with Location', async () => {
        await refused(
          () =>
            post('Practitioner', {
              resourceType: 'Practitioner',
              identifier: [{ system: 'urn:test:staff', value: unique('dr'), type: 'staff' }],
            }),
          422,
          [{ code: 'invalid', expression: ['Practitioner.identifier[0].type'] }],
        );
        const existing = await practitioner();
        const res = await refused(
          () => post('Practitioner', { resourceType: 'Practitioner', identifier: existing.identifier }),
          409,
          [{ code: 'duplicate', expression: ['Practitioner.identifier'] }],
        );
        expect(res.headers.get('location')).to.equal(`${base}/Practitioner/${existing.id}`);
      });

      it('conditional update creates (201), then updates and merges identifiers', async () => {
        const staff = { system: 'urn:test:staff', value: unique('dr') };
        const first = await fhir(app, 'PUT', `/Practitioner?${q(staff)}`, {
          body: { resourceType: 'Practitioner', name: [{ family: 'Grey' }] },
        });
        expect(first.status, JSON.stringify(first.body)).to.equal(201);
        expect(first.body).to.deep.equal(
          fhirResource('Practitioner', first.body.id, 1, now(), {
            name: [{ family: 'Grey' }],
            identifier: [staff],
          }),
        );
        const npi = { system: 'urn:test:npi', value: unique('npi') };
        const second = await fhir(app, 'PUT', `/Practitioner?${q(staff)}`, {
          body: { resourceType: 'Practitioner', identifier: [npi], gender: 'female' },
        });
        expect(second.status, JSON.stringify(second.body)).to.equal(200);
        expect(second.body).to.deep.equal(
          fhirResource('Practitioner', first.body.id, 2, now(), {
            name: [{ family: 'Grey' }],
            identifier: [staff, npi],
            gender: 'female',
          }),
        );
        await refused(
          () => fhir(app, 'PUT', '/Practitioner', { body: { resourceType: 'Practitioner' } }),
          422,
          [{ code: 'required', expression: ['identifier'] }],
        );
      });

      it('update by id is partial; a given identifier list replaces the old one', async () => {
        const existing = await practitioner({ gender: 'male' });
        const replacement = { system: 'urn:test:staff', value: unique('dr') };
        const res = await fhir(app, 'PUT', `/Practitioner/${existing.id}`, {
          body: { resourceType: 'Practitioner', identifier: [replacement] },
        });
        expect(res.status, JSON.stringify(res.body)).to.equal(200);
        expect(res.body).to.deep.equal(
          fhirResource('Practitioner', existing.id, 2, now(), {
            identifier: [replacement],
            name: existing.name,
            gender: 'male',
          }),
        );
        // The old identifier is free again.
        expect((await practitioner({ identifier: existing.identifier })).identifier).to.deep.equal(
          existing.identifier,
        );
      });

      it('delete answers 204, then GET 410 and the identifier is free', async () => {
        const existing = await practitioner();
        const before = await eventCount();
        expect((await fhir(app, 'DELETE', `/Practitioner/${existing.id}`)).status).to.equal(204);
        expect((await eventsSince(before)).map((e) => e.type)).to.deep.equal([
          'ReservationReleased',
          'PractitionerDeleted',
        ]);
        expectIssues(await read('Practitioner', existing.id), 410, [{ code: 'deleted' }]);
        const again = await practitioner({ identifier: existing.identifier });
        expect(again.id).not.to.equal(existing.id);
      });

      it("answers 404 for another tenant's Practitioner", async () => {
        const existing = await practitioner();
        expectIssues(await read('Practitioner', existing.id, MANAGED), 404, [{ code: 'not-found' }]);
      });
    });

    describe('versions: history, vread, ETag and If-Match', () => {
      /** A Patient created at t1, updated at t2 and t3, deleted at t4. */
      const lifecycle = async () => {
        const identifier = mrn();
        app.advance(SECOND);
        const v1 = await createPatient({ identifier: [identifier], gender: 'male' });
        app.advance(SECOND);
        const v2 = (
          await fhir(app, 'PUT', `/Patient/${v1.id}`, { body: { resourceType: 'Patient', gender: 'female' } })
        ).body;
        app.advance(SECOND);
        const v3 = (
          await fhir(app, 'PUT', `/Patient/${v1.id}`, {
            body: { resourceType: 'Patient', birthDate: '1960-06-06' },
          })
        ).body;
        app.advance(SECOND);
        expect((await fhir(app, 'DELETE', `/Patient/${v1.id}`)).status).to.equal(204);
        return { id: v1.id as string, v1, v2, v3, deletedAt: now() };
      };

      it('numbers versions by stream revision + 1 and dates each with its write', async () => {
        const { id, v1, v2, v3, deletedAt } = await lifecycle();
        expect([v1.meta.versionId, v2.meta.versionId, v3.meta.versionId]).to.deep.equal(['1', '2', '3']);
        expect(
          new Set([v1.meta.lastUpdated, v2.meta.lastUpdated, v3.meta.lastUpdated, deletedAt]).size,
        ).to.equal(4);
        const stream = (await app.allEvents()).filter((e) => e.streamName === `Patient-${id}`);
        expect(stream.map((e) => [e.type, e.revision])).to.deep.equal([
          ['PatientRegistered', 0n],
          ['PatientUpdated', 1n],
          ['PatientUpdated', 2n],
          ['PatientDeleted', 3n],
        ]);
        expect(stream.map((e) => (e.data as { at: string }).at)).to.deep.equal([
          v1.meta.lastUpdated,
          v2.meta.lastUpdated,
          v3.meta.lastUpdated,
          deletedAt,
        ]);
      });

      it('GET _history lists every version newest first, including the delete', async () => {
        const { id, v1, v2, v3, deletedAt } = await lifecycle();
        const res = await fhir(app, 'GET', `/Patient/${id}/_history`);
        expect(res.status).to.equal(200);
        expect(res.headers.get('content-type')).to.match(/^application\/fhir\+json/);
        const fullUrl = `${base}/Patient/${id}`;
        expect(res.body).to.deep.equal({
          resourceType: 'Bundle',
          type: 'history',
          total: 4,
          link: [
            { relation: 'self', url: `${base}/Patient/${id}/_history` },
            { relation: 'first', url: `${base}/Patient/${id}/_history` },
          ],
          entry: [
            {
              fullUrl,
              request: { method: 'DELETE', url: `Patient/${id}` },
              response: { status: '204 No Content', etag: 'W/"4"', lastModified: deletedAt },
            },
            {
              fullUrl,
              resource: v3,
              request: { method: 'PUT', url: `Patient/${id}` },
              response: { status: '200 OK', etag: 'W/"3"', lastModified: v3.meta.lastUpdated },
            },
            {
              fullUrl,
              resource: v2,
              request: { method: 'PUT', url: `Patient/${id}` },
              response: { status: '200 OK', etag: 'W/"2"', lastModified: v2.meta.lastUpdated },
            },
            {
              fullUrl,
              resource: v1,
              request: { method: 'POST', url: 'Patient' },
              response: { status: '201 Created', etag: 'W/"1"', lastModified: v1.meta.lastUpdated },
            },
          ],
        });
      });

      it('GET _history/{vid} reads each version; the deletion version answers 410, unknown ones 404', async () => {
        const { id, v1, v2, v3 } = await lifecycle();
        for (const [vid, version] of [
          ['1', v1],
          ['2', v2],
          ['3', v3],
        ] as const) {
          const res = await fhir(app, 'GET', `/Patient/${id}/_history/${vid}`);
          expect(res.status).to.equal(200);
          expect(res.headers.get('content-type')).to.match(/^application\/fhir\+json/);
          expect(res.headers.get('etag')).to.equal(`W/"${vid}"`);
          expect(res.headers.get('last-modified')).to.equal(new Date(version.meta.lastUpdated).toUTCString());
          expect(res.body).to.deep.equal(version);
        }
        expectIssues(await fhir(app, 'GET', `/Patient/${id}/_history/4`), 410, [{ code: 'deleted' }]);
        expectIssues(await fhir(app, 'GET', `/Patient/${id}/_history/5`), 404, [{ code: 'not-found' }]);
        expectIssues(await fhir(app, 'GET', `/Patient/${id}/_history/0`), 404, [{ code: 'not-found' }]);
        expectIssues(await fhir(app, 'GET', `/Patient/${id}/_history/one`), 404, [{ code: 'not-found' }]);
      });

      it('history and vread of an unknown Patient answer 404', async () => {
        expectIssues(await fhir(app, 'GET', '/Patient/987654/_history'), 404, [{ code: 'not-found' }]);
        expectIssues(await fhir(app, 'GET', '/Patient/987654/_history/1'), 404, [{ code: 'not-found' }]);
      });

      it('history of a live Patient ends with its current version', async () => {
        const existing = await createPatient();
        const res = await fhir(app, 'GET', `/Patient/${existing.id}/_history`);
        expect(res.body.total).to.equal(1);
        expect(res.body.entry.map((e: any) => e.resource)).to.deep.equal([existing]);
      });

      it('PUT with a stale If-Match answers 412 and writes nothing; the current one updates', async () => {
        const existing = await createPatient({ gender: 'male' });
        const v2 = await fhir(app, 'PUT', `/Patient/${existing.id}`, {
          body: { resourceType: 'Patient', gender: 'female' },
        });
        expect(v2.headers.get('etag')).to.equal('W/"2"');
        await refused(
          () =>
            fhir(app, 'PUT', `/Patient/${existing.id}`, {
              body: { resourceType: 'Patient', gender: 'other' },
              headers: { 'If-Match': 'W/"1"' },
            }),
          412,
          [{ code: 'conflict' }],
        );
        await refused(
          () =>
            fhir(app, 'PUT', `/Patient/${existing.id}`, {
              body: { resourceType: 'Patient', gender: 'other' },
              headers: { 'If-Match': 'W/"3"' },
            }),
          412,
          [{ code: 'conflict' }],
        );
        expect((await read('Patient', existing.id)).body.gender).to.equal('female');
        const ok = await fhir(app, 'PUT', `/Patient/${existing.id}`, {
          body: { resourceType: 'Patient', gender: 'other' },
          headers: { 'If-Match': v2.headers.get('etag')! },
        });
        expect(ok.status, JSON.stringify(ok.body)).to.equal(200);
        expect(ok.headers.get('etag')).to.equal('W/"3"');
        expect(ok.body.gender).to.equal('other');
        const strong = await fhir(app, 'PUT', `/Patient/${existing.id}`, {
          body: { resourceType: 'Patient', gender: 'unknown' },
          headers: { 'If-Match': '"3"' },
        });
        expect(strong.status).to.equal(200);
        expect(strong.body.meta.versionId).to.equal('4');
      });

      it('DELETE with a stale If-Match answers 412 and writes nothing; the current one deletes', async () => {
        const existing = await createPatient();
        await fhir(app, 'PUT', `/Patient/${existing.id}`, {
          body: { resourceType: 'Patient', gender: 'male' },
        });
        await refused(
          () => fhir(app, 'DELETE', `/Patient/${existing.id}`, { headers: { 'If-Match': 'W/"1"' } }),
          412,
          [{ code: 'conflict' }],
        );
        expect((await read('Patient', existing.id)).status).to.equal(200);
        const res = await fhir(app, 'DELETE', `/Patient/${existing.id}`, {
          headers: { 'If-Match': 'W/"2"' },
        });
        expect(res.status).to.equal(204);
        expectIssues(await read('Patient', existing.id), 410, [{ code: 'deleted' }]);
      });

      it('answers 400 for a malformed If-Match', async () => {
        const existing = await createPatient();
        await refused(
          () =>
            fhir(app, 'PUT', `/Patient/${existing.id}`, {
              body: { resourceType: 'Patient', gender: 'male' },
              headers: { 'If-Match': 'version-1' },
            }),
          400,
          [{ code: 'invalid' }],
        );
        await refused(
          () => fhir(app, 'DELETE', `/Patient/${existing.id}`, { headers: { 'If-Match': 'W/1' } }),
          400,
          [{ code: 'invalid' }],
        );
      });
    });

    describe('GET /metadata', () => {
      it('is a CapabilityStatement listing the resource types, their interactions and search parameters', async () => {
        const res = await fhir(app, 'GET', '/metadata', { auth: null });
        expect(res.status).to.equal(200);
        expect(res.headers.get('content-type')).to.match(/^application\/fhir\+json/);
        const cs = res.body;
        expect(cs.resourceType).to.equal('CapabilityStatement');
        expect(cs.status).to.equal('active');
        expect(cs.kind).to.equal('instance');
        expect(cs.fhirVersion).to.equal('5.0.0');
        expect(cs.date).to.equal(now());
        expect(cs.format).to.include('application/fhir+json');
        expect(cs.implementation.url).to.equal(base);
        expect(cs.rest).to.have.length(1);
        const [rest] = cs.rest;
        expect(rest.mode).to.equal('server');
        expect(rest.interaction).to.deep.equal([{ code: 'transaction' }]);
        expect(rest.resource.map((r: any) => r.type)).to.deep.equal([
          'Patient',
          'Encounter',
          'Practitioner',
          'Task',
          'Questionnaire',
          'QuestionnaireResponse',
          'ValueSet',
          'Observation',
          'Condition',
          'MedicationStatement',
          'Medication',
          'AllergyIntolerance',
          'Immunization',
          'DocumentReference',
          'AuditEvent',
          'Subscription',
          'SubscriptionTopic',
        ]);
        const byType = Object.fromEntries(rest.resource.map((r: any) => [r.type, r]));
        // Issue 13: the operations are discoverable, with their definitions.
        const operations = (type: string) => (byType[type].operation ?? []).map((o: any) => o.name);
        expect(operations('Questionnaire')).to.deep.equal(['populate', 'assemble']);
        expect(operations('QuestionnaireResponse')).to.deep.equal([
          'validate',
          'generate-narrative',
          'extract',
        ]);
        expect(operations('ValueSet')).to.deep.equal(['expand']);
        expect(operations('Patient')).to.deep.equal(['everything']);
        for (const r of rest.resource)
          for (const o of r.operation ?? [])
            expect(o.definition, o.name).to.match(/^http:\/\/hl7\.org\/fhir\//);
        expect(rest.documentation).to.match(/_count.*_sort.*_total/);
        expect(rest.searchParam.map((p: any) => `${p.name}:${p.type}`)).to.deep.equal([
          '_count:number',
          '_sort:special',
          '_total:token',
          '_include:special',
        ]);
        // Every operation listed is one the server answers (the router mounts the same table).
        const patient = await fhir(app, 'POST', '/Patient', {
          body: {
            resourceType: 'Patient',
            identifier: [{ system: 'urn:test:metadata', value: `m-${Date.now()}` }],
          },
        });
        expect(patient.status).to.equal(201);
        for (const r of rest.resource)
          for (const o of r.operation ?? []) {
            const answer =
              o.name === 'everything'
                ? await fhir(app, 'GET', `/${r.type}/${patient.body.id}/$${o.name}`)
                : await fhir(app, 'POST', `/${r.type}/$${o.name}`, { body: { resourceType: 'Parameters' } });
            expect(answer.status, `${r.type}/$${o.name}`).to.not.be.oneOf([404, 405]);
          }
        expect(byType.AuditEvent.interaction.map((i: any) => i.code)).to.deep.equal(['read', 'search-type']);
        for (const r of rest.resource.filter((x: any) => x.type !== 'AuditEvent')) {
          expect(r.interaction.map((i: any) => i.code).sort(), r.type).to.deep.equal(
            [
              'create',
              'delete',
              'history-instance',
              'history-type',
              'read',
              'search-type',
              'update',
              'vread',
            ].sort(),
          );
          expect(r.readHistory, r.type).to.equal(true);
          expect(r.updateCreate, r.type).to.equal(false);
          expect(r.conditionalUpdate, r.type).to.equal(true);
          expect(r.conditionalDelete, r.type).to.equal('not-supported');
        }
        const params = (type: string) =>
          Object.fromEntries(byType[type].searchParam.map((p: any) => [p.name, p.type]));
        expect(params('Patient')).to.deep.equal({ _id: 'token', identifier: 'token' });
        expect(params('Practitioner')).to.deep.equal({ _id: 'token', identifier: 'token' });
        expect(params('Encounter')).to.deep.equal({
          _id: 'token',
          identifier: 'token',
          subject: 'reference',
          patient: 'reference',
        });
        expect(params('Task')).to.deep.equal({
          _id: 'token',
          identifier: 'token',
          patient: 'reference',
          subject: 'reference',
          encounter: 'reference',
          status: 'token',
        });
        expect(params('Questionnaire')).to.deep.equal({
          _id: 'token',
          url: 'uri',
          version: 'token',
          identifier: 'token',
        });
        expect(params('QuestionnaireResponse')).to.deep.equal({
          _id: 'token',
          subject: 'reference',
          patient: 'reference',
          encounter: 'reference',
          status: 'token',
          authored: 'date',
        });
        expect(byType.QuestionnaireResponse.searchInclude).to.deep.equal([
          'QuestionnaireResponse:subject',
          'QuestionnaireResponse:encounter',
        ]);
        expect(byType.Patient.searchInclude).to.equal(undefined);
      });

      it('answers every search parameter it lists and refuses one it does not list', async () => {
        const patient = await createPatient();
        const res = await fhir(app, 'GET', `/Patient?_id=${patient.id}`);
        expect(res.status).to.equal(200);
        expect(res.body.entry.map((e: any) => e.resource.id)).to.deep.equal([patient.id]);
        expectIssues(await fhir(app, 'GET', '/Patient?name=Doe'), 400, [
          { code: 'not-supported', expression: ['name'] },
        ]);
      });
    });

    describe('content types, errors and authentication', () => {
      it('accepts application/json and answers application/fhir+json', async () => {
        const res = await fhir(app, 'POST', '/Patient', {
          body: { resourceType: 'Patient', identifier: [mrn()] },
          headers: { 'Content-Type': 'application/json' },
        });
        expect(res.status, JSON.stringify(res.body)).to.equal(201);
        expect(res.headers.get('content-type')).to.match(/^application\/fhir\+json/);
        const put = await fhir(app, 'PUT', `/Patient/${res.body.id}`, {
          body: { resourceType: 'Patient', gender: 'male' },
          headers: { 'Content-Type': 'application/json; charset=utf-8' },
        });
        expect(put.status).to.equal(200);
        expect(put.headers.get('content-type')).to.match(/^application\/fhir\+json/);
        const got = await fhir(app, 'GET', `/Patient/${res.body.id}`, {
          headers: { Accept: 'application/json' },
        });
        expect(got.status).to.equal(200);
        expect(got.headers.get('content-type')).to.match(/^application\/fhir\+json/);
      });

      it('accepts application/fhir+json with a charset', async () => {
        const res = await fhir(app, 'POST', '/Patient', {
          body: { resourceType: 'Patient', identifier: [mrn()] },
          headers: { 'Content-Type': `${FHIR_JSON}; charset=utf-8` },
        });
        expect(res.status).to.equal(201);
      });

      it('answers 415 for other content types and writes nothing', async () => {
        const identifier = mrn();
        const body = JSON.stringify({ resourceType: 'Patient', identifier: [identifier] });
        const headers = { 'Content-Type': 'text/plain' };
        await refused(() => fhir(app, 'POST', '/Patient', { body, headers }), 415, [
          { code: 'not-supported' },
        ]);
        await refused(() => fhir(app, 'PUT', `/Patient?${q(identifier)}`, { body, headers }), 415, [
          { code: 'not-supported' },
        ]);
        const existing = await createPatient();
        await refused(() => fhir(app, 'PUT', `/Patient/${existing.id}`, { body, headers }), 415, [
          { code: 'not-supported' },
        ]);
        await refused(
          () =>
            fhir(app, 'POST', '/Patient', {
              body: `identifier=${identifier.value}`,
              headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
            }),
          415,
          [{ code: 'not-supported' }],
        );
      });

      it('answers 400 invalid OperationOutcome for malformed JSON and writes nothing', async () => {
        await refused(() => fhir(app, 'POST', '/Patient', { body: '{"resourceType": "Patient",' }), 400, [
          { code: 'invalid' },
        ]);
        const existing = await createPatient();
        await refused(() => fhir(app, 'PUT', `/Patient/${existing.id}`, { body: '{gender: male}' }), 400, [
          { code: 'invalid' },
        ]);
      });

      it('answers 401 OperationOutcome with WWW-Authenticate without credentials, on every interaction', async () => {
        const existing = await createPatient();
        const requests: [string, string, unknown?][] = [
          ['GET', `/Patient/${existing.id}`],
          ['GET', `/Patient/${existing.id}/_history`],
          ['GET', `/Patient/${existing.id}/_history/1`],
          ['GET', `/Patient?_id=${existing.id}`],
          ['POST', '/Patient', { resourceType: 'Patient', identifier: [mrn()] }],
          ['PUT', `/Patient?${q(mrn())}`, { resourceType: 'Patient' }],
          ['PUT', `/Patient/${existing.id}`, { resourceType: 'Patient', gender: 'male' }],
          ['DELETE', `/Patient/${existing.id}`],
        ];
        for (const [method, path, body] of requests) {
          const res = await refused(
            () => fhir(app, method, path, { auth: null, ...(body ? { body } : {}) }),
            401,
            [{ code: 'login' }],
          );
          expect(res.headers.get('www-authenticate'), `${method} ${path}`).to.equal(
            'Basic realm="casebook", charset="UTF-8"',
          );
        }
        expect((await read('Patient', existing.id)).body).to.deep.equal(existing);
      });

      it('answers 401 for wrong client credentials', async () => {
        const res = await refused(
          () =>
            post(
              'Patient',
              { resourceType: 'Patient', identifier: [mrn()] },
              basic('ehr-backend', 'wrong-secret-0000000'),
            ),
          401,
          [{ code: 'login' }],
        );
        expect(res.headers.get('www-authenticate')).to.equal('Basic realm="casebook", charset="UTF-8"');
        expectIssues(await read('Patient', '1', basic('nobody', 'secret')), 401, [{ code: 'login' }]);
      });

      it('records the tenant and the client as actor on every write', async () => {
        const before = await eventCount();
        const identifier = mrn();
        const patient = await createPatient({ identifier: [identifier] });
        await fhir(app, 'PUT', `/Patient?${q(identifier)}`, {
          body: { resourceType: 'Patient', gender: 'male' },
        });
        await fhir(app, 'PUT', `/Patient/${patient.id}`, {
          body: { resourceType: 'Patient', identifier: [mrn()] },
        });
        const encounter = await createEncounter(patient.id);
        await fhir(app, 'DELETE', `/Encounter/${encounter.id}`);
        await fhir(app, 'DELETE', `/Patient/${patient.id}`);
        const events = await eventsSince(before);
        expect(events.map((e) => e.type)).to.deep.equal([
          'ReservationClaimed',
          'PatientRegistered',
          'PatientUpdated',
          'ReservationClaimed',
          'ReservationReleased',
          'PatientUpdated',
          'ReservationClaimed',
          'EncounterRegistered',
          'ReservationReleased',
          'EncounterDeleted',
          'ReservationReleased',
          'PatientDeleted',
        ]);
        for (const event of events) {
          expect(event.metadata.tenantId, event.type).to.equal(1);
          expect(event.metadata.actor, event.type).to.deep.equal({ type: 'client', id: 'ehr-backend' });
          expect(event.metadata.requestId, event.type).to.be.a('string').and.not.equal('');
        }
      });
    });
  });
}
