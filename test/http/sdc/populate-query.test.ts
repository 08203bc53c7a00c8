/**
 * $populate against casebook's own data (issue 35; docs/interface.md §4.4 "Queries"): the SDC IG's
 * request shape (`questionnaire` as a canonical with a version), a subject on another server copied
 * as it is, `x-fhir-query` variables, itemPopulationContext and sourceQueries run in-process under
 * the caller's scopes, a bound on every query, and a form of about twenty queries in one request.
 * On PGlite and PostgreSQL.
 */
import { expect } from 'chai';
import { execute } from '../../../src/commands/handler.js';
import { allocateId } from '../../../src/db/sequences.js';
import { resourceDecider, resourceStream } from '../../../src/domain/fhir/resource.js';
import { QUERY_MAX_COUNT } from '../../../src/sdc/fhir-query.js';
import { GENERAL, seed, startTestApp, type TestApp, unique } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import { expectOutcome, type FhirResponse, fhir } from '../../support/fhir.js';
import { givenTwoPatients, leakedIn, p1Session, type TwoPatients } from '../../support/isolation.js';

const SDC = 'http://hl7.org/fhir/uv/sdc/StructureDefinition';
const VARIABLE = 'http://hl7.org/fhir/StructureDefinition/variable';
const INITIAL = `${SDC}/sdc-questionnaire-initialExpression`;
const LAUNCH = `${SDC}/sdc-questionnaire-launchContext`;
const POPULATION_CONTEXT = `${SDC}/sdc-questionnaire-itemPopulationContext`;
const SOURCE_QUERIES = `${SDC}/sdc-questionnaire-sourceQueries`;
const QUERY = 'application/x-fhir-query';

const launchPatient = {
  url: LAUNCH,
  extension: [
    {
      url: 'name',
      valueCoding: { system: 'http://hl7.org/fhir/uv/sdc/CodeSystem/launchContext', code: 'patient' },
    },
    { url: 'type', valueCode: 'Patient' },
  ],
};
const variable = (name: string, expression: string, language = QUERY) => ({
  url: VARIABLE,
  valueExpression: { name, language, expression },
});
const initial = (expression: string) => ({
  url: INITIAL,
  valueExpression: { language: 'text/fhirpath', expression },
});

/** The response and issues of a 200 $populate answer. */
const populated = (res: FhirResponse) => {
  expect(res.status, JSON.stringify(res.body).slice(0, 600)).to.equal(200);
  const named = (name: string) => res.body.parameter.find((p: any) => p.name === name)?.resource;
  return { response: named('response'), issues: named('issues')?.issue ?? [] };
};
const answerOf = (response: any, linkId: string): unknown[] => {
  const found: unknown[] = [];
  const walk = (items: any[] | undefined) => {
    for (const item of items ?? []) {
      if (item.linkId === linkId) found.push(...(item.answer ?? []));
      walk(item.item);
      for (const a of item.answer ?? []) walk(a.item);
    }
  };
  walk(response.item);
  return found;
};

const populate = (app: TestApp, parameter: unknown[], auth: unknown = GENERAL) =>
  fhir(app, 'POST', '/Questionnaire/$populate', {
    body: { resourceType: 'Parameters', parameter },
    auth: auth as never,
  });
const patientContext = (patient: number) => ({
  name: 'context',
  part: [
    { name: 'name', valueString: 'patient' },
    { name: 'content', valueReference: { reference: `Patient/${patient}` } },
  ],
});

/**
 * Creates a Patient and `count` Encounters of it through the command handler, 1,000 per append
 * (their events and read model rows as any create writes them, without 10,000 requests).
 * @returns the Patient's id.
 */
const seedPatientWithEncounters = async (app: TestApp, count: number): Promise<number> => {
  const ctx = app.casebook.context({ tenantId: 1, actor: { type: 'system', id: 'test-seed' } });
  const patient = await allocateId(app.casebook.sql, 'Patient');
  await execute(ctx, (uow) =>
    uow.decide(
      resourceStream('Patient', patient),
      resourceDecider('Patient'),
      {
        type: 'CreateResource',
        id: patient,
        tenantId: 1,
        resource: { name: [{ family: 'Many' }] },
        now: uow.now,
      },
      { fresh: true },
    ),
  );
  for (let done = 0; done < count; done += 1000) {
    const ids = await Promise.all(
      Array.from({ length: Math.min(1000, count - done) }, () => allocateId(app.casebook.sql, 'Encounter')),
    );
    await execute(ctx, async (uow) => {
      for (const id of ids)
        await uow.decide(
          resourceStream('Encounter', id),
          resourceDecider('Encounter'),
          {
            type: 'CreateResource',
            id,
            tenantId: 1,
            resource: { status: 'completed', subject: { reference: `Patient/${patient}` } },
            now: uow.now,
          },
          { fresh: true },
        );
    });
  }
  return patient;
};

for (const database of testDatabases) {
  describe(`$populate with x-fhir-query on ${database.name}`, function () {
    this.timeout(300_000);
    let app: TestApp;
    let given: TwoPatients;
    let many: number;

    before(async () => {
      app = await startTestApp(database);
      await seed(app);
      // Seeded before any request: a pause of seconds between requests could meet the server
      // closing an idle keep-alive connection as the next request reuses it.
      many = await seedPatientWithEncounters(app, 10_000);
      given = await givenTwoPatients(app);
    });
    after(() => app?.close());

    it('takes questionnaire as a canonical with a version (the SDC IG request) and copies a subject on another server as it is', async () => {
      const url = `https://forms.example.org/Questionnaire/${unique('canon')}`;
      for (const version of ['1', '2']) {
        const res = await fhir(app, 'POST', '/Questionnaire', {
          body: {
            resourceType: 'Questionnaire',
            url,
            version,
            status: 'active',
            item: [{ linkId: 'v', type: 'string', initial: [{ valueString: `version ${version}` }] }],
          },
        });
        expect(res.status).to.equal(201);
      }
      const subject = { reference: 'https://other.example.org/fhir/Patient/77', display: 'Elsewhere' };
      for (const key of ['valueCanonical', 'valueUri']) {
        const { response, issues } = populated(
          await populate(app, [
            { name: 'questionnaire', [key]: `${url}|1` },
            { name: 'subject', valueReference: subject },
          ]),
        );
        expect(issues).to.deep.equal([]);
        expect(response.questionnaire).to.equal(`${url}|1`);
        expect(response.subject).to.deep.equal(subject);
        expect(answerOf(response, 'v')).to.deep.equal([{ valueString: 'version 1' }]);
      }
      const newest = populated(await populate(app, [{ name: 'questionnaire', valueCanonical: url }]));
      expect(answerOf(newest.response, 'v')).to.deep.equal([{ valueString: 'version 2' }]);
      expectOutcome(
        await populate(app, [{ name: 'questionnaire', valueCanonical: `${url}|9` }]),
        404,
        'not-found',
      );
    });

    it("finds the patient's latest Encounter through a variable, and its reports through sourceQueries", async () => {
      const later = await fhir(app, 'POST', '/Encounter', {
        body: {
          resourceType: 'Encounter',
          status: 'planned',
          subject: { reference: `Patient/${given.p1.patient}` },
        },
      });
      expect(later.status).to.equal(201);
      const questionnaire = {
        resourceType: 'Questionnaire',
        status: 'active',
        contained: [
          {
            resourceType: 'Bundle',
            id: 'prePop',
            type: 'batch',
            entry: [{ request: { method: 'GET', url: 'QuestionnaireResponse?patient={{%patient.id}}' } }],
          },
        ],
        extension: [
          launchPatient,
          { url: SOURCE_QUERIES, valueReference: { reference: '#prePop' } },
          variable('latest', 'Encounter?patient={{%patient.id}}&_sort=-_lastUpdated&_count=1'),
        ],
        item: [
          {
            linkId: 'encounterStatus',
            type: 'string',
            extension: [initial('%latest.entry.resource.status')],
          },
          {
            linkId: 'reports',
            type: 'integer',
            extension: [initial('%prePop.entry.resource.entry.count()')],
          },
        ],
      };
      const { response, issues } = populated(
        await populate(app, [
          { name: 'questionnaire', resource: questionnaire },
          patientContext(given.p1.patient),
        ]),
      );
      expect(issues.filter((i: any) => i.severity !== 'information')).to.deep.equal([
        {
          severity: 'warning',
          code: 'required',
          diagnostics:
            'the Questionnaire has no url and is not stored: the response refers to a copy contained in it (#questionnaire); give the Questionnaire a url to refer to it',
          expression: ['Questionnaire.url'],
        },
      ]);
      expect(answerOf(response, 'encounterStatus')).to.deep.equal([{ valueString: 'planned' }]);
      // P1's reports: the moved one and the one made during P2's encounter.
      expect(answerOf(response, 'reports')).to.deep.equal([{ valueInteger: 2 }]);
    });

    it('keeps a patient session to its patient: a query for another patient finds nothing', async () => {
      const cookie = await p1Session(app, given, 'patient/*.* user/*.*');
      const questionnaire = {
        resourceType: 'Questionnaire',
        url: given.questionnaireUrl,
        status: 'active',
        extension: [
          variable('theirs', `Encounter?patient=${given.p2.patient}`),
          variable('reports', `QuestionnaireResponse?patient=${given.p2.patient}`),
          variable('patients', 'Patient?_count=100'),
        ],
        item: [
          { linkId: 'theirs', type: 'integer', extension: [initial('%theirs.entry.count()')] },
          { linkId: 'reports', type: 'integer', extension: [initial('%reports.entry.count()')] },
          {
            linkId: 'names',
            type: 'string',
            repeats: true,
            extension: [initial('%patients.entry.resource.name.family')],
          },
        ],
      };
      const res = await populate(app, [{ name: 'questionnaire', resource: questionnaire }], { cookie });
      const { response } = populated(res);
      expect(leakedIn(given, JSON.stringify(res.body))).to.deep.equal([]);
      expect(answerOf(response, 'theirs')).to.deep.equal([{ valueInteger: 0 }]);
      expect(answerOf(response, 'reports')).to.deep.equal([{ valueInteger: 0 }]);
      expect(answerOf(response, 'names')).to.deep.equal([{ valueString: 'Onesson' }]);
    });

    it('names an unsupported query in an issue and goes on with the rest of the form', async () => {
      const questionnaire = {
        resourceType: 'Questionnaire',
        status: 'active',
        extension: [
          launchPatient,
          variable('odd', 'Encounter?colour=blue'),
          variable('remote', 'https://other.example.org/fhir/Encounter?patient=1'),
          variable('unknown', 'Basic?code=x'),
          variable('ok', 'Encounter?patient={{%patient.id}}'),
        ],
        item: [{ linkId: 'n', type: 'integer', extension: [initial('%ok.entry.count()')] }],
      };
      const { response, issues } = populated(
        await populate(app, [
          { name: 'questionnaire', resource: questionnaire },
          patientContext(given.p1.patient),
        ]),
      );
      const about = (name: string) => issues.find((i: any) => i.diagnostics.startsWith(`variable %${name}:`));
      expect(about('odd')).to.include({ code: 'not-supported' });
      expect(about('odd').diagnostics).to.match(/colour/);
      expect(about('remote')).to.include({ code: 'not-supported' });
      expect(about('unknown')).to.include({ code: 'not-supported' });
      expect((answerOf(response, 'n')[0] as any).valueInteger).to.be.greaterThan(0);
    });

    it('bounds a query of 10,000 matches, and fills one group instance per match of an itemPopulationContext query', async () => {
      const id = many;
      const count = await fhir(app, 'GET', `/Encounter?patient=${id}&_total=accurate&_count=0`);
      expect(count.body.total).to.equal(10_000);
      const questionnaire = {
        resourceType: 'Questionnaire',
        status: 'active',
        extension: [
          launchPatient,
          variable('all', 'Encounter?patient={{%patient.id}}&_count=100000&_total=accurate'),
        ],
        item: [
          { linkId: 'n', type: 'integer', extension: [initial('%all.entry.count()')] },
          {
            linkId: 'visit',
            type: 'group',
            repeats: true,
            extension: [
              {
                url: POPULATION_CONTEXT,
                valueExpression: {
                  name: 'visit',
                  language: QUERY,
                  expression: 'Encounter?patient={{%patient.id}}&_count=3',
                },
              },
            ],
            item: [{ linkId: 'status', type: 'string', extension: [initial('%visit.status')] }],
          },
        ],
      };
      const started = performance.now();
      const { response } = populated(
        await populate(app, [{ name: 'questionnaire', resource: questionnaire }, patientContext(id)]),
      );
      const took = performance.now() - started;
      expect(answerOf(response, 'n')).to.deep.equal([{ valueInteger: QUERY_MAX_COUNT }]);
      expect(response.item.filter((i: any) => i.linkId === 'visit')).to.have.length(3);
      expect(answerOf(response, 'status')).to.deep.equal([
        { valueString: 'completed' },
        { valueString: 'completed' },
        { valueString: 'completed' },
      ]);
      expect(took, 'one bounded request').to.be.lessThan(20_000);
    });

    // Query time is budgeted apart from FHIRPath time: twenty queries leave the items' expressions
    // their whole evaluation budget.
    it('populates a form of twenty queries in one request, every answer filled', async () => {
      const extension: unknown[] = [launchPatient];
      const item: unknown[] = [];
      for (let i = 0; i < 20; i++) {
        extension.push(
          variable(
            `q${i}`,
            i % 2 === 0
              ? 'Encounter?patient={{%patient.id}}&_count=5'
              : 'QuestionnaireResponse?patient={{%patient.id}}',
          ),
        );
        item.push({ linkId: `a${i}`, type: 'integer', extension: [initial(`%q${i}.entry.count()`)] });
      }
      const { response, issues } = populated(
        await populate(app, [
          {
            name: 'questionnaire',
            resource: {
              resourceType: 'Questionnaire',
              url: `https://forms.example.org/${unique('q20')}`,
              status: 'active',
              extension,
              item,
            },
          },
          patientContext(given.p1.patient),
        ]),
      );
      expect(issues).to.deep.equal([]);
      for (let i = 0; i < 20; i++) {
        const [answer] = answerOf(response, `a${i}`) as { valueInteger: number }[];
        expect(answer?.valueInteger, `a${i}`).to.be.at.least(1);
      }
    });
  });
}
