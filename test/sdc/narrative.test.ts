/**
 * The pure narrative of QuestionnaireResponse/$generate-narrative (issue 4; spec §4.4): the exact
 * plain text the report export sends to hospital systems and the exact XHTML of `text.div`, for a
 * realistic CT chest report with nested and repeated groups, codings, quantities, booleans,
 * multi-line text and hostile text.
 */
import { expect } from 'chai';
import { XMLValidator } from 'fast-xml-parser';
import { generateNarrative } from '../../src/sdc/narrative.js';
import type { Questionnaire, QuestionnaireResponse } from '../../src/sdc/types.js';

const SNOMED = 'http://snomed.info/sct';
const UCUM = 'http://unitsofmeasure.org';

const questionnaire: Questionnaire = {
  resourceType: 'Questionnaire',
  url: 'https://radiology.example.org/Questionnaire/ct-chest',
  version: '2.1.0',
  title: 'CT Chest Report',
  status: 'active',
  item: [
    {
      linkId: 'clinical',
      type: 'group',
      text: 'Clinical information',
      item: [
        { linkId: 'indication', type: 'string', text: 'Indication' },
        { linkId: 'contrast', type: 'boolean', text: 'Contrast given' },
        { linkId: 'prior', type: 'date', text: 'Prior study date' },
      ],
    },
    {
      linkId: 'findings',
      type: 'group',
      text: 'Findings',
      item: [
        {
          linkId: 'lungs',
          type: 'group',
          text: 'Lungs',
          item: [
            {
              linkId: 'nodule-present',
              type: 'boolean',
              text: 'Is a nodule present?',
              item: [{ linkId: 'nodule-count', type: 'integer', text: 'Number of nodules' }],
            },
            {
              linkId: 'nodule',
              type: 'group',
              text: 'Nodule',
              repeats: true,
              item: [
                {
                  linkId: 'nodule-lobe',
                  type: 'coding',
                  text: 'Location',
                  answerOption: [
                    { valueCoding: { system: SNOMED, code: '45653009', display: 'Right upper lobe' } },
                  ],
                },
                { linkId: 'nodule-size', type: 'quantity', text: 'Size' },
              ],
            },
          ],
        },
        {
          linkId: 'pleura',
          type: 'group',
          text: 'Pleura',
          item: [
            { linkId: 'effusion', type: 'boolean', text: 'Pleural effusion' },
            { linkId: 'effusion-side', type: 'coding', text: 'Side' },
          ],
        },
        { linkId: 'other', type: 'text', text: 'Other findings' },
      ],
    },
    {
      linkId: 'impression',
      type: 'group',
      text: 'Impression',
      item: [
        { linkId: 'summary', type: 'text', text: 'Summary' },
        { linkId: 'lung-rads', type: 'coding', text: 'Lung-RADS category' },
        { linkId: 'key-image', type: 'attachment', text: 'Key image' },
        { linkId: 'radiologist', type: 'reference', text: 'Reported by' },
      ],
    },
  ],
};

const response: QuestionnaireResponse = {
  resourceType: 'QuestionnaireResponse',
  questionnaire: 'https://radiology.example.org/Questionnaire/ct-chest|2.1.0',
  status: 'completed',
  authored: '2026-03-01T10:15:00Z',
  item: [
    {
      linkId: 'clinical',
      text: 'Clinical information',
      item: [
        {
          linkId: 'indication',
          text: 'Indication',
          answer: [{ valueString: 'Persistent cough <script>alert("x")</script>' }],
        },
        { linkId: 'contrast', answer: [{ valueBoolean: false }] },
        { linkId: 'prior', text: 'Prior study date', answer: [{ valueDate: '2025-09-14' }] },
      ],
    },
    {
      linkId: 'findings',
      text: 'Findings',
      item: [
        {
          linkId: 'lungs',
          text: 'Lungs',
          item: [
            {
              linkId: 'nodule-present',
              text: 'Is a nodule present?',
              answer: [
                {
                  valueBoolean: true,
                  item: [
                    { linkId: 'nodule-count', text: 'Number of nodules', answer: [{ valueInteger: 2 }] },
                  ],
                },
              ],
            },
            {
              linkId: 'nodule',
              text: 'Nodule',
              item: [
                {
                  linkId: 'nodule-lobe',
                  text: 'Location',
                  answer: [{ valueCoding: { system: SNOMED, code: '45653009' } }],
                },
                {
                  linkId: 'nodule-size',
                  text: 'Size',
                  answer: [{ valueQuantity: { value: 8, unit: 'mm', system: UCUM, code: 'mm' } }],
                },
              ],
            },
            {
              linkId: 'nodule',
              text: 'Nodule',
              item: [
                {
                  linkId: 'nodule-lobe',
                  text: 'Location',
                  answer: [{ valueCoding: { system: SNOMED, code: '31094006', display: 'Left lower lobe' } }],
                },
                {
                  linkId: 'nodule-size',
                  text: 'Size',
                  answer: [{ valueQuantity: { value: 4.5, comparator: '<', system: UCUM, code: 'mm' } }],
                },
              ],
            },
          ],
        },
        {
          linkId: 'pleura',
          text: 'Pleura',
          item: [
            { linkId: 'effusion', text: 'Pleural effusion', answer: [{ valueBoolean: true }] },
            {
              linkId: 'effusion-side',
              text: 'Side',
              answer: [
                { valueCoding: { system: SNOMED, code: '24028007', display: 'Right' } },
                { valueCoding: { system: SNOMED, code: '7771000', display: 'Left' } },
              ],
            },
          ],
        },
        // Unanswered: left out, and so is a group with nothing answered.
        { linkId: 'other', text: 'Other findings' },
        { linkId: 'mediastinum', text: 'Mediastinum', item: [{ linkId: 'nodes', text: 'Lymph nodes' }] },
      ],
    },
    {
      linkId: 'impression',
      text: 'Impression',
      item: [
        {
          linkId: 'summary',
          text: 'Summary',
          answer: [
            {
              valueString:
                '1. Two pulmonary nodules, the largest 8 mm in the right upper lobe.\r\n2. Small bilateral effusions.  \n\n\n\nFollow-up CT in 6 months & compare "prior" studies.\n',
            },
          ],
        },
        { linkId: 'lung-rads', answer: [{ valueCoding: { code: '4A' } }] },
        {
          linkId: 'key-image',
          text: 'Key image',
          answer: [
            {
              valueAttachment: {
                title: "Axial slice 42 (RUL 'nodule')",
                url: 'https://pacs.example.org/wado?id=1&frame=42',
              },
            },
          ],
        },
        {
          linkId: 'radiologist',
          text: 'Reported by',
          answer: [{ valueReference: { reference: 'Practitioner/7', display: 'Dr. A. Smith' } }],
        },
      ],
    },
  ],
};

const EXPECTED_TEXT = [
  'CT Chest Report',
  '',
  'CLINICAL INFORMATION',
  'Indication: Persistent cough <script>alert("x")</script>',
  'Contrast given: No',
  'Prior study date: 2025-09-14',
  '',
  'FINDINGS',
  'Lungs:',
  '  Is a nodule present? Yes',
  '    Number of nodules: 2',
  '  Nodule 1:',
  '    Location: Right upper lobe',
  '    Size: 8 mm',
  '  Nodule 2:',
  '    Location: Left lower lobe',
  '    Size: <4.5 mm',
  'Pleura:',
  '  Pleural effusion: Yes',
  '  Side: Right, Left',
  '',
  'IMPRESSION',
  'Summary:',
  '  1. Two pulmonary nodules, the largest 8 mm in the right upper lobe.',
  '  2. Small bilateral effusions.',
  '',
  '  Follow-up CT in 6 months & compare "prior" studies.',
  'Lung-RADS category: 4A',
  "Key image: Axial slice 42 (RUL 'nodule') (https://pacs.example.org/wado?id=1&frame=42)",
  'Reported by: Dr. A. Smith',
].join('\n');

const EXPECTED_XHTML = [
  '<div xmlns="http://www.w3.org/1999/xhtml">',
  '<h1>CT Chest Report</h1>',
  '<div><h2>Clinical information</h2><dl>',
  '<dt>Indication</dt><dd>Persistent cough &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;</dd>',
  '<dt>Contrast given</dt><dd>No</dd>',
  '<dt>Prior study date</dt><dd>2025-09-14</dd>',
  '</dl></div>',
  '<div><h2>Findings</h2>',
  '<div><h3>Lungs</h3>',
  '<dl><dt>Is a nodule present?</dt><dd>Yes<dl><dt>Number of nodules</dt><dd>2</dd></dl></dd></dl>',
  '<div><h4>Nodule 1</h4><dl><dt>Location</dt><dd>Right upper lobe</dd><dt>Size</dt><dd>8 mm</dd></dl></div>',
  '<div><h4>Nodule 2</h4><dl><dt>Location</dt><dd>Left lower lobe</dd><dt>Size</dt><dd>&lt;4.5 mm</dd></dl></div>',
  '</div>',
  '<div><h3>Pleura</h3><dl><dt>Pleural effusion</dt><dd>Yes</dd><dt>Side</dt><dd>Right, Left</dd></dl></div>',
  '</div>',
  '<div><h2>Impression</h2><dl>',
  '<dt>Summary</dt><dd>1. Two pulmonary nodules, the largest 8 mm in the right upper lobe.<br/>',
  '2. Small bilateral effusions.<br/><br/>',
  'Follow-up CT in 6 months &amp; compare &quot;prior&quot; studies.</dd>',
  '<dt>Lung-RADS category</dt><dd>4A</dd>',
  '<dt>Key image</dt><dd>Axial slice 42 (RUL &#39;nodule&#39;) (https://pacs.example.org/wado?id=1&amp;frame=42)</dd>',
  '<dt>Reported by</dt><dd>Dr. A. Smith</dd>',
  '</dl></div>',
  '</div>',
].join('');

/** XML well-formedness, by a real parser: true or the parser's error. */
const wellFormed = (xml: string) => XMLValidator.validate(xml);

describe('generateNarrative', () => {
  it('renders the plain text a hospital system receives', () => {
    expect(generateNarrative(response, questionnaire).text).to.equal(EXPECTED_TEXT);
  });

  it('renders escaped, well-formed XHTML for text.div', () => {
    const { xhtml } = generateNarrative(response, questionnaire);
    expect(xhtml).to.equal(EXPECTED_XHTML);
    expect(wellFormed(xhtml)).to.equal(true);
    expect(xhtml).not.to.include('<script');
  });

  it('gives the same output for the same input, whatever the object identity', () => {
    const first = generateNarrative(response, questionnaire);
    const again = generateNarrative(structuredClone(response), structuredClone(questionnaire));
    expect(again).to.deep.equal(first);
    expect(generateNarrative(response, questionnaire)).to.deep.equal(first);
  });

  it('reads the response alone without a Questionnaire: no title, linkIds for missing texts', () => {
    const { text, xhtml } = generateNarrative(response);
    const lines = text.split('\n');
    expect(lines.slice(0, 4)).to.deep.equal([
      'CLINICAL INFORMATION',
      'Indication: Persistent cough <script>alert("x")</script>',
      'contrast: No',
      'Prior study date: 2025-09-14',
    ]);
    expect(lines).to.include('    Location: 45653009');
    expect(lines).to.include('lung-rads: 4A');
    expect(xhtml).to.match(
      /^<div xmlns="http:\/\/www\.w3\.org\/1999\/xhtml"><div><h2>Clinical information<\/h2>/,
    );
    expect(wellFormed(xhtml)).to.equal(true);
  });

  it('puts each of several answers with nested items on its own bullet', () => {
    const { text, xhtml } = generateNarrative({
      resourceType: 'QuestionnaireResponse',
      status: 'completed',
      item: [
        {
          linkId: 'lesion',
          text: 'Lesion site',
          answer: [
            {
              valueString: 'Liver',
              item: [{ linkId: 'size', text: 'Size', answer: [{ valueDecimal: 1.2 }] }],
            },
            {
              valueString: 'Spleen',
              item: [{ linkId: 'size', text: 'Size', answer: [{ valueDecimal: 0.8 }] }],
            },
          ],
        },
        { linkId: 'note', text: 'Comment:', answer: [{ valueString: 'None' }] },
      ],
    });
    expect(text).to.equal(
      ['Lesion site:', '  - Liver', '    Size: 1.2', '  - Spleen', '    Size: 0.8', 'Comment: None'].join(
        '\n',
      ),
    );
    expect(xhtml).to.equal(
      '<div xmlns="http://www.w3.org/1999/xhtml"><dl><dt>Lesion site</dt>' +
        '<dd>Liver<dl><dt>Size</dt><dd>1.2</dd></dl></dd><dd>Spleen<dl><dt>Size</dt><dd>0.8</dd></dl></dd>' +
        '<dt>Comment:</dt><dd>None</dd></dl></div>',
    );
  });

  it('says so when nothing is answered', () => {
    const narrative = generateNarrative(
      { resourceType: 'QuestionnaireResponse', status: 'in-progress', item: [{ linkId: 'a', text: 'A' }] },
      { resourceType: 'Questionnaire', title: 'Empty & <b>bold</b>', status: 'active' },
    );
    expect(narrative).to.deep.equal({
      text: 'Empty & <b>bold</b>\n\nNo answers recorded.',
      xhtml:
        '<div xmlns="http://www.w3.org/1999/xhtml"><h1>Empty &amp; &lt;b&gt;bold&lt;/b&gt;</h1><p>No answers recorded.</p></div>',
    });
  });

  it('drops characters XML forbids so the div stays well-formed', () => {
    const { text, xhtml } = generateNarrative({
      resourceType: 'QuestionnaireResponse',
      status: 'completed',
      item: [{ linkId: 'q', text: 'Bell\u0007 "quoted"', answer: [{ valueString: "It's\u0000 <b>\uD800" }] }],
    });
    expect(text).to.equal('Bell "quoted": It\'s <b>');
    expect(xhtml).to.equal(
      '<div xmlns="http://www.w3.org/1999/xhtml"><dl><dt>Bell &quot;quoted&quot;</dt><dd>It&#39;s &lt;b&gt;</dd></dl></div>',
    );
    expect(wellFormed(xhtml)).to.equal(true);
  });

  it('writes the questionnaire-unit of an integer or decimal item beside its value (issue 32)', () => {
    const unitOf = (code: string, display?: string) => ({
      url: 'http://hl7.org/fhir/StructureDefinition/questionnaire-unit',
      valueCoding: { system: UCUM, code, ...(display ? { display } : {}) },
    });
    const { text, xhtml } = generateNarrative(
      {
        resourceType: 'QuestionnaireResponse',
        status: 'completed',
        item: [
          { linkId: 'size', answer: [{ valueDecimal: 7 }] },
          { linkId: 'months', answer: [{ valueInteger: 3 }] },
          { linkId: 'fraction', answer: [{ valueInteger: 45 }] },
          { linkId: 'count', answer: [{ valueInteger: 2 }] },
        ],
      },
      {
        resourceType: 'Questionnaire',
        status: 'active',
        item: [
          { linkId: 'size', type: 'decimal', text: 'Mean diameter', extension: [unitOf('mm')] },
          { linkId: 'months', type: 'integer', text: 'Follow-up in', extension: [unitOf('mo', 'months')] },
          { linkId: 'fraction', type: 'integer', text: 'Ejection fraction', extension: [unitOf('%')] },
          { linkId: 'count', type: 'integer', text: 'Number of nodules' },
        ],
      },
    );
    expect(text).to.equal(
      'Mean diameter: 7 mm\nFollow-up in: 3 months\nEjection fraction: 45%\nNumber of nodules: 2',
    );
    expect(xhtml).to.contain('<dt>Mean diameter</dt><dd>7 mm</dd>');
  });
  it('reads a coding without display by its answerValueSet display, then its code (issue 35)', () => {
    const valueSet = 'https://forms.example.org/ValueSet/lobes';
    const lobes = 'http://snomed.info/sct';
    const { text } = generateNarrative(
      {
        resourceType: 'QuestionnaireResponse',
        status: 'completed',
        item: [
          { linkId: 'lobe', answer: [{ valueCoding: { system: lobes, code: '45653009' } }] },
          { linkId: 'other', answer: [{ valueCoding: { system: lobes, code: '999' } }] },
          {
            linkId: 'shown',
            answer: [{ valueCoding: { system: lobes, code: '45653009', display: 'As sent' } }],
          },
        ],
      },
      {
        resourceType: 'Questionnaire',
        status: 'active',
        item: [
          { linkId: 'lobe', type: 'coding', text: 'Lobe', answerValueSet: valueSet },
          { linkId: 'other', type: 'coding', text: 'Other lobe', answerValueSet: valueSet },
          { linkId: 'shown', type: 'coding', text: 'Shown', answerValueSet: valueSet },
        ],
      },
      {
        valueSetCodings: new Map([
          [valueSet, [{ system: lobes, code: '45653009', display: 'Upper lobe of right lung' }]],
        ]),
      },
    );
    expect(text).to.equal('Lobe: Upper lobe of right lung\nOther lobe: 999\nShown: As sent');
  });

  it('opens an amended or entered-in-error report with its status, and nothing for a status that is no note', () => {
    const answered = (status: string) => ({
      resourceType: 'QuestionnaireResponse' as const,
      status,
      item: [{ linkId: 'size', text: 'Size', answer: [{ valueQuantity: { value: 7, unit: 'mm' } }] }],
    });
    expect(generateNarrative(answered('amended')).text).to.equal(
      'AMENDED REPORT: this version replaces the earlier one.\n\nSize: 7 mm',
    );
    const withdrawn = generateNarrative(answered('entered-in-error'));
    expect(withdrawn.text.split('\n')[0]).to.equal(
      'ENTERED IN ERROR: this report is withdrawn and must not be used.',
    );
    expect(withdrawn.xhtml).to.contain('<p><strong>ENTERED IN ERROR');
    // An inherited property name is no status note (a lenient schema lets any status through).
    for (const status of ['constructor', 'toString', '__proto__', 'completed'])
      expect(generateNarrative(answered(status)).text, status).to.equal('Size: 7 mm');
  });
});
