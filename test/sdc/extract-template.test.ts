/**
 * Template-based $extract, the pure part (issue 35; SDC 4.0 "Template-based extraction"):
 * templateExtract on the root and on repeating items, templateExtractContext (nested, repeated,
 * named, removing), templateExtractValue on primitives and complex elements, templateExtractBundle,
 * extractAllocateId linking entries by urn:uuid, and an issue for everything not supported.
 */
import { expect } from 'chai';
import { extract } from '../../src/sdc/extract.js';
import {
  EXTRACT_ALLOCATE_ID,
  TEMPLATE_EXTRACT,
  TEMPLATE_EXTRACT_BUNDLE,
  TEMPLATE_EXTRACT_CONTEXT,
  TEMPLATE_EXTRACT_VALUE,
} from '../../src/sdc/extract-template.js';
import type { Json, Questionnaire, QuestionnaireResponse } from '../../src/sdc/types.js';

const NOW = new Date('2026-03-01T10:00:00.000Z');
const URN_UUID = /^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

const value = (expression: string) => ({
  extension: [{ url: TEMPLATE_EXTRACT_VALUE, valueString: expression }],
});
const context = (expression: string, name?: string) =>
  name
    ? { url: TEMPLATE_EXTRACT_CONTEXT, valueExpression: { language: 'text/fhirpath', expression, name } }
    : { url: TEMPLATE_EXTRACT_CONTEXT, valueString: expression };
const templateExtract = (template: string, parts: Json[] = []) => ({
  url: TEMPLATE_EXTRACT,
  extension: [{ url: 'template', valueReference: { reference: `#${template}` } }, ...parts],
});

/** A registration form: a Patient from the root, an Encounter per visit, an Observation per reading. */
const registration: Questionnaire = {
  resourceType: 'Questionnaire',
  url: 'https://example.org/Questionnaire/registration',
  status: 'active',
  contained: [
    {
      resourceType: 'Patient',
      id: 'patientTemplate',
      active: true,
      name: [
        {
          extension: [context("item.where(linkId = 'name')")],
          use: 'official',
          _family: value("item.where(linkId = 'family').answer.value.first()"),
          _given: [value("item.where(linkId = 'given').answer.value")],
        },
      ],
      telecom: [
        {
          extension: [context("item.where(linkId = 'phone').answer.value")],
          system: 'phone',
          _value: value('$this'),
        },
      ],
      _gender: value("item.where(linkId = 'gender').answer.value.code"),
      _birthDate: value("item.where(linkId = 'birthDate').answer.value"),
    },
    {
      resourceType: 'Encounter',
      id: 'encounterTemplate',
      status: 'completed',
      subject: { _reference: value("'Patient/' + %PatientId") },
      class: [
        {
          extension: [context("item.where(linkId = 'kind').answer.value", 'kind')],
          coding: [value('ofType(Coding)')],
          _text: value('ofType(string)'),
        },
      ],
      actualPeriod: { _start: value("item.where(linkId = 'visitDate').answer.value") },
    },
  ],
  extension: [
    { url: EXTRACT_ALLOCATE_ID, valueString: 'PatientId' },
    templateExtract('patientTemplate', [{ url: 'fullUrl', valueString: '%PatientId' }]),
  ],
  item: [
    {
      linkId: 'name',
      type: 'group',
      repeats: true,
      item: [
        { linkId: 'family', type: 'string' },
        { linkId: 'given', type: 'string', repeats: true },
      ],
    },
    { linkId: 'phone', type: 'string', repeats: true },
    { linkId: 'gender', type: 'coding' },
    { linkId: 'birthDate', type: 'date' },
    {
      linkId: 'visit',
      type: 'group',
      repeats: true,
      extension: [templateExtract('encounterTemplate')],
      item: [
        { linkId: 'visitDate', type: 'dateTime' },
        { linkId: 'kind', type: 'open-choice', repeats: true },
      ],
    },
  ],
};

const AMB = {
  system: 'http://terminology.hl7.org/CodeSystem/v3-ActCode',
  code: 'AMB',
  display: 'ambulatory',
};

const registrationResponse: QuestionnaireResponse = {
  resourceType: 'QuestionnaireResponse',
  id: 'r1',
  questionnaire: 'https://example.org/Questionnaire/registration',
  status: 'completed',
  item: [
    {
      linkId: 'name',
      item: [
        { linkId: 'family', answer: [{ valueString: 'Doe' }] },
        { linkId: 'given', answer: [{ valueString: 'Jane' }, { valueString: 'Q' }] },
      ],
    },
    { linkId: 'name', item: [{ linkId: 'family', answer: [{ valueString: 'Roe' }] }] },
    { linkId: 'phone', answer: [{ valueString: '0400 000 000' }, { valueString: '02 9999 9999' }] },
    {
      linkId: 'gender',
      answer: [{ valueCoding: { system: 'http://hl7.org/fhir/administrative-gender', code: 'female' } }],
    },
    { linkId: 'birthDate', answer: [{ valueDate: '1970-01-02' }] },
    {
      linkId: 'visit',
      item: [
        { linkId: 'visitDate', answer: [{ valueDateTime: '2026-02-01T09:00:00Z' }] },
        { linkId: 'kind', answer: [{ valueCoding: AMB }, { valueString: 'walk-in' }] },
      ],
    },
    { linkId: 'visit', item: [{ linkId: 'visitDate', answer: [{ valueDateTime: '2026-02-08T09:00:00Z' }] }] },
  ],
};

const run = (response: QuestionnaireResponse, questionnaire: Questionnaire) =>
  extract(response, questionnaire, { now: NOW });

describe('template-based $extract (SDC 4.0)', () => {
  it('fills the root template from nested, repeated contexts and removes what nothing filled', async () => {
    const { bundle, issues } = await run(registrationResponse, registration);
    expect(issues.issue).to.deep.equal([]);
    const entries = bundle.entry as Json[];
    expect(entries).to.have.length(3);
    const [patient] = entries as [Json];
    expect(patient.fullUrl).to.match(URN_UUID);
    expect(patient.request).to.deep.equal({ method: 'POST', url: 'Patient' });
    expect(patient.resource).to.deep.equal({
      resourceType: 'Patient',
      active: true,
      name: [
        { use: 'official', family: 'Doe', given: ['Jane', 'Q'] },
        { use: 'official', family: 'Roe' },
      ],
      telecom: [
        { system: 'phone', value: '0400 000 000' },
        { system: 'phone', value: '02 9999 9999' },
      ],
      gender: 'female',
      birthDate: '1970-01-02',
    });
  });

  it('extracts one resource per repetition of an item, referencing the allocated id by urn:uuid', async () => {
    const { bundle } = await run(registrationResponse, registration);
    const [patient, first, second] = bundle.entry as [Json, Json, Json];
    expect(first.request).to.deep.equal({ method: 'POST', url: 'Encounter' });
    expect(first.resource).to.deep.equal({
      resourceType: 'Encounter',
      status: 'completed',
      subject: { reference: patient.fullUrl },
      class: [{ coding: [AMB] }, { text: 'walk-in' }],
      actualPeriod: { start: '2026-02-01T09:00:00Z' },
    });
    expect(second.resource).to.deep.equal({
      resourceType: 'Encounter',
      status: 'completed',
      subject: { reference: patient.fullUrl },
      actualPeriod: { start: '2026-02-08T09:00:00Z' },
    });
    expect(new Set([patient.fullUrl, first.fullUrl, second.fullUrl]).size).to.equal(3);
    for (const entry of [first, second]) expect(entry.fullUrl).to.match(URN_UUID);
  });

  it('gives the same Bundle for the same response, and other uuids for another response', async () => {
    const once = await run(registrationResponse, registration);
    const twice = await run(registrationResponse, registration);
    expect(twice.bundle).to.deep.equal(once.bundle);
    const other = await run({ ...registrationResponse, id: 'r2' }, registration);
    expect((other.bundle.entry as Json[])[0]!.fullUrl).not.to.equal(
      (once.bundle.entry as Json[])[0]!.fullUrl,
    );
  });

  it('allocates an id per item instance when extractAllocateId sits on a repeating item', async () => {
    const questionnaire: Questionnaire = {
      resourceType: 'Questionnaire',
      status: 'active',
      contained: [
        { resourceType: 'Patient', id: 'p', _birthDate: value("item.where(linkId = 'dob').answer.value") },
        {
          resourceType: 'Encounter',
          id: 'e',
          status: 'planned',
          subject: { _reference: value("'Patient/' + %Pid") },
        },
      ],
      item: [
        {
          linkId: 'person',
          type: 'group',
          repeats: true,
          extension: [
            { url: EXTRACT_ALLOCATE_ID, valueString: 'Pid' },
            templateExtract('p', [{ url: 'fullUrl', valueString: '%Pid' }]),
            templateExtract('e'),
          ],
          item: [{ linkId: 'dob', type: 'date' }],
        },
      ],
    };
    const response: QuestionnaireResponse = {
      resourceType: 'QuestionnaireResponse',
      id: 'r3',
      status: 'completed',
      item: [
        { linkId: 'person', item: [{ linkId: 'dob', answer: [{ valueDate: '1980-01-01' }] }] },
        { linkId: 'person', item: [{ linkId: 'dob', answer: [{ valueDate: '1990-01-01' }] }] },
      ],
    };
    const { bundle, issues } = await run(response, questionnaire);
    expect(issues.issue).to.deep.equal([]);
    const [p1, e1, p2, e2] = bundle.entry as [Json, Json, Json, Json];
    expect((e1.resource as Json).subject).to.deep.equal({ reference: p1.fullUrl });
    expect((e2.resource as Json).subject).to.deep.equal({ reference: p2.fullUrl });
    expect(p1.fullUrl).not.to.equal(p2.fullUrl);
  });

  it('PUTs a resourceId that is not an allocated id, and sets the request parts', async () => {
    const questionnaire: Questionnaire = {
      resourceType: 'Questionnaire',
      status: 'active',
      contained: [
        { resourceType: 'Patient', id: 't', _birthDate: value("item.where(linkId = 'dob').answer.value") },
      ],
      extension: [
        templateExtract('t', [
          { url: 'resourceId', valueString: "item.where(linkId = 'id').answer.value" },
          { url: 'ifMatch', valueString: '\'W/"3"\'' },
          { url: 'ifNoneMatch', valueString: "'*'" },
        ]),
      ],
      item: [
        { linkId: 'id', type: 'string' },
        { linkId: 'dob', type: 'date' },
      ],
    };
    const response: QuestionnaireResponse = {
      resourceType: 'QuestionnaireResponse',
      status: 'completed',
      item: [
        { linkId: 'id', answer: [{ valueString: '12' }] },
        { linkId: 'dob', answer: [{ valueDate: '1980-01-01' }] },
      ],
    };
    const { bundle, issues } = await run(response, questionnaire);
    const [entry] = bundle.entry as [Json];
    expect(entry.request).to.deep.equal({
      method: 'PUT',
      url: 'Patient/12',
      ifMatch: 'W/"3"',
      ifNoneMatch: '*',
    });
    expect(entry.resource).to.deep.equal({ resourceType: 'Patient', birthDate: '1980-01-01', id: '12' });
    expect(issues.issue.map((i) => i.diagnostics)).to.deep.equal([
      "templateExtract ifNoneMatch: casebook's transaction endpoint does not act on request.ifNoneMatch",
    ]);
  });

  it('builds the Bundle from a templateExtractBundle, an entry per context result', async () => {
    const questionnaire: Questionnaire = {
      resourceType: 'Questionnaire',
      status: 'active',
      contained: [
        {
          resourceType: 'Bundle',
          id: 'b',
          type: 'transaction',
          entry: [
            {
              extension: [context("item.where(linkId = 'dob')")],
              resource: { resourceType: 'Patient', _birthDate: value('answer.value') },
              request: { method: 'POST', url: 'Patient' },
            },
          ],
        },
      ],
      extension: [{ url: TEMPLATE_EXTRACT_BUNDLE, valueReference: { reference: '#b' } }],
      item: [{ linkId: 'dob', type: 'date', repeats: true }],
    };
    const response: QuestionnaireResponse = {
      resourceType: 'QuestionnaireResponse',
      status: 'completed',
      item: [{ linkId: 'dob', answer: [{ valueDate: '1980-01-01' }] }],
    };
    const { bundle, issues } = await run(response, questionnaire);
    expect(issues.issue).to.deep.equal([]);
    expect(bundle).to.deep.equal({
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [
        {
          resource: { resourceType: 'Patient', birthDate: '1980-01-01' },
          request: { method: 'POST', url: 'Patient' },
        },
      ],
    });
  });

  it('names every template feature it cannot act on', async () => {
    const questionnaire: Questionnaire = {
      resourceType: 'Questionnaire',
      status: 'active',
      contained: [
        {
          resourceType: 'Patient',
          id: 't',
          _gender: {
            extension: [
              { url: TEMPLATE_EXTRACT_VALUE, valueExpression: { language: 'text/cql', expression: 'x' } },
            ],
          },
        },
      ],
      extension: [
        {
          url: TEMPLATE_EXTRACT,
          extension: [{ url: 'template', valueReference: { reference: 'Patient/9' } }],
        },
        templateExtract('missing'),
        templateExtract('t', [{ url: 'patchRequest', valueBoolean: true }]),
        {
          url: 'http://hl7.org/fhir/uv/sdc/StructureDefinition/sdc-questionnaire-extractFuture',
          valueBoolean: true,
        },
      ],
      item: [{ linkId: 'a', type: 'string', extension: [{ url: TEMPLATE_EXTRACT_VALUE, valueString: 'x' }] }],
    };
    const response: QuestionnaireResponse = {
      resourceType: 'QuestionnaireResponse',
      status: 'completed',
      item: [{ linkId: 'a', answer: [{ valueString: 'x' }] }],
    };
    const { issues } = await run(response, questionnaire);
    const diagnostics = issues.issue.map((i) => i.diagnostics);
    expect(diagnostics).to.include(
      'templateExtract needs a template that references a contained resource (#id); other templates are not supported',
    );
    expect(diagnostics).to.include(
      'templateExtract template #missing is not a contained resource of the Questionnaire',
    );
    expect(diagnostics).to.include('templateExtract.patchRequest is not supported: ignored');
    expect(diagnostics).to.include(
      'sdc-questionnaire-templateExtractValue: only text/fhirpath expressions are supported, not text/cql',
    );
    expect(diagnostics).to.include('sdc-questionnaire-extractFuture is not supported by $extract: ignored');
    expect(diagnostics).to.include(
      'sdc-questionnaire-templateExtractValue acts only inside a contained template resource, not on the Questionnaire or its items: ignored',
    );
  });

  it('says so when the form asks for extraction and nothing comes out; stays silent when it asks for none', async () => {
    const empty: QuestionnaireResponse = {
      resourceType: 'QuestionnaireResponse',
      status: 'completed',
      item: [],
    };
    const none: Questionnaire = {
      resourceType: 'Questionnaire',
      status: 'active',
      item: [{ linkId: 'a', type: 'string' }],
    };
    const silent = await run({ ...empty, item: [{ linkId: 'a', answer: [{ valueString: 'x' }] }] }, none);
    expect(silent.bundle).to.deep.equal({ resourceType: 'Bundle', type: 'transaction' });
    expect(silent.issues.issue).to.deep.equal([]);
    // Only the visits extract (no root template): an empty response extracts nothing, and says so.
    const nothing = await run(empty, { ...registration, extension: [] });
    expect(nothing.bundle).to.deep.equal({ resourceType: 'Bundle', type: 'transaction' });
    expect(nothing.issues.issue).to.have.length(1);
    expect(nothing.issues.issue[0]).to.include({ severity: 'information', code: 'informational' });
  });
});
