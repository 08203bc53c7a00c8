/**
 * Answer constraints of the form engine (src/sdc/engine/checks.ts, values.ts, units.ts; issue 35),
 * through $validate (validateResponse), which runs the same checks as the editor:
 * sdc-questionnaire-minQuantity/maxQuantity across UCUM units, questionnaire-unitOption and
 * unitValueSet, minOccurs/maxOccurs, optionExclusive, attachment mimeType/maxSize, the abstract
 * `question` type, reference and URI syntax.
 */
import { expect } from 'chai';
import type {
  OperationOutcome,
  Questionnaire,
  QuestionnaireItem,
  QuestionnaireResponseItem,
} from '../../../src/sdc/types.js';
import { validateResponse } from '../../../src/sdc/validate.js';

const CORE = 'http://hl7.org/fhir/StructureDefinition/';
const SDC = 'http://hl7.org/fhir/uv/sdc/StructureDefinition/';
const UCUM = 'http://unitsofmeasure.org';
const URL = 'https://forms.example.org/Questionnaire/constraints';

const form = (...item: QuestionnaireItem[]): Questionnaire => ({
  resourceType: 'Questionnaire',
  url: URL,
  status: 'active',
  contained: [
    {
      resourceType: 'ValueSet',
      id: 'lengths',
      status: 'active',
      compose: { include: [{ system: UCUM, concept: [{ code: 'mm' }, { code: 'cm' }] }] },
    },
  ],
  item,
});
const run = (q: Questionnaire, ...item: QuestionnaireResponseItem[]) =>
  validateResponse(
    { resourceType: 'QuestionnaireResponse', questionnaire: URL, status: 'completed', item },
    q,
  );
const errors = (outcome: OperationOutcome) =>
  outcome.issue
    .filter((i) => i.severity === 'error')
    .map((i) => `${i.code} ${(i.expression ?? []).join(',')}`);
const expectValid = (outcome: OperationOutcome) =>
  expect(
    outcome.issue.map((i) => i.severity),
    JSON.stringify(outcome.issue),
  ).to.deep.equal(['information']);
const expectError = (outcome: OperationOutcome, expected: string, linkId: string, text: string) => {
  expect(errors(outcome), JSON.stringify(outcome.issue)).to.deep.equal([expected]);
  const issue = outcome.issue.find((i) => i.severity === 'error')!;
  expect(issue.diagnostics).to.include(`linkId "${linkId}"`).and.include(text);
};
const qty = (value: number, code: string) => ({ valueQuantity: { value, system: UCUM, code, unit: code } });
const answered = (linkId: string, ...answer: Record<string, unknown>[]): QuestionnaireResponseItem => ({
  linkId,
  answer,
});

describe('answer constraints of the form engine (issue 35)', () => {
  describe('sdc-questionnaire-minQuantity / maxQuantity (UCUM)', () => {
    const size = form({
      linkId: 'size',
      text: 'Size',
      type: 'quantity',
      extension: [
        { url: `${SDC}sdc-questionnaire-minQuantity`, valueQuantity: { value: 2, system: UCUM, code: 'mm' } },
        { url: `${SDC}sdc-questionnaire-maxQuantity`, valueQuantity: { value: 5, system: UCUM, code: 'cm' } },
      ],
    });
    it('accepts quantities within the limits in other units of the same dimension', async () => {
      expectValid(await run(size, answered('size', qty(0.2, 'cm'))));
      expectValid(await run(size, answered('size', qty(50, 'mm'))));
      expectValid(await run(size, answered('size', qty(1, '[in_i]'))));
    });
    it('refuses a quantity above the maximum when converted (60 mm > 5 cm)', async () => {
      expectError(
        await run(size, answered('size', qty(60, 'mm'))),
        'value QuestionnaireResponse.item[0].answer[0]',
        'size',
        'maxQuantity',
      );
    });
    it('refuses a quantity below the minimum when converted (0.1 cm < 2 mm)', async () => {
      expectError(
        await run(size, answered('size', qty(0.1, 'cm'))),
        'value QuestionnaireResponse.item[0].answer[0]',
        'size',
        'minQuantity',
      );
    });
    it('compares quantities in the same non-UCUM unit text as they are (Kg)', async () => {
      const kg = form({
        linkId: 'w',
        type: 'quantity',
        extension: [{ url: `${SDC}sdc-questionnaire-maxQuantity`, valueQuantity: { value: 5, unit: 'Kg' } }],
      });
      expectValid(await run(kg, answered('w', { valueQuantity: { value: 4, unit: 'Kg' } })));
      expectError(
        await run(kg, answered('w', { valueQuantity: { value: 10, unit: 'Kg' } })),
        'value QuestionnaireResponse.item[0].answer[0]',
        'w',
        'maxQuantity',
      );
    });
    it('refuses a unit of another dimension (kg against mm)', async () => {
      expectError(
        await run(size, answered('size', qty(3, 'kg'))),
        'value QuestionnaireResponse.item[0].answer[0]',
        'size',
        'cannot be compared',
      );
    });
  });

  describe('questionnaire-unitOption and unitValueSet', () => {
    it('refuses a unit that is not one of the unitOptions', async () => {
      const q = form({
        linkId: 'weight',
        type: 'quantity',
        extension: [
          { url: `${CORE}questionnaire-unitOption`, valueCoding: { system: UCUM, code: 'kg' } },
          { url: `${CORE}questionnaire-unitOption`, valueCoding: { system: UCUM, code: '[lb_av]' } },
        ],
      });
      expectValid(await run(q, answered('weight', qty(70, 'kg'))));
      expectError(
        await run(q, answered('weight', qty(70, 'g'))),
        'value QuestionnaireResponse.item[0].answer[0]',
        'weight',
        'kg',
      );
    });
    it('refuses a unit that is not in the unitValueSet', async () => {
      const q = form({
        linkId: 'len',
        type: 'quantity',
        extension: [{ url: `${CORE}questionnaire-unitValueSet`, valueCanonical: '#lengths' }],
      });
      expectValid(await run(q, answered('len', qty(3, 'mm'))));
      expectError(
        await run(q, answered('len', qty(3, 'm'))),
        'code-invalid QuestionnaireResponse.item[0].answer[0]',
        'len',
        'unitValueSet',
      );
    });
  });

  describe('questionnaire-minOccurs / maxOccurs', () => {
    const occurs = (min: number, max: number) => [
      { url: `${CORE}questionnaire-minOccurs`, valueInteger: min },
      { url: `${CORE}questionnaire-maxOccurs`, valueInteger: max },
    ];
    it('counts the answers of a repeating question', async () => {
      const q = form({ linkId: 'tags', type: 'string', repeats: true, extension: occurs(2, 3) });
      expectValid(await run(q, answered('tags', { valueString: 'a' }, { valueString: 'b' })));
      expectError(
        await run(q, answered('tags', ...['a', 'b', 'c', 'd'].map((v) => ({ valueString: v })))),
        'structure QuestionnaireResponse.item[0].answer[3]',
        'tags',
        'maxOccurs 3',
      );
      expectError(
        await run(q, answered('tags', { valueString: 'a' })),
        'structure QuestionnaireResponse.item[0]',
        'tags',
        'minOccurs 2',
      );
      expectError(
        await run(q, { linkId: 'tags' }),
        'structure QuestionnaireResponse.item[0]',
        'tags',
        'has 0 answers',
      );
    });
    it('counts the instances of a repeating group', async () => {
      const q = form({
        linkId: 'nodule',
        type: 'group',
        repeats: true,
        extension: occurs(1, 2),
        item: [{ linkId: 'n-size', type: 'integer' }],
      });
      const nodule = { linkId: 'nodule', item: [answered('n-size', { valueInteger: 3 })] };
      expectValid(await run(q, nodule, nodule));
      expectError(
        await run(q, nodule, nodule, nodule),
        'structure QuestionnaireResponse.item[2]',
        'nodule',
        'maxOccurs 2',
      );
    });
  });

  it('refuses an exclusive option combined with another answer (optionExclusive)', async () => {
    const q = form({
      linkId: 'symptoms',
      type: 'coding',
      repeats: true,
      answerOption: [
        { valueCoding: { code: 'cough' } },
        { valueCoding: { code: 'fever' } },
        {
          valueCoding: { code: 'none' },
          extension: [{ url: `${CORE}questionnaire-optionExclusive`, valueBoolean: true }],
        },
      ],
    });
    expectValid(await run(q, answered('symptoms', { valueCoding: { code: 'none' } })));
    expectValid(
      await run(
        q,
        answered('symptoms', { valueCoding: { code: 'cough' } }, { valueCoding: { code: 'fever' } }),
      ),
    );
    expectError(
      await run(
        q,
        answered('symptoms', { valueCoding: { code: 'cough' } }, { valueCoding: { code: 'none' } }),
      ),
      'business-rule QuestionnaireResponse.item[0].answer[1]',
      'symptoms',
      'exclusive',
    );
  });

  describe('attachments', () => {
    const q = form({
      linkId: 'scan',
      type: 'attachment',
      extension: [
        { url: `${CORE}mimeType`, valueCode: 'application/pdf' },
        { url: `${CORE}mimeType`, valueCode: 'image/png' },
        { url: `${CORE}maxSize`, valueDecimal: 6 },
      ],
    });
    it('accepts an attachment of a listed type within maxSize', async () => {
      expectValid(
        await run(q, answered('scan', { valueAttachment: { contentType: 'image/png', data: 'AAAAAA==' } })),
      );
    });
    it('refuses a contentType that is not a listed mimeType', async () => {
      expectError(
        await run(q, answered('scan', { valueAttachment: { contentType: 'image/jpeg', data: 'AAAA' } })),
        'value QuestionnaireResponse.item[0].answer[0]',
        'scan',
        'mimeType',
      );
    });
    it('refuses an attachment larger than maxSize (its size, else its data)', async () => {
      expectError(
        await run(
          q,
          answered('scan', { valueAttachment: { contentType: 'application/pdf', data: 'AAAAAAAAAA==' } }),
        ),
        'too-long QuestionnaireResponse.item[0].answer[0]',
        'scan',
        '7 bytes',
      );
      expectError(
        await run(
          q,
          answered('scan', {
            valueAttachment: { contentType: 'application/pdf', url: 'https://x.org/a.pdf', size: '4096' },
          }),
        ),
        'too-long QuestionnaireResponse.item[0].answer[0]',
        'scan',
        '4096 bytes',
      );
    });
  });

  it('refuses answers on an item of the abstract type question', async () => {
    const q = form({ linkId: 'abstract', text: 'Heading', type: 'question' });
    expectError(
      await run(q, answered('abstract', { valueString: 'x' })),
      'structure QuestionnaireResponse.item[0].answer[0]',
      'abstract',
      'abstract type question',
    );
  });

  describe('reference and URI syntax', () => {
    const ref = form({ linkId: 'who', type: 'reference' });
    const url = form({ linkId: 'site', type: 'url' });
    it('accepts Type/id of an R5 resource type, absolute URLs, urn:uuid and #contained', async () => {
      for (const reference of [
        'Patient/123',
        'Observation/a.b-c/_history/2',
        'https://other.example.org/fhir/Patient/9',
        'urn:uuid:53fefa32-fcbb-4ff8-8a92-55ee120877b7',
      ])
        expectValid(await run(ref, answered('who', { valueReference: { reference } })));
      // `#p1` names a resource the response contains (test/sdc/contained.test.ts: one it lacks is refused).
      expectValid(
        await validateResponse(
          {
            resourceType: 'QuestionnaireResponse',
            questionnaire: URL,
            status: 'completed',
            contained: [{ resourceType: 'Patient', id: 'p1' }],
            item: [answered('who', { valueReference: { reference: '#p1' } })],
          },
          ref,
        ),
      );
    });
    it('refuses a reference to an unknown resource type (Chicken/x) and malformed ones', async () => {
      expectError(
        await run(ref, answered('who', { valueReference: { reference: 'Chicken/x' } })),
        'value QuestionnaireResponse.item[0].answer[0]',
        'who',
        'Chicken',
      );
      expectError(
        await run(ref, answered('who', { valueReference: { reference: 'https://example.org/Chicken/x' } })),
        'value QuestionnaireResponse.item[0].answer[0]',
        'who',
        'Chicken',
      );
      expectError(
        await run(ref, answered('who', { valueReference: { reference: 'Patient/a b' } })),
        'value QuestionnaireResponse.item[0].answer[0]',
        'who',
        'whitespace',
      );
      expectError(
        await run(ref, answered('who', { valueReference: { reference: 'urn:uuid:1234' } })),
        'value QuestionnaireResponse.item[0].answer[0]',
        'who',
        'UUID',
      );
    });
    it('refuses a URI with a space or a malformed urn:uuid / urn:oid', async () => {
      expectValid(await run(url, answered('site', { valueUri: 'https://example.org/a%20b' })));
      for (const [valueUri, text] of [
        ['https://example.org/a b', 'whitespace'],
        ['urn:uuid:53FEFA32-FCBB-4FF8-8A92-55EE120877B7', 'UUID'],
        ['urn:uuid:not-a-uuid', 'UUID'],
        ['urn:oid:1.2.03', 'OID'],
      ])
        expectError(
          await run(url, answered('site', { valueUri })),
          'value QuestionnaireResponse.item[0].answer[0]',
          'site',
          text!,
        );
    });
  });
});
