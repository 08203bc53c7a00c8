/**
 * QuestionnaireResponse/$validate, pure (issue 4; spec §4.4): structure, required with enableWhen /
 * enableBehavior / enableWhenExpression, repeats, answer types and syntax, answerOption and
 * answerConstraint, answerValueSet through a resolver, and the constraint extensions. The
 * Questionnaires follow the FHIR R5 Questionnaire resource and the SDC IG.
 */
import { expect } from 'chai';
import type {
  CanonicalResolver,
  Json,
  OperationOutcome,
  Questionnaire,
  QuestionnaireItem,
  QuestionnaireResponse,
  QuestionnaireResponseAnswer,
  QuestionnaireResponseItem,
} from '../../src/sdc/types.js';
import {
  EXT_ENABLE_WHEN_EXPRESSION,
  EXT_MAX_DECIMAL_PLACES,
  EXT_MAX_VALUE,
  EXT_MIN_LENGTH,
  EXT_MIN_VALUE,
  EXT_REGEX,
  validateResponse,
} from '../../src/sdc/validate.js';

const URL = 'https://forms.example.org/Questionnaire/chest-ct';
const SNOMED = 'http://snomed.info/sct';
const UCUM = 'http://unitsofmeasure.org';

const questionnaire = (...item: QuestionnaireItem[]): Questionnaire => ({
  resourceType: 'Questionnaire',
  url: URL,
  version: '1',
  status: 'active',
  item,
});

const response = (item: QuestionnaireResponseItem[], status = 'completed'): QuestionnaireResponse => ({
  resourceType: 'QuestionnaireResponse',
  questionnaire: `${URL}|1`,
  status,
  item,
});

/** A response item with answers (`{ valueString: 'x' }`…). */
const answered = (linkId: string, ...answer: QuestionnaireResponseAnswer[]): QuestionnaireResponseItem => ({
  linkId,
  answer,
});
const group = (linkId: string, ...item: QuestionnaireResponseItem[]): QuestionnaireResponseItem => ({
  linkId,
  item,
});

const validate = (r: QuestionnaireResponse, q: Questionnaire, resolve?: CanonicalResolver) =>
  validateResponse(r, q, resolve ? { resolve } : {});

/** The issues as `severity code expression`, for exact comparison. */
const summary = (outcome: OperationOutcome): string[] =>
  outcome.issue.map((i) => `${i.severity} ${i.code} ${(i.expression ?? []).join(',')}`);

const expectValid = (outcome: OperationOutcome) => {
  expect(outcome.resourceType).to.equal('OperationOutcome');
  expect(outcome.issue, JSON.stringify(outcome.issue)).to.have.length(1);
  expect(outcome.issue[0]!.severity).to.equal('information');
  expect(outcome.issue[0]!.code).to.equal('informational');
};

const expectIssues = (outcome: OperationOutcome, expected: string[]) => {
  expect(summary(outcome), JSON.stringify(outcome.issue, null, 1)).to.deep.equal(expected);
  for (const issue of outcome.issue) expect(issue.diagnostics).to.be.a('string').and.not.equal('');
};

const errorsOf = (outcome: OperationOutcome) => outcome.issue.filter((i) => i.severity === 'error');

const ext = (url: string, value: Record<string, unknown>) => ({ url, ...value });

describe('validateResponse (QuestionnaireResponse/$validate)', () => {
  describe('a valid response', () => {
    const q = questionnaire(
      { linkId: 'name', text: 'Name', type: 'string', required: true },
      {
        linkId: 'history',
        text: 'History',
        type: 'group',
        item: [
          { linkId: 'smoker', text: 'Smoker?', type: 'boolean', required: true },
          {
            linkId: 'allergies',
            text: 'Allergies',
            type: 'group',
            repeats: true,
            item: [{ linkId: 'substance', text: 'Substance', type: 'string', required: true }],
          },
        ],
      },
      { linkId: 'note', text: 'Please review', type: 'display' },
    );

    it('answers one information issue naming the Questionnaire', async () => {
      const outcome = await validate(
        response([
          answered('name', { valueString: 'Ada' }),
          group(
            'history',
            answered('smoker', { valueBoolean: false }),
            group('allergies', answered('substance', { valueString: 'peanut' })),
            group('allergies', answered('substance', { valueString: 'latex' })),
          ),
        ]),
        q,
      );
      expectValid(outcome);
      expect(outcome.issue[0]!.diagnostics).to.equal(`the response is valid against Questionnaire ${URL}|1`);
    });

    it('does not modify the response or the Questionnaire', async () => {
      const r = response([answered('name', { valueString: 'Ada' })]);
      const withExpression = questionnaire({
        linkId: 'name',
        type: 'string',
        extension: [
          ext(EXT_ENABLE_WHEN_EXPRESSION, {
            valueExpression: { language: 'text/fhirpath', expression: '%resource.status.exists()' },
          }),
        ],
      });
      const before = JSON.stringify([r, withExpression]);
      await validate(r, withExpression);
      expect(JSON.stringify([r, withExpression])).to.equal(before);
    });
  });

  describe('item hierarchy', () => {
    const q = questionnaire(
      { linkId: 'a', text: 'A', type: 'string' },
      {
        linkId: 'g',
        text: 'Group',
        type: 'group',
        item: [
          { linkId: 'g1', text: 'G1', type: 'string' },
          { linkId: 'g2', text: 'G2', type: 'integer' },
        ],
      },
      {
        linkId: 'q',
        text: 'Has symptoms?',
        type: 'boolean',
        item: [{ linkId: 'q1', text: 'Which?', type: 'string' }],
      },
      {
        linkId: 'rg',
        text: 'Repeating group',
        type: 'group',
        repeats: true,
        item: [{ linkId: 'r1', type: 'string' }],
      },
      { linkId: 'd', text: 'Read this', type: 'display' },
    );

    it('reports an unknown linkId with its FHIRPath', async () => {
      const outcome = await validate(
        response([answered('a', { valueString: 'x' }), group('g', answered('zzz', { valueString: 'y' }))]),
        q,
      );
      expectIssues(outcome, ['error structure QuestionnaireResponse.item[1].item[0]']);
      expect(outcome.issue[0]!.diagnostics).to.contain('"zzz"').and.contain('unknown linkId');
    });

    it('reports an item nested at the wrong level', async () => {
      const outcome = await validate(response([answered('g1', { valueString: 'x' })]), q);
      expectIssues(outcome, ['error structure QuestionnaireResponse.item[0]']);
      expect(outcome.issue[0]!.diagnostics).to.contain("'G1'").and.contain("inside 'Group'");
    });

    it('takes children of a question under answer.item, not item.item', async () => {
      expectValid(
        await validate(
          response([
            {
              linkId: 'q',
              answer: [{ valueBoolean: true, item: [answered('q1', { valueString: 'cough' })] }],
            },
          ]),
          q,
        ),
      );
      const outcome = await validate(
        response([
          { linkId: 'q', answer: [{ valueBoolean: true }], item: [answered('q1', { valueString: 'x' })] },
        ]),
        q,
      );
      expectIssues(outcome, ['error structure QuestionnaireResponse.item[0].item']);
    });

    it('reports items out of Questionnaire order', async () => {
      const outcome = await validate(
        response([group('g', answered('g2', { valueInteger: 1 }), answered('g1', { valueString: 'x' }))]),
        q,
      );
      expectIssues(outcome, ['error structure QuestionnaireResponse.item[0].item[1]']);
      expect(outcome.issue[0]!.diagnostics).to.contain('out of order');
      expectIssues(
        await validate(
          response([group('g', answered('g1', { valueString: 'x' })), answered('a', { valueString: 'y' })]),
          q,
        ),
        ['error structure QuestionnaireResponse.item[1]'],
      );
    });

    it('accepts instances of a repeating group and refuses them for a non-repeating one', async () => {
      expectValid(
        await validate(
          response([
            group('rg', answered('r1', { valueString: '1' })),
            group('rg', answered('r1', { valueString: '2' })),
          ]),
          q,
        ),
      );
      expectIssues(
        await validate(
          response([
            group('g', answered('g1', { valueString: '1' })),
            group('g', answered('g1', { valueString: '2' })),
          ]),
          q,
        ),
        ['error structure QuestionnaireResponse.item[1]'],
      );
    });

    it('refuses a question repeated as several items (its answers belong in one item)', async () => {
      expectIssues(
        await validate(
          response([answered('a', { valueString: '1' }), answered('a', { valueString: '2' })]),
          q,
        ),
        ['error structure QuestionnaireResponse.item[1]'],
      );
    });

    it('refuses answers on group and display items', async () => {
      expectIssues(await validate(response([{ linkId: 'g', answer: [{ valueString: 'x' }] }]), q), [
        'error structure QuestionnaireResponse.item[0].answer[0]',
      ]);
      expectIssues(await validate(response([answered('d', { valueString: 'x' })]), q), [
        'error structure QuestionnaireResponse.item[0].answer[0]',
      ]);
    });

    it('never throws on malformed items: each problem is an issue', async () => {
      const bad = {
        resourceType: 'QuestionnaireResponse',
        status: 'completed',
        item: [{ text: 'no linkId' }, 'junk', { linkId: 'a', answer: ['x'] }, { linkId: 'g', item: 'x' }],
      } as unknown as QuestionnaireResponse;
      expectIssues(await validate(bad, q), [
        'error structure QuestionnaireResponse.item[0]',
        'error structure QuestionnaireResponse.item[1]',
        'error structure QuestionnaireResponse.item[3].item',
        'error structure QuestionnaireResponse.item[2].answer[0]',
      ]);
      const noItems = {
        resourceType: 'QuestionnaireResponse',
        status: 'bogus',
        item: 5,
      } as unknown as QuestionnaireResponse;
      expectIssues(await validate(noItems, q), [
        'error value QuestionnaireResponse.status',
        'error structure QuestionnaireResponse.item',
      ]);
    });
  });

  describe('required', () => {
    const q = questionnaire(
      { linkId: 'name', text: 'Patient name', type: 'string', required: true },
      {
        linkId: 'g',
        text: 'Findings',
        type: 'group',
        item: [
          { linkId: 'size', text: 'Size', type: 'decimal', required: true },
          { linkId: 'comment', text: 'Comment', type: 'text' },
        ],
      },
      {
        linkId: 'lesions',
        text: 'Lesions',
        type: 'group',
        repeats: true,
        item: [{ linkId: 'location', text: 'Location', type: 'string', required: true }],
      },
    );

    it('reports a missing required question at its parent, naming text and linkId', async () => {
      const outcome = await validate(response([group('g', answered('size', { valueDecimal: 1.5 }))]), q);
      expectIssues(outcome, ['error required QuestionnaireResponse']);
      expect(outcome.issue[0]!.diagnostics).to.contain("'Patient name'").and.contain('"name"');
    });

    it('reports a required question present without answers at the item', async () => {
      expectIssues(
        await validate(
          response([{ linkId: 'name', answer: [] }, group('g', answered('size', { valueDecimal: 1 }))]),
          q,
        ),
        ['error required QuestionnaireResponse.item[0]'],
      );
    });

    it('reports a missing required question inside a present group', async () => {
      expectIssues(
        await validate(
          response([
            answered('name', { valueString: 'x' }),
            group('g', answered('comment', { valueString: 'c' })),
          ]),
          q,
        ),
        ['error required QuestionnaireResponse.item[1]'],
      );
    });

    it('checks each instance of a repeating group', async () => {
      expectIssues(
        await validate(
          response([
            answered('name', { valueString: 'x' }),
            group('g', answered('size', { valueDecimal: 2 })),
            group('lesions', answered('location', { valueString: 'liver' })),
            group('lesions'),
            { linkId: 'lesions', item: [{ linkId: 'location' }] },
          ]),
          q,
        ),
        [
          'error required QuestionnaireResponse.item[3]',
          'error required QuestionnaireResponse.item[4].item[0]',
        ],
      );
    });

    it('requires a required group to hold an answer', async () => {
      const qg = questionnaire({
        linkId: 'g',
        text: 'Vitals',
        type: 'group',
        required: true,
        item: [{ linkId: 'hr', type: 'integer' }],
      });
      expectIssues(await validate(response([]), qg), ['error required QuestionnaireResponse']);
      expectIssues(await validate(response([group('g', { linkId: 'hr' })]), qg), [
        'error required QuestionnaireResponse.item[0]',
      ]);
      expectValid(await validate(response([group('g', answered('hr', { valueInteger: 60 }))]), qg));
    });

    it('requires required children of a question within each of its answers', async () => {
      const qn = questionnaire({
        linkId: 'pain',
        type: 'boolean',
        repeats: true,
        item: [{ linkId: 'where', text: 'Where?', type: 'string', required: true }],
      });
      expectIssues(
        await validate(
          response([
            {
              linkId: 'pain',
              answer: [
                { valueBoolean: true, item: [answered('where', { valueString: 'back' })] },
                { valueBoolean: false },
              ],
            },
          ]),
          qn,
        ),
        ['error required QuestionnaireResponse.item[0].answer[1]'],
      );
    });
  });

  describe('enableWhen', () => {
    /** A trigger question of `type` and a required question enabled by `condition` on it. */
    const conditional = (type: string, condition: Record<string, unknown>, repeats = false): Questionnaire =>
      questionnaire(
        { linkId: 'trigger', text: 'Trigger', type, repeats },
        {
          linkId: 'dependent',
          text: 'Dependent',
          type: 'string',
          required: true,
          enableWhen: [{ question: 'trigger', ...condition }],
        },
      );
    /** Is the dependent question enabled when the trigger has `answers`? (required ⇒ error when enabled) */
    const enabled = async (q: Questionnaire, ...answers: QuestionnaireResponseAnswer[]): Promise<boolean> => {
      const outcome = await validate(response(answers.length ? [answered('trigger', ...answers)] : []), q);
      const required = outcome.issue.filter((i) => i.code === 'required');
      const others = outcome.issue.filter((i) => i.code !== 'required' && i.severity !== 'information');
      expect(others, JSON.stringify(others)).to.deep.equal([]);
      return required.length === 1;
    };

    const cases: [string, string, Record<string, unknown>, QuestionnaireResponseAnswer, boolean][] = [
      ['boolean', '=', { answerBoolean: true }, { valueBoolean: true }, true],
      ['boolean', '=', { answerBoolean: true }, { valueBoolean: false }, false],
      ['boolean', '!=', { answerBoolean: true }, { valueBoolean: false }, true],
      ['boolean', '!=', { answerBoolean: true }, { valueBoolean: true }, false],
      ['integer', '>', { answerInteger: 5 }, { valueInteger: 6 }, true],
      ['integer', '>', { answerInteger: 5 }, { valueInteger: 5 }, false],
      ['integer', '<', { answerInteger: 5 }, { valueInteger: 4 }, true],
      ['integer', '<', { answerInteger: 5 }, { valueInteger: 5 }, false],
      ['integer', '>=', { answerInteger: 5 }, { valueInteger: 5 }, true],
      ['integer', '>=', { answerInteger: 5 }, { valueInteger: 4 }, false],
      ['integer', '<=', { answerInteger: 5 }, { valueInteger: 5 }, true],
      ['integer', '<=', { answerInteger: 5 }, { valueInteger: 6 }, false],
      ['integer', '=', { answerInteger: 5 }, { valueInteger: 5 }, true],
      ['integer', '!=', { answerInteger: 5 }, { valueInteger: 5 }, false],
      ['decimal', '>', { answerDecimal: 1.5 }, { valueDecimal: 1.51 }, true],
      ['decimal', '<=', { answerDecimal: 1.5 }, { valueDecimal: 1.51 }, false],
      ['decimal', '=', { answerDecimal: 2 }, { valueDecimal: 2.0 }, true],
      ['date', '>', { answerDate: '2024-01-01' }, { valueDate: '2024-06-30' }, true],
      ['date', '<', { answerDate: '2024-01-01' }, { valueDate: '2024-06-30' }, false],
      ['date', '=', { answerDate: '2024-01-01' }, { valueDate: '2024-01-01' }, true],
      [
        'dateTime',
        '>=',
        { answerDateTime: '2024-01-01T10:00:00Z' },
        { valueDateTime: '2024-01-01T11:00:00+01:00' },
        true,
      ],
      [
        'dateTime',
        '>',
        { answerDateTime: '2024-01-01T10:00:00Z' },
        { valueDateTime: '2024-01-01T11:00:00+01:00' },
        false,
      ],
      ['time', '<', { answerTime: '12:00:00' }, { valueTime: '09:30:00' }, true],
      ['time', '>', { answerTime: '12:00:00' }, { valueTime: '09:30:00' }, false],
      ['string', '=', { answerString: 'yes' }, { valueString: 'yes' }, true],
      ['string', '!=', { answerString: 'yes' }, { valueString: 'no' }, true],
      ['string', '>', { answerString: 'b' }, { valueString: 'c' }, true],
      [
        'coding',
        '=',
        { answerCoding: { system: SNOMED, code: '1' } },
        { valueCoding: { system: SNOMED, code: '1', display: 'One' } },
        true,
      ],
      [
        'coding',
        '=',
        { answerCoding: { system: SNOMED, code: '1' } },
        { valueCoding: { system: SNOMED, code: '2' } },
        false,
      ],
      [
        'coding',
        '=',
        { answerCoding: { system: SNOMED, code: '1' } },
        { valueCoding: { system: 'urn:other', code: '1' } },
        false,
      ],
      [
        'coding',
        '!=',
        { answerCoding: { system: SNOMED, code: '1' } },
        { valueCoding: { system: SNOMED, code: '2' } },
        true,
      ],
      [
        'quantity',
        '>',
        { answerQuantity: { value: 10, system: UCUM, code: 'mm' } },
        { valueQuantity: { value: 12, system: UCUM, code: 'mm' } },
        true,
      ],
      [
        'quantity',
        '>',
        { answerQuantity: { value: 10, system: UCUM, code: 'mm' } },
        { valueQuantity: { value: 12, system: UCUM, code: 'cm' } },
        false,
      ],
      [
        'quantity',
        '<=',
        { answerQuantity: { value: 10, system: UCUM, code: 'mm' } },
        { valueQuantity: { value: 10, system: UCUM, code: 'mm' } },
        true,
      ],
      [
        'reference',
        '=',
        { answerReference: { reference: 'Patient/1' } },
        { valueReference: { reference: 'Patient/1' } },
        true,
      ],
      [
        'reference',
        '!=',
        { answerReference: { reference: 'Patient/1' } },
        { valueReference: { reference: 'Patient/2' } },
        true,
      ],
    ];
    for (const [type, operator, answer, given, expected] of cases)
      it(`${type} ${operator} ${JSON.stringify(Object.values(answer)[0])} with ${JSON.stringify(Object.values(given)[0])} → ${expected ? 'enabled' : 'disabled'}`, async () => {
        expect(await enabled(conditional(type, { operator, ...answer }), given)).to.equal(expected);
      });

    it('exists true / false', async () => {
      const exists = conditional('string', { operator: 'exists', answerBoolean: true });
      expect(await enabled(exists, { valueString: 'x' })).to.equal(true);
      expect(await enabled(exists)).to.equal(false);
      const absent = conditional('string', { operator: 'exists', answerBoolean: false });
      expect(await enabled(absent)).to.equal(true);
      expect(await enabled(absent, { valueString: 'x' })).to.equal(false);
    });

    it('!= holds for an unanswered question; the others do not', async () => {
      expect(await enabled(conditional('integer', { operator: '!=', answerInteger: 1 }))).to.equal(true);
      for (const operator of ['=', '>', '<', '>=', '<='])
        expect(await enabled(conditional('integer', { operator, answerInteger: 1 }))).to.equal(false);
    });

    it('holds when any answer of a repeating question meets it', async () => {
      const q = conditional('integer', { operator: '>', answerInteger: 5 }, true);
      expect(await enabled(q, { valueInteger: 1 }, { valueInteger: 9 })).to.equal(true);
      expect(await enabled(q, { valueInteger: 1 }, { valueInteger: 2 })).to.equal(false);
    });

    describe('enableBehavior', () => {
      const both = (enableBehavior: 'all' | 'any') =>
        questionnaire(
          { linkId: 'a', type: 'boolean' },
          { linkId: 'b', type: 'boolean' },
          {
            linkId: 'c',
            type: 'string',
            required: true,
            enableBehavior,
            enableWhen: [
              { question: 'a', operator: '=', answerBoolean: true },
              { question: 'b', operator: '=', answerBoolean: true },
            ],
          },
        );
      const requiredFor = async (q: Questionnaire, a: boolean, b: boolean) =>
        (
          await validate(
            response([answered('a', { valueBoolean: a }), answered('b', { valueBoolean: b })]),
            q,
          )
        ).issue.some((i) => i.code === 'required');

      it('all: every condition must hold', async () => {
        expect(await requiredFor(both('all'), true, true)).to.equal(true);
        expect(await requiredFor(both('all'), true, false)).to.equal(false);
      });
      it('any: one condition suffices', async () => {
        expect(await requiredFor(both('any'), false, true)).to.equal(true);
        expect(await requiredFor(both('any'), false, false)).to.equal(false);
      });
    });

    it('reports answers on a disabled question', async () => {
      const q = conditional('boolean', { operator: '=', answerBoolean: true });
      expectIssues(
        await validate(
          response([
            answered('trigger', { valueBoolean: false }),
            answered('dependent', { valueString: 'x' }),
          ]),
          q,
        ),
        ['error business-rule QuestionnaireResponse.item[1]'],
      );
    });

    it('treats a disabled question as unanswered, and disables the children of a disabled group', async () => {
      const q = questionnaire(
        { linkId: 'a', type: 'boolean' },
        { linkId: 'b', type: 'boolean', enableWhen: [{ question: 'a', operator: '=', answerBoolean: true }] },
        {
          linkId: 'g',
          type: 'group',
          enableWhen: [{ question: 'b', operator: 'exists', answerBoolean: true }],
          item: [{ linkId: 'c', type: 'string', required: true }],
        },
      );
      // b is answered but disabled: g is disabled, so c is not required — but b's answer is reported.
      expectIssues(
        await validate(
          response([answered('a', { valueBoolean: false }), answered('b', { valueBoolean: true })]),
          q,
        ),
        ['error business-rule QuestionnaireResponse.item[1]'],
      );
      expectIssues(
        await validate(
          response([
            answered('a', { valueBoolean: true }),
            answered('b', { valueBoolean: true }),
            group('g'),
          ]),
          q,
        ),
        ['error required QuestionnaireResponse.item[2]'],
      );
    });

    it('uses the instance of the question in the same repeating-group instance', async () => {
      const q = questionnaire({
        linkId: 'lesion',
        type: 'group',
        repeats: true,
        item: [
          { linkId: 'malignant', type: 'boolean' },
          {
            linkId: 'stage',
            type: 'string',
            required: true,
            enableWhen: [{ question: 'malignant', operator: '=', answerBoolean: true }],
          },
        ],
      });
      expectIssues(
        await validate(
          response([
            group('lesion', answered('malignant', { valueBoolean: false })),
            group('lesion', answered('malignant', { valueBoolean: true })),
          ]),
          q,
        ),
        ['error required QuestionnaireResponse.item[1]'],
      );
    });
  });

  describe('enableWhenExpression (SDC)', () => {
    const q = (expression: string) =>
      questionnaire(
        { linkId: 'age', type: 'integer' },
        {
          linkId: 'g',
          type: 'group',
          item: [
            {
              linkId: 'pregnant',
              text: 'Pregnant?',
              type: 'boolean',
              required: true,
              extension: [
                ext(EXT_ENABLE_WHEN_EXPRESSION, {
                  valueExpression: { language: 'text/fhirpath', expression },
                }),
              ],
            },
          ],
        },
      );
    const adult = "%resource.item.where(linkId='age').answer.value >= 18";

    it('enables the item when the FHIRPath is true against %resource', async () => {
      expectIssues(await validate(response([answered('age', { valueInteger: 30 }), group('g')]), q(adult)), [
        'error required QuestionnaireResponse.item[1]',
      ]);
      expectValid(await validate(response([answered('age', { valueInteger: 12 }), group('g')]), q(adult)));
    });

    it('is evaluated on its own response item (%context), present or not (SDC "FHIRPath supplements")', async () => {
      const own = "%context.linkId = 'pregnant' and %resource.item.where(linkId = 'age').answer.value > 1";
      // Missing from the response: %context is an empty item of its own linkId.
      expectIssues(await validate(response([answered('age', { valueInteger: 30 }), group('g')]), q(own)), [
        'error required QuestionnaireResponse.item[1]',
      ]);
      expectValid(
        await validate(
          response([
            answered('age', { valueInteger: 30 }),
            group('g', answered('pregnant', { valueBoolean: false })),
          ]),
          q(own),
        ),
      );
    });

    it('types %context as a response item, so its answers resolve value[x] (answer.value)', async () => {
      const smoking = questionnaire({
        linkId: 'habits',
        type: 'group',
        item: [
          { linkId: 'smoker', type: 'boolean' },
          {
            linkId: 'packs',
            type: 'integer',
            required: true,
            extension: [
              ext(EXT_ENABLE_WHEN_EXPRESSION, {
                valueExpression: {
                  language: 'text/fhirpath',
                  expression: '%context.answer.value.empty() or %context.answer.value >= 1',
                },
              }),
            ],
          },
        ],
      });
      const habits = (...packs: QuestionnaireResponseAnswer[]) =>
        response([
          group(
            'habits',
            answered('smoker', { valueBoolean: true }),
            ...(packs.length ? [answered('packs', ...packs)] : []),
          ),
        ]);
      expectIssues(await validate(habits(), smoking), ['error required QuestionnaireResponse.item[0]']);
      expectValid(await validate(habits({ valueInteger: 5 }), smoking));
      expectIssues(await validate(habits({ valueInteger: 0 }), smoking), [
        'error business-rule QuestionnaireResponse.item[0].item[1]',
      ]);
    });

    it('reports an expression that fails as a warning and treats the item as enabled', async () => {
      const outcome = await validate(
        response([answered('age', { valueInteger: 30 }), group('g')]),
        q('%nope = 1'),
      );
      expectIssues(outcome, [
        'warning processing QuestionnaireResponse.item[1]',
        'error required QuestionnaireResponse.item[1]',
      ]);
    });
  });

  describe('answer types', () => {
    const typed: [string, string, unknown, [string, unknown][]][] = [
      ['boolean', 'valueBoolean', true, [['valueBoolean', 'true']]],
      ['decimal', 'valueDecimal', 3.14, [['valueDecimal', '3.14']]],
      [
        'integer',
        'valueInteger',
        42,
        [
          ['valueInteger', 4.2],
          ['valueInteger', 3_000_000_000],
        ],
      ],
      [
        'date',
        'valueDate',
        '2024-02-29',
        [
          ['valueDate', '2023-02-29'],
          ['valueDate', '2024-13-01'],
          ['valueDate', '01.02.2024'],
          ['valueDate', '2024-01-01T10:00:00Z'],
        ],
      ],
      ['date', 'valueDate', '2024-02', []],
      [
        'dateTime',
        'valueDateTime',
        '2024-02-29T10:15:00+01:00',
        [
          ['valueDateTime', '2024-02-29T10:15:00'],
          ['valueDateTime', '2024-02-29T25:15:00Z'],
        ],
      ],
      ['dateTime', 'valueDateTime', '2024', []],
      [
        'time',
        'valueTime',
        '23:59:59',
        [
          ['valueTime', '24:00:00'],
          ['valueTime', '10:15'],
        ],
      ],
      [
        'string',
        'valueString',
        'left lung',
        [
          ['valueString', ''],
          ['valueString', 7],
        ],
      ],
      ['text', 'valueString', 'line 1\nline 2', [['valueString', '   ']]],
      ['url', 'valueUri', 'https://example.org/a', [['valueUri', 'not a url']]],
      [
        'coding',
        'valueCoding',
        { system: SNOMED, code: '123' },
        [
          ['valueCoding', {}],
          ['valueCoding', { code: 5 }],
          ['valueCoding', 'x'],
        ],
      ],
      [
        'quantity',
        'valueQuantity',
        { value: 5, unit: 'mm', system: UCUM, code: 'mm' },
        [['valueQuantity', { unit: 'mm' }]],
      ],
      [
        'reference',
        'valueReference',
        { reference: 'Patient/1' },
        [
          ['valueReference', {}],
          ['valueReference', { reference: '' }],
        ],
      ],
      [
        'attachment',
        'valueAttachment',
        { contentType: 'image/png', data: 'aGVsbG8=' },
        [
          ['valueAttachment', { contentType: 'image/png' }],
          ['valueAttachment', { data: '***' }],
        ],
      ],
    ];
    const wrongKey: Record<string, string> = { valueBoolean: 'valueString', valueString: 'valueInteger' };

    for (const [type, key, good, bad] of typed) {
      const q = questionnaire({ linkId: 'x', text: 'X', type });
      it(`${type}: accepts ${key} ${JSON.stringify(good)}`, async () => {
        expectValid(await validate(response([answered('x', { [key]: good })]), q));
      });
      for (const [badKey, badValue] of bad)
        it(`${type}: refuses ${badKey} ${JSON.stringify(badValue)}`, async () => {
          const outcome = await validate(response([answered('x', { [badKey]: badValue })]), q);
          expectIssues(outcome, ['error value QuestionnaireResponse.item[0].answer[0]']);
          expect(outcome.issue[0]!.diagnostics).to.contain("'X'").and.contain('"x"');
        });
      it(`${type}: refuses another value[x] than ${key}`, async () => {
        const other = wrongKey[key] ?? 'valueBoolean';
        const outcome = await validate(
          response([answered('x', { [other]: other === 'valueBoolean' ? true : 'x' })]),
          q,
        );
        expectIssues(outcome, ['error value QuestionnaireResponse.item[0].answer[0]']);
        expect(outcome.issue[0]!.diagnostics).to.contain(key);
      });
    }

    it('refuses an answer without a value or with two', async () => {
      const q = questionnaire({ linkId: 'x', type: 'string' });
      expectIssues(await validate(response([answered('x', {})]), q), [
        'error required QuestionnaireResponse.item[0].answer[0]',
      ]);
      expectIssues(await validate(response([answered('x', { valueString: 'a', valueInteger: 1 })]), q), [
        'error structure QuestionnaireResponse.item[0].answer[0]',
      ]);
    });
  });

  describe('repeats', () => {
    it('refuses a second answer on a non-repeating question and accepts it on a repeating one', async () => {
      const single = questionnaire({ linkId: 'x', text: 'X', type: 'string' });
      expectIssues(
        await validate(response([answered('x', { valueString: 'a' }, { valueString: 'b' })]), single),
        ['error structure QuestionnaireResponse.item[0].answer[1]'],
      );
      const multiple = questionnaire({ linkId: 'x', type: 'string', repeats: true });
      expectValid(
        await validate(response([answered('x', { valueString: 'a' }, { valueString: 'b' })]), multiple),
      );
    });
  });

  describe('answerOption and answerConstraint', () => {
    const options = [
      { valueCoding: { system: SNOMED, code: '1', display: 'Left' } },
      { valueCoding: { system: SNOMED, code: '2', display: 'Right' } },
    ];
    const q = (answerConstraint?: 'optionsOnly' | 'optionsOrType' | 'optionsOrString') =>
      questionnaire({
        linkId: 'side',
        text: 'Side',
        type: 'coding',
        answerOption: options,
        ...(answerConstraint ? { answerConstraint } : {}),
      });
    const listed = { valueCoding: { system: SNOMED, code: '2', display: 'right side' } };
    const unlisted = { valueCoding: { system: SNOMED, code: '3' } };
    const text = { valueString: 'both' };
    const path = 'QuestionnaireResponse.item[0].answer[0]';

    it('optionsOnly (the default): only the options', async () => {
      for (const constraint of [undefined, 'optionsOnly'] as const) {
        expectValid(await validate(response([answered('side', listed)]), q(constraint)));
        expectIssues(await validate(response([answered('side', unlisted)]), q(constraint)), [
          `error code-invalid ${path}`,
        ]);
        expectIssues(await validate(response([answered('side', text)]), q(constraint)), [
          `error value ${path}`,
        ]);
      }
    });

    it('optionsOrType: any value of the item type, no free text', async () => {
      expectValid(await validate(response([answered('side', listed)]), q('optionsOrType')));
      expectValid(await validate(response([answered('side', unlisted)]), q('optionsOrType')));
      expectIssues(await validate(response([answered('side', text)]), q('optionsOrType')), [
        `error value ${path}`,
      ]);
    });

    it('optionsOrString: the options or free text', async () => {
      expectValid(await validate(response([answered('side', listed)]), q('optionsOrString')));
      expectValid(await validate(response([answered('side', text)]), q('optionsOrString')));
      expectIssues(await validate(response([answered('side', unlisted)]), q('optionsOrString')), [
        `error code-invalid ${path}`,
      ]);
    });

    it('compares integer, date, string and reference options by value', async () => {
      const cases: [string, string, unknown[], unknown, unknown][] = [
        ['integer', 'valueInteger', [1, 2, 3], 2, 4],
        ['date', 'valueDate', ['2024-01-01'], '2024-01-01', '2024-01-02'],
        ['time', 'valueTime', ['08:00:00'], '08:00:00', '09:00:00'],
        ['string', 'valueString', ['a', 'b'], 'b', 'c'],
        [
          'reference',
          'valueReference',
          [{ reference: 'Practitioner/1' }],
          { reference: 'Practitioner/1' },
          { reference: 'Practitioner/2' },
        ],
      ];
      for (const [type, key, values, good, bad] of cases) {
        const qo = questionnaire({ linkId: 'o', type, answerOption: values.map((v) => ({ [key]: v })) });
        expectValid(await validate(response([answered('o', { [key]: good })]), qo));
        expectIssues(await validate(response([answered('o', { [key]: bad })]), qo), [
          'error code-invalid QuestionnaireResponse.item[0].answer[0]',
        ]);
      }
    });
  });

  describe('answerValueSet', () => {
    const VS = 'https://forms.example.org/ValueSet/laterality';
    const composed: Json = {
      resourceType: 'ValueSet',
      url: VS,
      status: 'active',
      compose: { include: [{ system: SNOMED, concept: [{ code: '7771000' }, { code: '24028007' }] }] },
    };
    const expanded: Json = {
      resourceType: 'ValueSet',
      url: VS,
      status: 'active',
      expansion: {
        timestamp: '2024-01-01T00:00:00Z',
        contains: [
          { system: SNOMED, code: 'parent', abstract: true, contains: [{ system: SNOMED, code: '7771000' }] },
        ],
      },
    };
    const q = questionnaire({ linkId: 'side', text: 'Side', type: 'coding', answerValueSet: VS });
    const answer = (code: string) => response([answered('side', { valueCoding: { system: SNOMED, code } })]);
    const resolver =
      (valueSet: Json | undefined): CanonicalResolver =>
      async (type, canonical) =>
        type === 'ValueSet' && canonical === VS ? valueSet : undefined;

    it('accepts codes of the compose and refuses others', async () => {
      expectValid(await validate(answer('24028007'), q, resolver(composed)));
      expectIssues(await validate(answer('999'), q, resolver(composed)), [
        'error code-invalid QuestionnaireResponse.item[0].answer[0]',
      ]);
    });

    it('uses expansion.contains, nested', async () => {
      expectValid(await validate(answer('7771000'), q, resolver(expanded)));
      expectIssues(await validate(answer('24028007'), q, resolver(expanded)), [
        'error code-invalid QuestionnaireResponse.item[0].answer[0]',
      ]);
    });

    it('resolves a contained ValueSet (#id)', async () => {
      const contained: Questionnaire = {
        ...questionnaire({ linkId: 'side', type: 'coding', answerValueSet: '#lat' }),
        contained: [{ ...composed, id: 'lat' }],
      };
      expectValid(await validate(answer('7771000'), contained));
      expectIssues(await validate(answer('1'), contained), [
        'error code-invalid QuestionnaireResponse.item[0].answer[0]',
      ]);
    });

    it('warns (does not fail) when the ValueSet cannot be resolved', async () => {
      for (const resolve of [
        resolver(undefined),
        undefined,
        (async () => {
          throw new Error('terminology down');
        }) as CanonicalResolver,
      ])
        expectIssues(await validate(answer('999'), q, resolve), [
          'warning not-found QuestionnaireResponse.item[0].answer[0]',
        ]);
    });

    it('warns when the ValueSet includes codes it does not enumerate', async () => {
      const open: Json = { resourceType: 'ValueSet', url: VS, compose: { include: [{ system: SNOMED }] } };
      expectIssues(await validate(answer('999'), q, resolver(open)), [
        'warning code-invalid QuestionnaireResponse.item[0].answer[0]',
      ]);
    });
  });

  describe('constraints', () => {
    const one = (item: Omit<QuestionnaireItem, 'linkId'>) =>
      questionnaire({ linkId: 'x', text: 'X', ...item } as QuestionnaireItem);
    const check = async (q: Questionnaire, answer: QuestionnaireResponseAnswer) =>
      summary(await validate(response([answered('x', answer)]), q));
    const path = 'QuestionnaireResponse.item[0].answer[0]';

    it('maxLength', async () => {
      const q = one({ type: 'string', maxLength: 3 });
      expect(await check(q, { valueString: 'abc' })).to.deep.equal(['information informational ']);
      expect(await check(q, { valueString: 'abcd' })).to.deep.equal([`error too-long ${path}`]);
    });

    it('minLength', async () => {
      const q = one({ type: 'text', extension: [ext(EXT_MIN_LENGTH, { valueInteger: 3 })] });
      expect(await check(q, { valueString: 'abc' })).to.deep.equal(['information informational ']);
      expect(await check(q, { valueString: 'ab' })).to.deep.equal([`error value ${path}`]);
    });

    it('regex matches the whole answer', async () => {
      const q = one({ type: 'string', extension: [ext(EXT_REGEX, { valueString: '[A-Z]{2}\\d{3}' })] });
      expect(await check(q, { valueString: 'AB123' })).to.deep.equal(['information informational ']);
      expect(await check(q, { valueString: 'xAB123' })).to.deep.equal([`error value ${path}`]);
      expect(await check(q, { valueString: 'AB1234' })).to.deep.equal([`error value ${path}`]);
      const broken = one({ type: 'string', extension: [ext(EXT_REGEX, { valueString: '([a-z' })] });
      expect(await check(broken, { valueString: 'a' })).to.deep.equal([`warning processing ${path}`]);
    });

    const bounds: [string, string, unknown, unknown, unknown, unknown, unknown][] = [
      // type, key, min, max, below, inside, above
      ['integer', 'Integer', 1, 10, 0, 10, 11],
      ['decimal', 'Decimal', 0.5, 2.5, 0.49, 0.5, 2.51],
      ['date', 'Date', '2024-01-01', '2024-12-31', '2023-12-31', '2024-06-01', '2025-01-01'],
      [
        'dateTime',
        'DateTime',
        '2024-01-01T00:00:00Z',
        '2024-01-02T00:00:00Z',
        '2023-12-31T23:59:59Z',
        '2024-01-01T12:00:00+02:00',
        '2024-01-02T00:00:01Z',
      ],
      [
        'quantity',
        'Quantity',
        { value: 1, system: UCUM, code: 'mm' },
        { value: 50, system: UCUM, code: 'mm' },
        { value: 0.5, system: UCUM, code: 'mm' },
        { value: 50, system: UCUM, code: 'mm' },
        { value: 51, system: UCUM, code: 'mm' },
      ],
    ];
    for (const [type, key, min, max, below, inside, above] of bounds)
      it(`minValue/maxValue on ${type}`, async () => {
        const q = one({
          type,
          extension: [
            ext(EXT_MIN_VALUE, { [`value${key}`]: min }),
            ext(EXT_MAX_VALUE, { [`value${key}`]: max }),
          ],
        });
        expect(await check(q, { [`value${key}`]: inside })).to.deep.equal(['information informational ']);
        expect(await check(q, { [`value${key}`]: below })).to.deep.equal([`error value ${path}`]);
        expect(await check(q, { [`value${key}`]: above })).to.deep.equal([`error value ${path}`]);
      });

    it('maxDecimalPlaces on decimal and quantity', async () => {
      const q = one({ type: 'decimal', extension: [ext(EXT_MAX_DECIMAL_PLACES, { valueInteger: 2 })] });
      expect(await check(q, { valueDecimal: 1.25 })).to.deep.equal(['information informational ']);
      expect(await check(q, { valueDecimal: 1.255 })).to.deep.equal([`error value ${path}`]);
      expect(await check(q, { valueDecimal: 1e-7 })).to.deep.equal([`error value ${path}`]);
      const qq = one({ type: 'quantity', extension: [ext(EXT_MAX_DECIMAL_PLACES, { valueInteger: 0 })] });
      expect(await check(qq, { valueQuantity: { value: 3, unit: 'mm' } })).to.deep.equal([
        'information informational ',
      ]);
      expect(await check(qq, { valueQuantity: { value: 3.5, unit: 'mm' } })).to.deep.equal([
        `error value ${path}`,
      ]);
    });
  });

  describe('severity by status', () => {
    const q = questionnaire(
      { linkId: 'name', text: 'Name', type: 'string', required: true },
      { linkId: 'age', text: 'Age', type: 'integer', maxLength: 2 },
    );
    const broken = (status: string) => response([answered('age', { valueString: 'old' })], status);

    it('reports every problem of an in-progress (or stopped) response as a warning', async () => {
      for (const status of ['in-progress', 'stopped']) {
        const outcome = await validate(broken(status), q);
        expectIssues(outcome, [
          'warning required QuestionnaireResponse',
          'warning value QuestionnaireResponse.item[0].answer[0]',
        ]);
        expect(errorsOf(outcome)).to.deep.equal([]);
      }
    });

    it('reports them as errors on a completed or amended response', async () => {
      for (const status of ['completed', 'amended'])
        expectIssues(await validate(broken(status), q), [
          'error required QuestionnaireResponse',
          'error value QuestionnaireResponse.item[0].answer[0]',
        ]);
    });

    it('warns when the response names another Questionnaire', async () => {
      const r = {
        ...response([answered('name', { valueString: 'x' })]),
        questionnaire: 'https://other.example.org/Q',
      };
      expectIssues(await validate(r, q), ['warning business-rule QuestionnaireResponse.questionnaire']);
    });
  });

  describe("the Questionnaire's own rules (issue 35)", () => {
    it('reports duplicate linkIds (que-2) as an error even for an in-progress response: it is not valid against a broken form', async () => {
      const form: Questionnaire = {
        resourceType: 'Questionnaire',
        url: URL,
        status: 'active',
        item: [
          { linkId: 'size', type: 'decimal' },
          { linkId: 'g', type: 'group', item: [{ linkId: 'size', type: 'decimal' }] },
        ],
      };
      const outcome = await validate(response([answered('size', { valueDecimal: 3 })], 'in-progress'), form);
      expectIssues(outcome, ['error invariant Questionnaire.item[1].item[0].linkId']);
      expect(outcome.issue[0]!.diagnostics).to.include('que-2').and.include('linkId "size"');
    });
  });
});
