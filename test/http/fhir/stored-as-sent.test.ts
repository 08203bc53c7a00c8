/**
 * Nothing dropped in silence, and identifiers as FHIR R5 has them (issue 35; docs/interface.md
 * §2.5–2.6, §4.3 rule 13): Questionnaire, Encounter, Practitioner and Task take any valid R5
 * Identifier, only Patient keeps the §2.5 rule; every R5 element of Encounter, Practitioner, Task,
 * Questionnaire and QuestionnaireResponse is stored and returned; what Patient does not keep is
 * named by `Prefer: return=OperationOutcome` and by a transaction entry's `response.outcome`.
 * On PGlite and PostgreSQL.
 */
import { expect } from 'chai';
import { seed, startTestApp, type TestApp, unique } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import { expectOutcome, fhir } from '../../support/fhir.js';

/** The resource as sent: what comes back without id and meta. */
const stored = (body: Record<string, unknown>) => {
  const { id: _i, meta: _m, ...rest } = body;
  return rest;
};

for (const database of testDatabases) {
  describe(`resources stored as sent on ${database.name}`, function () {
    this.timeout(120_000);
    let app: TestApp;
    let patient: string;

    before(async () => {
      app = await startTestApp(database);
      await seed(app);
      patient = (await fhir(app, 'POST', '/Patient', { body: { resourceType: 'Patient' } })).body.id;
    });
    after(() => app?.close());

    const SYSTEM_ONLY = { system: 'urn:oid:2.16.840.1.113883.4.642.21.1' };
    const USE_ONLY = { use: 'official', value: unique('phq') };

    describe('identifiers: any R5 Identifier except on Patient', () => {
      const bodies = (): Record<string, Record<string, unknown>> => ({
        Questionnaire: {
          resourceType: 'Questionnaire',
          status: 'draft',
          identifier: [SYSTEM_ONLY, USE_ONLY],
        },
        Encounter: {
          resourceType: 'Encounter',
          status: 'planned',
          subject: { reference: `Patient/${patient}` },
          identifier: [SYSTEM_ONLY, USE_ONLY],
        },
        Practitioner: {
          resourceType: 'Practitioner',
          identifier: [SYSTEM_ONLY, { ...USE_ONLY, value: unique('p') }],
        },
        Task: {
          resourceType: 'Task',
          status: 'draft',
          intent: 'order',
          identifier: [SYSTEM_ONLY, { ...USE_ONLY, value: unique('t') }],
        },
      });
      for (const type of ['Questionnaire', 'Encounter', 'Practitioner', 'Task'])
        it(`${type} takes an identifier with a system and no value, and one with use and no system`, async () => {
          const body = bodies()[type]!;
          const res = await fhir(app, 'POST', `/${type}`, { body });
          expect(res.status, JSON.stringify(res.body)).to.equal(201);
          expect(res.body.identifier).to.deep.equal(body.identifier);
        });

      it('Patient keeps the §2.5 rule: system and value, both required (422)', async () => {
        const res = await fhir(app, 'POST', '/Patient', {
          body: { resourceType: 'Patient', identifier: [SYSTEM_ONLY] },
        });
        expectOutcome(res, 422, 'required');
      });

      it('refuses an Identifier the R5 schema refuses (422 naming it)', async () => {
        const res = await fhir(app, 'POST', '/Encounter', {
          body: {
            resourceType: 'Encounter',
            status: 'planned',
            identifier: [{ system: 'urn:x', value: 'v', colour: 'red' }],
          },
        });
        expect(res.status).to.equal(422);
        expect(res.body.issue.flatMap((i: any) => i.expression)).to.include('Encounter.identifier[0].colour');
      });
    });

    describe('every R5 element stored and returned', () => {
      const bodies = (): Record<string, Record<string, unknown>> => ({
        Practitioner: {
          resourceType: 'Practitioner',
          active: true,
          name: [
            { family: 'Chalmers', given: ['Peter'], use: 'official' },
            { given: ['Jim'], use: 'usual' },
          ],
          telecom: [{ system: 'phone', value: '(03) 5555 6473', use: 'work' }],
          address: [{ line: ['534 Erewhon St'], city: 'PleasantVille', postalCode: '3999' }],
          qualification: [{ code: { text: 'Bachelor of Science' } }],
        },
        Encounter: {
          resourceType: 'Encounter',
          status: 'completed',
          class: [{ coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v3-ActCode', code: 'AMB' }] }],
          subject: { reference: `Patient/${patient}` },
          participant: [{ type: [{ text: 'attender' }] }],
          reason: [{ value: [{ concept: { text: 'follow-up' } }] }],
          serviceProvider: { display: 'Good Health Clinic' },
          actualPeriod: { start: '2026-01-01T10:00:00Z', extension: [{ url: 'urn:x', valueString: 'y' }] },
        },
        Task: {
          resourceType: 'Task',
          status: 'ready',
          intent: 'order',
          code: { coding: [{ system: 'http://hl7.org/fhir/CodeSystem/task-code', code: 'fulfill' }] },
          priority: 'urgent',
          note: [{ text: 'call first' }],
        },
        QuestionnaireResponse: {
          resourceType: 'QuestionnaireResponse',
          questionnaire: 'https://example.org/q/x',
          status: 'in-progress',
          source: { reference: `Patient/${patient}` },
          language: 'en',
        },
        Questionnaire: {
          resourceType: 'Questionnaire',
          status: 'draft',
          url: `https://example.org/q/${unique('q')}`,
          publisher: 'HL7',
          item: [
            {
              linkId: '1',
              type: 'string',
              text: 'Name',
              _text: { extension: [{ url: 'urn:x', valueString: 'y' }] },
            },
          ],
        },
      });
      for (const type of ['Practitioner', 'Encounter', 'Task', 'QuestionnaireResponse', 'Questionnaire'])
        it(`${type}: what comes back is what was sent, and the outcome says all was stored`, async () => {
          const body = bodies()[type]!;
          const res = await fhir(app, 'POST', `/${type}`, {
            body,
            headers: { Prefer: 'return=OperationOutcome' },
          });
          expect(res.status, JSON.stringify(res.body)).to.equal(201);
          expect(res.body.resourceType).to.equal('OperationOutcome');
          expect(res.body.issue).to.deep.equal([
            { severity: 'information', code: 'informational', diagnostics: 'every element sent was stored' },
          ]);
          const location = res.headers.get('location')!;
          const read = await fhir(
            app,
            'GET',
            location.slice(location.indexOf(`/${type}/`)).split('/_history')[0]!,
          );
          expect(stored(read.body)).to.deep.equal(body);
        });
    });

    describe('Patient: what §2.5 drops is named', () => {
      const body = {
        resourceType: 'Patient',
        active: true,
        name: [{ family: 'Chalmers', given: ['Peter'], use: 'official' }, { given: ['Jim'] }],
        telecom: [{ system: 'phone', value: '(03) 5555 6473' }],
        address: [{ city: 'PleasantVille' }],
        contact: [{ name: { family: 'du Marché' } }],
        managingOrganization: { display: 'Gastroenterology' },
        extension: [{ url: 'urn:x', valueString: 'y' }],
        birthDate: '1974-12-25',
        _birthDate: { extension: [{ url: 'urn:x', valueString: 'z' }] },
      };

      it('keeps every other R5 element, and a create with Prefer: return=OperationOutcome names each dropped element (201, Location)', async () => {
        const res = await fhir(app, 'POST', '/Patient', {
          body,
          headers: { Prefer: 'return=OperationOutcome' },
        });
        expect(res.status).to.equal(201);
        expect(res.headers.get('location')).to.match(/\/Patient\/\d+\/_history\/1$/);
        expect(res.body.issue.map((i: any) => i.expression[0])).to.deep.equal([
          'Patient.name.use',
          'Patient.name',
        ]);
        expect(res.body.issue.every((i: any) => i.severity === 'warning')).to.equal(true);
        const id = res.headers.get('location')!.split('/Patient/')[1]!.split('/')[0];
        const read = await fhir(app, 'GET', `/Patient/${id}`);
        const { name: _n, ...rest } = body;
        expect(stored(read.body)).to.deep.equal({
          ...rest,
          name: [{ family: 'Chalmers', given: ['Peter'] }],
        });
      });

      it('names them in a transaction entry’s response.outcome', async () => {
        const res = await fhir(app, 'POST', '/', {
          body: {
            resourceType: 'Bundle',
            type: 'transaction',
            entry: [
              { resource: body, request: { method: 'POST', url: 'Patient' } },
              {
                resource: { resourceType: 'Practitioner', telecom: [{ system: 'email', value: 'a@b.org' }] },
                request: { method: 'POST', url: 'Practitioner' },
              },
            ],
          },
        });
        expect(res.status, JSON.stringify(res.body)).to.equal(200);
        const [patientEntry, practitionerEntry] = res.body.entry;
        expect(patientEntry.response.outcome.issue.map((i: any) => i.expression[0])).to.deep.equal([
          'Patient.name.use',
          'Patient.name',
        ]);
        expect(practitionerEntry.response.outcome).to.equal(undefined);
        expect(practitionerEntry.resource.telecom).to.deep.equal([{ system: 'email', value: 'a@b.org' }]);
      });

      it('refuses an element the R5 schema does not know (422), instead of dropping it', async () => {
        const res = await fhir(app, 'POST', '/Patient', {
          body: { resourceType: 'Patient', favouriteColour: 'red' },
        });
        expect(res.status).to.equal(422);
        expect(res.body.issue.flatMap((i: any) => i.expression)).to.deep.equal(['Patient.favouriteColour']);
      });
    });
  });
}
