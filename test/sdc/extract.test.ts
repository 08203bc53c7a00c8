/**
 * SDC $extract, the pure part (issue 4 "definition-based and observation-based extraction to a
 * transaction Bundle"): Observations from coded items, resources from definitions, warnings for
 * what can't be extracted, deterministic fullUrls.
 */
import { expect } from 'chai';
import {
  DEFINITION_EXTRACT,
  DEFINITION_EXTRACT_VALUE,
  extract,
  OBSERVATION_EXTRACT,
  OBSERVATION_EXTRACT_CATEGORY,
} from '../../src/sdc/extract.js';
import type { Questionnaire, QuestionnaireResponse } from '../../src/sdc/types.js';

const LOINC = 'http://loinc.org';
const UCUM = 'http://unitsofmeasure.org';
const NOW = new Date('2026-03-01T10:00:00.000Z');
const VITAL_SIGNS = {
  coding: [{ system: 'http://terminology.hl7.org/CodeSystem/observation-category', code: 'vital-signs' }],
};

/** Vitals: a repeating group of readings under a root-level observationExtract. */
const vitals: Questionnaire = {
  resourceType: 'Questionnaire',
  url: 'https://example.org/Questionnaire/vitals',
  status: 'active',
  extension: [
    { url: OBSERVATION_EXTRACT, valueBoolean: true },
    { url: OBSERVATION_EXTRACT_CATEGORY, valueCodeableConcept: VITAL_SIGNS },
  ],
  item: [
    {
      linkId: 'reading',
      type: 'group',
      repeats: true,
      item: [
        {
          linkId: 'weight',
          type: 'quantity',
          code: [{ system: LOINC, code: '29463-7', display: 'Body weight' }],
        },
        {
          linkId: 'position',
          type: 'coding',
          code: [{ system: LOINC, code: '8361-8', display: 'Body position' }],
        },
      ],
    },
    {
      linkId: 'smoker',
      type: 'boolean',
      code: [{ system: LOINC, code: '72166-2', display: 'Tobacco smoking status' }],
    },
    { linkId: 'note', type: 'string' },
    {
      linkId: 'temperature',
      type: 'decimal',
      code: [{ system: LOINC, code: '8310-5' }],
      extension: [
        {
          url: 'http://hl7.org/fhir/StructureDefinition/questionnaire-unit',
          valueCoding: { system: UCUM, code: 'Cel', display: '°C' },
        },
      ],
    },
  ],
};

const kg = (value: number) => ({ value, unit: 'kg', system: UCUM, code: 'kg' });
const standing = { system: 'http://snomed.info/sct', code: '10904000', display: 'Standing' };

const vitalsResponse: QuestionnaireResponse = {
  resourceType: 'QuestionnaireResponse',
  id: '42',
  questionnaire: 'https://example.org/Questionnaire/vitals',
  status: 'completed',
  subject: { reference: 'Patient/7' },
  encounter: { reference: 'Encounter/9' },
  author: { reference: 'Practitioner/3' },
  authored: '2026-02-28T08:30:00Z',
  item: [
    {
      linkId: 'reading',
      item: [
        { linkId: 'weight', answer: [{ valueQuantity: kg(70.5) }] },
        { linkId: 'position', answer: [{ valueCoding: standing }] },
      ],
    },
    { linkId: 'reading', item: [{ linkId: 'weight', answer: [{ valueQuantity: kg(71) }] }] },
    { linkId: 'smoker', answer: [{ valueBoolean: false }] },
    { linkId: 'note', answer: [{ valueString: 'calm' }] },
    { linkId: 'temperature', answer: [{ valueDecimal: 37.2 }] },
  ],
};

const PATIENT = 'http://hl7.org/fhir/StructureDefinition/Patient';

/** Patient registration: definition-based, name in a group, gender, birth date, marital status. */
const registration: Questionnaire = {
  resourceType: 'Questionnaire',
  url: 'https://example.org/Questionnaire/registration',
  status: 'active',
  item: [
    {
      linkId: 'patient',
      type: 'group',
      extension: [
        { url: DEFINITION_EXTRACT, valueCanonical: PATIENT },
        {
          url: DEFINITION_EXTRACT_VALUE,
          extension: [
            { url: 'definition', valueUri: `${PATIENT}#Patient.active` },
            { url: 'fixed-value', valueBoolean: true },
          ],
        },
        {
          url: DEFINITION_EXTRACT_VALUE,
          extension: [
            { url: 'definition', valueUri: `${PATIENT}#Patient.name.text` },
            {
              url: 'expression',
              valueExpression: {
                language: 'text/fhirpath',
                expression:
                  "item.where(linkId='name').item.where(linkId='given').answer.value.first() + ' ' + item.where(linkId='name').item.where(linkId='family').answer.value",
              },
            },
          ],
        },
      ],
      item: [
        {
          linkId: 'name',
          type: 'group',
          definition: `${PATIENT}#Patient.name`,
          item: [
            { linkId: 'given', type: 'string', repeats: true, definition: `${PATIENT}#Patient.name.given` },
            { linkId: 'family', type: 'string', definition: `${PATIENT}#Patient.name.family` },
          ],
        },
        { linkId: 'gender', type: 'coding', definition: `${PATIENT}#Patient.gender` },
        { linkId: 'birthDate', type: 'date', definition: `${PATIENT}#Patient.birthDate` },
        { linkId: 'marital', type: 'coding', definition: `${PATIENT}#Patient.maritalStatus` },
        { linkId: 'deceased', type: 'boolean', definition: `${PATIENT}#Patient.deceased[x]` },
        { linkId: 'photo', type: 'string', definition: `${PATIENT}#Patient.photo` },
        { linkId: 'shoe', type: 'string', definition: `${PATIENT}#Patient.shoeSize` },
      ],
    },
  ],
};

const registrationResponse = (id?: string): QuestionnaireResponse => ({
  resourceType: 'QuestionnaireResponse',
  ...(id ? { id } : {}),
  status: 'completed',
  item: [
    {
      linkId: 'patient',
      item: [
        {
          linkId: 'name',
          item: [
            { linkId: 'given', answer: [{ valueString: 'Ada' }, { valueString: 'Augusta' }] },
            { linkId: 'family', answer: [{ valueString: 'Lovelace' }] },
          ],
        },
        {
          linkId: 'gender',
          answer: [{ valueCoding: { system: 'http://hl7.org/fhir/administrative-gender', code: 'female' } }],
        },
        { linkId: 'birthDate', answer: [{ valueDate: '1815-12-10' }] },
        {
          linkId: 'marital',
          answer: [
            {
              valueCoding: { system: 'http://terminology.hl7.org/CodeSystem/v3-MaritalStatus', code: 'M' },
            },
          ],
        },
        { linkId: 'deceased', answer: [{ valueBoolean: true }] },
      ],
    },
  ],
});

const resources = (bundle: any, type: string) =>
  (bundle.entry ?? []).filter((e: any) => e.resource.resourceType === type).map((e: any) => e.resource);

describe('SDC $extract (pure)', () => {
  describe('observation-based', () => {
    it('makes one Observation per coded answer, in repeating groups too, with value[x] from the answer', async () => {
      const { bundle, issues } = await extract(vitalsResponse, vitals, { now: NOW });
      expect(bundle.resourceType).to.equal('Bundle');
      expect(bundle.type).to.equal('transaction');
      const observations = resources(bundle, 'Observation');
      expect(observations.map((o: any) => o.code.coding[0].code)).to.deep.equal([
        '29463-7',
        '8361-8',
        '29463-7',
        '72166-2',
        '8310-5',
      ]);
      const [weight, position, weight2, smoker, temperature] = observations;
      expect(weight).to.deep.equal({
        resourceType: 'Observation',
        status: 'final',
        category: [VITAL_SIGNS],
        code: { coding: [{ system: LOINC, code: '29463-7', display: 'Body weight' }] },
        subject: { reference: 'Patient/7' },
        encounter: { reference: 'Encounter/9' },
        effectiveDateTime: '2026-02-28T08:30:00Z',
        performer: [{ reference: 'Practitioner/3' }],
        valueQuantity: kg(70.5),
        derivedFrom: [{ reference: 'QuestionnaireResponse/42' }],
      });
      expect(position.valueCodeableConcept).to.deep.equal({ coding: [standing] });
      expect(weight2.valueQuantity).to.deep.equal(kg(71));
      expect(smoker.valueBoolean).to.equal(false);
      expect(temperature.valueQuantity).to.deep.equal({ value: 37.2, unit: '°C', system: UCUM, code: 'Cel' });
      for (const entry of bundle.entry as any[]) {
        expect(entry.request).to.deep.equal({ method: 'POST', url: 'Observation' });
        expect(entry.fullUrl).to.match(
          /^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/,
        );
      }
      expect(new Set((bundle.entry as any[]).map((e) => e.fullUrl)).size).to.equal(5);
      // The uncoded `note` is not an observation item: silently skipped.
      expect(issues).to.deep.equal({ resourceType: 'OperationOutcome', issue: [] });
    });

    it('uses `now` without authored and omits derivedFrom without a response id', async () => {
      const { id: _id, authored: _a, ...rest } = vitalsResponse;
      const { bundle } = await extract(rest as QuestionnaireResponse, vitals, { now: NOW });
      const [first] = resources(bundle, 'Observation');
      expect(first.effectiveDateTime).to.equal('2026-03-01T10:00:00.000Z');
      expect(first).not.to.have.property('derivedFrom');
    });

    it('extracts only items under an observationExtract, and false switches it off', async () => {
      const q: Questionnaire = {
        resourceType: 'Questionnaire',
        item: [
          {
            linkId: 'g',
            type: 'group',
            extension: [{ url: OBSERVATION_EXTRACT, valueBoolean: true }],
            item: [
              { linkId: 'a', type: 'integer', code: [{ system: LOINC, code: 'A' }] },
              {
                linkId: 'b',
                type: 'integer',
                code: [{ system: LOINC, code: 'B' }],
                extension: [{ url: OBSERVATION_EXTRACT, valueBoolean: false }],
              },
            ],
          },
          { linkId: 'c', type: 'integer', code: [{ system: LOINC, code: 'C' }] },
        ],
      };
      const r: QuestionnaireResponse = {
        resourceType: 'QuestionnaireResponse',
        status: 'completed',
        item: [
          {
            linkId: 'g',
            item: [
              { linkId: 'a', answer: [{ valueInteger: 1 }, { valueInteger: 2 }] },
              { linkId: 'b', answer: [{ valueInteger: 3 }] },
            ],
          },
          { linkId: 'c', answer: [{ valueInteger: 4 }] },
        ],
      };
      const { bundle } = await extract(r, q, { now: NOW });
      const observations = resources(bundle, 'Observation');
      expect(observations.map((o: any) => [o.code.coding[0].code, o.valueInteger])).to.deep.equal([
        ['A', 1],
        ['A', 2],
      ]);
    });
  });

  describe('definition-based', () => {
    it('builds a Patient with name, gender (code), birthDate, maritalStatus (CodeableConcept) and fixed/expression values', async () => {
      const { bundle, issues } = await extract(registrationResponse('5'), registration, { now: NOW });
      const [patient, ...others] = resources(bundle, 'Patient');
      expect(others).to.have.length(0);
      expect(patient).to.deep.equal({
        resourceType: 'Patient',
        active: true,
        name: [{ text: 'Ada Lovelace', given: ['Ada', 'Augusta'], family: 'Lovelace' }],
        gender: 'female',
        birthDate: '1815-12-10',
        maritalStatus: {
          coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v3-MaritalStatus', code: 'M' }],
        },
        deceasedBoolean: true,
      });
      const entry = (bundle.entry as any[]).find(
        (e) => e.resource === patient || e.resource.resourceType === 'Patient',
      );
      expect(entry.request).to.deep.equal({ method: 'POST', url: 'Patient' });
      expect(entry.fullUrl).to.match(/^urn:uuid:/);
      // photo and shoeSize were not answered: no warnings for them.
      expect(issues.issue).to.deep.equal([]);
    });

    it('makes one resource per instance of a repeating group, each name group its own HumanName', async () => {
      const q: Questionnaire = {
        resourceType: 'Questionnaire',
        item: [
          {
            linkId: 'contact',
            type: 'group',
            repeats: true,
            extension: [
              {
                url: DEFINITION_EXTRACT,
                valueCanonical: 'http://hl7.org/fhir/StructureDefinition/RelatedPerson',
              },
            ],
            item: [
              {
                linkId: 'name',
                type: 'group',
                repeats: true,
                definition: 'http://hl7.org/fhir/StructureDefinition/RelatedPerson#RelatedPerson.name',
                item: [
                  {
                    linkId: 'family',
                    type: 'string',
                    definition:
                      'http://hl7.org/fhir/StructureDefinition/RelatedPerson#RelatedPerson.name.family',
                  },
                ],
              },
              {
                linkId: 'phone',
                type: 'string',
                definition:
                  'http://hl7.org/fhir/StructureDefinition/RelatedPerson#RelatedPerson.telecom.value',
              },
            ],
          },
        ],
      };
      const r: QuestionnaireResponse = {
        resourceType: 'QuestionnaireResponse',
        id: '8',
        status: 'completed',
        item: [
          {
            linkId: 'contact',
            item: [
              { linkId: 'name', item: [{ linkId: 'family', answer: [{ valueString: 'Byron' }] }] },
              { linkId: 'name', item: [{ linkId: 'family', answer: [{ valueString: 'Milbanke' }] }] },
              { linkId: 'phone', answer: [{ valueString: '+44 20 0000' }] },
            ],
          },
          { linkId: 'contact', item: [{ linkId: 'phone', answer: [{ valueString: '+44 20 1111' }] }] },
        ],
      };
      const { bundle, issues } = await extract(r, q, { now: NOW });
      expect(resources(bundle, 'RelatedPerson')).to.deep.equal([
        {
          resourceType: 'RelatedPerson',
          name: [{ family: 'Byron' }, { family: 'Milbanke' }],
          telecom: [{ value: '+44 20 0000' }],
        },
        { resourceType: 'RelatedPerson', telecom: [{ value: '+44 20 1111' }] },
      ]);
      expect(issues.issue).to.deep.equal([]);
    });

    it('extracts from a root-level definitionExtract (STU4 complex form)', async () => {
      const q: Questionnaire = {
        resourceType: 'Questionnaire',
        extension: [
          {
            url: DEFINITION_EXTRACT,
            extension: [{ url: 'definition', valueCanonical: PATIENT }],
          },
        ],
        item: [{ linkId: 'birth', type: 'date', definition: `${PATIENT}#Patient.birthDate` }],
      };
      const r: QuestionnaireResponse = {
        resourceType: 'QuestionnaireResponse',
        status: 'completed',
        item: [{ linkId: 'birth', answer: [{ valueDate: '2000-01-02' }] }],
      };
      const { bundle } = await extract(r, q, { now: NOW });
      expect(resources(bundle, 'Patient')).to.deep.equal([
        { resourceType: 'Patient', birthDate: '2000-01-02' },
      ]);
    });
  });

  describe('warnings', () => {
    it('reports answers that cannot be extracted and still extracts the rest', async () => {
      const q: Questionnaire = {
        resourceType: 'Questionnaire',
        extension: [{ url: OBSERVATION_EXTRACT, valueBoolean: true }],
        item: [
          { linkId: 'site', type: 'url', code: [{ system: LOINC, code: 'URL' }] },
          { linkId: 'ok', type: 'integer', code: [{ system: LOINC, code: 'OK' }] },
          {
            linkId: 'uncoded',
            type: 'integer',
            extension: [{ url: OBSERVATION_EXTRACT, valueBoolean: true }],
          },
          {
            linkId: 'p',
            type: 'group',
            extension: [{ url: DEFINITION_EXTRACT, valueCanonical: PATIENT }],
            item: [
              { linkId: 'gender', type: 'boolean', definition: `${PATIENT}#Patient.gender` },
              { linkId: 'shoe', type: 'string', definition: `${PATIENT}#Patient.shoeSize` },
              { linkId: 'birth', type: 'date', definition: `${PATIENT}#Patient.birthDate` },
            ],
          },
          {
            linkId: 'mystery',
            type: 'group',
            extension: [
              { url: DEFINITION_EXTRACT, valueCanonical: 'https://example.org/StructureDefinition/Unknown' },
            ],
          },
        ],
      };
      const r: QuestionnaireResponse = {
        resourceType: 'QuestionnaireResponse',
        status: 'completed',
        item: [
          { linkId: 'site', answer: [{ valueUri: 'https://example.org' }] },
          { linkId: 'ok', answer: [{ valueInteger: 3 }] },
          { linkId: 'uncoded', answer: [{ valueInteger: 5 }] },
          {
            linkId: 'p',
            item: [
              { linkId: 'gender', answer: [{ valueBoolean: true }] },
              { linkId: 'shoe', answer: [{ valueString: '42' }] },
              { linkId: 'birth', answer: [{ valueDate: '1990-05-06' }, { valueDate: '1991-05-06' }] },
            ],
          },
          { linkId: 'mystery', item: [] },
          { linkId: 'stray', answer: [{ valueString: 'x' }] },
        ],
      };
      const { bundle, issues } = await extract(r, q, { now: NOW });
      expect(resources(bundle, 'Observation').map((o: any) => o.valueInteger)).to.deep.equal([3]);
      expect(resources(bundle, 'Patient')).to.deep.equal([
        { resourceType: 'Patient', birthDate: '1990-05-06' },
      ]);
      expect(issues.issue.every((i) => i.severity === 'warning')).to.equal(true);
      const byExpression = Object.fromEntries(issues.issue.map((i) => [i.expression?.[0], i.diagnostics]));
      expect(byExpression['QuestionnaireResponse.item[0].answer[0]']).to.match(/Uri answer of item site/);
      expect(byExpression['QuestionnaireResponse.item[2]']).to.match(/uncoded .*no code/);
      expect(byExpression['QuestionnaireResponse.item[3].item[0]']).to.match(
        /Boolean answer can't be set on Patient.gender/,
      );
      expect(byExpression['QuestionnaireResponse.item[3].item[1]']).to.match(
        /Patient has no element shoeSize/,
      );
      expect(byExpression['QuestionnaireResponse.item[3].item[2]']).to.match(/takes one value/);
      expect(byExpression['QuestionnaireResponse.item[4]']).to.match(/can't tell which resource type/);
      expect(byExpression['QuestionnaireResponse.item[5]']).to.match(/stray is not in the Questionnaire/);
      expect(issues.issue).to.have.length(7);
    });

    it('reports a failing FHIRPath expression as a warning', async () => {
      const q: Questionnaire = {
        resourceType: 'Questionnaire',
        extension: [
          { url: DEFINITION_EXTRACT, valueCanonical: PATIENT },
          {
            url: DEFINITION_EXTRACT_VALUE,
            extension: [
              { url: 'definition', valueUri: `${PATIENT}#Patient.active` },
              { url: 'expression', valueExpression: { language: 'text/fhirpath', expression: 'item.(((' } },
            ],
          },
        ],
        item: [{ linkId: 'birth', type: 'date', definition: `${PATIENT}#Patient.birthDate` }],
      };
      const r: QuestionnaireResponse = {
        resourceType: 'QuestionnaireResponse',
        status: 'completed',
        item: [{ linkId: 'birth', answer: [{ valueDate: '2000-01-02' }] }],
      };
      const { bundle, issues } = await extract(r, q, { now: NOW });
      expect(resources(bundle, 'Patient')).to.deep.equal([
        { resourceType: 'Patient', birthDate: '2000-01-02' },
      ]);
      expect(issues.issue).to.have.length(1);
      expect(issues.issue[0]!.diagnostics).to.match(/FHIRPath failed/);
    });
  });

  describe('fullUrls', () => {
    it('are the same for the same response and differ between responses', async () => {
      const urls = async (r: QuestionnaireResponse, q: Questionnaire) =>
        ((await extract(r, q, { now: NOW })).bundle.entry as any[]).map((e) => e.fullUrl);
      const first = await urls(vitalsResponse, vitals);
      expect(await urls(structuredClone(vitalsResponse), vitals)).to.deep.equal(first);
      expect(await urls({ ...vitalsResponse, id: '43' }, vitals)).not.to.include(first[0]);
      // Without an id the content decides.
      const anonymous = await urls(registrationResponse(), registration);
      expect(await urls(registrationResponse(), registration)).to.deep.equal(anonymous);
      expect(await urls(registrationResponse('5'), registration)).not.to.deep.equal(anonymous);
    });

    it('leaves the inputs untouched', async () => {
      const r = structuredClone(registrationResponse('5'));
      const q = structuredClone(registration);
      await extract(r, q, { now: NOW });
      expect(r).to.deep.equal(registrationResponse('5'));
      expect(q).to.deep.equal(registration);
    });
  });
});
