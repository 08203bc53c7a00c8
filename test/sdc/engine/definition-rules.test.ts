/**
 * The rules of a Questionnaire itself (src/sdc/engine/definition-rules.ts; issue 35): one
 * refusing case per R5 invariant and per item rule, each naming its item by FHIRPath and linkId.
 */
import { expect } from 'chai';
import { questionnaireProblems } from '../../../src/sdc/engine/definition-rules.js';

type Item = Record<string, unknown>;
const form = (item: Item[], extra: Record<string, unknown> = {}) => ({
  resourceType: 'Questionnaire',
  status: 'active',
  item,
  ...extra,
});
const q = (linkId: string, type = 'string', extra: Item = {}): Item => ({
  linkId,
  type,
  text: linkId,
  ...extra,
});
const group = (linkId: string, item: Item[], extra: Item = {}): Item => ({
  linkId,
  type: 'group',
  item,
  ...extra,
});

/** [rule, severity, items, expected expression, linkId] */
const CASES: [string, 'error' | 'warning', Item[], string, string][] = [
  ['que-2', 'error', [q('a'), group('g', [q('a')])], 'Questionnaire.item[1].item[0].linkId', 'a'],
  ['que-1b', 'warning', [q('a'), { linkId: 'g', type: 'group' }], 'Questionnaire.item[1]', 'g'],
  [
    'que-1c',
    'error',
    [{ linkId: 'd', type: 'display', text: 'x', item: [q('a')] }],
    'Questionnaire.item[0].item',
    'd',
  ],
  [
    'que-3',
    'error',
    [{ linkId: 'd', type: 'display', code: [{ code: 'x' }] }],
    'Questionnaire.item[0].code',
    'd',
  ],
  [
    'que-4',
    'error',
    [q('c', 'coding', { answerOption: [{ valueCoding: { code: 'x' } }], answerValueSet: 'http://x.org/vs' })],
    'Questionnaire.item[0].answerValueSet',
    'c',
  ],
  [
    'que-5',
    'error',
    [q('b', 'boolean', { answerValueSet: 'http://x.org/vs' })],
    'Questionnaire.item[0].answerValueSet',
    'b',
  ],
  [
    'que-6',
    'error',
    [{ linkId: 'd', type: 'display', required: true }],
    'Questionnaire.item[0].required',
    'd',
  ],
  [
    'que-7',
    'error',
    [q('a'), q('b', 'string', { enableWhen: [{ question: 'a', operator: 'exists', answerString: 'x' }] })],
    'Questionnaire.item[1].enableWhen[0]',
    'b',
  ],
  [
    'que-8',
    'error',
    [group('g', [q('a')], { initial: [{ valueString: 'x' }] })],
    'Questionnaire.item[0].initial',
    'g',
  ],
  [
    'que-9',
    'error',
    [{ linkId: 'd', type: 'display', readOnly: true }],
    'Questionnaire.item[0].readOnly',
    'd',
  ],
  ['que-10', 'error', [q('d', 'date', { maxLength: 10 })], 'Questionnaire.item[0].maxLength', 'd'],
  [
    'que-11',
    'error',
    [q('s', 'string', { answerOption: [{ valueString: 'x' }], initial: [{ valueString: 'x' }] })],
    'Questionnaire.item[0].initial',
    's',
  ],
  [
    'que-12',
    'error',
    [
      q('a', 'boolean'),
      q('b', 'boolean'),
      q('c', 'string', {
        enableWhen: [
          { question: 'a', operator: '=', answerBoolean: true },
          { question: 'b', operator: '=', answerBoolean: true },
        ],
      }),
    ],
    'Questionnaire.item[2].enableBehavior',
    'c',
  ],
  [
    'que-13',
    'error',
    [q('s', 'string', { initial: [{ valueString: 'x' }, { valueString: 'y' }] })],
    'Questionnaire.item[0].initial',
    's',
  ],
  [
    'que-14',
    'warning',
    [q('s', 'string', { answerConstraint: 'optionsOnly' })],
    'Questionnaire.item[0].answerConstraint',
    's',
  ],
  ['que-15', 'warning', [q('x'.repeat(256))], 'Questionnaire.item[0].linkId', 'x'.repeat(256)],
  [
    'enableWhen-question',
    'error',
    [
      q('a'),
      q('b', 'string', { enableWhen: [{ question: 'nowhere', operator: 'exists', answerBoolean: true }] }),
    ],
    'Questionnaire.item[1].enableWhen[0].question',
    'b',
  ],
  [
    'enableWhen-question',
    'error',
    [
      group('g', [q('a')]),
      q('b', 'string', { enableWhen: [{ question: 'g', operator: 'exists', answerBoolean: true }] }),
    ],
    'Questionnaire.item[1].enableWhen[0].question',
    'b',
  ],
  [
    'enableWhen-question',
    'error',
    [q('b', 'string', { enableWhen: [{ question: 'b', operator: 'exists', answerBoolean: true }] })],
    'Questionnaire.item[0].enableWhen[0].question',
    'b',
  ],
  [
    'enableWhen-answer',
    'error',
    [
      q('a', 'boolean'),
      q('b', 'string', { enableWhen: [{ question: 'a', operator: '=', answerString: 'yes' }] }),
    ],
    'Questionnaire.item[1].enableWhen[0].answerString',
    'b',
  ],
  [
    'enableWhen-answer',
    'error',
    [
      q('a', 'date'),
      q('b', 'string', { enableWhen: [{ question: 'a', operator: '>', answerDate: '2024-02-30' }] }),
    ],
    'Questionnaire.item[1].enableWhen[0].answerDate',
    'b',
  ],
  [
    'enableWhen-operator',
    'error',
    [
      q('a', 'boolean'),
      q('b', 'string', { enableWhen: [{ question: 'a', operator: '>', answerBoolean: true }] }),
    ],
    'Questionnaire.item[1].enableWhen[0].operator',
    'b',
  ],
  [
    'answerOption-value',
    'error',
    [q('c', 'coding', { answerOption: [{ valueCoding: { code: 'x' } }, { valueString: 'y' }] })],
    'Questionnaire.item[0].answerOption[1].valueString',
    'c',
  ],
  [
    'answerOption-value',
    'error',
    [q('i', 'integer', { answerOption: [{ valueInteger: 1.5 }] })],
    'Questionnaire.item[0].answerOption[0].valueInteger',
    'i',
  ],
  [
    'answerOption-initialSelected',
    'error',
    [
      q('c', 'coding', {
        answerOption: [
          { valueCoding: { code: 'x' }, initialSelected: true },
          { valueCoding: { code: 'y' }, initialSelected: true },
        ],
      }),
    ],
    'Questionnaire.item[0].answerOption',
    'c',
  ],
  [
    'initial-value',
    'error',
    [q('n', 'integer', { initial: [{ valueString: '3' }] })],
    'Questionnaire.item[0].initial[0].valueString',
    'n',
  ],
  [
    'initial-value',
    'error',
    [q('d', 'date', { initial: [{ valueDate: '2024-13-01' }] })],
    'Questionnaire.item[0].initial[0].valueDate',
    'd',
  ],
];

describe('Questionnaire rules (src/sdc/engine/definition-rules.ts)', () => {
  for (const [key, severity, items, expression, linkId] of CASES)
    it(`${key}: ${severity === 'error' ? 'refuses' : 'warns about'} ${expression} naming linkId ${linkId.slice(0, 12)}`, () => {
      const problems = questionnaireProblems(form(items));
      expect(problems, JSON.stringify(problems)).to.have.length(1);
      const [problem] = problems;
      expect(problem).to.deep.include({ key, severity, expression, linkId });
      expect(problem!.diagnostics).to.include(`linkId ${JSON.stringify(linkId)}`);
      expect(problem!.diagnostics.startsWith(`${key}: `)).to.equal(true);
    });

  it('accepts a form that keeps every rule (ct-chest seed, options, initial, enableWhen after the item)', async () => {
    const { ctChestQuestionnaire } = await import('../../support/ct-chest.js');
    expect(
      questionnaireProblems(ctChestQuestionnaire('https://casebook.example/fhir/Questionnaire/ct-chest')),
    ).to.deep.equal([]);
    expect(
      questionnaireProblems(
        form([
          q('later-target', 'string', { enableWhen: [{ question: 'n', operator: '>=', answerInteger: 3 }] }),
          q('n', 'integer', { initial: [{ valueInteger: 2 }] }),
          q('c', 'coding', {
            repeats: true,
            answerOption: [
              { valueCoding: { code: 'x' }, initialSelected: true },
              { valueCoding: { code: 'y' }, initialSelected: true },
            ],
          }),
          q('o', 'coding', {
            answerConstraint: 'optionsOrString',
            answerValueSet: 'http://x.org/vs',
            maxLength: 20,
          }),
          q('p', 'string', { enableWhen: [{ question: 'o', operator: '=', answerString: 'free' }] }),
        ]),
      ),
    ).to.deep.equal([]);
  });

  it('reports nothing for what is not a Questionnaire object, and skips malformed items', () => {
    expect(questionnaireProblems(null)).to.deep.equal([]);
    expect(questionnaireProblems(form([null as unknown as Item, q('a')]))).to.deep.equal([]);
  });
});
