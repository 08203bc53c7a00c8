/**
 * SDC $populate as a pure function (issue 4; spec §4.4; SDC IG "Expression-based population"):
 * Questionnaires written from the SDC IG patterns, each asserted against the exact
 * QuestionnaireResponse and warnings it produces.
 */
import { expect } from 'chai';
import { evaluateFhirPath, FhirPathError } from '../../src/sdc/fhirpath.js';
import { populate, POPULATE_EXTENSIONS as X } from '../../src/sdc/populate.js';
import type { Json, Questionnaire, QuestionnaireItem } from '../../src/sdc/types.js';

const NOW = new Date('2026-03-01T10:00:00.000Z');
const LOINC = 'http://loinc.org';
const LAUNCH = 'http://hl7.org/fhir/uv/sdc/CodeSystem/launchContext';
const ITEM_WEIGHT = 'http://hl7.org/fhir/StructureDefinition/itemWeight';
const GENDER = 'http://hl7.org/fhir/administrative-gender';

const fhirpath = (expression: string, name?: string) => ({
  language: 'text/fhirpath',
  expression,
  ...(name ? { name } : {}),
});
const launchContext = (code: string, ...types: string[]) => ({
  url: X.launchContext,
  extension: [
    { url: 'name', valueCoding: { system: LAUNCH, code } },
    ...types.map((t) => ({ url: 'type', valueCode: t })),
  ],
});
const variable = (name: string, expression: string) => ({
  url: X.variable,
  valueExpression: fhirpath(expression, name),
});
const initialExpression = (expression: string) => ({
  url: X.initialExpression,
  valueExpression: fhirpath(expression),
});
const calculated = (expression: string) => ({
  url: X.calculatedExpression,
  valueExpression: fhirpath(expression),
});
const populationContext = (name: string, expression: string) => ({
  url: X.itemPopulationContext,
  valueExpression: fhirpath(expression, name),
});

const PATIENT: Json = {
  resourceType: 'Patient',
  id: '17',
  name: [
    { use: 'official', family: 'Chalmers', given: ['Peter', 'James'] },
    { use: 'usual', family: 'Chalmers', given: ['Jim'] },
  ],
  gender: 'male',
  birthDate: '1974-12-25',
};

/* ----------------------------------------------------------------------------- PHQ-9 --- */

const PHQ_ANSWERS: [string, string, number][] = [
  ['LA6568-5', 'Not at all', 0],
  ['LA6569-3', 'Several days', 1],
  ['LA6570-1', 'More than half the days', 2],
  ['LA6571-9', 'Nearly every day', 3],
];
const phqCoding = (index: number) => {
  const [code, display] = PHQ_ANSWERS[index]!;
  return { system: LOINC, code, display };
};
const PHQ_QUESTIONS = [
  ['44250-9', 'Little interest or pleasure in doing things'],
  ['44255-8', 'Feeling down, depressed, or hopeless'],
  ['44259-0', 'Trouble falling or staying asleep, or sleeping too much'],
  ['44254-1', 'Feeling tired or having little energy'],
  ['44251-7', 'Poor appetite or overeating'],
  ['44258-2', 'Feeling bad about yourself'],
  ['44252-5', 'Trouble concentrating on things'],
  ['44253-3', 'Moving or speaking so slowly that other people could have noticed'],
  ['44260-8', 'Thoughts that you would be better off dead, or of hurting yourself'],
] as const;
/** Pre-answered ordinals (initial.valueCoding / initialSelected); undefined = unanswered. */
const PHQ_PRESET: (number | undefined)[] = [1, 2, 3, 0, undefined, 1, 2, undefined, 0];

const phq9 = (): Questionnaire => ({
  resourceType: 'Questionnaire',
  url: 'http://example.org/Questionnaire/phq-9',
  version: '1.0.0',
  status: 'active',
  item: [
    {
      linkId: 'phq-9',
      type: 'group',
      text: 'Over the last 2 weeks, how often have you been bothered by any of the following problems?',
      item: [
        ...PHQ_QUESTIONS.map(([code, text], i): QuestionnaireItem => {
          const preset = PHQ_PRESET[i];
          // Every other preset answer comes from initialSelected rather than initial.
          const selected = preset !== undefined && i % 2 === 1;
          return {
            linkId: code,
            code: [{ system: LOINC, code }],
            type: 'coding',
            text,
            required: true,
            answerOption: PHQ_ANSWERS.map((_, k) => ({
              extension: [{ url: ITEM_WEIGHT, valueDecimal: PHQ_ANSWERS[k]![2] }],
              valueCoding: phqCoding(k),
              ...(selected && k === preset ? { initialSelected: true } : {}),
            })),
            ...(preset !== undefined && !selected ? { initial: [{ valueCoding: phqCoding(preset) }] } : {}),
          };
        }),
        // Declared before the total it depends on: calculations must iterate to settle.
        {
          linkId: 'severity',
          type: 'string',
          text: 'Depression severity',
          readOnly: true,
          extension: [
            calculated(
              "%resource.repeat(item).where(linkId = '44261-6').answer.value.select(iif($this >= 20, 'severe', iif($this >= 15, 'moderately severe', iif($this >= 10, 'moderate', iif($this >= 5, 'mild', 'minimal')))))",
            ),
          ],
        },
        {
          linkId: '44261-6',
          code: [{ system: LOINC, code: '44261-6' }],
          type: 'integer',
          text: 'Patient Health Questionnaire 9 item (PHQ-9) total score',
          readOnly: true,
          extension: [
            calculated("%resource.repeat(item).where(linkId != '44261-6').answer.value.weight().sum()"),
          ],
        },
      ],
    },
  ],
});

const phqAnswerItem = (i: number) => {
  const [code, text] = PHQ_QUESTIONS[i]!;
  const preset = PHQ_PRESET[i];
  return {
    linkId: code,
    text,
    ...(preset !== undefined ? { answer: [{ valueCoding: phqCoding(preset) }] } : {}),
  };
};

/* ------------------------------------------------------------------ demographics form --- */

const demographics = (): Questionnaire => ({
  resourceType: 'Questionnaire',
  url: 'http://example.org/Questionnaire/demographics',
  status: 'active',
  extension: [
    launchContext('patient', 'Patient'),
    variable('official', "%patient.name.where(use = 'official').first()"),
    variable(
      'age',
      'today().toString().substring(0, 4).toInteger() - %patient.birthDate.toString().substring(0, 4).toInteger()',
    ),
  ],
  item: [
    { linkId: 'intro', type: 'display', text: 'Please check your details.' },
    {
      linkId: 'patient',
      type: 'group',
      text: 'Patient',
      item: [
        {
          linkId: 'name',
          type: 'group',
          text: 'Name',
          item: [
            {
              linkId: 'family',
              type: 'string',
              text: 'Family name',
              extension: [initialExpression('%official.family')],
            },
            {
              linkId: 'given',
              type: 'string',
              text: 'Given names',
              repeats: true,
              extension: [initialExpression('%official.given')],
            },
          ],
        },
        {
          linkId: 'birthDate',
          type: 'date',
          text: 'Date of birth',
          extension: [initialExpression('%patient.birthDate')],
        },
        {
          linkId: 'age',
          type: 'integer',
          text: 'Age in years',
          extension: [initialExpression('%age')],
        },
        {
          linkId: 'gender',
          type: 'coding',
          text: 'Administrative gender',
          answerOption: [
            { valueCoding: { system: GENDER, code: 'female', display: 'Female' } },
            { valueCoding: { system: GENDER, code: 'male', display: 'Male' } },
            { valueCoding: { system: GENDER, code: 'other', display: 'Other' } },
          ],
          extension: [initialExpression('%patient.gender')],
        },
      ],
    },
    {
      linkId: 'visit',
      type: 'group',
      text: 'Visit',
      item: [
        { linkId: 'today', type: 'date', text: 'Date', extension: [initialExpression('today()')] },
        { linkId: 'smoker', type: 'boolean', text: 'Smoker', initial: [{ valueBoolean: false }] },
        {
          linkId: 'weight',
          type: 'quantity',
          text: 'Weight',
          extension: [initialExpression("72.5 'kg'")],
        },
        {
          linkId: 'cigarettes',
          type: 'integer',
          text: 'Cigarettes per day',
          initial: [{ valueInteger: 0 }],
          item: [{ linkId: 'since', type: 'date', text: 'Since', initial: [{ valueDate: '2020-01-01' }] }],
        },
        {
          linkId: 'allergies',
          type: 'string',
          text: 'Known allergies',
          repeats: true,
          initial: [{ valueString: 'penicillin' }, { valueString: 'latex' }],
        },
        {
          linkId: 'contact',
          type: 'coding',
          text: 'Preferred contact',
          repeats: true,
          answerOption: [
            { valueCoding: { code: 'phone', display: 'Phone' }, initialSelected: true },
            { valueCoding: { code: 'mail', display: 'Mail' } },
            { valueCoding: { code: 'email', display: 'Email' }, initialSelected: true },
          ],
        },
        { linkId: 'notes', type: 'text', text: 'Notes' },
      ],
    },
  ],
});

const DEMOGRAPHICS_RESPONSE = {
  resourceType: 'QuestionnaireResponse',
  questionnaire: 'http://example.org/Questionnaire/demographics',
  status: 'in-progress',
  subject: { reference: 'Patient/17' },
  item: [
    {
      linkId: 'patient',
      text: 'Patient',
      item: [
        {
          linkId: 'name',
          text: 'Name',
          item: [
            { linkId: 'family', text: 'Family name', answer: [{ valueString: 'Chalmers' }] },
            {
              linkId: 'given',
              text: 'Given names',
              answer: [{ valueString: 'Peter' }, { valueString: 'James' }],
            },
          ],
        },
        { linkId: 'birthDate', text: 'Date of birth', answer: [{ valueDate: '1974-12-25' }] },
        { linkId: 'age', text: 'Age in years', answer: [{ valueInteger: 52 }] },
        {
          linkId: 'gender',
          text: 'Administrative gender',
          answer: [{ valueCoding: { system: GENDER, code: 'male', display: 'Male' } }],
        },
      ],
    },
    {
      linkId: 'visit',
      text: 'Visit',
      item: [
        { linkId: 'today', text: 'Date', answer: [{ valueDate: '2026-03-01' }] },
        { linkId: 'smoker', text: 'Smoker', answer: [{ valueBoolean: false }] },
        {
          linkId: 'weight',
          text: 'Weight',
          answer: [
            { valueQuantity: { value: 72.5, unit: 'kg', system: 'http://unitsofmeasure.org', code: 'kg' } },
          ],
        },
        {
          linkId: 'cigarettes',
          text: 'Cigarettes per day',
          answer: [
            {
              valueInteger: 0,
              item: [{ linkId: 'since', text: 'Since', answer: [{ valueDate: '2020-01-01' }] }],
            },
          ],
        },
        {
          linkId: 'allergies',
          text: 'Known allergies',
          answer: [{ valueString: 'penicillin' }, { valueString: 'latex' }],
        },
        {
          linkId: 'contact',
          text: 'Preferred contact',
          answer: [
            { valueCoding: { code: 'phone', display: 'Phone' } },
            { valueCoding: { code: 'email', display: 'Email' } },
          ],
        },
        { linkId: 'notes', text: 'Notes' },
      ],
    },
  ],
};

const EMPTY_OUTCOME = { resourceType: 'OperationOutcome', issue: [] };

describe('SDC populate (pure)', () => {
  describe('evaluateFhirPath', () => {
    it('evaluates with the R5 model, environment variables and a fixed clock', () => {
      expect(evaluateFhirPath(PATIENT, "Patient.name.where(use = 'usual').given")).to.deep.equal(['Jim']);
      expect(evaluateFhirPath({}, '%p.birthDate', { p: PATIENT })).to.deep.equal(['1974-12-25']);
      expect(evaluateFhirPath({}, 'today()', {}, { now: NOW })).to.deep.equal(['2026-03-01']);
      expect(evaluateFhirPath({}, 'now()', {}, { now: NOW })).to.deep.equal(['2026-03-01T10:00:00.000Z']);
    });

    it('throws FhirPathError on a syntax error and on an undefined variable', () => {
      expect(() => evaluateFhirPath(PATIENT, 'Patient.name.where(')).to.throw(FhirPathError);
      expect(() => evaluateFhirPath(PATIENT, '%nope')).to.throw(FhirPathError, /nope/);
    });
  });

  it('scores a PHQ-9: initial and initialSelected answers, itemWeight total and a severity that depends on it', async () => {
    const { response, issues } = await populate({ questionnaire: phq9(), context: [], now: NOW });
    expect(issues).to.deep.equal(EMPTY_OUTCOME);
    expect(response).to.deep.equal({
      resourceType: 'QuestionnaireResponse',
      questionnaire: 'http://example.org/Questionnaire/phq-9|1.0.0',
      status: 'in-progress',
      item: [
        {
          linkId: 'phq-9',
          text: 'Over the last 2 weeks, how often have you been bothered by any of the following problems?',
          item: [
            ...PHQ_QUESTIONS.map((_, i) => phqAnswerItem(i)),
            { linkId: 'severity', text: 'Depression severity', answer: [{ valueString: 'mild' }] },
            {
              linkId: '44261-6',
              text: 'Patient Health Questionnaire 9 item (PHQ-9) total score',
              answer: [{ valueInteger: 9 }],
            },
          ],
        },
      ],
    });
  });

  it('leaves out an unanswered PHQ-9 group, total included (fhirpath.js: sum() of nothing is empty)', async () => {
    const questionnaire = phq9();
    for (const item of questionnaire.item![0]!.item!) {
      delete item.initial;
      for (const option of item.answerOption ?? []) delete option.initialSelected;
    }
    const { response, issues } = await populate({ questionnaire, context: [] });
    expect(issues).to.deep.equal(EMPTY_OUTCOME);
    // The optional group has no answer beneath it (a total of 0 would be one): it is left out,
    // and with it the response's only item (issue 13: no empty groups, no empty arrays).
    expect(questionnaire.item![0]!.required).to.not.equal(true);
    expect(response.item).to.equal(undefined);

    // A required group is kept, empty, so that $validate can name its missing answers.
    questionnaire.item![0]!.required = true;
    const required = await populate({ questionnaire, context: [] });
    const items = required.response.item![0]!.item!;
    expect(items.slice(0, 9)).to.deep.equal(PHQ_QUESTIONS.map(([linkId, text]) => ({ linkId, text })));
    expect(items.slice(9)).to.deep.equal([
      { linkId: 'severity', text: 'Depression severity' },
      { linkId: '44261-6', text: 'Patient Health Questionnaire 9 item (PHQ-9) total score' },
    ]);
  });

  it('fills nested groups from the launch context, variables, initial values and initialSelected options', async () => {
    const { response, issues } = await populate({
      questionnaire: demographics(),
      context: [{ name: 'subject', content: PATIENT }],
      now: NOW,
    });
    expect(issues).to.deep.equal(EMPTY_OUTCOME);
    expect(response).to.deep.equal(DEMOGRAPHICS_RESPONSE);
  });

  it('accepts the SDC launch context name itself (patient) and an explicit subject', async () => {
    const { response, issues } = await populate({
      questionnaire: demographics(),
      subject: { reference: 'Patient/other' },
      context: [{ name: 'patient', content: PATIENT }],
      now: NOW,
    });
    expect(issues).to.deep.equal(EMPTY_OUTCOME);
    expect(response).to.deep.equal({ ...DEMOGRAPHICS_RESPONSE, subject: { reference: 'Patient/other' } });
  });

  it('is deterministic: the same input gives the same output', async () => {
    const run = () =>
      populate({ questionnaire: demographics(), context: [{ name: 'subject', content: PATIENT }], now: NOW });
    expect(JSON.stringify(await run())).to.equal(JSON.stringify(await run()));
    expect(JSON.stringify((await populate({ questionnaire: phq9(), context: [] })).response)).to.equal(
      JSON.stringify((await populate({ questionnaire: phq9(), context: [] })).response),
    );
  });

  it('warns when the launch context is missing or of the wrong type, leaving those answers empty', async () => {
    const missing = await populate({ questionnaire: demographics(), context: [], now: NOW });
    expect(missing.issues.issue).to.deep.equal([
      {
        severity: 'warning',
        code: 'not-found',
        diagnostics:
          "launch context %patient was not supplied (pass a context part named 'subject' or 'patient'); expressions using it find nothing",
        expression: ['Questionnaire.extension[0]'],
      },
    ]);
    expect(missing.response.subject).to.equal(undefined);
    // The patient group, all of whose answers come from the missing context, is left out whole.
    const rootItems = missing.response.item!.map((i) => i.linkId);
    expect(rootItems).to.deep.equal(['visit']);

    const wrong = await populate({
      questionnaire: demographics(),
      context: [{ name: 'patient', content: { resourceType: 'Practitioner', id: '3' } }],
      now: NOW,
    });
    expect(wrong.issues.issue).to.deep.equal([
      {
        severity: 'warning',
        code: 'value',
        diagnostics: 'launch context %patient must be a Patient, not Practitioner; it is ignored',
        expression: ['Questionnaire.extension[0]'],
      },
    ]);
    expect(wrong.response.item!.map((i) => i.linkId)).to.deep.equal(rootItems);
  });

  it('repeats a group per itemPopulationContext element: %patient.name and Observations of a Bundle context', async () => {
    const observation = (id: string, kg: number, date: string) => ({
      fullUrl: `urn:uuid:${id}`,
      resource: {
        resourceType: 'Observation',
        id,
        status: 'final',
        code: { coding: [{ system: LOINC, code: '29463-7', display: 'Body weight' }] },
        effectiveDateTime: date,
        valueQuantity: { value: kg, unit: 'kg', system: 'http://unitsofmeasure.org', code: 'kg' },
      },
    });
    const bundle = {
      resourceType: 'Bundle',
      type: 'collection',
      entry: [
        observation('w1', 80.2, '2026-01-10T08:00:00Z'),
        {
          resource: {
            resourceType: 'Observation',
            id: 'h1',
            status: 'final',
            code: { coding: [{ system: LOINC, code: '8302-2' }] },
          },
        },
        observation('w2', 79, '2026-02-14T09:30:00Z'),
      ],
    };
    const questionnaire: Questionnaire = {
      resourceType: 'Questionnaire',
      status: 'active',
      extension: [
        launchContext('patient', 'Patient'),
        {
          url: X.launchContext,
          extension: [
            { url: 'name', valueId: 'weights' },
            { url: 'type', valueCode: 'Bundle' },
          ],
        },
      ],
      item: [
        {
          linkId: 'names',
          type: 'group',
          text: 'Names',
          repeats: true,
          extension: [populationContext('name', '%patient.name')],
          item: [
            { linkId: 'use', type: 'string', extension: [initialExpression('%name.use')] },
            { linkId: 'family', type: 'string', extension: [initialExpression('%name.family')] },
            {
              linkId: 'given',
              type: 'string',
              repeats: true,
              extension: [initialExpression('%name.given')],
            },
          ],
        },
        {
          linkId: 'weights',
          type: 'group',
          repeats: true,
          extension: [
            populationContext('obs', "%weights.entry.resource.where(code.coding.code = '29463-7')"),
          ],
          item: [
            { linkId: 'when', type: 'dateTime', extension: [initialExpression('%obs.effective')] },
            { linkId: 'kg', type: 'quantity', extension: [initialExpression('%obs.value')] },
            { linkId: 'source', type: 'reference', extension: [initialExpression('%obs')] },
            {
              linkId: 'heavy',
              type: 'boolean',
              extension: [calculated('%obs.value.value > 79.5')],
            },
          ],
        },
        {
          linkId: 'none',
          type: 'group',
          repeats: true,
          extension: [populationContext('c', '%patient.contact')],
          item: [
            { linkId: 'contact-name', type: 'string', extension: [initialExpression('%c.name.family')] },
          ],
        },
      ],
    };
    const { response, issues } = await populate({
      questionnaire,
      context: [
        { name: 'subject', content: PATIENT },
        { name: 'weights', content: bundle },
      ],
      now: NOW,
    });
    expect(issues).to.deep.equal(EMPTY_OUTCOME);
    const weight = (id: string, value: number, when: string, heavy: boolean) => ({
      linkId: 'weights',
      item: [
        { linkId: 'when', answer: [{ valueDateTime: when }] },
        {
          linkId: 'kg',
          answer: [{ valueQuantity: { value, unit: 'kg', system: 'http://unitsofmeasure.org', code: 'kg' } }],
        },
        { linkId: 'source', answer: [{ valueReference: { reference: `Observation/${id}` } }] },
        { linkId: 'heavy', answer: [{ valueBoolean: heavy }] },
      ],
    });
    expect(response).to.deep.equal({
      resourceType: 'QuestionnaireResponse',
      status: 'in-progress',
      subject: { reference: 'Patient/17' },
      item: [
        {
          linkId: 'names',
          text: 'Names',
          item: [
            { linkId: 'use', answer: [{ valueString: 'official' }] },
            { linkId: 'family', answer: [{ valueString: 'Chalmers' }] },
            { linkId: 'given', answer: [{ valueString: 'Peter' }, { valueString: 'James' }] },
          ],
        },
        {
          linkId: 'names',
          text: 'Names',
          item: [
            { linkId: 'use', answer: [{ valueString: 'usual' }] },
            { linkId: 'family', answer: [{ valueString: 'Chalmers' }] },
            { linkId: 'given', answer: [{ valueString: 'Jim' }] },
          ],
        },
        weight('w1', 80.2, '2026-01-10T08:00:00Z', true),
        weight('w2', 79, '2026-02-14T09:30:00Z', false),
        // No contacts: no instance (an optional group with no answers is left out; the editor
        // shows an empty group of its own).
      ],
    });
  });

  it('turns failing, wrong-typed, surplus and unsupported expressions into warnings', async () => {
    const questionnaire: Questionnaire = {
      resourceType: 'Questionnaire',
      url: 'http://example.org/Questionnaire/broken',
      status: 'active',
      extension: [
        launchContext('patient', 'Patient'),
        launchContext('encounter', 'Encounter'),
        {
          url: X.variable,
          valueExpression: {
            name: 'labs',
            language: 'application/x-fhir-query',
            expression: 'Observation?subject={{%patient.id}}',
          },
        },
        variable('bad', 'Patient.name.where('),
      ],
      item: [
        {
          linkId: 'syntax',
          type: 'string',
          extension: [initialExpression('%patient.name.first().family.where(')],
        },
        { linkId: 'undefined', type: 'string', extension: [initialExpression('%nowhere.family')] },
        { linkId: 'date', type: 'date', extension: [initialExpression('%patient.name')] },
        {
          linkId: 'count',
          type: 'integer',
          extension: [initialExpression("'three'")],
          initial: [{ valueInteger: 3 }],
        },
        { linkId: 'first', type: 'string', extension: [initialExpression('%patient.name.given')] },
        {
          linkId: 'option',
          type: 'coding',
          answerOption: [{ valueCoding: { system: GENDER, code: 'female' } }],
          extension: [initialExpression('%patient.gender')],
        },
        {
          linkId: 'g',
          type: 'group',
          item: [
            { linkId: 'calc', type: 'decimal', extension: [calculated('%resource.item.answer.value.foo()')] },
          ],
        },
        { linkId: 'nothing', type: 'string', extension: [initialExpression('%encounter.id')] },
      ],
    };
    const { response, issues } = await populate({
      questionnaire,
      context: [{ name: 'subject', content: PATIENT }],
      now: NOW,
    });
    expect(response).to.deep.equal({
      resourceType: 'QuestionnaireResponse',
      questionnaire: 'http://example.org/Questionnaire/broken',
      status: 'in-progress',
      subject: { reference: 'Patient/17' },
      item: [
        { linkId: 'syntax' },
        { linkId: 'undefined' },
        { linkId: 'date' },
        // The expression's value does not fit, so the static initial value applies.
        { linkId: 'count', answer: [{ valueInteger: 3 }] },
        { linkId: 'first', answer: [{ valueString: 'Peter' }] },
        { linkId: 'option' },

        { linkId: 'nothing' },
      ],
    });
    const summary = issues.issue.map((i) => ({ code: i.code, expression: i.expression }));
    expect(summary).to.deep.equal([
      { code: 'not-found', expression: ['Questionnaire.extension[1]'] },
      { code: 'not-supported', expression: ['Questionnaire.extension[2]'] },
      { code: 'processing', expression: ['Questionnaire.extension[3]'] },
      { code: 'processing', expression: ['Questionnaire.item[0]'] },
      { code: 'processing', expression: ['Questionnaire.item[1]'] },
      { code: 'value', expression: ['Questionnaire.item[2]'] },
      { code: 'value', expression: ['Questionnaire.item[2]'] },
      { code: 'value', expression: ['Questionnaire.item[3]'] },
      { code: 'value', expression: ['Questionnaire.item[4]'] },
      { code: 'value', expression: ['Questionnaire.item[5]'] },
      { code: 'processing', expression: ['Questionnaire.item[6].item[0]'] },
    ]);
    for (const issue of issues.issue) expect(issue.severity).to.equal('warning');
    expect(issues.issue.map((i) => i.diagnostics)).to.deep.equal([
      "launch context %encounter was not supplied (pass a context part named 'encounter'); expressions using it find nothing",
      // Without a query runner (the pure call) a query is not run, and says so.
      'variable %labs: application/x-fhir-query is not supported here; it is ignored',
      issues.issue[2]!.diagnostics,
      issues.issue[3]!.diagnostics,
      "initialExpression '%nowhere.family' failed: Attempting to access an undefined environment variable: nowhere",
      'initialExpression of item \'date\': FHIR.HumanName {"use":"official","family":"Chalmers","given":["Peter","James"]} cannot answer a date item; the value is ignored',
      'initialExpression of item \'date\': FHIR.HumanName {"use":"usual","family":"Chalmers","given":["Jim"]} cannot answer a date item; the value is ignored',
      'initialExpression of item \'count\': System.String "three" cannot answer an integer item; the value is ignored',
      "initialExpression of item 'first' gave 3 values but the item does not repeat; the first is used",
      'initialExpression of item \'option\': FHIR.code "male" matches no answerOption code of the item; the value is ignored',
      "calculatedExpression '%resource.item.answer.value.foo()' failed: Not implemented: foo",
    ]);
    expect(issues.issue[2]!.diagnostics).to.match(/^variable %bad 'Patient\.name\.where\(' failed: /);
    expect(issues.issue[3]!.diagnostics).to.match(
      /^initialExpression '%patient\.name\.first\(\)\.family\.where\(' failed: /,
    );
  });

  it('sets encounter and author from the encounter and user contexts, and a supplied variable wins over its expression', async () => {
    const questionnaire: Questionnaire = {
      resourceType: 'Questionnaire',
      status: 'active',
      extension: [variable('site', "'computed'")],
      item: [{ linkId: 'site', type: 'string', extension: [initialExpression('%site.name')] }],
    };
    const { response, issues } = await populate({
      questionnaire,
      context: [
        { name: 'subject', content: PATIENT },
        { name: 'encounter', content: { resourceType: 'Encounter', id: '5', status: 'in-progress' } },
        { name: 'user', content: { resourceType: 'Practitioner', id: '9' } },
        { name: 'site', content: { resourceType: 'Location', id: 'x', name: 'Ward 3' } },
      ],
    });
    expect(issues).to.deep.equal(EMPTY_OUTCOME);
    expect(response).to.deep.equal({
      resourceType: 'QuestionnaireResponse',
      status: 'in-progress',
      subject: { reference: 'Patient/17' },
      encounter: { reference: 'Encounter/5' },
      author: { reference: 'Practitioner/9' },
      item: [{ linkId: 'site', answer: [{ valueString: 'Ward 3' }] }],
    });
  });

  it('converts expression results to each answer type', async () => {
    const item = (linkId: string, type: string, expr: string, extra: Partial<QuestionnaireItem> = {}) => ({
      linkId,
      type,
      extension: [initialExpression(expr)],
      ...extra,
    });
    const questionnaire: Questionnaire = {
      resourceType: 'Questionnaire',
      status: 'active',
      extension: [launchContext('patient', 'Patient')],
      item: [
        item('bool', 'boolean', '%patient.birthDate.exists()'),
        item('dec', 'decimal', '7 / 2'),
        item('int-from-dec', 'integer', '3.0'),
        item('dt', 'dateTime', '@2026-02-03T04:05'),
        item('dt-from-date', 'dateTime', '%patient.birthDate'),
        item('date-from-dt', 'date', 'now()'),
        item('time', 'time', '@T14:30'),
        item('text', 'text', '%patient.birthDate'),
        item('str-from-int', 'string', '1 + 1'),
        item('url', 'url', "'https://example.org/x'"),
        item('ref', 'reference', '%patient'),
        item('ref-string', 'reference', "'Practitioner/7'"),
        item('qty-years', 'quantity', '3 years'),
        item('qty-number', 'quantity', '120', {
          extension: [
            initialExpression('120'),
            {
              url: X.unit,
              valueCoding: { system: 'http://unitsofmeasure.org', code: 'mm[Hg]', display: 'mmHg' },
            },
          ],
        }),
        item('cc', 'coding', '%patient.maritalStatus', {
          answerConstraint: 'optionsOrType',
        }),
        item('open', 'coding', "'free text'", {
          answerConstraint: 'optionsOrString',
          answerOption: [{ valueCoding: { code: 'a' } }],
        }),
      ],
    };
    const patient = {
      ...PATIENT,
      maritalStatus: {
        coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v3-MaritalStatus', code: 'M' }],
      },
    };
    const { response, issues } = await populate({
      questionnaire,
      context: [{ name: 'patient', content: patient }],
      now: NOW,
    });
    expect(issues).to.deep.equal(EMPTY_OUTCOME);
    expect(response.item).to.deep.equal([
      { linkId: 'bool', answer: [{ valueBoolean: true }] },
      { linkId: 'dec', answer: [{ valueDecimal: 3.5 }] },
      { linkId: 'int-from-dec', answer: [{ valueInteger: 3 }] },
      { linkId: 'dt', answer: [{ valueDateTime: '2026-02-03T04:05:00' }] },
      { linkId: 'dt-from-date', answer: [{ valueDateTime: '1974-12-25' }] },
      { linkId: 'date-from-dt', answer: [{ valueDate: '2026-03-01' }] },
      { linkId: 'time', answer: [{ valueTime: '14:30:00' }] },
      { linkId: 'text', answer: [{ valueString: '1974-12-25' }] },
      { linkId: 'str-from-int', answer: [{ valueString: '2' }] },
      { linkId: 'url', answer: [{ valueUri: 'https://example.org/x' }] },
      { linkId: 'ref', answer: [{ valueReference: { reference: 'Patient/17' } }] },
      { linkId: 'ref-string', answer: [{ valueReference: { reference: 'Practitioner/7' } }] },
      {
        linkId: 'qty-years',
        answer: [
          { valueQuantity: { value: 3, unit: 'years', system: 'http://unitsofmeasure.org', code: 'a' } },
        ],
      },
      {
        linkId: 'qty-number',
        answer: [
          {
            valueQuantity: { value: 120, unit: 'mmHg', system: 'http://unitsofmeasure.org', code: 'mm[Hg]' },
          },
        ],
      },
      {
        linkId: 'cc',
        answer: [
          { valueCoding: { system: 'http://terminology.hl7.org/CodeSystem/v3-MaritalStatus', code: 'M' } },
        ],
      },
      { linkId: 'open', answer: [{ valueString: 'free text' }] },
    ]);
  });

  it('warns for a coding outside optionsOnly answerOptions, a non-repeating population context and a calculation that reads itself (a cycle, not evaluated)', async () => {
    const questionnaire: Questionnaire = {
      resourceType: 'Questionnaire',
      status: 'active',
      extension: [launchContext('patient', 'Patient')],
      item: [
        {
          linkId: 'coded',
          type: 'coding',
          answerOption: [{ valueCoding: { system: GENDER, code: 'female' } }],
          extension: [initialExpression(`%patient.gender.select(%factory.Coding('${GENDER}', $this))`)],
        },
        {
          linkId: 'one-name',
          type: 'group',
          extension: [populationContext('n', '%patient.name')],
          item: [{ linkId: 'family', type: 'string', extension: [initialExpression('%n.family')] }],
        },
        {
          linkId: 'counter',
          type: 'integer',
          initial: [{ valueInteger: 0 }],
          extension: [calculated("%resource.item.where(linkId = 'counter').answer.value + 1")],
        },
      ],
    };
    const { response, issues } = await populate({
      questionnaire,
      context: [{ name: 'subject', content: PATIENT }],
      now: NOW,
    });
    expect(response.item).to.deep.equal([
      { linkId: 'coded' },
      { linkId: 'one-name', item: [{ linkId: 'family', answer: [{ valueString: 'Chalmers' }] }] },
      { linkId: 'counter', answer: [{ valueInteger: 0 }] },
    ]);
    expect(issues.issue).to.deep.equal([
      {
        severity: 'warning',
        code: 'value',
        diagnostics: `initialExpression of item 'coded': FHIR.Coding {"system":"${GENDER}","code":"male"} is not one of the item's answerOptions; the value is ignored`,
        expression: ['Questionnaire.item[0]'],
      },
      {
        severity: 'warning',
        code: 'value',
        diagnostics:
          "itemPopulationContext of group 'one-name' gave 2 elements but the group does not repeat; the first is used",
        expression: ['Questionnaire.item[1]'],
      },
      {
        severity: 'warning',
        code: 'business-rule',
        diagnostics:
          'the enableWhen, enableWhenExpression or calculatedExpression of linkId "counter" depend on each other in a cycle: linkId "counter" not calculated',
        expression: ['Questionnaire.item[2]'],
      },
    ]);
  });
});
