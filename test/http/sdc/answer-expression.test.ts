/**
 * Answers computed at run time and the query budget, against casebook's own data (issue 35;
 * docs/interface.md §4.4 "Queries" and "Computed answer lists"; SDC IG "Expressions"):
 *
 * - answerExpression as x-fhir-query in $validate: an answer outside what the query finds for the
 *   response's patient is an error; under a patient session the query sees that patient only.
 * - The editor shows the computed list as the item's choices (computed when the page renders).
 * - A form the size of the MBS 715 health check (20 queries, 116 items) populates in one request
 *   with every answer; a form of more queries than the budget allows names the items it could
 *   not fill.
 * On PGlite and PostgreSQL.
 */
import { expect } from 'chai';
import { MAX_QUERIES_PER_REQUEST } from '../../../src/sdc/fhir-query.js';
import { GENERAL, seed, startTestApp, type TestApp, unique } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import { type FhirResponse, fhir } from '../../support/fhir.js';
import {
  appUrlOf,
  givenTwoPatients,
  leakedIn,
  p1Session,
  type TwoPatients,
} from '../../support/isolation.js';

const SDC = 'http://hl7.org/fhir/uv/sdc/StructureDefinition';
const QUERY = 'application/x-fhir-query';
const ANSWER = `${SDC}/sdc-questionnaire-answerExpression`;
const INITIAL = `${SDC}/sdc-questionnaire-initialExpression`;
const launchPatient = {
  url: `${SDC}/sdc-questionnaire-launchContext`,
  extension: [
    {
      url: 'name',
      valueCoding: { system: 'http://hl7.org/fhir/uv/sdc/CodeSystem/launchContext', code: 'patient' },
    },
    { url: 'type', valueCode: 'Patient' },
  ],
};
const queryVariable = (name: string, expression: string) => ({
  url: 'http://hl7.org/fhir/StructureDefinition/variable',
  valueExpression: { name, language: QUERY, expression },
});
const initial = (expression: string) => ({
  url: INITIAL,
  valueExpression: { language: 'text/fhirpath', expression },
});
const patientContext = (patient: number) => ({
  name: 'context',
  part: [
    { name: 'name', valueString: 'patient' },
    { name: 'content', valueReference: { reference: `Patient/${patient}` } },
  ],
});

const create = async (app: TestApp, body: Record<string, unknown>): Promise<number> => {
  const res = await fhir(app, 'POST', `/${body.resourceType}`, { body, auth: GENERAL });
  expect(res.status, JSON.stringify(res.body).slice(0, 400)).to.equal(201);
  return Number(res.body.id);
};
const condition = (patient: number, text: string) => ({
  resourceType: 'Condition',
  clinicalStatus: {
    coding: [{ system: 'http://terminology.hl7.org/CodeSystem/condition-clinical', code: 'active' }],
  },
  code: { text },
  subject: { reference: `Patient/${patient}` },
});
const observation = (patient: number, code: string, value: number) => ({
  resourceType: 'Observation',
  status: 'final',
  code: { coding: [{ system: 'http://loinc.org', code }] },
  subject: { reference: `Patient/${patient}` },
  effectiveDateTime: '2026-01-02T10:00:00Z',
  valueQuantity: { value, unit: 'kg', system: 'http://unitsofmeasure.org', code: 'kg' },
});

const populated = (res: FhirResponse) => {
  expect(res.status, JSON.stringify(res.body).slice(0, 600)).to.equal(200);
  const named = (name: string) => res.body.parameter.find((p: any) => p.name === name)?.resource;
  return { response: named('response'), issues: (named('issues')?.issue ?? []) as any[] };
};
const answered = (response: any): Map<string, unknown[]> => {
  const found = new Map<string, unknown[]>();
  const walk = (items: any[] | undefined) => {
    for (const item of items ?? []) {
      if (item.answer) found.set(item.linkId, item.answer);
      walk(item.item);
    }
  };
  walk(response.item);
  return found;
};

/**
 * A form shaped like the MBS 715 health check: `queries` x-fhir-query variables over the clinical
 * resources of the patient, and `items` questions in groups of ten, each answered from one of them.
 */
const healthCheckForm = (queries: number, items: number) => {
  const searches = [
    'Condition?patient={{%patient.id}}&clinical-status=active',
    'Observation?patient={{%patient.id}}&code=http://loinc.org|29463-7&_sort=-date&_count=1',
    'Observation?patient={{%patient.id}}&category=vital-signs&_count=10',
    'MedicationStatement?patient={{%patient.id}}&status=recorded',
    'AllergyIntolerance?patient={{%patient.id}}',
    'Immunization?patient={{%patient.id}}&status=completed',
    'Encounter?patient={{%patient.id}}&_sort=-_lastUpdated&_count=1',
    'QuestionnaireResponse?patient={{%patient.id}}&_sort=-authored&_count=1',
  ];
  const extension: unknown[] = [launchPatient];
  for (let q = 0; q < queries; q++) extension.push(queryVariable(`q${q}`, searches[q % searches.length]!));
  const groups: { linkId: string; type: string; item: unknown[] }[] = [];
  for (let i = 0; i < items; i++) {
    if (i % 10 === 0) groups.push({ linkId: `g${i / 10}`, type: 'group', item: [] });
    groups.at(-1)!.item.push({
      linkId: `a${i}`,
      text: `Question ${i}`,
      type: 'integer',
      extension: [initial(`%q${i % queries}.entry.count()`)],
    });
  }
  return {
    resourceType: 'Questionnaire',
    url: `https://forms.example.org/Questionnaire/${unique('mbs715')}`,
    status: 'active',
    extension,
    item: groups,
  };
};

for (const database of testDatabases) {
  describe(`computed answers and the query budget on ${database.name}`, function () {
    this.timeout(120_000);
    let app: TestApp;
    let given: TwoPatients;
    let mine: number[];
    let theirs: number;

    before(async () => {
      app = await startTestApp(database);
      await seed(app);
      given = await givenTwoPatients(app);
      mine = [
        await create(app, condition(given.p1.patient, 'Asthma')),
        await create(app, condition(given.p1.patient, 'Gout')),
      ];
      theirs = await create(app, condition(given.p2.patient, `Theirs${given.secrets[0]}`));
      await create(app, observation(given.p1.patient, '29463-7', 71));
    });
    after(() => app?.close());

    const conditionForm = (url: string, search: string) => ({
      resourceType: 'Questionnaire',
      url,
      version: '1',
      status: 'active',
      title: 'Computed answers',
      extension: [launchPatient],
      item: [
        {
          linkId: 'condition',
          text: 'Condition',
          type: 'reference',
          extension: [{ url: ANSWER, valueExpression: { language: QUERY, expression: search } }],
        },
      ],
    });
    const responseTo = (url: string, reference: string) => ({
      resourceType: 'QuestionnaireResponse',
      questionnaire: `${url}|1`,
      status: 'completed',
      subject: { reference: `Patient/${given.p1.patient}` },
      item: [{ linkId: 'condition', answer: [{ valueReference: { reference } }] }],
    });

    it("$validate refuses an answer outside what the answerExpression's query finds for the response's patient", async () => {
      const url = `https://forms.example.org/Questionnaire/${unique('computed')}`;
      await create(app, conditionForm(url, 'Condition?patient={{%patient.id}}'));
      const bad = await fhir(app, 'POST', '/QuestionnaireResponse/$validate', {
        body: responseTo(url, `Condition/${theirs}`),
      });
      expect(bad.status).to.equal(200);
      const errors = bad.body.issue.filter((i: any) => i.severity === 'error');
      expect(errors.map((i: any) => [i.code, i.expression[0]])).to.deep.equal([
        ['code-invalid', 'QuestionnaireResponse.item[0].answer[0]'],
      ]);
      const good = await fhir(app, 'POST', '/QuestionnaireResponse/$validate', {
        body: responseTo(url, `Condition/${mine[1]}`),
      });
      expect(good.body.issue.map((i: any) => i.severity)).to.deep.equal(['information']);
    });

    it("runs the query under the caller's scopes: a patient session finds its own patient's conditions only", async () => {
      const url = `https://forms.example.org/Questionnaire/${unique('computed')}`;
      // No patient filter: the scopes alone keep the session to P1.
      await create(app, conditionForm(url, 'Condition?_count=50'));
      const cookie = await p1Session(app, given, 'patient/*.* user/*.*');
      const refused = await fhir(app, 'POST', '/QuestionnaireResponse/$validate', {
        body: responseTo(url, `Condition/${theirs}`),
        auth: { cookie } as never,
      });
      expect(refused.status).to.equal(200);
      expect(refused.body.issue.filter((i: any) => i.severity === 'error')).to.have.length(1);
      expect(leakedIn(given, JSON.stringify(refused.body))).to.deep.equal([]);
      const accepted = await fhir(app, 'POST', '/QuestionnaireResponse/$validate', {
        body: responseTo(url, `Condition/${mine[0]}`),
        auth: { cookie } as never,
      });
      expect(accepted.body.issue.map((i: any) => i.severity)).to.deep.equal(['information']);
    });

    it('shows the computed list as the choices of the item in the editor', async () => {
      const url = `https://forms.example.org/Questionnaire/${unique('computed')}`;
      const questionnaire = await create(app, conditionForm(url, 'Condition?patient={{%patient.id}}'));
      const task = await create(app, {
        resourceType: 'Task',
        status: 'draft',
        intent: 'order',
        for: { reference: `Patient/${given.p1.patient}` },
      });
      const cookie = await p1Session(app, given, 'user/*.* patient/*.*');
      const { url: appUrl, origin } = appUrlOf(app);
      const chosen = await fetch(`${appUrl}/tasks/${task}/forms`, {
        method: 'POST',
        redirect: 'manual',
        headers: { cookie, origin, 'content-type': 'application/x-www-form-urlencoded' },
        body: `questionnaire=${questionnaire}`,
      });
      expect(chosen.status, await chosen.text()).to.equal(303);
      const page = await fetch(`${appUrl}/tasks/${task}/report`, { headers: { cookie } });
      expect(page.status).to.equal(200);
      const html = await page.text();
      expect(html).to.include('Asthma').and.include('Gout');
      expect(html).to.include(`Condition/${mine[0]}`);
      expect(leakedIn(given, html)).to.deep.equal([]);
      expect(html).not.to.include(`Condition/${theirs}"`);
    });

    it('populates a form the size of MBS 715 (20 queries, 116 items) in one request, every answer filled', async () => {
      const form = healthCheckForm(20, 116);
      const started = performance.now();
      const { response, issues } = populated(
        await fhir(app, 'POST', '/Questionnaire/$populate', {
          body: {
            resourceType: 'Parameters',
            parameter: [{ name: 'questionnaire', resource: form }, patientContext(given.p1.patient)],
          },
        }),
      );
      const ms = performance.now() - started;
      expect(issues.filter((i) => i.severity !== 'information')).to.deep.equal([]);
      const answers = answered(response);
      expect(answers.size).to.equal(116);
      // The weight query (q1) found P1's one observation; the conditions query (q0) its two.
      expect(answers.get('a1')).to.deep.equal([{ valueInteger: 1 }]);
      expect(answers.get('a0')).to.deep.equal([{ valueInteger: 2 }]);
      console.log(`      MBS 715-sized form (20 queries, 116 items) populated in ${ms.toFixed(0)} ms`);
    });

    it('names the items it could not fill when a form asks for more queries than the budget allows', async () => {
      const queries = MAX_QUERIES_PER_REQUEST + 2;
      const form = healthCheckForm(queries, queries);
      const { response, issues } = populated(
        await fhir(app, 'POST', '/Questionnaire/$populate', {
          body: {
            resourceType: 'Parameters',
            parameter: [{ name: 'questionnaire', resource: form }, patientContext(given.p1.patient)],
          },
        }),
      );
      const answers = answered(response);
      expect(answers.size).to.equal(MAX_QUERIES_PER_REQUEST);
      const unfilled = issues.filter((i) => i.code === 'incomplete').map((i) => i.diagnostics);
      expect(unfilled).to.deep.equal([
        `%q${MAX_QUERIES_PER_REQUEST} was not queried (query budget used up): items 'a${MAX_QUERIES_PER_REQUEST}' could not be filled from it`,
        `%q${MAX_QUERIES_PER_REQUEST + 1} was not queried (query budget used up): items 'a${MAX_QUERIES_PER_REQUEST + 1}' could not be filled from it`,
      ]);
      expect(issues.filter((i) => i.code === 'too-costly')).to.have.length(2);
    });
  });
}
