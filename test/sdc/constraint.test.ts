/**
 * QuestionnaireResponse/$validate of questionnaire-constraint invariants (issue 10; docs/interface.md
 * §4.4): FHIRPath on the matching response item (the response for a Questionnaire-level one),
 * evaluated within the evaluation budget; a violation is an issue with the `human` text, a broken
 * or slow expression an issue too, never an exception.
 */
import { expect } from 'chai';
import { EvaluationBudget } from '../../src/sdc/budget.js';
import type {
  OperationOutcome,
  Questionnaire,
  QuestionnaireItem,
  QuestionnaireResponse,
  QuestionnaireResponseItem,
} from '../../src/sdc/types.js';
import { EXT_QUESTIONNAIRE_CONSTRAINT, validateResponse } from '../../src/sdc/validate.js';

/** 30⁵ = 24 million evaluations: seconds of FHIRPath (as in budget.test.ts). */
const LIST = `(${Array.from({ length: 30 }, (_, i) => i).join('|')})`;
const SLOW_FHIRPATH = `${LIST}.select(${LIST}.select(${LIST}.select(${LIST}.select(${LIST})))).count() > 0`;

const constraint = (
  key: string,
  expression: string,
  human: string,
  severity: 'error' | 'warning' = 'error',
) => ({
  url: EXT_QUESTIONNAIRE_CONSTRAINT,
  extension: [
    { url: 'key', valueId: key },
    { url: 'severity', valueCode: severity },
    { url: 'expression', valueString: expression },
    { url: 'human', valueString: human },
  ],
});

const questionnaire = (
  items: QuestionnaireItem[],
  extension: Questionnaire['extension'] = undefined,
): Questionnaire => ({
  resourceType: 'Questionnaire',
  url: 'https://forms.example.org/Questionnaire/lesions',
  status: 'active',
  ...(extension ? { extension } : {}),
  item: items,
});

const response = (item: QuestionnaireResponseItem[], status = 'completed'): QuestionnaireResponse => ({
  resourceType: 'QuestionnaireResponse',
  questionnaire: 'https://forms.example.org/Questionnaire/lesions',
  status,
  item,
});

/** `size` (mm) must be at most 100: an item-level invariant on the item's own answer. */
const sizeItem = (expression: string, severity: 'error' | 'warning' = 'error'): QuestionnaireItem => ({
  linkId: 'size',
  text: 'Size (mm)',
  type: 'integer',
  extension: [constraint('size-1', expression, 'The size cannot exceed 100 mm.', severity)],
});
const SIZE_RULE = 'answer.value <= 100';

const size = (value: number): QuestionnaireResponseItem => ({
  linkId: 'size',
  answer: [{ valueInteger: value }],
});

const summary = (outcome: OperationOutcome): string[] =>
  outcome.issue.map((i) => `${i.severity} ${i.code} ${(i.expression ?? []).join(',')}`);

const expectValid = (outcome: OperationOutcome) =>
  expect(summary(outcome), JSON.stringify(outcome.issue)).to.deep.equal(['information informational ']);

describe('questionnaire-constraint ($validate)', () => {
  it('gives no issue when the invariant holds', async () => {
    expectValid(await validateResponse(response([size(40)]), questionnaire([sizeItem(SIZE_RULE)])));
  });

  it('counts an empty result (an unanswered question) as satisfied', async () => {
    expectValid(await validateResponse(response([{ linkId: 'size' }]), questionnaire([sizeItem(SIZE_RULE)])));
  });

  it('reports a violation with the human text, at the item, as an error on a completed response', async () => {
    for (const status of ['completed', 'amended']) {
      const outcome = await validateResponse(
        response([{ linkId: 'other', answer: [{ valueString: 'x' }] }, size(140)], status),
        questionnaire([{ linkId: 'other', type: 'string' }, sizeItem(SIZE_RULE)]),
      );
      expect(outcome.issue).to.deep.equal([
        {
          severity: 'error',
          code: 'invariant',
          diagnostics: 'The size cannot exceed 100 mm.',
          expression: ['QuestionnaireResponse.item[1]'],
        },
      ]);
    }
  });

  it('reports a violation as a warning on an in-progress response, and a warning constraint always as a warning', async () => {
    const inProgress = await validateResponse(
      response([size(140)], 'in-progress'),
      questionnaire([sizeItem(SIZE_RULE)]),
    );
    expect(summary(inProgress)).to.deep.equal(['warning invariant QuestionnaireResponse.item[0]']);
    const warning = await validateResponse(
      response([size(140)]),
      questionnaire([sizeItem(SIZE_RULE, 'warning')]),
    );
    expect(summary(warning)).to.deep.equal(['warning invariant QuestionnaireResponse.item[0]']);
    expect(warning.issue[0]!.diagnostics).to.equal('The size cannot exceed 100 mm.');
  });

  it('evaluates on every instance of a repeating group, with %resource and %context', async () => {
    const q = questionnaire([
      {
        linkId: 'lesion',
        type: 'group',
        repeats: true,
        extension: [
          constraint(
            'lesion-1',
            "%context.item.where(linkId='size').answer.value < %resource.item.where(linkId='limit').answer.value",
            'A lesion must be smaller than the limit.',
          ),
        ],
        item: [{ linkId: 'size', type: 'integer' }],
      },
      { linkId: 'limit', type: 'integer' },
    ]);
    const outcome = await validateResponse(
      response([
        { linkId: 'lesion', item: [size(10)] },
        { linkId: 'lesion', item: [size(60)] },
        { linkId: 'limit', answer: [{ valueInteger: 50 }] },
      ]),
      q,
    );
    expect(summary(outcome)).to.deep.equal(['error invariant QuestionnaireResponse.item[1]']);
    expect(outcome.issue[0]!.diagnostics).to.equal('A lesion must be smaller than the limit.');
  });

  it('evaluates a Questionnaire-level constraint on the response', async () => {
    const q = questionnaire(
      [
        { linkId: 'a', type: 'integer' },
        { linkId: 'b', type: 'integer' },
      ],
      [
        constraint(
          'q-1',
          "item.where(linkId='a').answer.value < item.where(linkId='b').answer.value",
          'a < b',
        ),
      ],
    );
    const item = (a: number, b: number): QuestionnaireResponseItem[] => [
      { linkId: 'a', answer: [{ valueInteger: a }] },
      { linkId: 'b', answer: [{ valueInteger: b }] },
    ];
    expectValid(await validateResponse(response(item(1, 2)), q));
    const outcome = await validateResponse(response(item(3, 2)), q);
    expect(summary(outcome)).to.deep.equal(['error invariant QuestionnaireResponse']);
    expect(outcome.issue[0]!.diagnostics).to.equal('a < b');
  });

  it('does not apply the invariants of a disabled item', async () => {
    const q = questionnaire([
      { linkId: 'measured', type: 'boolean' },
      {
        ...sizeItem(SIZE_RULE),
        enableWhen: [{ question: 'measured', operator: '=', answerBoolean: true }],
      },
    ]);
    const outcome = await validateResponse(
      response([{ linkId: 'measured', answer: [{ valueBoolean: false }] }, size(140)]),
      q,
    );
    // Only the existing "answered although disabled" error, no invariant issue.
    expect(summary(outcome)).to.deep.equal(['error business-rule QuestionnaireResponse.item[1]']);
  });

  it('reports a malformed, failing or non-boolean expression as a warning that it was not checked', async () => {
    for (const expression of ['answer.value <= ', '%undefinedVariable = 1', 'answer.value']) {
      const outcome = await validateResponse(response([size(140)]), questionnaire([sizeItem(expression)]));
      expect(summary(outcome), expression).to.deep.equal([
        'warning processing QuestionnaireResponse.item[0]',
      ]);
      expect(outcome.issue[0]!.diagnostics).to.match(
        /questionnaire-constraint "size-1" of 'Size \(mm\)'.* was not checked/,
      );
    }
    const keyless = questionnaire([
      { linkId: 'size', type: 'integer', extension: [{ url: EXT_QUESTIONNAIRE_CONSTRAINT, extension: [] }] },
    ]);
    expect(summary(await validateResponse(response([size(1)]), keyless))).to.deep.equal([
      'warning processing QuestionnaireResponse.item[0]',
    ]);
  });

  it('interrupts a slow expression within the budget, reports it once, and returns within 1 s', async () => {
    const q = questionnaire([
      {
        linkId: 'lesion',
        type: 'group',
        repeats: true,
        extension: [constraint('slow', SLOW_FHIRPATH, 'never shown')],
        item: [{ linkId: 'size', type: 'integer' }],
      },
    ]);
    const r = response(Array.from({ length: 5 }, (_, i) => ({ linkId: 'lesion', item: [size(i)] })));
    const started = performance.now();
    const outcome = await validateResponse(r, q, { budget: new EvaluationBudget(750) });
    expect(performance.now() - started).to.be.below(1000);
    expect(summary(outcome)).to.deep.equal(['warning processing QuestionnaireResponse.item[0]']);
    expect(outcome.issue[0]!.diagnostics).to.match(/budget of 200 ms/);
  });
  it("stops at the request's budget when many constraints are slow, still within 1 s", async () => {
    const q = questionnaire(
      Array.from({ length: 6 }, (_, i) => ({
        linkId: `q${i}`,
        type: 'integer',
        extension: [constraint(`slow-${i}`, SLOW_FHIRPATH, 'never shown')],
      })),
    );
    const r = response(
      Array.from({ length: 6 }, (_, i) => ({ linkId: `q${i}`, answer: [{ valueInteger: i }] })),
    );
    const started = performance.now();
    const outcome = await validateResponse(r, q, { budget: new EvaluationBudget(750) });
    expect(performance.now() - started).to.be.below(1000);
    expect(summary(outcome)).to.deep.equal(
      Array.from({ length: 6 }, (_, i) => `warning processing QuestionnaireResponse.item[${i}]`),
    );
    expect(outcome.issue[0]!.diagnostics).to.match(/budget of 200 ms/);
    expect(outcome.issue.at(-1)!.diagnostics).to.match(/budget of 750 ms is used up/);
  });
});
