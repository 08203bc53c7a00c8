/**
 * `POST /QuestionnaireResponse/$validate` on the form backend (issue 4; spec §4.4), over HTTP
 * against a real casebook on PGlite and on the Postgres server: inline Questionnaires (Parameters),
 * Questionnaires resolved by canonical in the caller's tenant, the OperationOutcome answered 200
 * even with errors, and 4xx OperationOutcomes for bad input.
 */
import { expect } from 'chai';
import { PROJECT_TAG_SYSTEM } from '../../../src/fhir/resources.js';
import { GENERAL, MANAGED, seed, startTestApp, type TestApp } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import { type Credentials, expectOutcome, FHIR_JSON, type FhirResponse, fhir } from '../../support/fhir.js';

for (const database of testDatabases) {
  describe(`POST /QuestionnaireResponse/$validate on ${database.name}`, () => {
    let app: TestApp;
    let seq = 0;
    const unique = (prefix: string) => `${prefix}-${++seq}-${Math.random().toString(36).slice(2, 8)}`;

    /** Posts to the operation on {sdk_backend_address}. */
    const validate = async (
      body: unknown,
      options: { auth?: Credentials; contentType?: string } = {},
    ): Promise<FhirResponse> => {
      const auth = options.auth === undefined ? GENERAL : options.auth;
      const base = app.casebook.config.sdcUrl.replace('localhost', '127.0.0.1');
      const res = await fetch(`${base}/QuestionnaireResponse/$validate`, {
        method: 'POST',
        headers: {
          Accept: FHIR_JSON,
          'Content-Type': options.contentType ?? FHIR_JSON,
          ...(typeof auth === 'string' ? { Authorization: auth } : auth ? { Cookie: auth.cookie } : {}),
        },
        body: typeof body === 'string' ? body : JSON.stringify(body),
      });
      const text = await res.text();
      return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : undefined };
    };

    const questionnaire = (url: string) => ({
      resourceType: 'Questionnaire',
      url,
      version: '2',
      status: 'active',
      meta: { tag: [{ system: PROJECT_TAG_SYSTEM, code: 'radiology' }] },
      item: [
        { linkId: 'finding', text: 'Finding', type: 'string', required: true },
        {
          linkId: 'lesion',
          text: 'Lesion',
          type: 'group',
          item: [{ linkId: 'size', text: 'Size (mm)', type: 'integer', required: true }],
        },
      ],
    });
    const response = (canonical: string | undefined, items: unknown[], status = 'completed') => ({
      resourceType: 'QuestionnaireResponse',
      ...(canonical ? { questionnaire: canonical } : {}),
      status,
      item: items,
    });
    const complete = [
      { linkId: 'finding', answer: [{ valueString: 'nodule' }] },
      { linkId: 'lesion', item: [{ linkId: 'size', answer: [{ valueInteger: 7 }] }] },
    ];
    const wrongSize = [
      { linkId: 'finding', answer: [{ valueString: 'nodule' }] },
      { linkId: 'lesion', item: [{ linkId: 'size', answer: [{ valueString: 'seven' }] }] },
    ];

    let url: string;

    before(async () => {
      app = await startTestApp(database);
      await seed(app);
      url = `https://forms.example.org/Questionnaire/${unique('chest-ct')}`;
      const created = await fhir(app, 'POST', '/Questionnaire', { body: questionnaire(url) });
      expect(created.status, JSON.stringify(created.body)).to.equal(201);
    });
    after(() => app?.close());

    const expectValid = (res: FhirResponse) => {
      expect(res.status, JSON.stringify(res.body)).to.equal(200);
      expect(res.headers.get('content-type')).to.match(/^application\/fhir\+json/);
      expect(res.body).to.deep.equal({
        resourceType: 'OperationOutcome',
        issue: [
          {
            severity: 'information',
            code: 'informational',
            diagnostics: `the response is valid against Questionnaire ${url}|2`,
          },
        ],
      });
    };

    describe('with the Questionnaire resolved by canonical in the tenant', () => {
      it('answers 200 with an information issue for a valid response', async () => {
        expectValid(await validate(response(url, complete)));
        expectValid(await validate(response(`${url}|2`, complete)));
      });

      it('answers 200 with one error issue pointing at the wrong answer', async () => {
        const res = await validate(response(url, wrongSize));
        expect(res.status, JSON.stringify(res.body)).to.equal(200);
        expect(res.body.resourceType).to.equal('OperationOutcome');
        expect(res.body.issue).to.have.length(1);
        const [issue] = res.body.issue;
        expect(issue.severity).to.equal('error');
        expect(issue.code).to.equal('value');
        expect(issue.expression).to.deep.equal(['QuestionnaireResponse.item[1].item[0].answer[0]']);
        expect(issue.diagnostics).to.contain("'Size (mm)'").and.contain('"size"').and.contain('valueInteger');
      });

      it('answers warnings only for an in-progress response', async () => {
        const res = await validate(response(url, [], 'in-progress'));
        expect(res.status).to.equal(200);
        expect(
          res.body.issue.map((i: { severity: string; code: string }) => `${i.severity} ${i.code}`),
        ).to.deep.equal(['warning required']);
      });

      it('answers 422 not-found for an unknown canonical', async () => {
        const issue = expectOutcome(
          await validate(response('https://forms.example.org/Questionnaire/unknown', complete)),
          422,
          'not-found',
        );
        expect(issue.expression).to.deep.equal(['QuestionnaireResponse.questionnaire']);
        expectOutcome(await validate(response(`${url}|9`, complete)), 422, 'not-found');
      });

      it("does not resolve another tenant's Questionnaire", async () => {
        expectOutcome(await validate(response(url, complete), { auth: MANAGED }), 422, 'not-found');
      });

      it('answers 400 required when the response names no questionnaire', async () => {
        const issue = expectOutcome(await validate(response(undefined, complete)), 400, 'required');
        expect(issue.expression).to.deep.equal(['QuestionnaireResponse.questionnaire']);
      });
    });

    describe('answerValueSet', () => {
      it("checks membership in a ValueSet of the caller's tenant", async () => {
        const vsUrl = `https://forms.example.org/ValueSet/${unique('laterality')}`;
        const created = await fhir(app, 'POST', '/ValueSet', {
          body: {
            resourceType: 'ValueSet',
            url: vsUrl,
            status: 'active',
            compose: { include: [{ system: 'http://snomed.info/sct', concept: [{ code: '7771000' }] }] },
          },
        });
        expect(created.status, JSON.stringify(created.body)).to.equal(201);
        const inline = {
          resourceType: 'Questionnaire',
          status: 'active',
          item: [{ linkId: 'side', type: 'coding', answerValueSet: vsUrl }],
        };
        const answer = (code: string) => ({
          resourceType: 'Parameters',
          parameter: [
            {
              name: 'resource',
              resource: response(undefined, [
                { linkId: 'side', answer: [{ valueCoding: { system: 'http://snomed.info/sct', code } }] },
              ]),
            },
            { name: 'questionnaire', resource: inline },
          ],
        });
        const good = await validate(answer('7771000'));
        expect(good.status).to.equal(200);
        expect(good.body.issue.map((i: { severity: string }) => i.severity)).to.deep.equal(['information']);
        const bad = await validate(answer('24028007'));
        expect(bad.status).to.equal(200);
        expect(
          bad.body.issue.map((i: { severity: string; code: string }) => `${i.severity} ${i.code}`),
        ).to.deep.equal(['error code-invalid']);
        // In another tenant the ValueSet is unknown: a warning, not an error.
        const elsewhere = await validate(answer('24028007'), { auth: MANAGED });
        expect(elsewhere.status).to.equal(200);
        expect(
          elsewhere.body.issue.map((i: { severity: string; code: string }) => `${i.severity} ${i.code}`),
        ).to.deep.equal(['warning not-found']);
      });
    });

    describe('with Parameters', () => {
      const parameters = (...parameter: unknown[]) => ({ resourceType: 'Parameters', parameter });

      it('validates against an inline questionnaire parameter', async () => {
        const inlineUrl = 'https://forms.example.org/Questionnaire/inline-only';
        const res = await validate(
          parameters(
            {
              name: 'resource',
              resource: response(inlineUrl, [{ linkId: 'other', answer: [{ valueBoolean: true }] }]),
            },
            {
              name: 'questionnaire',
              resource: {
                resourceType: 'Questionnaire',
                url: inlineUrl,
                status: 'active',
                item: [{ linkId: 'other', text: 'Other', type: 'boolean', required: true }],
              },
            },
          ),
        );
        expect(res.status, JSON.stringify(res.body)).to.equal(200);
        expect(res.body.issue).to.deep.equal([
          {
            severity: 'information',
            code: 'informational',
            diagnostics: `the response is valid against Questionnaire ${inlineUrl}`,
          },
        ]);
      });

      it('reports errors against the inline questionnaire', async () => {
        const res = await validate(
          parameters(
            {
              name: 'resource',
              resource: response(undefined, [{ linkId: 'other', answer: [{ valueString: 'x' }] }]),
            },
            {
              name: 'questionnaire',
              resource: {
                resourceType: 'Questionnaire',
                status: 'active',
                item: [{ linkId: 'other', type: 'boolean' }],
              },
            },
          ),
        );
        expect(res.status).to.equal(200);
        expect(
          res.body.issue.map((i: { severity: string; expression: string[] }) => [i.severity, i.expression]),
        ).to.deep.equal([['error', ['QuestionnaireResponse.item[0].answer[0]']]]);
      });

      it('resolves the canonical when only the resource parameter is given', async () => {
        expectValid(await validate(parameters({ name: 'resource', resource: response(url, complete) })));
      });

      it('answers 400 for Parameters without a QuestionnaireResponse or with a wrong questionnaire', async () => {
        expectOutcome(await validate(parameters()), 400, 'required');
        const wrong = expectOutcome(
          await validate(parameters({ name: 'resource', resource: { resourceType: 'Patient' } })),
          400,
          'invalid',
        );
        expect(wrong.expression).to.deep.equal(['Parameters.parameter[0].resource']);
        expectOutcome(
          await validate(
            parameters(
              { name: 'resource', resource: response(url, complete) },
              { name: 'questionnaire', resource: { resourceType: 'ValueSet' } },
            ),
          ),
          400,
          'invalid',
        );
      });
    });

    describe('bad requests', () => {
      it('answers 401 without credentials', async () => {
        expectOutcome(await validate(response(url, complete), { auth: null }), 401, 'login');
      });

      it('answers 400 for another resource type, a JSON array or malformed JSON', async () => {
        expectOutcome(await validate({ resourceType: 'Patient' }), 400, 'invalid');
        expectOutcome(await validate([]), 400, 'invalid');
        const malformed = await validate('{"resourceType":');
        expect(malformed.status).to.equal(400);
        expect(malformed.body.resourceType).to.equal('OperationOutcome');
      });

      it('answers 415 for a body that is not JSON', async () => {
        expectOutcome(await validate('resourceType=x', { contentType: 'text/plain' }), 415, 'not-supported');
      });

      it('answers 200 with issues (not 500) for a structurally broken response', async () => {
        const res = await validate({
          resourceType: 'QuestionnaireResponse',
          questionnaire: url,
          status: 'completed',
          item: [{ answer: 'x' }, 5, { linkId: 'finding', answer: [null, { valueString: 1 }] }],
        });
        expect(res.status, JSON.stringify(res.body)).to.equal(200);
        expect(res.body.issue.every((i: { severity: string }) => i.severity === 'error')).to.equal(true);
        expect(res.body.issue.length).to.be.greaterThan(2);
      });
    });
  });
}
