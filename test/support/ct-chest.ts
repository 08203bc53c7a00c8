/**
 * A realistic 60-item CT chest report form (issue 32), shared by the editor's tests: groups, a
 * repeating "Nodule" group, 16 required items, answerOption, a contained and two stored ValueSets,
 * an open choice, integers and decimals with units and limits, a quantity with unit options,
 * dates, a dateTime, booleans, enableWhen on items and on a group (any and all), a BMI
 * calculatedExpression, and help and display items.
 *
 * Store {@link CT_CHEST_VALUE_SETS} in the tenant before the Questionnaire: `lung-rads` and
 * `contrast-agents` are referenced by canonical URL, `#lobes` is contained.
 */
import type { Questionnaire, QuestionnaireItem } from '../../src/sdc/types.js';

const SDC = 'http://hl7.org/fhir/uv/sdc/StructureDefinition/';
const CORE = 'http://hl7.org/fhir/StructureDefinition/';
const UCUM = 'http://unitsofmeasure.org';

export const LUNG_RADS_SYSTEM = 'https://casebook.example/CodeSystem/lung-rads';
export const LUNG_RADS_URL = 'https://casebook.example/fhir/ValueSet/lung-rads';
export const CONTRAST_AGENTS_URL = 'https://casebook.example/fhir/ValueSet/contrast-agents';
export const SNOMED = 'http://snomed.info/sct';
export const FINDINGS_SYSTEM = 'https://casebook.example/CodeSystem/ct-chest';

/** The `questionnaire-unit` extension: a UCUM unit shown beside the field. */
const unit = (code: string, display = code) => ({
  url: `${CORE}questionnaire-unit`,
  valueCoding: { system: UCUM, code, display },
});
const minValue = (value: Record<string, unknown>) => ({ url: `${CORE}minValue`, ...value });
const maxValue = (value: Record<string, unknown>) => ({ url: `${CORE}maxValue`, ...value });
const decimals = (places: number) => ({ url: `${CORE}maxDecimalPlaces`, valueInteger: places });
/** A display child shown as the item's help (SDC itemControl `help`). */
const help = (linkId: string, text: string): QuestionnaireItem => ({
  linkId,
  type: 'display',
  text,
  extension: [
    {
      url: `${SDC}sdc-questionnaire-itemControl`,
      valueCodeableConcept: {
        coding: [{ system: 'http://hl7.org/fhir/questionnaire-item-control', code: 'help' }],
      },
    },
  ],
});
const option = (code: string, display: string, system = FINDINGS_SYSTEM) => ({
  valueCoding: { system, code, display },
});

/** The stored ValueSets the form names by canonical URL (POST them before the Questionnaire). */
export const CT_CHEST_VALUE_SETS: Record<string, unknown>[] = [
  {
    resourceType: 'ValueSet',
    url: LUNG_RADS_URL,
    version: '2022',
    name: 'LungRads',
    title: 'Lung-RADS v2022 categories',
    status: 'active',
    compose: {
      include: [
        {
          system: LUNG_RADS_SYSTEM,
          concept: [
            { code: '0', display: '0 — Incomplete' },
            { code: '1', display: '1 — Negative' },
            { code: '2', display: '2 — Benign appearance or behaviour' },
            { code: '3', display: '3 — Probably benign' },
            { code: '4A', display: '4A — Suspicious' },
            { code: '4B', display: '4B — Very suspicious' },
            { code: '4X', display: '4X — Very suspicious, additional features' },
          ],
        },
      ],
    },
  },
  {
    resourceType: 'ValueSet',
    url: CONTRAST_AGENTS_URL,
    version: '1',
    name: 'ContrastAgents',
    title: 'Iodinated contrast agents',
    status: 'active',
    compose: {
      include: [
        {
          system: SNOMED,
          concept: [
            { code: '395767004', display: 'Iohexol' },
            { code: '386932002', display: 'Iopamidol' },
            { code: '109223004', display: 'Iodixanol' },
            { code: '412238007', display: 'Iomeprol' },
          ],
        },
      ],
    },
  },
];

/** linkIds of the 16 required items. */
export const CT_CHEST_REQUIRED = [
  'exam-date',
  'indication',
  'priority',
  'comparison-date',
  'contrast',
  'contrast-agent',
  'slice-thickness',
  'height',
  'weight',
  'nodules-present',
  'nodule-lobe',
  'nodule-size',
  'lung-rads',
  'impression',
  'critical-finding',
  'critical-communicated-to',
] as const;

/**
 * The CT chest form at `url` (version 1). 60 items in all (groups, questions, display), in seven
 * top-level groups.
 */
export const ctChestQuestionnaire = (url: string): Questionnaire => ({
  resourceType: 'Questionnaire',
  url,
  version: '1',
  name: 'CtChest',
  title: 'CT chest report',
  status: 'active',
  contained: [
    {
      resourceType: 'ValueSet',
      id: 'lobes',
      status: 'active',
      compose: {
        include: [
          {
            system: SNOMED,
            concept: [
              { code: '45653009', display: 'Right upper lobe' },
              { code: '72481006', display: 'Right middle lobe' },
              { code: '266005', display: 'Right lower lobe' },
              { code: '44714003', display: 'Left upper lobe' },
              { code: '41224006', display: 'Left lower lobe' },
            ],
          },
        ],
      },
    },
  ],
  extension: [
    {
      url: `${CORE}variable`,
      valueExpression: {
        name: 'heightM',
        language: 'text/fhirpath',
        expression: "%resource.repeat(item).where(linkId='height').answer.value / 100",
      },
    },
    {
      url: `${CORE}variable`,
      valueExpression: {
        name: 'weightKg',
        language: 'text/fhirpath',
        expression: "%resource.repeat(item).where(linkId='weight').answer.value",
      },
    },
  ],
  item: [
    {
      linkId: 'intro',
      type: 'display',
      text: 'Report the findings of a contrast or non-contrast CT of the chest. Items marked * are required.',
    },
    {
      linkId: 'exam',
      type: 'group',
      text: 'Examination',
      item: [
        { linkId: 'exam-date', type: 'date', text: 'Date of examination', required: true },
        { linkId: 'indication', type: 'text', text: 'Clinical indication', required: true, maxLength: 1000 },
        { linkId: 'referrer', type: 'string', text: 'Referring clinician', maxLength: 120 },
        {
          linkId: 'priority',
          type: 'coding',
          text: 'Priority',
          required: true,
          answerOption: [
            option('routine', 'Routine'),
            option('urgent', 'Urgent'),
            option('emergency', 'Emergency'),
          ],
        },
        { linkId: 'comparison', type: 'boolean', text: 'Prior imaging available for comparison' },
        {
          linkId: 'comparison-date',
          type: 'date',
          text: 'Date of the prior examination',
          required: true,
          enableWhen: [{ question: 'comparison', operator: '=', answerBoolean: true }],
        },
      ],
    },
    {
      linkId: 'technique',
      type: 'group',
      text: 'Technique',
      item: [
        { linkId: 'contrast', type: 'boolean', text: 'Intravenous contrast given', required: true },
        {
          linkId: 'contrast-agent',
          type: 'coding',
          text: 'Contrast agent',
          required: true,
          answerValueSet: CONTRAST_AGENTS_URL,
          enableWhen: [{ question: 'contrast', operator: '=', answerBoolean: true }],
        },
        {
          linkId: 'contrast-volume',
          type: 'decimal',
          text: 'Contrast volume',
          extension: [
            unit('mL'),
            minValue({ valueDecimal: 0 }),
            maxValue({ valueDecimal: 200 }),
            decimals(1),
          ],
          enableWhen: [{ question: 'contrast', operator: '=', answerBoolean: true }],
        },
        {
          linkId: 'slice-thickness',
          type: 'decimal',
          text: 'Slice thickness',
          required: true,
          extension: [
            unit('mm'),
            minValue({ valueDecimal: 0.5 }),
            maxValue({ valueDecimal: 10 }),
            decimals(2),
          ],
          item: [help('slice-thickness-help', 'The thinnest reconstruction used for reading.')],
        },
        {
          linkId: 'dlp',
          type: 'decimal',
          text: 'Dose-length product',
          extension: [
            unit('mGy.cm'),
            minValue({ valueDecimal: 0 }),
            maxValue({ valueDecimal: 5000 }),
            decimals(1),
          ],
        },
        {
          linkId: 'ctdi',
          type: 'decimal',
          text: 'CTDIvol',
          extension: [
            unit('mGy'),
            minValue({ valueDecimal: 0 }),
            maxValue({ valueDecimal: 100 }),
            decimals(2),
          ],
        },
        {
          linkId: 'dose-note',
          type: 'display',
          text: 'Dose values are taken from the scanner’s dose report.',
        },
      ],
    },
    {
      linkId: 'measurements',
      type: 'group',
      text: 'Patient measurements',
      item: [
        {
          linkId: 'height',
          type: 'decimal',
          text: 'Height',
          required: true,
          extension: [
            unit('cm'),
            minValue({ valueDecimal: 50 }),
            maxValue({ valueDecimal: 250 }),
            decimals(1),
          ],
        },
        {
          linkId: 'weight',
          type: 'decimal',
          text: 'Weight',
          required: true,
          extension: [
            unit('kg'),
            minValue({ valueDecimal: 2 }),
            maxValue({ valueDecimal: 400 }),
            decimals(1),
          ],
        },
        {
          linkId: 'bmi',
          type: 'decimal',
          text: 'Body mass index',
          readOnly: true,
          extension: [
            unit('kg/m2', 'kg/m²'),
            {
              url: `${SDC}sdc-questionnaire-calculatedExpression`,
              valueExpression: {
                language: 'text/fhirpath',
                expression: '(%weightKg / (%heightM * %heightM)).round(1)',
              },
            },
          ],
        },
      ],
    },
    {
      linkId: 'lungs',
      type: 'group',
      text: 'Lungs and pleura',
      item: [
        {
          linkId: 'emphysema',
          type: 'coding',
          text: 'Emphysema',
          answerOption: [
            option('none', 'None'),
            option('mild', 'Mild'),
            option('moderate', 'Moderate'),
            option('severe', 'Severe'),
          ],
        },
        {
          linkId: 'emphysema-pattern',
          type: 'string',
          text: 'Emphysema pattern',
          answerConstraint: 'optionsOrString',
          answerOption: [
            { valueString: 'Centrilobular' },
            { valueString: 'Paraseptal' },
            { valueString: 'Panlobular' },
          ],
          enableWhen: [
            { question: 'emphysema', operator: 'exists', answerBoolean: true },
            {
              question: 'emphysema',
              operator: '!=',
              answerCoding: { system: FINDINGS_SYSTEM, code: 'none' },
            },
          ],
          enableBehavior: 'all',
        },
        { linkId: 'nodules-present', type: 'boolean', text: 'Pulmonary nodules present', required: true },
        {
          linkId: 'nodule',
          type: 'group',
          text: 'Nodule',
          repeats: true,
          enableWhen: [{ question: 'nodules-present', operator: '=', answerBoolean: true }],
          item: [
            {
              linkId: 'nodule-lobe',
              type: 'coding',
              text: 'Lobe',
              required: true,
              answerValueSet: '#lobes',
            },
            {
              linkId: 'nodule-type',
              type: 'coding',
              text: 'Type',
              answerOption: [
                option('solid', 'Solid'),
                option('part-solid', 'Part-solid'),
                option('ground-glass', 'Ground glass'),
              ],
            },
            {
              linkId: 'nodule-size',
              type: 'decimal',
              text: 'Mean diameter',
              required: true,
              extension: [
                unit('mm'),
                minValue({ valueDecimal: 1 }),
                maxValue({ valueDecimal: 300 }),
                decimals(1),
              ],
            },
            {
              linkId: 'nodule-solid-size',
              type: 'decimal',
              text: 'Solid component',
              extension: [
                unit('mm'),
                minValue({ valueDecimal: 0 }),
                maxValue({ valueDecimal: 300 }),
                decimals(1),
              ],
              enableWhen: [
                {
                  question: 'nodule-type',
                  operator: '=',
                  answerCoding: { system: FINDINGS_SYSTEM, code: 'part-solid' },
                },
              ],
            },
            {
              linkId: 'nodule-image',
              type: 'integer',
              text: 'Image number',
              extension: [minValue({ valueInteger: 1 }), maxValue({ valueInteger: 5000 })],
            },
            { linkId: 'nodule-calcified', type: 'boolean', text: 'Calcified' },
            {
              linkId: 'nodule-margin',
              type: 'coding',
              text: 'Margin',
              answerOption: [
                option('smooth', 'Smooth'),
                option('lobulated', 'Lobulated'),
                option('spiculated', 'Spiculated'),
              ],
            },
          ],
        },
        {
          linkId: 'lung-rads',
          type: 'coding',
          text: 'Lung-RADS category',
          required: true,
          answerValueSet: LUNG_RADS_URL,
          enableWhen: [{ question: 'nodules-present', operator: '=', answerBoolean: true }],
        },
        { linkId: 'consolidation', type: 'boolean', text: 'Consolidation' },
        {
          linkId: 'consolidation-site',
          type: 'string',
          text: 'Site of consolidation',
          enableWhen: [{ question: 'consolidation', operator: '=', answerBoolean: true }],
        },
        {
          linkId: 'effusion',
          type: 'coding',
          text: 'Pleural effusion',
          answerOption: [
            option('none', 'None'),
            option('left', 'Left'),
            option('right', 'Right'),
            option('bilateral', 'Bilateral'),
          ],
        },
        {
          linkId: 'effusion-depth',
          type: 'quantity',
          text: 'Effusion depth',
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
          enableWhen: [
            { question: 'effusion', operator: '=', answerCoding: { system: FINDINGS_SYSTEM, code: 'left' } },
            { question: 'effusion', operator: '=', answerCoding: { system: FINDINGS_SYSTEM, code: 'right' } },
            {
              question: 'effusion',
              operator: '=',
              answerCoding: { system: FINDINGS_SYSTEM, code: 'bilateral' },
            },
          ],
          enableBehavior: 'any',
        },
      ],
    },
    {
      linkId: 'mediastinum',
      type: 'group',
      text: 'Mediastinum and heart',
      item: [
        { linkId: 'lymph-nodes', type: 'boolean', text: 'Enlarged lymph nodes' },
        {
          linkId: 'lymph-node-axis',
          type: 'integer',
          text: 'Largest short axis',
          extension: [unit('mm'), minValue({ valueInteger: 1 }), maxValue({ valueInteger: 100 })],
          enableWhen: [{ question: 'lymph-nodes', operator: '=', answerBoolean: true }],
        },
        {
          linkId: 'lymph-node-station',
          type: 'string',
          text: 'Station',
          answerConstraint: 'optionsOrString',
          answerOption: [
            { valueString: '4R' },
            { valueString: '4L' },
            { valueString: '7' },
            { valueString: '10R' },
          ],
          enableWhen: [{ question: 'lymph-nodes', operator: '=', answerBoolean: true }],
        },
        {
          linkId: 'heart-size',
          type: 'coding',
          text: 'Heart size',
          answerOption: [option('normal', 'Normal'), option('enlarged', 'Enlarged')],
        },
        {
          linkId: 'coronary-calcification',
          type: 'coding',
          text: 'Coronary artery calcification',
          answerOption: [
            option('none', 'None'),
            option('mild', 'Mild'),
            option('moderate', 'Moderate'),
            option('severe', 'Severe'),
          ],
        },
        {
          linkId: 'aorta-diameter',
          type: 'decimal',
          text: 'Ascending aorta diameter',
          extension: [
            unit('mm'),
            minValue({ valueDecimal: 10 }),
            maxValue({ valueDecimal: 100 }),
            decimals(0),
          ],
        },
      ],
    },
    {
      linkId: 'other',
      type: 'group',
      text: 'Other findings',
      item: [
        { linkId: 'other-findings', type: 'boolean', text: 'Incidental findings outside the chest' },
        {
          linkId: 'incidental',
          type: 'group',
          text: 'Incidental finding',
          enableWhen: [{ question: 'other-findings', operator: '=', answerBoolean: true }],
          item: [
            {
              linkId: 'incidental-organ',
              type: 'coding',
              text: 'Organ',
              answerOption: [
                option('thyroid', 'Thyroid'),
                option('liver', 'Liver'),
                option('adrenal', 'Adrenal gland'),
                option('kidney', 'Kidney'),
                option('bone', 'Bone'),
              ],
            },
            { linkId: 'incidental-description', type: 'text', text: 'Description', maxLength: 500 },
            { linkId: 'incidental-follow-up', type: 'boolean', text: 'Follow-up recommended' },
          ],
        },
        { linkId: 'bones', type: 'string', text: 'Bones and soft tissues', maxLength: 300 },
      ],
    },
    {
      linkId: 'conclusion',
      type: 'group',
      text: 'Conclusion',
      item: [
        { linkId: 'impression', type: 'text', text: 'Impression', required: true, maxLength: 2000 },
        {
          linkId: 'recommendation',
          type: 'coding',
          text: 'Recommendation',
          answerOption: [
            option('none', 'No further imaging'),
            option('ct-follow-up', 'Follow-up CT'),
            option('pet-ct', 'PET-CT'),
            option('biopsy', 'Tissue sampling'),
            option('mdt', 'Multidisciplinary discussion'),
          ],
        },
        {
          linkId: 'follow-up-months',
          type: 'integer',
          text: 'Follow-up CT in',
          extension: [unit('mo', 'months'), minValue({ valueInteger: 1 }), maxValue({ valueInteger: 24 })],
          enableWhen: [
            {
              question: 'recommendation',
              operator: '=',
              answerCoding: { system: FINDINGS_SYSTEM, code: 'ct-follow-up' },
            },
          ],
        },
        { linkId: 'critical-finding', type: 'boolean', text: 'Critical finding', required: true },
        {
          linkId: 'critical-communicated-to',
          type: 'string',
          text: 'Communicated to',
          required: true,
          enableWhen: [{ question: 'critical-finding', operator: '=', answerBoolean: true }],
        },
        {
          linkId: 'critical-communicated-at',
          type: 'dateTime',
          text: 'Communicated at',
          enableWhen: [{ question: 'critical-finding', operator: '=', answerBoolean: true }],
        },
        {
          linkId: 'sign-off-note',
          type: 'display',
          text: 'Submitting the report signs it off; a signed-off report can only be amended.',
        },
      ],
    },
  ],
});

/** Every item of a Questionnaire, depth first. */
export const allItems = (items: readonly QuestionnaireItem[] | undefined): QuestionnaireItem[] =>
  (items ?? []).flatMap((item) => [item, ...allItems(item.item)]);
