/**
 * enableWhen evaluation of the report editor (issue 5): the same source runs in the browser.
 */
import { expect } from 'chai';
import { evaluateEnableWhen, rulesOf } from '../../../src/http/app/enable-when.js';
import type { QuestionnaireItem } from '../../../src/sdc/types.js';

const ITEMS: QuestionnaireItem[] = [
  { linkId: 'contrast', type: 'boolean' },
  {
    linkId: 'agent',
    type: 'string',
    enableWhen: [{ question: 'contrast', operator: '=', answerBoolean: true }],
  },
  {
    linkId: 'dose',
    type: 'decimal',
    enableWhen: [{ question: 'agent', operator: 'exists', answerBoolean: true }],
  },
  {
    linkId: 'severity',
    type: 'coding',
    answerOption: [{ valueCoding: { code: 'mild' } }, { valueCoding: { code: 'severe' } }],
  },
  {
    linkId: 'followup',
    type: 'group',
    enableBehavior: 'any',
    enableWhen: [
      { question: 'severity', operator: '=', answerCoding: { system: 'urn:s', code: 'severe' } },
      { question: 'size', operator: '>=', answerDecimal: 10 },
    ],
    item: [{ linkId: 'interval', type: 'integer' }],
  },
  { linkId: 'size', type: 'decimal' },
  {
    linkId: 'notsevere',
    type: 'string',
    enableWhen: [{ question: 'severity', operator: '!=', answerCoding: { code: 'severe' } }],
  },
];

const rules = rulesOf(ITEMS);

describe('report editor enableWhen', () => {
  it('enables an item when its condition holds and disables it otherwise', () => {
    expect(evaluateEnableWhen(rules, { contrast: [true] }).agent).to.equal(true);
    expect(evaluateEnableWhen(rules, { contrast: [false] }).agent).to.equal(false);
    expect(evaluateEnableWhen(rules, {}).agent).to.equal(false);
  });

  it('treats the answers of a disabled question as absent (chains)', () => {
    const state = evaluateEnableWhen(rules, { contrast: [false], agent: ['Iohexol'] });
    expect(state.agent).to.equal(false);
    expect(state.dose).to.equal(false);
    expect(evaluateEnableWhen(rules, { contrast: [true], agent: ['Iohexol'] }).dose).to.equal(true);
  });

  it('compares codings by code and numbers by value; enableBehavior any', () => {
    expect(evaluateEnableWhen(rules, { severity: ['severe'] }).followup).to.equal(true);
    expect(evaluateEnableWhen(rules, { size: [12] }).followup).to.equal(true);
    expect(evaluateEnableWhen(rules, { severity: ['mild'], size: [9.5] }).followup).to.equal(false);
  });

  it('disables the children of a disabled group', () => {
    expect(evaluateEnableWhen(rules, { severity: ['mild'] }).interval).to.equal(false);
    expect(evaluateEnableWhen(rules, { severity: ['severe'] }).interval).to.equal(true);
  });

  it('!= needs an answer that differs', () => {
    expect(evaluateEnableWhen(rules, { severity: ['mild'] }).notsevere).to.equal(true);
    expect(evaluateEnableWhen(rules, { severity: ['severe'] }).notsevere).to.equal(false);
    expect(evaluateEnableWhen(rules, {}).notsevere).to.equal(false);
  });
});
