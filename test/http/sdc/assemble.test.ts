/**
 * `Questionnaire/$assemble` on the form backend, and $populate/$validate of a modular form
 * (issue 35; docs/interface.md §4.4), over HTTP on PGlite and on the Postgres server: the
 * sub-Questionnaires come from the caller's tenant; an unknown one is a 422 naming the display
 * item; without credentials 401.
 */
import { expect } from 'chai';
import { seed, startTestApp, type TestApp } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import { type Credentials, expectOutcome, FHIR_JSON, type FhirResponse, fhir } from '../../support/fhir.js';

const SDC = 'http://hl7.org/fhir/uv/sdc/StructureDefinition/';
const VARIABLE = 'http://hl7.org/fhir/StructureDefinition/variable';

for (const database of testDatabases) {
  describe(`Questionnaire/$assemble on ${database.name}`, () => {
    let app: TestApp;
    const base = `https://forms.example.org/Questionnaire/${Math.random().toString(36).slice(2, 8)}`;
    let rootId: string;

    const sdc = async (
      method: string,
      path: string,
      body?: unknown,
      auth: Credentials | null = undefined as unknown as Credentials,
    ): Promise<FhirResponse> => {
      const url = `${app.casebook.config.sdcUrl.replace('localhost', '127.0.0.1')}${path}`;
      const credentials =
        auth === null ? undefined : (auth ?? (await import('../../support/app.js')).GENERAL);
      const res = await fetch(url, {
        method,
        headers: {
          Accept: FHIR_JSON,
          ...(body !== undefined ? { 'Content-Type': FHIR_JSON } : {}),
          ...(typeof credentials === 'string' ? { Authorization: credentials } : {}),
        },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
      const text = await res.text();
      return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : undefined };
    };
    const create = async (body: Record<string, unknown>) => {
      const res = await fhir(app, 'POST', '/Questionnaire', { body });
      expect(res.status, JSON.stringify(res.body)).to.equal(201);
      return res.body.id as string;
    };
    const root = (sub: string) => ({
      resourceType: 'Questionnaire',
      url: `${base}/root-${sub}`,
      version: '2',
      status: 'active',
      item: [
        {
          linkId: 'who',
          type: 'group',
          extension: [
            {
              url: VARIABLE,
              valueExpression: { name: 'linkIdPrefix', language: 'text/fhirpath', expression: "'patient.'" },
            },
          ],
          item: [
            {
              linkId: 'who.1',
              type: 'display',
              text: 'Name module',
              extension: [
                { url: `${SDC}sdc-questionnaire-subQuestionnaire`, valueCanonical: `${base}/${sub}|1` },
              ],
            },
          ],
        },
      ],
    });

    before(async function () {
      this.timeout(180_000);
      app = await startTestApp(database);
      await seed(app);
      await create({
        resourceType: 'Questionnaire',
        url: `${base}/name`,
        version: '1',
        status: 'active',
        extension: [{ url: `${SDC}sdc-questionnaire-assembleContext`, valueString: 'linkIdPrefix' }],
        item: [
          { linkId: 'given', text: 'Given name', type: 'string', initial: [{ valueString: 'Ann' }] },
          { linkId: 'family', text: 'Family name', type: 'string', required: true },
        ],
      });
      rootId = await create(root('name'));
    });
    after(() => app?.close());

    it('assembles a stored form by canonical into Parameters.return, prefixing the module linkIds', async () => {
      const res = await sdc('POST', '/Questionnaire/$assemble', {
        resourceType: 'Parameters',
        parameter: [{ name: 'questionnaire', valueCanonical: `${base}/root-name|2` }],
      });
      expect(res.status, JSON.stringify(res.body)).to.equal(200);
      expect(res.body.resourceType).to.equal('Parameters');
      const assembled = res.body.parameter.find((p: { name: string }) => p.name === 'return').resource;
      expect(assembled.version).to.equal('2-assembled');
      expect(assembled.item[0].item.map((i: { linkId: string }) => i.linkId)).to.deep.equal([
        'patient.given',
        'patient.family',
      ]);
      expect(assembled.extension).to.deep.include({
        url: `${SDC}sdc-questionnaire-assembledFrom`,
        valueCanonical: `${base}/name|1`,
      });
    });

    it('assembles the stored instance with GET /Questionnaire/{id}/$assemble', async () => {
      const res = await sdc('GET', `/Questionnaire/${rootId}/$assemble`);
      expect(res.status, JSON.stringify(res.body)).to.equal(200);
      expect(res.body.parameter[0].resource.item[0].item).to.have.length(2);
    });

    it('answers 422 naming the display item when a sub-Questionnaire is unknown', async () => {
      const res = await sdc('POST', '/Questionnaire/$assemble', {
        resourceType: 'Parameters',
        parameter: [{ name: 'questionnaire', resource: root('missing') }],
      });
      expectOutcome(res, 422, 'not-found');
      expect(res.body.issue[0].expression).to.deep.equal(['Questionnaire.item[0].item[0]']);
    });

    it('$populate assembles a modular form first; $validate checks its response against the same assembly', async () => {
      const populated = await sdc('POST', `/Questionnaire/${rootId}/$populate`, {
        resourceType: 'Parameters',
        parameter: [],
      });
      expect(populated.status, JSON.stringify(populated.body)).to.equal(200);
      const response = populated.body.parameter.find((p: { name: string }) => p.name === 'response').resource;
      expect(response.questionnaire).to.equal(`${base}/root-name|2`);
      expect(response.item[0].item).to.deep.equal([
        { linkId: 'patient.given', text: 'Given name', answer: [{ valueString: 'Ann' }] },
        { linkId: 'patient.family', text: 'Family name' },
      ]);
      const incomplete = await sdc('POST', '/QuestionnaireResponse/$validate', {
        ...response,
        status: 'completed',
      });
      expect(incomplete.status).to.equal(200);
      expect(
        incomplete.body.issue.map((i: { severity: string; code: string }) => `${i.severity} ${i.code}`),
      ).to.deep.equal(['error required']);
      expect(incomplete.body.issue[0].diagnostics).to.include('patient.family');
    });

    it('answers 401 without credentials', async () => {
      const res = await sdc('GET', `/Questionnaire/${rootId}/$assemble`, undefined, null);
      expect(res.status).to.equal(401);
    });
  });
}
