/**
 * $populate, the pure part of issue 35: initial values checked against the item's type, codes
 * mapped through answerValueSet, a subject copied as given, and x-fhir-query expansion, bounds
 * and budget (the search itself is the caller's runner; over HTTP it is casebook's own search,
 * test/http/sdc/populate-query.test.ts).
 */
import { expect } from 'chai';
import { expandQuery, FhirQueryError, parseQuery, QueryBudget } from '../../src/sdc/fhir-query.js';
import { populate } from '../../src/sdc/populate.js';
import type { Json, Questionnaire } from '../../src/sdc/types.js';

const SDC = 'http://hl7.org/fhir/uv/sdc/StructureDefinition';
const NOW = new Date('2026-03-01T10:00:00.000Z');
const initial = (expression: string) => ({
  url: `${SDC}/sdc-questionnaire-initialExpression`,
  valueExpression: { language: 'text/fhirpath', expression },
});
const queryVariable = (name: string, expression: string) => ({
  url: 'http://hl7.org/fhir/StructureDefinition/variable',
  valueExpression: { name, language: 'application/x-fhir-query', expression },
});
const patient = { resourceType: 'Patient', id: '7', name: [{ family: 'Doe' }] };
const searchset = (...resources: Json[]): Json => ({
  resourceType: 'Bundle',
  type: 'searchset',
  entry: resources.map((resource) => ({ resource, search: { mode: 'match' } })),
});

describe('$populate (issue 35, pure)', () => {
  it('drops an initial value of the wrong type or syntax with an issue, and keeps the right ones', async () => {
    const questionnaire: Questionnaire = {
      resourceType: 'Questionnaire',
      status: 'active',
      item: [
        { linkId: 'n', type: 'integer', initial: [{ valueString: 'seven' }] },
        { linkId: 'd', type: 'date', initial: [{ valueDate: '2026-02-30' }] },
        { linkId: 'ok', type: 'decimal', initial: [{ valueDecimal: 1.5 }] },
        {
          linkId: 'c',
          type: 'coding',
          answerOption: [{ valueString: 'not a coding', initialSelected: true }],
        },
      ],
    };
    const { response, issues } = await populate({ questionnaire, context: [], now: NOW });
    expect(response.item).to.deep.equal([
      { linkId: 'n' },
      { linkId: 'd' },
      { linkId: 'ok', answer: [{ valueDecimal: 1.5 }] },
      { linkId: 'c' },
    ]);
    expect(issues.issue.map((i) => [i.code, i.expression?.[0]])).to.deep.equal([
      ['value', 'Questionnaire.item[0]'],
      ['value', 'Questionnaire.item[1]'],
      ['value', 'Questionnaire.item[3]'],
    ]);
    expect(issues.issue[0]!.diagnostics).to.match(/valueString .*integer.*valueInteger/);
  });

  it('maps a code to the Coding of the answerValueSet, display included', async () => {
    const valueSet = 'https://forms.example.org/ValueSet/gender';
    const questionnaire: Questionnaire = {
      resourceType: 'Questionnaire',
      status: 'active',
      extension: [
        {
          url: `${SDC}/sdc-questionnaire-launchContext`,
          extension: [{ url: 'name', valueCoding: { code: 'patient' } }],
        },
      ],
      item: [
        { linkId: 'g', type: 'coding', answerValueSet: valueSet, extension: [initial('%patient.gender')] },
      ],
    };
    const { response, issues } = await populate({
      questionnaire,
      context: [{ name: 'patient', content: { ...patient, gender: 'female' } }],
      resolve: async (type, canonical) =>
        type === 'ValueSet' && canonical === valueSet
          ? {
              resourceType: 'ValueSet',
              compose: {
                include: [
                  {
                    system: 'http://hl7.org/fhir/administrative-gender',
                    concept: [{ code: 'female', display: 'Female' }],
                  },
                ],
              },
            }
          : undefined,
      now: NOW,
    });
    expect(issues.issue).to.deep.equal([]);
    expect(response.item).to.deep.equal([
      {
        linkId: 'g',
        answer: [
          {
            valueCoding: {
              system: 'http://hl7.org/fhir/administrative-gender',
              code: 'female',
              display: 'Female',
            },
          },
        ],
      },
    ]);
  });

  it('copies a subject on another server as it is', async () => {
    const subject = {
      reference: 'https://other.example.org/fhir/Patient/9',
      display: 'Elsewhere',
      type: 'Patient',
    };
    const { response } = await populate({
      questionnaire: { resourceType: 'Questionnaire', status: 'active', item: [] },
      subject,
      context: [],
      now: NOW,
    });
    expect(response.subject).to.deep.equal(subject);
  });

  it('runs a query with {{%patient.id}} resolved, and names the items a used-up query budget left empty', async () => {
    const asked: [string, [string, string][], number][] = [];
    const questionnaire: Questionnaire = {
      resourceType: 'Questionnaire',
      status: 'active',
      extension: [
        {
          url: `${SDC}/sdc-questionnaire-launchContext`,
          extension: [{ url: 'name', valueCoding: { code: 'patient' } }],
        },
        queryVariable('first', 'Encounter?patient={{%patient.id}}&status=finished'),
        queryVariable('second', 'Encounter?patient={{%patient.id}}'),
      ],
      item: [
        { linkId: 'a', type: 'integer', extension: [initial('%first.entry.count()')] },
        { linkId: 'b', type: 'integer', extension: [initial('%second.entry.count()')] },
      ],
    };
    const { response, issues } = await populate({
      questionnaire,
      context: [{ name: 'patient', content: patient }],
      query: async (type, parameters, maxCount) => {
        asked.push([type, parameters, maxCount]);
        return searchset({ resourceType: 'Encounter', id: '1' }, { resourceType: 'Encounter', id: '2' });
      },
      queryBudget: new QueryBudget(5000, 1),
      now: NOW,
    });
    expect(asked).to.deep.equal([
      [
        'Encounter',
        [
          ['patient', '7'],
          ['status', 'finished'],
        ],
        50,
      ],
    ]);
    expect(response.item).to.deep.equal([{ linkId: 'a', answer: [{ valueInteger: 2 }] }, { linkId: 'b' }]);
    const diagnostics = issues.issue.map((i) => i.diagnostics);
    expect(diagnostics.some((d) => /query budget is used up/.test(d))).to.equal(true);
    expect(diagnostics).to.include(
      "%second was not queried (query budget used up): items 'b' could not be filled from it",
    );
  });

  it('binds the batch-response of sourceQueries as %<Bundle id>', async () => {
    const questionnaire: Questionnaire = {
      resourceType: 'Questionnaire',
      status: 'active',
      contained: [
        {
          resourceType: 'Bundle',
          id: 'PrePop',
          type: 'batch',
          entry: [
            { request: { method: 'GET', url: 'Encounter?patient=7' } },
            { request: { method: 'POST', url: 'Encounter' } },
          ],
        },
      ],
      extension: [
        { url: `${SDC}/sdc-questionnaire-sourceQueries`, valueReference: { reference: '#PrePop' } },
      ],
      item: [
        { linkId: 'n', type: 'integer', extension: [initial('%PrePop.entry[0].resource.entry.count()')] },
      ],
    };
    const { response, issues } = await populate({
      questionnaire,
      context: [],
      query: async () => searchset({ resourceType: 'Encounter', id: '1' }),
      now: NOW,
    });
    expect(response.item).to.deep.equal([{ linkId: 'n', answer: [{ valueInteger: 1 }] }]);
    expect(issues.issue.map((i) => i.diagnostics)).to.deep.equal([
      'sourceQueries #PrePop entry 1: only GET searches are run; it answers nothing',
    ]);
  });
});

describe('x-fhir-query parts', () => {
  it('substitutes {{…}} URI-encoded, and refuses one with no value', () => {
    expect(
      expandQuery('Observation?patient={{%p}}&code={{%c}}', (e) => (e === '%p' ? ['7'] : ['a&b'])),
    ).to.equal('Observation?patient=7&code=a%26b');
    expect(() => expandQuery('Observation?patient={{%p}}', () => [])).to.throw(FhirQueryError, /no value/);
    expect(() => expandQuery('Observation?patient={{%p', () => ['1'])).to.throw(FhirQueryError, /without }}/);
  });

  it("parses a search relative to the base or under casebook's base, and refuses anything else", () => {
    const base = 'https://casebook.example.org/fhir';
    expect(parseQuery('Observation?code=1&code=2', [base])).to.deep.equal({
      type: 'Observation',
      parameters: [
        ['code', '1'],
        ['code', '2'],
      ],
    });
    expect(parseQuery(`${base}/Encounter?patient=3`, [base]).type).to.equal('Encounter');
    for (const query of [
      'https://other.example.org/fhir/Encounter',
      'Patient/7',
      'Patient/$everything',
      '?x=1',
    ])
      expect(() => parseQuery(query, [base]), query).to.throw(FhirQueryError);
  });
});
