/**
 * The clinical resources pre-population reads (issue 35; docs/interface.md §2.7, §4.3 rule 10):
 * Observation, Condition, MedicationStatement, Medication, AllergyIntolerance, Immunization and
 * DocumentReference are created, read, updated, deleted, versioned and searched through the one
 * generic resource path, checked against the R5 schema, searched by the parameters of the official
 * R5 definitions, and shown to a patient session only within its patient's compartment.
 * QuestionnaireResponse gains `status` and `authored`. On PGlite and PostgreSQL.
 */
import { expect } from 'chai';
import { GENERAL, seed, startTestApp, type TestApp } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import { entryRefs, expectOutcome, fhir } from '../../support/fhir.js';
import { givenTwoPatients, p1Session, type TwoPatients } from '../../support/isolation.js';

const LOINC = 'http://loinc.org';
const CATEGORY = 'http://terminology.hl7.org/CodeSystem/observation-category';

const observation = (patient: number, code: string, effective: string, value: number) => ({
  resourceType: 'Observation',
  status: 'final',
  category: [{ coding: [{ system: CATEGORY, code: 'vital-signs' }] }],
  code: { coding: [{ system: LOINC, code, display: 'Body weight' }] },
  subject: { reference: `Patient/${patient}` },
  effectiveDateTime: effective,
  valueQuantity: { value, unit: 'kg', system: 'http://unitsofmeasure.org', code: 'kg' },
});

/** A minimal valid body of each clinical type about `patient`. */
const CLINICAL = (patient: number): Record<string, Record<string, unknown>> => ({
  Observation: observation(patient, '29463-7', '2026-02-01T09:00:00Z', 70),
  Condition: {
    resourceType: 'Condition',
    clinicalStatus: {
      coding: [{ system: 'http://terminology.hl7.org/CodeSystem/condition-clinical', code: 'active' }],
    },
    code: { coding: [{ system: 'http://snomed.info/sct', code: '195967001', display: 'Asthma' }] },
    subject: { reference: `Patient/${patient}` },
    onsetDateTime: '2019-05',
  },
  MedicationStatement: {
    resourceType: 'MedicationStatement',
    status: 'recorded',
    medication: { concept: { text: 'salbutamol' } },
    subject: { reference: `Patient/${patient}` },
  },
  Medication: { resourceType: 'Medication', code: { text: 'salbutamol 100 microgram inhaler' } },
  AllergyIntolerance: {
    resourceType: 'AllergyIntolerance',
    code: { text: 'peanut' },
    patient: { reference: `Patient/${patient}` },
    recordedDate: '2020-01-02',
  },
  Immunization: {
    resourceType: 'Immunization',
    status: 'completed',
    vaccineCode: { coding: [{ system: 'http://hl7.org/fhir/sid/cvx', code: '03' }] },
    patient: { reference: `Patient/${patient}` },
    occurrenceDateTime: '2021-06-01',
  },
  DocumentReference: {
    resourceType: 'DocumentReference',
    status: 'current',
    subject: { reference: `Patient/${patient}` },
    content: [{ attachment: { contentType: 'text/plain', title: 'discharge letter' } }],
  },
});

/** The resource as sent: what comes back without id and meta. */
const sent = (body: Record<string, unknown>) => {
  const { id: _i, meta: _m, ...rest } = body;
  return rest;
};

for (const database of testDatabases) {
  describe(`clinical resources on the data server on ${database.name}`, function () {
    this.timeout(120_000);
    let app: TestApp;
    let given: TwoPatients;
    let p1: { cookie: string };
    let p2: { cookie: string };

    before(async () => {
      app = await startTestApp(database);
      await seed(app);
      given = await givenTwoPatients(app);
      p1 = { cookie: await p1Session(app, given, 'patient/*.*') };
      p2 = {
        cookie: await p1Session(
          app,
          { ...given, p1: { ...given.p1, patient: given.p2.patient } },
          'patient/*.*',
        ),
      };
    });
    after(() => app?.close());

    const create = async (body: Record<string, unknown>, auth: string | { cookie: string } = GENERAL) => {
      const res = await fhir(app, 'POST', `/${body.resourceType}`, { body, auth });
      expect(res.status, JSON.stringify(res.body)).to.equal(201);
      return res.body as Record<string, any>;
    };

    for (const type of Object.keys(CLINICAL(1)))
      it(`${type}: create, read, update, history, search and delete, stored as sent`, async () => {
        const body = CLINICAL(given.p1.patient)[type]!;
        const created = await create(body);
        expect(sent(created)).to.deep.equal(body);
        const before = (await app.allEvents()).length;
        const read = await fhir(app, 'GET', `/${type}/${created.id}`);
        expect(read.status).to.equal(200);
        expect(sent(read.body)).to.deep.equal(body);
        const changed = { ...body, id: created.id, language: 'en' };
        const updated = await fhir(app, 'PUT', `/${type}/${created.id}`, { body: changed });
        expect(updated.status, JSON.stringify(updated.body)).to.equal(200);
        expect(updated.body.meta.versionId).to.equal('2');
        expect(updated.body.language).to.equal('en');
        const events = (await app.allEvents()).slice(before).map((e) => e.type);
        expect(events).to.deep.equal([`${type}Updated`]);
        const history = await fhir(app, 'GET', `/${type}/${created.id}/_history`);
        expect(history.body.total).to.equal(2);
        const found = await fhir(app, 'GET', `/${type}?_id=${created.id}`);
        expect(entryRefs(found.body)).to.deep.equal([`${type}/${created.id}`]);
        const removed = await fhir(app, 'DELETE', `/${type}/${created.id}`);
        expect(removed.status).to.be.oneOf([200, 204]);
        expectOutcome(await fhir(app, 'GET', `/${type}/${created.id}`), 410, 'deleted');
        expect((await app.allEvents()).at(-1)!.type).to.equal(`${type}Deleted`);
      });

    it('refuses a body the R5 schema refuses (422, one issue per problem) and writes nothing', async () => {
      const before = (await app.allEvents()).length;
      const res = await fhir(app, 'POST', '/Observation', {
        body: {
          resourceType: 'Observation',
          code: { text: 'weight' },
          colour: 'blue',
          valueQuantity: { value: 'heavy' },
        },
      });
      expect(res.status).to.equal(422);
      const expressions = res.body.issue.flatMap((i: any) => i.expression ?? []);
      expect(expressions).to.include.members(['Observation.status', 'Observation.colour']);
      expect(expressions.some((e: string) => e.startsWith('Observation.valueQuantity.value'))).to.equal(true);
      expect((await app.allEvents()).length).to.equal(before);
    });

    it('refuses a reference to a resource casebook cannot hold, and to a missing Patient', async () => {
      const body = CLINICAL(given.p1.patient).Condition!;
      const named = await fhir(app, 'POST', '/Condition', {
        body: { ...body, subject: { reference: 'Patient/example' } },
      });
      expect(named.status).to.equal(422);
      expect(named.body.issue[0].expression).to.deep.equal(['Condition.subject.reference']);
      const missing = await fhir(app, 'POST', '/Condition', {
        body: { ...body, subject: { reference: 'Patient/2000000000' } },
      });
      expectOutcome(missing, 422, 'not-found');
    });

    describe('search by the R5 definitions', () => {
      let older: string;
      let newer: string;
      let other: string;
      let medication: string;
      let statement: string;
      before(async () => {
        older = (await create(observation(given.p1.patient, '8302-2', '2025-01-10T08:00:00Z', 170))).id;
        newer = (await create(observation(given.p1.patient, '8302-2', '2026-01-10T08:00:00Z', 171))).id;
        other = (await create(observation(given.p2.patient, '8302-2', '2026-01-11T08:00:00Z', 160))).id;
        medication = (await create(CLINICAL(0).Medication!)).id;
        statement = (
          await create({
            ...CLINICAL(given.p1.patient).MedicationStatement,
            medication: { reference: { reference: `Medication/${medication}` } },
          })
        ).id;
      });

      it('finds by patient, code (system|code, code, |code), category and status', async () => {
        const p = `patient=${given.p1.patient}`;
        for (const code of [`${LOINC}|8302-2`, '8302-2'])
          expect(
            entryRefs((await fhir(app, 'GET', `/Observation?${p}&code=${encodeURIComponent(code)}`)).body),
          ).to.deep.equal([`Observation/${older}`, `Observation/${newer}`]);
        expect(entryRefs((await fhir(app, 'GET', `/Observation?${p}&code=|8302-2`)).body)).to.deep.equal([]);
        expect(
          entryRefs(
            (
              await fhir(
                app,
                'GET',
                `/Observation?${p}&code=8302-2&category=${encodeURIComponent(`${CATEGORY}|vital-signs`)}&status=final`,
              )
            ).body,
          ),
        ).to.have.length(2);
        expect(
          entryRefs((await fhir(app, 'GET', `/Observation?${p}&code=8302-2&status=amended`)).body),
        ).to.deep.equal([]);
        expect(
          entryRefs(
            (await fhir(app, 'GET', `/Observation?subject=Patient/${given.p2.patient}&code=8302-2`)).body,
          ),
        ).to.deep.equal([`Observation/${other}`]);
      });

      it('finds by date with prefixes, and sorts by -date with _count', async () => {
        const p = `patient=${given.p1.patient}&code=8302-2`;
        expect(entryRefs((await fhir(app, 'GET', `/Observation?${p}&date=2025`)).body)).to.deep.equal([
          `Observation/${older}`,
        ]);
        expect(
          entryRefs((await fhir(app, 'GET', `/Observation?${p}&date=ge2025-06&date=lt2027`)).body),
        ).to.deep.equal([`Observation/${newer}`]);
        const latest = await fhir(app, 'GET', `/Observation?${p}&_sort=-date&_count=1`);
        expect(entryRefs(latest.body)).to.deep.equal([`Observation/${newer}`]);
        expect(latest.body.total).to.equal(2);
        const next = latest.body.link.find((l: any) => l.relation === 'next').url as string;
        const second = await fhir(app, 'GET', next.slice(next.indexOf('/Observation')));
        expect(entryRefs(second.body)).to.deep.equal([`Observation/${older}`]);
        const oldest = await fhir(app, 'GET', `/Observation?${p}&_sort=date`);
        expect(entryRefs(oldest.body)).to.deep.equal([`Observation/${older}`, `Observation/${newer}`]);
        expectOutcome(await fhir(app, 'GET', `/Observation?${p}&date=2025-13`), 400, 'invalid');
        expectOutcome(await fhir(app, 'GET', `/Observation?${p}&value-quantity=5`), 400, 'not-supported');
      });

      it('includes the Medication of a MedicationStatement (_include=MedicationStatement:medication)', async () => {
        const res = await fhir(
          app,
          'GET',
          `/MedicationStatement?patient=${given.p1.patient}&medication=Medication/${medication}&_include=MedicationStatement:medication`,
        );
        expect(entryRefs(res.body, 'match')).to.deep.equal([`MedicationStatement/${statement}`]);
        expect(entryRefs(res.body, 'include')).to.deep.equal([`Medication/${medication}`]);
        // A patient session reads the Medication its MedicationStatement names.
        const own = await fhir(app, 'GET', `/MedicationStatement?_include=MedicationStatement:medication`, {
          auth: p1,
        });
        expect(entryRefs(own.body, 'include')).to.deep.equal([`Medication/${medication}`]);
        expect(entryRefs(own.body, 'match')).to.include(`MedicationStatement/${statement}`);
      });

      it('shows a patient session only its patient: another patient’s session finds, reads and counts nothing', async () => {
        const mine = await fhir(app, 'GET', '/Observation?code=8302-2', { auth: p1 });
        expect(entryRefs(mine.body)).to.deep.equal([`Observation/${older}`, `Observation/${newer}`]);
        const theirs = await fhir(app, 'GET', '/Observation?code=8302-2&_total=accurate', { auth: p2 });
        expect(entryRefs(theirs.body)).to.deep.equal([`Observation/${other}`]);
        expect(theirs.body.total).to.equal(1);
        const byPatient = await fhir(app, 'GET', `/Observation?patient=${given.p1.patient}`, { auth: p2 });
        expect(byPatient.body.total).to.equal(0);
        expect(byPatient.body.entry).to.equal(undefined);
        expectOutcome(await fhir(app, 'GET', `/Observation/${older}`, { auth: p2 }), 403, 'forbidden');
        expectOutcome(
          await fhir(app, 'GET', `/Observation/${older}/_history`, { auth: p2 }),
          403,
          'forbidden',
        );
        expectOutcome(
          await fhir(app, 'GET', `/MedicationStatement/${statement}`, { auth: p2 }),
          403,
          'forbidden',
        );
        // Nor may it write into P1's compartment.
        const write = await fhir(app, 'POST', '/Observation', {
          body: observation(given.p1.patient, '8302-2', '2026-02-02', 1),
          auth: p2,
        });
        expectOutcome(write, 403, 'forbidden');
        // A patient session may not write Medications, which belong to no patient.
        expectOutcome(
          await fhir(app, 'POST', '/Medication', { body: CLINICAL(0).Medication, auth: p2 }),
          403,
          'forbidden',
        );
      });

      it('refuses to delete a Patient whose compartment holds clinical resources (409)', async () => {
        expectOutcome(await fhir(app, 'DELETE', `/Patient/${given.p1.patient}`), 409, 'conflict');
      });
    });

    describe('QuestionnaireResponse by patient, status and -authored', () => {
      it('finds by status and sorts by -authored', async () => {
        const made: string[] = [];
        for (const authored of ['2026-01-01T10:00:00Z', '2026-02-01T10:00:00Z'])
          made.push(
            (
              await create({
                resourceType: 'QuestionnaireResponse',
                questionnaire: given.questionnaireUrl,
                status: 'amended',
                subject: { reference: `Patient/${given.p1.patient}` },
                authored,
              })
            ).id,
          );
        const res = await fhir(
          app,
          'GET',
          `/QuestionnaireResponse?patient=${given.p1.patient}&status=amended&_sort=-authored`,
        );
        expect(entryRefs(res.body)).to.deep.equal(made.reverse().map((id) => `QuestionnaireResponse/${id}`));
        const january = await fhir(
          app,
          'GET',
          `/QuestionnaireResponse?patient=${given.p1.patient}&status=amended&authored=2026-01`,
        );
        expect(entryRefs(january.body)).to.deep.equal([`QuestionnaireResponse/${made[1]}`]);
      });
    });

    it('lists the clinical types and their R5 search parameters in the CapabilityStatement', async () => {
      const res = await fhir(app, 'GET', '/metadata');
      const observationEntry = res.body.rest[0].resource.find((r: any) => r.type === 'Observation');
      const names = observationEntry.searchParam.map((p: any) => p.name);
      expect(names).to.include.members(['patient', 'subject', 'code', 'category', 'status', 'date']);
      const statementEntry = res.body.rest[0].resource.find((r: any) => r.type === 'MedicationStatement');
      expect(statementEntry.searchInclude).to.include('MedicationStatement:medication');
    });
  });
}
