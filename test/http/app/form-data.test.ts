/**
 * The report editor's form → QuestionnaireResponse mapping (issue 5), pure.
 */
import { expect } from 'chai';
import {
  answerOf,
  buildItems,
  codingChoices,
  linkIdOfExpression,
  missingRequired,
  optionChoices,
  valuesOf,
} from '../../../src/http/app/form-data.js';
import type { QuestionnaireItem } from '../../../src/sdc/types.js';

const SEVERITY: QuestionnaireItem = {
  linkId: 'severity',
  text: 'Severity',
  type: 'coding',
  answerOption: [
    { valueCoding: { system: 'urn:s', code: 'mild', display: 'Mild' } },
    { valueCoding: { system: 'urn:s', code: 'severe', display: 'Severe' } },
  ],
};

const ITEMS: QuestionnaireItem[] = [
  { linkId: 'findings', text: 'Findings', type: 'string', required: true },
  { linkId: 'contrast', text: 'Contrast given', type: 'boolean' },
  {
    linkId: 'agent',
    text: 'Contrast agent',
    type: 'string',
    enableWhen: [{ question: 'contrast', operator: '=', answerBoolean: true }],
  },
  SEVERITY,
  {
    linkId: 'exam',
    text: 'Examination',
    type: 'group',
    item: [
      { linkId: 'date', type: 'date', text: 'Date', required: true },
      { linkId: 'size', type: 'decimal', text: 'Size' },
      { linkId: 'count', type: 'integer', text: 'Count' },
      { linkId: 'at', type: 'dateTime', text: 'At' },
    ],
  },
  { linkId: 'refs', type: 'string', repeats: true, text: 'References' },
  {
    linkId: 'nodule',
    type: 'group',
    repeats: true,
    text: 'Nodule',
    item: [
      { linkId: 'loc', type: 'string', text: 'Location' },
      { linkId: 'mm', type: 'integer', text: 'mm' },
    ],
  },
  { linkId: 'scan', type: 'attachment', text: 'Scan' },
];

const choices = new Map([['severity', optionChoices(SEVERITY)]]);

describe('report editor form mapping', () => {
  describe('valuesOf', () => {
    it('keeps only string values, so a crafted nested field cannot break the mapping', () => {
      const body = { 'q:a': 'one', 'q:b': ['x', 'y'], 'q:c': { nested: '1' } } as unknown as Record<
        string,
        string
      >;
      expect(valuesOf(body, 'q:a')).to.deep.equal(['one']);
      expect(valuesOf(body, 'q:b')).to.deep.equal(['x', 'y']);
      expect(valuesOf(body, 'q:c')).to.deep.equal([]);
      expect(valuesOf(body, 'q:missing')).to.deep.equal([]);
    });
  });

  describe('buildItems', () => {
    it('maps each item type to its answer value and keeps Questionnaire order', () => {
      const { items, errors } = buildItems(
        ITEMS,
        {
          'q:severity': 'severe',
          'q:findings': ' Nodule ',
          'q:contrast': 'true',
          'q:agent': 'Iohexol',
          'q:date': '2026-03-01',
          'q:size': '12.5',
          'q:count': '3',
          'q:at': '2026-03-01T10:15',
          'cb:tz': '+01:00',
        },
        { choices },
      );
      expect(errors.size).to.equal(0);
      expect(items).to.deep.equal([
        { linkId: 'findings', text: 'Findings', answer: [{ valueString: ' Nodule ' }] },
        { linkId: 'contrast', text: 'Contrast given', answer: [{ valueBoolean: true }] },
        { linkId: 'agent', text: 'Contrast agent', answer: [{ valueString: 'Iohexol' }] },
        {
          linkId: 'severity',
          text: 'Severity',
          answer: [{ valueCoding: { system: 'urn:s', code: 'severe', display: 'Severe' } }],
        },
        {
          linkId: 'exam',
          text: 'Examination',
          item: [
            { linkId: 'date', text: 'Date', answer: [{ valueDate: '2026-03-01' }] },
            { linkId: 'size', text: 'Size', answer: [{ valueDecimal: 12.5 }] },
            { linkId: 'count', text: 'Count', answer: [{ valueInteger: 3 }] },
            { linkId: 'at', text: 'At', answer: [{ valueDateTime: '2026-03-01T10:15:00+01:00' }] },
          ],
        },
      ]);
    });

    it('drops empty answers, and groups and items left without any', () => {
      const { items } = buildItems(
        ITEMS,
        { 'q:findings': '   ', 'q:date': '', 'q:refs': ['', ''] },
        { choices },
      );
      expect(items).to.deep.equal([]);
    });

    it('ignores the answers of items whose enableWhen fails', () => {
      const { items } = buildItems(ITEMS, { 'q:contrast': 'false', 'q:agent': 'Iohexol' }, { choices });
      expect(items.map((i) => i.linkId)).to.deep.equal(['contrast']);
    });

    it('keeps every value of a repeating question, once each', () => {
      const { items } = buildItems(ITEMS, { 'q:refs': ['CT 2025', '', 'MR 2024', 'CT 2025'] }, { choices });
      expect(items).to.deep.equal([
        {
          linkId: 'refs',
          text: 'References',
          answer: [{ valueString: 'CT 2025' }, { valueString: 'MR 2024' }],
        },
      ]);
    });

    it('keeps only the first value of a non-repeating question', () => {
      const { items } = buildItems(ITEMS, { 'q:findings': ['a', 'b'] }, { choices });
      expect(items[0]!.answer).to.deep.equal([{ valueString: 'a' }]);
    });

    it('splits repeating group fields into instances by position', () => {
      const { items } = buildItems(
        ITEMS,
        { 'n:nodule': ['1', '1', '1'], 'q:loc': ['left', '', 'right'], 'q:mm': ['4', '', ''] },
        { choices },
      );
      expect(items).to.deep.equal([
        {
          linkId: 'nodule',
          text: 'Nodule',
          item: [
            { linkId: 'loc', text: 'Location', answer: [{ valueString: 'left' }] },
            { linkId: 'mm', text: 'mm', answer: [{ valueInteger: 4 }] },
          ],
        },
        {
          linkId: 'nodule',
          text: 'Nodule',
          item: [{ linkId: 'loc', text: 'Location', answer: [{ valueString: 'right' }] }],
        },
      ]);
    });

    it('keeps answers of item types without inputs from the existing response', () => {
      const scan = { linkId: 'scan', answer: [{ valueAttachment: { url: 'urn:x', title: 'scan' } }] };
      const { items } = buildItems(ITEMS, {}, { choices, existing: [scan] });
      expect(items).to.deep.equal([{ linkId: 'scan', text: 'Scan', answer: scan.answer }]);
    });

    it('keeps the stored answer of a readOnly item whatever the form posts', () => {
      const readOnly: QuestionnaireItem[] = [
        { linkId: 'name', text: 'Name', type: 'string', readOnly: true },
      ];
      const stored = { linkId: 'name', text: 'Name', answer: [{ valueString: 'Ada Lovelace' }] };
      const { items } = buildItems(
        readOnly,
        { 'q:name': 'Somebody Else' },
        { choices: new Map(), existing: [stored] },
      );
      expect(items).to.deep.equal([stored]);
      expect(buildItems(readOnly, { 'q:name': 'Somebody Else' }, { choices: new Map() }).items).to.deep.equal(
        [],
      );
    });

    it('reports values that are not valid for the item type, per linkId', () => {
      const { errors } = buildItems(
        ITEMS,
        { 'q:count': '2.5', 'q:severity': 'unknown', 'q:contrast': 'maybe' },
        { choices },
      );
      expect([...errors.keys()].sort()).to.deep.equal(['contrast', 'count', 'severity']);
    });
  });

  describe('answerOf', () => {
    it('uses system|code values when two options share a code', () => {
      const cs = codingChoices([
        { system: 'urn:a', code: 'x', display: 'A' },
        { system: 'urn:b', code: 'x', display: 'B' },
      ]);
      expect(cs.map((c) => c.value)).to.deep.equal(['urn:a|x', 'urn:b|x']);
      expect(answerOf({ linkId: 'c', type: 'coding' }, 'urn:b|x', cs, 'Z')).to.deep.equal({
        valueCoding: { system: 'urn:b', code: 'x', display: 'B' },
      });
    });

    it('accepts free text for optionsOrString and time without seconds', () => {
      expect(
        answerOf(
          { ...SEVERITY, answerConstraint: 'optionsOrString' },
          'moderate',
          optionChoices(SEVERITY),
          'Z',
        ),
      ).to.deep.equal({ valueString: 'moderate' });
      expect(answerOf({ linkId: 't', type: 'time' }, '08:30', undefined, 'Z')).to.deep.equal({
        valueTime: '08:30:00',
      });
    });
  });

  describe('missingRequired', () => {
    it('names required questions of absent groups and the top level, not disabled ones', () => {
      const items: QuestionnaireItem[] = [
        ...ITEMS,
        {
          linkId: 'why',
          type: 'string',
          required: true,
          enableWhen: [{ question: 'contrast', operator: '=', answerBoolean: true }],
        },
      ];
      expect(
        missingRequired(items, [{ linkId: 'contrast', answer: [{ valueBoolean: false }] }]),
      ).to.deep.equal(['findings', 'date']);
    });
  });

  describe('linkIdOfExpression', () => {
    it('walks item and answer indexes through the response', () => {
      const items = [
        { linkId: 'a' },
        { linkId: 'g', item: [{ linkId: 'b' }, { linkId: 'c', answer: [{ valueString: 'x' }] }] },
      ];
      expect(linkIdOfExpression('QuestionnaireResponse.item[1].item[1].answer[0]', items)).to.equal('c');
      expect(linkIdOfExpression('QuestionnaireResponse.item[1]', items)).to.equal('g');
      expect(linkIdOfExpression('QuestionnaireResponse', items)).to.equal(undefined);
    });
  });
});
