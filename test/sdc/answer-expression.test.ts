/**
 * Answers computed at run time (src/sdc/answer-expression.ts; issue 35; SDC IG "Expressions",
 * answerExpression and candidateExpression): the pure part, with a fake query runner. Over HTTP,
 * against casebook's own search and under the caller's scopes: test/http/sdc/answer-expression.test.ts.
 */
import { expect } from 'chai';
import { computeAnswers, withComputedOptions } from '../../src/sdc/answer-expression.js';
import { EXT_ANSWER_EXPRESSION } from '../../src/sdc/engine/extensions.js';
import { QueryBudget } from '../../src/sdc/fhir-query.js';
import { populate } from '../../src/sdc/populate.js';
import type { Json, Questionnaire, QuestionnaireResponse } from '../../src/sdc/types.js';
import { validateResponse } from '../../src/sdc/validate.js';

const SDC = 'http://hl7.org/fhir/uv/sdc/StructureDefinition';
const NOW = new Date('2026-03-01T10:00:00.000Z');
const fhirpath = (url: string, expression: string) => ({
  url,
  valueExpression: { language: 'text/fhirpath', expression },
});
const query = (url: string, expression: string) => ({
  url,
  valueExpression: { language: 'application/x-fhir-query', expression },
});
const ANSWER = `${SDC}/sdc-questionnaire-answerExpression`;
const CANDIDATE = `${SDC}/sdc-questionnaire-candidateExpression`;
const INITIAL = `${SDC}/sdc-questionnaire-initialExpression`;
const launchPatient = {
  url: `${SDC}/sdc-questionnaire-launchContext`,
  extension: [{ url: 'name', valueCoding: { code: 'patient' } }],
};
const patient = {
  resourceType: 'Patient',
  id: '7',
  name: [{ given: ['Ann'], family: 'Doe' }],
  telecom: [
    { system: 'phone', value: '555-1' },
    { system: 'phone', value: '555-2' },
  ],
};
const conditions = [
  { resourceType: 'Condition', id: '11', code: { text: 'Asthma' } },
  { resourceType: 'Condition', id: '12', code: { coding: [{ display: 'Gout' }] } },
];
const searchset = (...resources: Json[]): Json => ({
  resourceType: 'Bundle',
  type: 'searchset',
  entry: resources.map((resource) => ({ resource, search: { mode: 'match' } })),
});

/** A phone item whose answers are the patient's phone numbers, and a condition item answered from a query. */
const form: Questionnaire = {
  resourceType: 'Questionnaire',
  url: 'https://forms.example.org/Questionnaire/computed',
  status: 'active',
  extension: [launchPatient],
  item: [
    {
      linkId: 'phone',
      type: 'string',
      extension: [
        fhirpath(ANSWER, "%patient.telecom.where(system = 'phone').value"),
        fhirpath(INITIAL, "%patient.telecom.where(system = 'phone').value.last() | 'not-a-phone'"),
      ],
      repeats: true,
    },
    {
      linkId: 'condition',
      type: 'reference',
      extension: [query(ANSWER, 'Condition?patient={{%patient.id}}')],
    },
    {
      linkId: 'contact',
      type: 'reference',
      extension: [query(CANDIDATE, 'Condition?patient={{%patient.id}}')],
    },
  ],
};

const response = (answers: Record<string, unknown[]>): QuestionnaireResponse => ({
  resourceType: 'QuestionnaireResponse',
  questionnaire: form.url as string,
  status: 'completed',
  subject: { reference: 'Patient/7' },
  item: Object.entries(answers).map(([linkId, answer]) => ({ linkId, answer })) as never,
});

describe('answerExpression and candidateExpression (issue 35, pure)', () => {
  const asked: [string, [string, string][]][] = [];
  const queries = () => ({
    query: async (type: string, parameters: [string, string][]) => {
      asked.push([type, parameters]);
      return type === 'Condition' ? searchset(...conditions) : searchset();
    },
    budget: new QueryBudget(),
    bases: [],
  });

  it('computes FHIRPath and x-fhir-query lists: a resource answers a reference item as Type/id with its display', async () => {
    asked.length = 0;
    const computed = await computeAnswers(form, EXT_ANSWER_EXPRESSION, {
      response: { resourceType: 'QuestionnaireResponse' },
      environment: { patient },
      queries: queries(),
    });
    expect(computed.issues).to.deep.equal([]);
    expect(computed.options.get('phone')).to.deep.equal([{ valueString: '555-1' }, { valueString: '555-2' }]);
    expect(computed.options.get('condition')).to.deep.equal([
      { valueReference: { reference: 'Condition/11', display: 'Asthma' } },
      { valueReference: { reference: 'Condition/12', display: 'Gout' } },
    ]);
    expect(asked).to.deep.equal([['Condition', [['patient', '7']]]]);
    // The editor's form: the lists become the items' answerOption.
    const shown = withComputedOptions(form, computed.options);
    expect(shown.item?.[1]?.answerOption).to.have.length(2);
    expect(form.item?.[1]?.answerOption).to.equal(undefined);
  });

  it('$populate keeps initial values the answerExpression permits, drops the rest, and offers candidates without answering', async () => {
    const {
      response: populated,
      issues,
      candidates,
    } = await populate({
      questionnaire: form,
      context: [{ name: 'patient', content: patient }],
      query: queries().query,
      now: NOW,
    });
    expect(populated.item).to.deep.equal([
      { linkId: 'phone', answer: [{ valueString: '555-2' }] },
      { linkId: 'condition' },
      { linkId: 'contact' },
    ]);
    const diagnostics = issues.issue.map((i) => [i.severity, i.code, i.diagnostics]);
    expect(diagnostics).to.deep.include([
      'warning',
      'value',
      "the initial value 'not-a-phone' of item 'phone' is not one of the answers its answerExpression permits; the value is ignored",
    ]);
    expect(diagnostics).to.deep.include([
      'information',
      'informational',
      "item 'contact': 2 candidates offered by its candidateExpression, none answered: Asthma; Gout",
    ]);
    expect(candidates.get('contact')).to.have.length(2);
  });

  it('$validate refuses an answer outside the computed list, and accepts one inside it', async () => {
    const bad = await validateResponse(
      response({
        phone: [{ valueString: '555-9' }],
        condition: [{ valueReference: { reference: 'Condition/99' } }],
      }),
      form,
      { queries: queries(), environment: { patient } },
    );
    const errors = bad.issue.filter((i) => i.severity === 'error');
    expect(errors.map((i) => [i.code, i.expression?.[0]])).to.deep.equal([
      ['code-invalid', 'QuestionnaireResponse.item[0].answer[0]'],
      ['code-invalid', 'QuestionnaireResponse.item[1].answer[0]'],
    ]);
    expect(errors[1]!.diagnostics).to.match(
      /Condition\/99 .*not one of the answers its answerExpression permits/,
    );
    const good = await validateResponse(
      response({
        phone: [{ valueString: '555-1' }],
        condition: [{ valueReference: { reference: 'Condition/12' } }],
      }),
      form,
      { queries: queries(), environment: { patient } },
    );
    expect(good.issue.map((i) => i.severity)).to.deep.equal(['information']);
  });

  it('$validate warns, never errs, when a list could not be computed (no runner, or the query budget used up)', async () => {
    const answers = { condition: [{ valueReference: { reference: 'Condition/99' } }] };
    for (const options of [{}, { queries: { ...queries(), budget: new QueryBudget(5000, 0) } }]) {
      const outcome = await validateResponse(response(answers), form, options);
      expect(outcome.issue.filter((i) => i.severity === 'error')).to.deep.equal([]);
      expect(outcome.issue.map((i) => i.diagnostics).join('\n')).to.match(
        /answerExpression could not be computed .*was not checked/,
      );
    }
  });

  it('ignores an answerExpression beside answerOption (SDC forbids both) and says so', async () => {
    const both: Questionnaire = {
      resourceType: 'Questionnaire',
      status: 'active',
      item: [
        {
          linkId: 'x',
          type: 'string',
          answerOption: [{ valueString: 'a' }],
          extension: [fhirpath(ANSWER, "'b'")],
        },
      ],
    };
    const computed = await computeAnswers(both, EXT_ANSWER_EXPRESSION, { response: {} });
    expect(computed.options.size).to.equal(0);
    expect(computed.issues[0]!.diagnostics).to.match(/takes no answerExpression/);
    const outcome = await validateResponse(
      {
        resourceType: 'QuestionnaireResponse',
        status: 'completed',
        item: [{ linkId: 'x', answer: [{ valueString: 'b' }] }],
      },
      both,
    );
    expect(outcome.issue.filter((i) => i.severity === 'error').map((i) => i.diagnostics)).to.deep.equal([
      'linkId "x": \'b\' is not one of the answer options',
    ]);
  });
});
