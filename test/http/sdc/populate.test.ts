/**
 * `POST /Questionnaire/$populate` and `POST /Questionnaire/{id}/$populate` on the form backend
 * (issue 4; spec §4.4; SDC $populate), over HTTP against a real casebook on PGlite and on the
 * Postgres server: the Parameters answered, context references read from the tenant under the
 * caller's scopes, and every refusal as an OperationOutcome (never 500), with nothing written.
 */
import { expect } from 'chai';
import { MANAGED, seed, startTestApp, type TestApp } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import {
  type Credentials,
  expectOutcome,
  type FhirResponse,
  fhir,
  sessionCookie,
} from '../../support/fhir.js';

const SDC = 'http://hl7.org/fhir/uv/sdc/StructureDefinition/';
const LOINC = 'http://loinc.org';
const ITEM_WEIGHT = 'http://hl7.org/fhir/StructureDefinition/itemWeight';
const GENDER = 'http://hl7.org/fhir/administrative-gender';

const expression = (text: string, name?: string) => ({
  language: 'text/fhirpath',
  expression: text,
  ...(name ? { name } : {}),
});

/** A PHQ-2 with a patient header: launchContext, variable, initialExpression, calculatedExpression. */
const phq2 = (url: string) => ({
  resourceType: 'Questionnaire',
  url,
  version: '2.0',
  status: 'active',
  extension: [
    {
      url: `${SDC}sdc-questionnaire-launchContext`,
      extension: [
        {
          url: 'name',
          valueCoding: { system: 'http://hl7.org/fhir/uv/sdc/CodeSystem/launchContext', code: 'patient' },
        },
        { url: 'type', valueCode: 'Patient' },
      ],
    },
    {
      url: 'http://hl7.org/fhir/StructureDefinition/variable',
      valueExpression: expression('%patient.name.first()', 'name'),
    },
  ],
  item: [
    {
      linkId: 'header',
      type: 'group',
      item: [
        {
          linkId: 'family',
          type: 'string',
          extension: [
            { url: `${SDC}sdc-questionnaire-initialExpression`, valueExpression: expression('%name.family') },
          ],
        },
        {
          linkId: 'birthDate',
          type: 'date',
          extension: [
            {
              url: `${SDC}sdc-questionnaire-initialExpression`,
              valueExpression: expression('%patient.birthDate'),
            },
          ],
        },
        {
          linkId: 'gender',
          type: 'coding',
          answerOption: ['female', 'male', 'other', 'unknown'].map((code) => ({
            valueCoding: { system: GENDER, code },
          })),
          extension: [
            {
              url: `${SDC}sdc-questionnaire-initialExpression`,
              valueExpression: expression('%patient.gender'),
            },
          ],
        },
      ],
    },
    ...['44250-9', '44255-8'].map((linkId) => ({
      linkId,
      type: 'coding',
      answerOption: [
        ['LA6568-5', 0],
        ['LA6569-3', 1],
        ['LA6570-1', 2],
        ['LA6571-9', 3],
      ].map(([code, weight]) => ({
        extension: [{ url: ITEM_WEIGHT, valueDecimal: weight }],
        valueCoding: { system: LOINC, code },
        // R5 que-11: an item with answerOption marks its initial answer with initialSelected.
        ...(code === 'LA6570-1' ? { initialSelected: true } : {}),
      })),
    })),
    {
      linkId: '55758-7',
      type: 'integer',
      extension: [
        {
          url: `${SDC}sdc-questionnaire-calculatedExpression`,
          valueExpression: expression(
            "%resource.item.where(linkId != '55758-7').answer.value.weight().sum()",
          ),
        },
      ],
    },
  ],
});

/** The response phq2 gives for the test patient (`subject` added by the caller). */
const phq2Items = [
  {
    linkId: 'header',
    item: [
      { linkId: 'family', answer: [{ valueString: 'Chalmers' }] },
      { linkId: 'birthDate', answer: [{ valueDate: '1974-12-25' }] },
      { linkId: 'gender', answer: [{ valueCoding: { system: GENDER, code: 'male' } }] },
    ],
  },
  { linkId: '44250-9', answer: [{ valueCoding: { system: LOINC, code: 'LA6570-1' } }] },
  { linkId: '44255-8', answer: [{ valueCoding: { system: LOINC, code: 'LA6570-1' } }] },
  { linkId: '55758-7', answer: [{ valueInteger: 4 }] },
];

for (const database of testDatabases) {
  describe(`POST /Questionnaire/$populate on ${database.name}`, () => {
    let app: TestApp;
    let seq = 0;
    const unique = (prefix: string) => `${prefix}-${++seq}-${Math.random().toString(36).slice(2, 8)}`;
    let patientId: string;
    let otherPatientId: string;
    let userId: string;
    let questionnaireId: string;
    let questionnaireUrl: string;

    const eventCount = async () => (await app.allEvents()).length;
    const create = async (body: Record<string, unknown>, auth: Credentials | undefined = undefined) => {
      const res = await fhir(app, 'POST', `/${body.resourceType}`, { body, ...(auth ? { auth } : {}) });
      expect(res.status, JSON.stringify(res.body)).to.equal(201);
      return res.body.id as string;
    };
    const patient = () => ({
      resourceType: 'Patient',
      identifier: [{ system: 'urn:test:mrn', value: unique('mrn') }],
      name: [{ family: 'Chalmers', given: ['Peter'] }],
      gender: 'male',
      birthDate: '1974-12-25',
    });
    const parameters = (...parameter: unknown[]) => ({ resourceType: 'Parameters', parameter });
    const subjectContext = (content: Record<string, unknown>) => ({
      name: 'context',
      part: [
        { name: 'name', valueString: 'subject' },
        { name: 'content', ...content },
      ],
    });
    /** POSTs `body` and asserts that nothing was written. */
    const post = async (
      body: unknown,
      options: { path?: string; auth?: Credentials; headers?: Record<string, string> } = {},
    ): Promise<FhirResponse> => {
      const before = await eventCount();
      const res = await fhir(app, 'POST', options.path ?? '/Questionnaire/$populate', {
        body,
        ...(options.auth !== undefined ? { auth: options.auth } : {}),
        ...(options.headers ? { headers: options.headers } : {}),
      });
      expect(await eventCount(), 'events written by $populate').to.equal(before);
      return res;
    };
    const expectParameters = (res: FhirResponse) => {
      expect(res.status, JSON.stringify(res.body)).to.equal(200);
      expect(res.headers.get('content-type')).to.match(/^application\/fhir\+json/);
      expect(res.body.resourceType).to.equal('Parameters');
      return res.body.parameter as { name: string; resource: any }[];
    };

    before(async () => {
      app = await startTestApp(database);
      await seed(app);
      patientId = await create(patient());
      otherPatientId = await create(patient());
      userId = await create({
        resourceType: 'Practitioner',
        identifier: [{ system: 'urn:test:staff', value: unique('dr') }],
        name: [{ family: 'House' }],
      });
      questionnaireUrl = `https://forms.example.org/Questionnaire/${unique('phq2')}`;
      questionnaireId = await create(phq2(questionnaireUrl));
    });
    after(() => app?.close());

    it('populates an inline Questionnaire from a subject resource and answers Parameters with only the response', async () => {
      const res = await post(
        parameters(
          { name: 'questionnaire', resource: phq2('https://forms.example.org/Questionnaire/inline') },
          subjectContext({ resource: { ...patient(), id: 'p1' } }),
        ),
      );
      expect(expectParameters(res)).to.deep.equal([
        {
          name: 'response',
          resource: {
            resourceType: 'QuestionnaireResponse',
            questionnaire: 'https://forms.example.org/Questionnaire/inline|2.0',
            status: 'in-progress',
            subject: { reference: 'Patient/p1' },
            item: phq2Items,
          },
        },
      ]);
    });

    it('reads a context reference from the tenant and resolves the Questionnaire by canonical', async () => {
      const res = await post(
        parameters(
          { name: 'canonical', valueCanonical: questionnaireUrl },
          subjectContext({ valueReference: { reference: `Patient/${patientId}` } }),
        ),
      );
      expect(expectParameters(res)).to.deep.equal([
        {
          name: 'response',
          resource: {
            resourceType: 'QuestionnaireResponse',
            questionnaire: `${questionnaireUrl}|2.0`,
            status: 'in-progress',
            subject: { reference: `Patient/${patientId}` },
            item: phq2Items,
          },
        },
      ]);
    });

    it('populates a stored Questionnaire by id, with the subject parameter and an absolute context reference', async () => {
      const res = await post(
        parameters(
          { name: 'subject', valueReference: { reference: `Patient/${patientId}` } },
          subjectContext({
            valueReference: { reference: `${app.casebook.config.fhirUrl}/Patient/${patientId}` },
          }),
          { name: 'local', valueBoolean: true },
        ),
        {
          path: `/Questionnaire/${questionnaireId}/$populate`,
          headers: { 'Content-Type': 'application/json' },
        },
      );
      const [response] = expectParameters(res);
      expect(response).to.deep.equal({
        name: 'response',
        resource: {
          resourceType: 'QuestionnaireResponse',
          questionnaire: `${questionnaireUrl}|2.0`,
          status: 'in-progress',
          subject: { reference: `Patient/${patientId}` },
          item: phq2Items,
        },
      });
    });

    it('adds the issues parameter with warnings when expressions fail or the launch context is missing', async () => {
      const questionnaire = phq2('https://forms.example.org/Questionnaire/warned');
      const header = questionnaire.item[0] as {
        item: { extension: { valueExpression: { expression: string } }[] }[];
      };
      header.item[0]!.extension[0]!.valueExpression.expression = '%name.family.where(';
      const res = await post(parameters({ name: 'questionnaire', resource: questionnaire }));
      const [response, issues] = expectParameters(res);
      // Nothing of the optional header group could be filled in: it is left out (issue 13).
      expect(response!.resource.item).to.deep.equal(phq2Items.slice(1));
      expect(issues!.name).to.equal('issues');
      expect(issues!.resource.resourceType).to.equal('OperationOutcome');
      expect(
        issues!.resource.issue.map((i: any) => ({
          severity: i.severity,
          code: i.code,
          expression: i.expression,
        })),
      ).to.deep.equal([
        { severity: 'warning', code: 'not-found', expression: ['Questionnaire.extension[0]'] },
        { severity: 'warning', code: 'processing', expression: ['Questionnaire.item[0].item[0]'] },
      ]);
    });

    describe('refusals', () => {
      it('answers 400 for a body that is not Parameters', async () => {
        const issue = expectOutcome(
          await post({ resourceType: 'Questionnaire', status: 'active' }),
          400,
          'invalid',
        );
        expect(issue.diagnostics).to.match(/Parameters/);
      });

      it('answers 400 (required) without a Questionnaire', async () => {
        expectOutcome(
          await post(parameters(subjectContext({ resource: { ...patient(), id: 'p1' } }))),
          400,
          'required',
        );
      });

      it('answers 400 for two Questionnaires, an unknown parameter, or a context without a name', async () => {
        const q = { name: 'questionnaire', resource: phq2('https://forms.example.org/Questionnaire/x') };
        expectOutcome(await post(parameters(q, q)), 400, 'invalid');
        expectOutcome(
          await post(parameters({ name: 'launch', valueString: 'x' }), {
            path: `/Questionnaire/${questionnaireId}/$populate`,
          }),
          400,
          'not-supported',
        );
        const issue = expectOutcome(
          await post(parameters(q, { name: 'context', part: [{ name: 'content', resource: patient() }] })),
          400,
          'invalid',
        );
        expect(issue.expression).to.deep.equal(['Parameters.parameter[1].part']);
      });

      it('answers 404 for an unknown canonical, Questionnaire id or context reference', async () => {
        expectOutcome(
          await post(
            parameters({ name: 'canonical', valueCanonical: 'https://forms.example.org/Questionnaire/none' }),
          ),
          404,
          'not-found',
        );
        expectOutcome(
          await post(parameters(), { path: '/Questionnaire/999999/$populate' }),
          404,
          'not-found',
        );
        const issue = expectOutcome(
          await post(
            parameters(
              { name: 'canonical', valueCanonical: questionnaireUrl },
              subjectContext({ valueReference: { reference: 'Patient/999999' } }),
            ),
          ),
          404,
          'not-found',
        );
        expect(issue.expression).to.deep.equal(['Parameters.parameter[1].part[1]']);
      });

      it("answers 404 for another tenant's Patient and Questionnaire", async () => {
        expectOutcome(
          await post(
            parameters(
              { name: 'questionnaire', resource: phq2('https://forms.example.org/Questionnaire/y') },
              subjectContext({ valueReference: { reference: `Patient/${patientId}` } }),
            ),
            { auth: MANAGED },
          ),
          404,
          'not-found',
        );
        expectOutcome(
          await post(parameters({ name: 'canonical', valueCanonical: questionnaireUrl }), { auth: MANAGED }),
          404,
          'not-found',
        );
      });

      it('answers 403 for a context resource outside the session patient compartment', async () => {
        const { cookie } = await sessionCookie(app, {
          user: Number(userId),
          patient: Number(patientId),
          scope: 'patient/*.*',
        });
        const body = (id: string) =>
          parameters(
            { name: 'questionnaire', resource: phq2('https://forms.example.org/Questionnaire/z') },
            subjectContext({ valueReference: { reference: `Patient/${id}` } }),
          );
        expectOutcome(await post(body(otherPatientId), { auth: cookie }), 403, 'forbidden');
        expect(
          expectParameters(await post(body(patientId), { auth: cookie }))[0]!.resource.subject,
        ).to.deep.equal({
          reference: `Patient/${patientId}`,
        });
      });

      it('answers 422 for a reference to an unsupported type and for a malformed Questionnaire item', async () => {
        expectOutcome(
          await post(
            parameters(
              { name: 'canonical', valueCanonical: questionnaireUrl },
              subjectContext({ valueReference: { reference: 'Organization/1' } }),
            ),
          ),
          422,
          'not-supported',
        );
        const issue = expectOutcome(
          await post(
            parameters({
              name: 'questionnaire',
              resource: {
                resourceType: 'Questionnaire',
                status: 'active',
                item: [{ linkId: 'a', type: 'group', item: [{ text: 'x' }] }],
              },
            }),
          ),
          422,
          'structure',
        );
        expect(issue.expression).to.deep.equal(['Parameters.parameter[0].resource.item[0].item[0]']);
      });

      it('answers 401 without credentials and 415 for another content type', async () => {
        expectOutcome(await post(parameters(), { auth: null }), 401, 'login');
        expectOutcome(await post('x=1', { headers: { 'Content-Type': 'text/plain' } }), 415, 'not-supported');
      });
    });
  });
}
