/**
 * The report editor's form → QuestionnaireResponse mapping (issues 5, 32), pure: every item the
 * page shows becomes a response item, answered or not; enablement and pruning are the form
 * engine's (test/http/app/editor-form.test.ts).
 */
import { expect } from 'chai';
import {
  answerOf,
  buildItems,
  codingChoices,
  MAX_REPEAT_INSTANCES,
  optionChoices,
  valuesOf,
  withStoredChoices,
} from '../../../src/http/app/form-data.js';
import type { QuestionnaireItem, QuestionnaireResponseItem } from '../../../src/sdc/types.js';

const UCUM = 'http://unitsofmeasure.org';

/** The answered part of built items: items without answers beneath them left out. */
const answered = (items: readonly QuestionnaireResponseItem[]): QuestionnaireResponseItem[] =>
  items.flatMap((item) => {
    const children = answered(item.item ?? []);
    if (!item.answer?.length && children.length === 0) return [];
    return [{ ...item, ...(item.item ? { item: children } : {}) }];
  });

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
      expect(answered(items)).to.deep.equal([
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

    it('gives every item the page shows an item, answered or not (the engine prunes)', () => {
      const { items } = buildItems(
        ITEMS,
        { 'q:findings': '   ', 'q:date': '', 'q:refs': ['', ''] },
        { choices },
      );
      expect(items.map((i) => i.linkId)).to.deep.equal([
        'findings',
        'contrast',
        'agent',
        'severity',
        'exam',
        'refs',
        'scan',
      ]);
      expect(items.find((i) => i.linkId === 'exam')!.item!.map((i) => i.linkId)).to.deep.equal([
        'date',
        'size',
        'count',
        'at',
      ]);
      expect(answered(items)).to.deep.equal([]);
    });

    it('maps the answers of items whose enableWhen fails too: enablement is the engine’s', () => {
      const { items } = buildItems(ITEMS, { 'q:contrast': 'false', 'q:agent': 'Iohexol' }, { choices });
      expect(answered(items).map((i) => i.linkId)).to.deep.equal(['contrast', 'agent']);
    });

    it('keeps every value of a repeating question, once each', () => {
      const { items } = buildItems(ITEMS, { 'q:refs': ['CT 2025', '', 'MR 2024', 'CT 2025'] }, { choices });
      expect(answered(items)).to.deep.equal([
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

    it('splits repeating group fields into instances by position, empty instances included', () => {
      const { items } = buildItems(
        ITEMS,
        { 'n:nodule': ['1', '1', '1'], 'q:loc': ['left', '', 'right'], 'q:mm': ['4', '', ''] },
        { choices },
      );
      const nodules = items.filter((i) => i.linkId === 'nodule');
      expect(nodules).to.have.length(3);
      expect(answered(nodules)).to.deep.equal([
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
      expect(answered(items)).to.deep.equal([{ linkId: 'scan', text: 'Scan', answer: scan.answer }]);
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
      expect(
        answered(buildItems(readOnly, { 'q:name': 'Somebody Else' }, { choices: new Map() }).items),
      ).to.deep.equal([]);
    });

    it('ignores a posted value of a calculated item (the engine calculates it)', () => {
      const calculated: QuestionnaireItem[] = [
        {
          linkId: 'bmi',
          type: 'decimal',
          extension: [
            {
              url: 'http://hl7.org/fhir/uv/sdc/StructureDefinition/sdc-questionnaire-calculatedExpression',
              valueExpression: { language: 'text/fhirpath', expression: '1' },
            },
          ],
        },
      ];
      const stored = { linkId: 'bmi', answer: [{ valueDecimal: 99 }] };
      expect(
        buildItems(calculated, { 'q:bmi': '12' }, { choices: new Map(), existing: [stored] }).items,
      ).to.deep.equal([{ linkId: 'bmi' }]);
    });

    it('never makes a coding without a system: a coded item without its list keeps its stored answer', () => {
      const coded: QuestionnaireItem[] = [{ linkId: 'rads', type: 'coding', answerValueSet: 'urn:vs' }];
      const stored = {
        linkId: 'rads',
        answer: [{ valueCoding: { system: 'urn:lr', code: '4A', display: '4A' } }],
      };
      expect(
        buildItems(coded, { 'q:rads': '4A' }, { choices: new Map(), existing: [stored] }).items,
      ).to.deep.equal([{ linkId: 'rads', answer: stored.answer }]);
      expect(buildItems(coded, { 'q:rads': '4A' }, { choices: new Map() }).items).to.deep.equal([
        { linkId: 'rads' },
      ]);
    });

    it('maps a quantity with its unit: the chosen unitOption, or the one unit', () => {
      const items: QuestionnaireItem[] = [
        {
          linkId: 'depth',
          type: 'quantity',
          extension: [
            {
              url: 'http://hl7.org/fhir/StructureDefinition/questionnaire-unitOption',
              valueCoding: { system: UCUM, code: 'mm', display: 'mm' },
            },
            {
              url: 'http://hl7.org/fhir/StructureDefinition/questionnaire-unitOption',
              valueCoding: { system: UCUM, code: 'cm', display: 'cm' },
            },
          ],
        },
        {
          linkId: 'weight',
          type: 'quantity',
          extension: [
            {
              url: 'http://hl7.org/fhir/StructureDefinition/questionnaire-unit',
              valueCoding: { system: UCUM, code: 'kg' },
            },
          ],
        },
      ];
      const { items: built, errors } = buildItems(
        items,
        { 'q:depth': '2.5', 'u:depth': 'cm', 'q:weight': '80' },
        { choices: new Map() },
      );
      expect(errors.size).to.equal(0);
      expect(built).to.deep.equal([
        {
          linkId: 'depth',
          answer: [{ valueQuantity: { value: 2.5, unit: 'cm', system: UCUM, code: 'cm' } }],
        },
        {
          linkId: 'weight',
          answer: [{ valueQuantity: { value: 80, unit: 'kg', system: UCUM, code: 'kg' } }],
        },
      ]);
      expect([
        ...buildItems(items, { 'q:depth': '2', 'u:depth': 'km' }, { choices: new Map() }).errors,
      ]).to.deep.equal([['depth', ['Choose a unit.']]]);
    });

    it(`builds at most ${MAX_REPEAT_INSTANCES} instances of a repeating group, and says so at the group`, () => {
      const started = performance.now();
      const { items, errors } = buildItems(
        ITEMS,
        { 'n:nodule': Array(30_000).fill('1'), 'q:mm': Array(30_000).fill('4') },
        {
          choices,
        },
      );
      expect(performance.now() - started).to.be.below(500);
      expect(items.filter((i) => i.linkId === 'nodule')).to.have.length(MAX_REPEAT_INSTANCES);
      expect([...errors]).to.deep.equal([
        ['nodule', [`Give at most ${MAX_REPEAT_INSTANCES} of these (this form has 30000).`]],
      ]);
    });

    it('reports values that are not valid for the item type, per node key', () => {
      const { errors } = buildItems(
        ITEMS,
        {
          'q:count': '2.5',
          'q:severity': 'unknown',
          'q:contrast': 'maybe',
          'n:nodule': ['1', '1'],
          'q:mm': ['', 'x'],
        },
        { choices },
      );
      expect([...errors.keys()].sort()).to.deep.equal(['contrast', 'count', 'nodule[1]/mm', 'severity']);
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

    it('takes free text of an open choice as a string, and time without seconds', () => {
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

  describe('withStoredChoices', () => {
    it('adds a stored coding the list no longer has, so it is shown by its display and kept', () => {
      const list = new Map([['severity', optionChoices(SEVERITY)]]);
      const gone = { system: 'urn:s', code: 'moderate', display: 'Moderate' };
      const out = withStoredChoices(list, [{ linkId: 'severity', answer: [{ valueCoding: gone }] }]);
      expect(out.get('severity')!.at(-1)).to.deep.equal({
        value: 'urn:s|moderate',
        label: 'Moderate (no longer listed)',
        answer: { valueCoding: gone },
      });
      expect(list.get('severity')).to.have.length(2);
    });
  });
});
