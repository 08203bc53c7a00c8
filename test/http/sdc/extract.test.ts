/**
 * POST /QuestionnaireResponse/$extract on the form backend (issue 4; spec §4.5): the transaction
 * Bundle in Parameters, the Questionnaire inline or by canonical, errors as OperationOutcome, and
 * nothing stored — asserted over HTTP on PGlite and on the Postgres server.
 */
import { expect } from 'chai';
import {
  DEFINITION_EXTRACT,
  OBSERVATION_EXTRACT,
  OBSERVATION_EXTRACT_CATEGORY,
} from '../../../src/sdc/extract.js';
import {
  EXTRACT_ALLOCATE_ID,
  TEMPLATE_EXTRACT,
  TEMPLATE_EXTRACT_CONTEXT,
  TEMPLATE_EXTRACT_VALUE,
} from '../../../src/sdc/extract-template.js';
import { GENERAL, MANAGED, seed, startTestApp, type TestApp } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import { expectOutcome, type FhirResponse, fhir } from '../../support/fhir.js';

const LOINC = 'http://loinc.org';
const PATIENT = 'http://hl7.org/fhir/StructureDefinition/Patient';
const EXTRACT = '/QuestionnaireResponse/$extract';

const questionnaireFor = (url: string) => ({
  resourceType: 'Questionnaire',
  url,
  status: 'active',
  extension: [
    {
      url: OBSERVATION_EXTRACT_CATEGORY,
      valueCodeableConcept: {
        coding: [
          { system: 'http://terminology.hl7.org/CodeSystem/observation-category', code: 'vital-signs' },
        ],
      },
    },
  ],
  item: [
    {
      linkId: 'vitals',
      type: 'group',
      repeats: true,
      extension: [{ url: OBSERVATION_EXTRACT, valueBoolean: true }],
      item: [
        {
          linkId: 'weight',
          type: 'quantity',
          code: [{ system: LOINC, code: '29463-7', display: 'Body weight' }],
        },
        { linkId: 'fasting', type: 'boolean', code: [{ system: LOINC, code: '49541-6' }] },
      ],
    },
    {
      linkId: 'patient',
      type: 'group',
      extension: [{ url: DEFINITION_EXTRACT, valueCanonical: PATIENT }],
      item: [
        { linkId: 'given', type: 'string', definition: `${PATIENT}#Patient.name.given` },
        { linkId: 'gender', type: 'coding', definition: `${PATIENT}#Patient.gender` },
        { linkId: 'birthDate', type: 'date', definition: `${PATIENT}#Patient.birthDate` },
      ],
    },
    {
      linkId: 'link',
      type: 'url',
      code: [{ system: LOINC, code: 'X' }],
      extension: [{ url: OBSERVATION_EXTRACT, valueBoolean: true }],
    },
  ],
});

const responseFor = (questionnaire: string) => ({
  resourceType: 'QuestionnaireResponse',
  id: '314',
  questionnaire,
  status: 'completed',
  subject: { reference: 'Patient/1' },
  authored: '2026-02-27T09:00:00Z',
  item: [
    {
      linkId: 'vitals',
      item: [
        {
          linkId: 'weight',
          answer: [
            { valueQuantity: { value: 70, unit: 'kg', system: 'http://unitsofmeasure.org', code: 'kg' } },
          ],
        },
        { linkId: 'fasting', answer: [{ valueBoolean: true }] },
      ],
    },
    {
      linkId: 'vitals',
      item: [
        {
          linkId: 'weight',
          answer: [
            { valueQuantity: { value: 69, unit: 'kg', system: 'http://unitsofmeasure.org', code: 'kg' } },
          ],
        },
      ],
    },
    {
      linkId: 'patient',
      item: [
        { linkId: 'given', answer: [{ valueString: 'Grace' }] },
        {
          linkId: 'gender',
          answer: [{ valueCoding: { system: 'http://hl7.org/fhir/administrative-gender', code: 'female' } }],
        },
        { linkId: 'birthDate', answer: [{ valueDate: '1906-12-09' }] },
      ],
    },
    // A url answer can't be an Observation value: reported in `issues`.
    { linkId: 'link', answer: [{ valueUri: 'https://example.org' }] },
  ],
});

const templateValue = (expression: string) => ({
  extension: [{ url: TEMPLATE_EXTRACT_VALUE, valueString: expression }],
});

/** A template form: a Patient (allocated id) and an Encounter per visit that references it. */
const templateQuestionnaire = (url: string) => ({
  resourceType: 'Questionnaire',
  url,
  status: 'active',
  contained: [
    {
      resourceType: 'Patient',
      id: 'patient',
      identifier: [
        { system: 'urn:test:mrn', _value: templateValue("item.where(linkId = 'mrn').answer.value") },
      ],
      name: [{ _family: templateValue("item.where(linkId = 'family').answer.value") }],
      _birthDate: templateValue("item.where(linkId = 'dob').answer.value"),
    },
    {
      resourceType: 'Encounter',
      id: 'encounter',
      status: 'completed',
      identifier: [
        {
          extension: [
            { url: TEMPLATE_EXTRACT_CONTEXT, valueString: "item.where(linkId = 'visitId').answer.value" },
          ],
          system: 'urn:test:visit',
          _value: templateValue('$this'),
        },
      ],
      subject: { _reference: templateValue("'Patient/' + %NewPatient") },
    },
  ],
  extension: [
    { url: EXTRACT_ALLOCATE_ID, valueString: 'NewPatient' },
    {
      url: TEMPLATE_EXTRACT,
      extension: [
        { url: 'template', valueReference: { reference: '#patient' } },
        { url: 'fullUrl', valueString: '%NewPatient' },
      ],
    },
  ],
  item: [
    { linkId: 'mrn', type: 'string' },
    { linkId: 'family', type: 'string' },
    { linkId: 'dob', type: 'date' },
    {
      linkId: 'visit',
      type: 'group',
      repeats: true,
      extension: [
        {
          url: TEMPLATE_EXTRACT,
          extension: [{ url: 'template', valueReference: { reference: '#encounter' } }],
        },
      ],
      item: [{ linkId: 'visitId', type: 'string' }],
    },
  ],
});

const templateResponse = (url: string, mrn: string) => ({
  resourceType: 'QuestionnaireResponse',
  questionnaire: url,
  status: 'completed',
  item: [
    { linkId: 'mrn', answer: [{ valueString: mrn }] },
    { linkId: 'family', answer: [{ valueString: 'Lovelace' }] },
    { linkId: 'dob', answer: [{ valueDate: '1815-12-10' }] },
    { linkId: 'visit', item: [{ linkId: 'visitId', answer: [{ valueString: `${mrn}-v1` }] }] },
    { linkId: 'visit', item: [{ linkId: 'visitId', answer: [{ valueString: `${mrn}-v2` }] }] },
  ],
});

/** The Bundle and issues of a 200 $extract answer. */
const resultOf = (res: FhirResponse) => {
  expect(res.status, JSON.stringify(res.body)).to.equal(200);
  expect(res.headers.get('content-type')).to.match(/^application\/fhir\+json/);
  expect(res.body.resourceType).to.equal('Parameters');
  const named = (name: string) => res.body.parameter.find((p: any) => p.name === name)?.resource;
  return { bundle: named('return'), issues: named('issues') };
};

/** Asserts the Bundle extracted from responseFor(…) with questionnaireFor(…). */
const expectExtracted = (bundle: any, issues: any) => {
  expect(bundle.resourceType).to.equal('Bundle');
  expect(bundle.type).to.equal('transaction');
  expect(bundle.entry.map((e: any) => e.request)).to.deep.equal([
    { method: 'POST', url: 'Observation' },
    { method: 'POST', url: 'Observation' },
    { method: 'POST', url: 'Observation' },
    { method: 'POST', url: 'Patient' },
  ]);
  for (const e of bundle.entry) expect(e.fullUrl).to.match(/^urn:uuid:[0-9a-f-]{36}$/);
  const [weight, fasting, weight2, patient] = bundle.entry.map((e: any) => e.resource);
  expect(weight).to.include({ status: 'final', effectiveDateTime: '2026-02-27T09:00:00Z' });
  expect(weight.code.coding[0].code).to.equal('29463-7');
  expect(weight.category[0].coding[0].code).to.equal('vital-signs');
  expect(weight.subject).to.deep.equal({ reference: 'Patient/1' });
  expect(weight.derivedFrom).to.deep.equal([{ reference: 'QuestionnaireResponse/314' }]);
  expect(weight.valueQuantity.value).to.equal(70);
  expect(fasting.valueBoolean).to.equal(true);
  expect(weight2.valueQuantity.value).to.equal(69);
  expect(patient).to.deep.equal({
    resourceType: 'Patient',
    name: [{ given: ['Grace'] }],
    gender: 'female',
    birthDate: '1906-12-09',
  });
  expect(issues.resourceType).to.equal('OperationOutcome');
  expect(issues.issue).to.have.length(1);
  expect(issues.issue[0]).to.include({ severity: 'warning', code: 'not-supported' });
  expect(issues.issue[0].expression).to.deep.equal(['QuestionnaireResponse.item[3].answer[0]']);
};

for (const database of testDatabases) {
  describe(`POST /QuestionnaireResponse/$extract on ${database.name}`, () => {
    let app: TestApp;
    let seq = 0;
    const unique = () =>
      `https://example.org/Questionnaire/extract-${++seq}-${Math.random().toString(36).slice(2, 8)}`;
    const eventCount = async () => (await app.allEvents()).length;

    before(async () => {
      app = await startTestApp(database);
      await seed(app);
    });
    after(() => app?.close());

    it('extracts with an inline questionnaire (Parameters) and stores nothing', async () => {
      const url = unique();
      const before = await eventCount();
      const res = await fhir(app, 'POST', EXTRACT, {
        body: {
          resourceType: 'Parameters',
          parameter: [
            { name: 'questionnaire-response', resource: responseFor(url) },
            { name: 'questionnaire', resource: questionnaireFor(url) },
          ],
        },
      });
      const { bundle, issues } = resultOf(res);
      expectExtracted(bundle, issues);
      expect(await eventCount()).to.equal(before);
    });

    it("resolves the response's canonical among the caller's Questionnaires, with the same fullUrls each time", async () => {
      const url = unique();
      const created = await fhir(app, 'POST', '/Questionnaire', {
        body: questionnaireFor(url),
        auth: GENERAL,
      });
      expect(created.status, JSON.stringify(created.body)).to.equal(201);
      const before = await eventCount();
      const first = resultOf(await fhir(app, 'POST', EXTRACT, { body: responseFor(url) }));
      expectExtracted(first.bundle, first.issues);
      const again = resultOf(
        await fhir(app, 'POST', EXTRACT, {
          body: {
            resourceType: 'Parameters',
            parameter: [{ name: 'questionnaire-response', resource: responseFor(url) }],
          },
        }),
      );
      expect(again.bundle).to.deep.equal(first.bundle);
      expect(await eventCount()).to.equal(before);
    });

    it('answers Parameters without issues when everything was extracted', async () => {
      const url = unique();
      const response = responseFor(url);
      response.item = response.item.slice(0, 3);
      const res = await fhir(app, 'POST', EXTRACT, {
        body: {
          resourceType: 'Parameters',
          parameter: [
            { name: 'questionnaire-response', resource: response },
            { name: 'questionnaire', resource: questionnaireFor(url) },
          ],
        },
      });
      const { bundle, issues } = resultOf(res);
      expect(bundle.entry).to.have.length(4);
      expect(issues).to.equal(undefined);
      expect(res.body.parameter.map((p: any) => p.name)).to.deep.equal(['return']);
    });

    it("answers 422 not-found for a canonical the caller's tenant does not have", async () => {
      const url = unique();
      const created = await fhir(app, 'POST', '/Questionnaire', {
        body: questionnaireFor(url),
        auth: GENERAL,
      });
      expect(created.status).to.equal(201);
      const before = await eventCount();
      const issue = expectOutcome(
        await fhir(app, 'POST', EXTRACT, { body: responseFor(url), auth: MANAGED }),
        422,
        'not-found',
      );
      expect(issue.expression).to.deep.equal(['QuestionnaireResponse.questionnaire']);
      expectOutcome(await fhir(app, 'POST', EXTRACT, { body: responseFor(unique()) }), 422, 'not-found');
      expect(await eventCount()).to.equal(before);
    });

    it('answers 422 required for a response without questionnaire and no questionnaire parameter', async () => {
      const { questionnaire: _q, ...response } = responseFor(unique());
      const issue = expectOutcome(await fhir(app, 'POST', EXTRACT, { body: response }), 422, 'required');
      expect(issue.expression).to.deep.equal(['QuestionnaireResponse.questionnaire']);
    });

    it('extracts from templates a transaction Bundle that POSTs back to casebook unchanged (200)', async () => {
      const url = unique();
      const mrn = `mrn-${Math.random().toString(36).slice(2, 10)}`;
      const { bundle, issues } = resultOf(
        await fhir(app, 'POST', EXTRACT, {
          body: {
            resourceType: 'Parameters',
            parameter: [
              { name: 'questionnaire-response', resource: templateResponse(url, mrn) },
              { name: 'questionnaire', resource: templateQuestionnaire(url) },
            ],
          },
        }),
      );
      expect(issues, JSON.stringify(issues)).to.equal(undefined);
      expect(bundle.entry.map((e: any) => e.request)).to.deep.equal([
        { method: 'POST', url: 'Patient' },
        { method: 'POST', url: 'Encounter' },
        { method: 'POST', url: 'Encounter' },
      ]);
      const patientUrl = bundle.entry[0].fullUrl;
      expect(bundle.entry[1].resource.subject).to.deep.equal({ reference: patientUrl });
      const before = await eventCount();
      const posted = await fhir(app, 'POST', '/', { body: bundle });
      expect(posted.status, JSON.stringify(posted.body)).to.equal(200);
      expect(posted.body.type).to.equal('transaction-response');
      expect(posted.body.entry.map((e: any) => e.response.status)).to.deep.equal([
        '201 Created',
        '201 Created',
        '201 Created',
      ]);
      expect(await eventCount()).to.be.greaterThan(before);
      const patientLocation = posted.body.entry[0].response.location.split('/_history')[0];
      const encounterLocation = posted.body.entry[1].response.location.split('/_history')[0];
      const encounter = await fhir(app, 'GET', `/${encounterLocation.replace(/^.*\/(Encounter\/)/, '$1')}`);
      expect(encounter.status).to.equal(200);
      expect(encounter.body.subject.reference).to.equal(patientLocation.replace(/^.*\/(Patient\/)/, '$1'));
      expect(encounter.body.identifier).to.deep.equal([{ system: 'urn:test:visit', value: `${mrn}-v1` }]);
      const patient = await fhir(app, 'GET', `/${patientLocation.replace(/^.*\/(Patient\/)/, '$1')}`);
      expect(patient.body.identifier).to.deep.equal([{ system: 'urn:test:mrn', value: mrn }]);
      expect(patient.body.birthDate).to.equal('1815-12-10');
    });

    it('answers 4xx OperationOutcomes for bad input, never 500', async () => {
      const url = unique();
      expectOutcome(await fhir(app, 'POST', EXTRACT, { body: responseFor(url), auth: null }), 401, 'login');
      expectOutcome(await fhir(app, 'POST', EXTRACT, { body: [1, 2] }), 400, 'invalid');
      expectOutcome(await fhir(app, 'POST', EXTRACT, { body: { resourceType: 'Patient' } }), 400, 'invalid');
      expectOutcome(await fhir(app, 'POST', EXTRACT, { body: '{not json' }), 400, 'invalid');
      expectOutcome(
        await fhir(app, 'POST', EXTRACT, { body: { resourceType: 'Parameters', parameter: [] } }),
        400,
        'required',
      );
      expectOutcome(
        await fhir(app, 'POST', EXTRACT, {
          body: {
            resourceType: 'Parameters',
            parameter: [
              { name: 'questionnaire-response', resource: responseFor(url) },
              { name: 'questionnaire', resource: { resourceType: 'ValueSet' } },
            ],
          },
        }),
        400,
        'invalid',
      );
      const malformed = { ...responseFor(url), item: [{ answer: [{ valueString: 'no linkId' }] }] };
      const issue = expectOutcome(
        await fhir(app, 'POST', EXTRACT, {
          body: {
            resourceType: 'Parameters',
            parameter: [
              { name: 'questionnaire-response', resource: malformed },
              { name: 'questionnaire', resource: questionnaireFor(url) },
            ],
          },
        }),
        422,
        'required',
      );
      expect(issue.expression).to.deep.equal(['QuestionnaireResponse.item[0].linkId']);
      const res = await fhir(app, 'POST', EXTRACT, {
        body: responseFor(url),
        headers: { 'Content-Type': 'text/plain' },
      });
      expectOutcome(res, 415, 'not-supported');
    });
  });
}
