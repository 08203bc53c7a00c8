/**
 * The form engine (issue 32; src/sdc/engine/), pure: evaluation order and cycles, keys and the
 * stored form of a response, enablement in repeat scopes, calculations in dependency order, the
 * answer checks' messages and units, and linkIds that are names of Object.prototype.
 */
import { expect } from 'chai';
import { defineForm, type FormRun, runForm } from '../../../src/sdc/engine/index.js';
import { expressionReferences } from '../../../src/sdc/fhirpath.js';
import type {
  Questionnaire,
  QuestionnaireItem,
  QuestionnaireResponse,
  QuestionnaireResponseItem,
} from '../../../src/sdc/types.js';

const SDC = 'http://hl7.org/fhir/uv/sdc/StructureDefinition/';
const CORE = 'http://hl7.org/fhir/StructureDefinition/';
const UCUM = 'http://unitsofmeasure.org';

const form = (...item: QuestionnaireItem[]): Questionnaire => ({
  resourceType: 'Questionnaire',
  status: 'active',
  item,
});
const response = (...item: QuestionnaireResponseItem[]): QuestionnaireResponse => ({
  resourceType: 'QuestionnaireResponse',
  status: 'completed',
  item,
});
const calc = (expression: string) => ({
  url: `${SDC}sdc-questionnaire-calculatedExpression`,
  valueExpression: { language: 'text/fhirpath', expression },
});
const enableExpr = (expression: string) => ({
  url: `${SDC}sdc-questionnaire-enableWhenExpression`,
  valueExpression: { language: 'text/fhirpath', expression },
});
const unit = (code: string) => ({ url: `${CORE}questionnaire-unit`, valueCoding: { system: UCUM, code } });
const answered = (linkId: string, value: Record<string, unknown>): QuestionnaireResponseItem => ({
  linkId,
  answer: [value],
});

const run = (
  q: Questionnaire,
  r: QuestionnaireResponse,
  options: Parameters<typeof runForm>[2] = {},
): FormRun => runForm(defineForm(q), structuredClone(r), options);
const enabled = (result: FormRun): Record<string, boolean> => Object.fromEntries(result.enablementByKey());

describe('form engine (src/sdc/engine)', () => {
  describe('evaluation order', () => {
    it('evaluates a calculation after the one it names, whatever the document order', () => {
      const q = form(
        {
          linkId: 'severity',
          type: 'string',
          extension: [calc("iif(%resource.item.where(linkId='total').answer.value > 5, 'high', 'low')")],
        },
        {
          linkId: 'total',
          type: 'integer',
          extension: [calc("%resource.item.where(linkId='score').answer.value * 2")],
        },
        { linkId: 'score', type: 'integer' },
      );
      const definition = defineForm(q);
      expect(definition.evaluationOrder.map((d) => d.linkId)).to.deep.equal(['score', 'total', 'severity']);
      const stored = run(q, response(answered('score', { valueInteger: 4 })), { calculate: true }).stored();
      expect(stored.item).to.deep.equal([
        { linkId: 'severity', answer: [{ valueString: 'high' }] },
        { linkId: 'total', answer: [{ valueInteger: 8 }] },
        { linkId: 'score', answer: [{ valueInteger: 4 }] },
      ]);
    });

    it('reads through variables: BMI from height and weight named in root variables', () => {
      const q: Questionnaire = {
        ...form(
          { linkId: 'bmi', type: 'decimal', extension: [calc('(%w / (%h * %h)).round(1)')] },
          { linkId: 'height', type: 'decimal' },
          { linkId: 'weight', type: 'decimal' },
        ),
        extension: [
          {
            url: `${CORE}variable`,
            valueExpression: {
              name: 'h',
              language: 'text/fhirpath',
              expression: "%resource.item.where(linkId='height').answer.value / 100",
            },
          },
          {
            url: `${CORE}variable`,
            valueExpression: {
              name: 'w',
              language: 'text/fhirpath',
              expression: "%resource.item.where(linkId='weight').answer.value",
            },
          },
        ],
      };
      expect(defineForm(q).evaluationOrder.map((d) => d.linkId)).to.deep.equal(['height', 'weight', 'bmi']);
      const stored = run(
        q,
        response(answered('height', { valueDecimal: 180 }), answered('weight', { valueDecimal: 81 })),
        {
          calculate: true,
        },
      ).stored();
      expect(stored.item![0]).to.deep.equal({ linkId: 'bmi', answer: [{ valueDecimal: 25 }] });
    });

    it('refuses a cycle of calculations and disables a cycle of conditions, reporting each once', () => {
      const q = form(
        {
          linkId: 'a',
          type: 'integer',
          extension: [calc("%resource.item.where(linkId='b').answer.value + 1")],
        },
        {
          linkId: 'b',
          type: 'integer',
          extension: [calc("%resource.item.where(linkId='a').answer.value + 1")],
        },
        {
          linkId: 'x',
          type: 'boolean',
          enableWhen: [{ question: 'y', operator: 'exists', answerBoolean: true }],
        },
        {
          linkId: 'y',
          type: 'boolean',
          enableWhen: [{ question: 'x', operator: 'exists', answerBoolean: true }],
        },
      );
      const result = run(
        q,
        response(
          answered('a', { valueInteger: 7 }),
          answered('x', { valueBoolean: true }),
          answered('y', { valueBoolean: true }),
        ),
        {
          calculate: true,
        },
      );
      const cycles = result.problems.filter((p) => p.diagnostics.includes('cycle'));
      expect(cycles.map((p) => [p.advisory, p.linkId])).to.deep.equal([
        [true, 'a'],
        [true, 'x'],
      ]);
      // The calculations are not evaluated (a keeps what it had); x and y are disabled.
      expect(result.stored().item).to.deep.equal([{ linkId: 'a', answer: [{ valueInteger: 7 }] }]);
      expect(enabled(result)).to.deep.include({ x: false, y: false, a: true, b: true });
    });

    it('does not take an exclusion (linkId != …) or the context’s own linkId for a read', () => {
      expect(
        expressionReferences("%resource.repeat(item).where(linkId != 'total').answer.value.sum()").linkIds,
      ).to.deep.equal([]);
      expect(
        expressionReferences("%context.linkId = 'me' and %resource.item.where(linkId = 'other').exists()")
          .linkIds,
      ).to.deep.equal(['other']);
      expect(
        [...expressionReferences("item.where('a' = linkId or linkId in ('b' | 'c'))").linkIds].sort(),
      ).to.deep.equal(['a', 'b', 'c']);
      expect(expressionReferences('%`weird name` + %x').variables).to.deep.equal(['weird name', 'x']);
    });
  });

  describe('keys and the stored form', () => {
    const q = form(
      { linkId: 'top', type: 'string' },
      {
        linkId: 'nodule',
        type: 'group',
        repeats: true,
        item: [
          { linkId: 'size', type: 'decimal' },
          { linkId: 'finding', type: 'boolean', item: [{ linkId: 'note', type: 'string' }] },
        ],
      },
    );

    it('names each node by the instances on its way, and completes the tree with every field', () => {
      const result = run(
        q,
        response(
          { linkId: 'nodule', item: [answered('size', { valueDecimal: 4 })] },
          { linkId: 'nodule', item: [] },
        ),
        { complete: true },
      );
      expect([...result.enablementByKey().keys()].sort()).to.deep.equal(
        [
          'nodule',
          'nodule[0]',
          'nodule[0]/size',
          'nodule[0]/finding',
          'nodule[0]/finding[0]/note',
          'nodule[1]',
          'nodule[1]/size',
          'nodule[1]/finding',
          'nodule[1]/finding[0]/note',
          'top',
        ].sort(),
      );
      // Stored: answered items only.
      expect(result.stored().item).to.deep.equal([
        { linkId: 'nodule', item: [{ linkId: 'size', answer: [{ valueDecimal: 4 }] }] },
      ]);
    });
  });

  describe('enablement', () => {
    it('reads a question in the same repeat instance, and every instance from outside', () => {
      const q = form(
        {
          linkId: 'lesion',
          type: 'group',
          repeats: true,
          item: [
            { linkId: 'malignant', type: 'boolean' },
            {
              linkId: 'stage',
              type: 'string',
              enableWhen: [{ question: 'malignant', operator: '=', answerBoolean: true }],
            },
          ],
        },
        {
          linkId: 'summary',
          type: 'string',
          enableWhen: [{ question: 'malignant', operator: '=', answerBoolean: true }],
        },
      );
      const result = run(
        q,
        response(
          { linkId: 'lesion', item: [answered('malignant', { valueBoolean: false })] },
          { linkId: 'lesion', item: [answered('malignant', { valueBoolean: true })] },
        ),
        { complete: true },
      );
      expect(enabled(result)).to.deep.include({
        'lesion[0]/stage': false,
        'lesion[1]/stage': true,
        summary: true,
      });
    });

    it('treats answers of a disabled item as absent, down a chain', () => {
      const q = form(
        { linkId: 'a', type: 'boolean' },
        { linkId: 'b', type: 'boolean', enableWhen: [{ question: 'a', operator: '=', answerBoolean: true }] },
        {
          linkId: 'c',
          type: 'string',
          enableWhen: [{ question: 'b', operator: 'exists', answerBoolean: true }],
        },
        { linkId: 'd', type: 'string', enableWhen: [{ question: 'b', operator: '!=', answerBoolean: true }] },
      );
      const result = run(
        q,
        response(answered('a', { valueBoolean: false }), answered('b', { valueBoolean: true })),
        {
          complete: true,
        },
      );
      expect(enabled(result)).to.deep.equal({ a: true, b: false, c: false, d: true });
      expect(result.stored().item).to.deep.equal([{ linkId: 'a', answer: [{ valueBoolean: false }] }]);
    });

    it('sees %resource as stored: an expression does not read the answer of an item disabled before it', () => {
      const q = form(
        { linkId: 'a', type: 'boolean' },
        { linkId: 'b', type: 'string', enableWhen: [{ question: 'a', operator: '=', answerBoolean: true }] },
        {
          linkId: 'c',
          type: 'string',
          extension: [enableExpr("%resource.item.where(linkId='b').answer.exists()")],
        },
      );
      const result = run(
        q,
        response(answered('a', { valueBoolean: false }), answered('b', { valueString: 'x' })),
      );
      expect(enabled(result)).to.deep.include({ b: false, c: false });
    });
  });

  describe('calculations', () => {
    it('adds a calculated item the response lacks, in every instance, and clears it in a disabled one', () => {
      const q = form({
        linkId: 'lesion',
        type: 'group',
        repeats: true,
        // A variable of the group, evaluated on each instance: that instance's mm.
        extension: [
          {
            url: `${CORE}variable`,
            valueExpression: {
              name: 'mm',
              language: 'text/fhirpath',
              expression: "%context.item.where(linkId='mm').answer.value",
            },
          },
        ],
        item: [
          { linkId: 'include', type: 'boolean' },
          { linkId: 'mm', type: 'decimal' },
          {
            linkId: 'cm',
            type: 'decimal',
            enableWhen: [{ question: 'include', operator: '=', answerBoolean: true }],
            extension: [calc('%mm / 10')],
          },
        ],
      });
      const result = run(
        q,
        response(
          {
            linkId: 'lesion',
            item: [answered('include', { valueBoolean: true }), answered('mm', { valueDecimal: 25 })],
          },
          {
            linkId: 'lesion',
            item: [answered('include', { valueBoolean: false }), answered('mm', { valueDecimal: 40 })],
          },
        ),
        { calculate: true },
      );
      const cm = result.context.tree.nodes.filter((n) => n.def.linkId === 'cm');
      expect(cm.map((n) => [n.key, n.answers])).to.deep.equal([
        ['lesion[0]/cm', [{ valueDecimal: 2.5 }]],
        ['lesion[1]/cm', []],
      ]);
    });

    it('reports a failing calculation once and leaves the item unanswered', () => {
      const q = form({ linkId: 'x', type: 'integer', extension: [calc('%nope + 1')] });
      const result = run(q, response(answered('x', { valueInteger: 3 })), { calculate: true });
      expect(result.problems.map((p) => [p.code, p.advisory])).to.deep.equal([['processing', true]]);
      expect(result.stored().item).to.equal(undefined);
    });
  });

  describe('answer checks', () => {
    const check = (item: QuestionnaireItem, value: Record<string, unknown>) =>
      run(form(item), response(answered(item.linkId, value)), { valueSets: new Map() }).problems.map(
        (p) => p.message,
      );

    it('says what is wrong in words for the field, with the unit of the limit', () => {
      const size: QuestionnaireItem = {
        linkId: 'size',
        type: 'decimal',
        extension: [
          unit('mm'),
          { url: `${CORE}minValue`, valueDecimal: 1 },
          { url: `${CORE}maxValue`, valueDecimal: 300 },
          { url: `${CORE}maxDecimalPlaces`, valueInteger: 1 },
        ],
      };
      expect(check(size, { valueDecimal: 400 })).to.deep.equal(['The value must be at most 300 mm.']);
      expect(check(size, { valueDecimal: 0.25 })).to.deep.equal([
        'The value must be at least 1 mm.',
        'Use at most 1 decimal place.',
      ]);
      expect(check({ linkId: 't', type: 'string', maxLength: 3 }, { valueString: 'abcd' })).to.deep.equal([
        'Use at most 3 characters (this answer has 4).',
      ]);
    });

    it('checks the unit of a quantity against its unitOptions', () => {
      const depth: QuestionnaireItem = {
        linkId: 'depth',
        type: 'quantity',
        extension: [
          {
            url: `${CORE}questionnaire-unitOption`,
            valueCoding: { system: UCUM, code: 'mm', display: 'mm' },
          },
          {
            url: `${CORE}questionnaire-unitOption`,
            valueCoding: { system: UCUM, code: 'cm', display: 'cm' },
          },
        ],
      };
      expect(
        check(depth, { valueQuantity: { value: 2, unit: 'cm', system: UCUM, code: 'cm' } }),
      ).to.deep.equal([]);
      expect(
        check(depth, { valueQuantity: { value: 2, unit: 'in', system: UCUM, code: '[in_i]' } }),
      ).to.deep.equal(['Choose one of the units mm, cm.']);
    });
  });

  describe('linkIds that are names of Object.prototype', () => {
    it('places, enables, calculates and checks items named constructor, valueOf, __proto__ and toString', () => {
      const q = form(
        { linkId: 'constructor', type: 'boolean' },
        {
          linkId: 'valueOf',
          type: 'string',
          required: true,
          enableWhen: [{ question: 'constructor', operator: '=', answerBoolean: true }],
        },
        {
          linkId: '__proto__',
          type: 'integer',
          extension: [calc("%resource.item.where(linkId='toString').answer.value + 1")],
        },
        { linkId: 'toString', type: 'integer' },
      );
      const result = run(
        q,
        response(answered('constructor', { valueBoolean: true }), answered('toString', { valueInteger: 1 })),
        {
          complete: true,
          calculate: true,
          valueSets: new Map(),
        },
      );
      expect([...result.enablementByKey()].sort()).to.deep.equal([
        ['__proto__', true],
        ['constructor', true],
        ['toString', true],
        ['valueOf', true],
      ]);
      expect(result.problems.map((p) => [p.code, p.key])).to.deep.equal([['required', 'valueOf']]);
      expect(result.stored().item!.map((i) => [i.linkId, i.answer])).to.deep.equal([
        ['constructor', [{ valueBoolean: true }]],
        ['__proto__', [{ valueInteger: 2 }]],
        ['toString', [{ valueInteger: 1 }]],
      ]);
    });
  });
});
