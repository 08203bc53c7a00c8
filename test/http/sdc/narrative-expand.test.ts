/**
 * QuestionnaireResponse/$generate-narrative (spec §4.4) and ValueSet/$expand (issue 4) on the
 * form backend, and its CORS for the web SDK (spec §4.5), over HTTP against a real casebook on
 * PGlite and on the Postgres server: status, body, and that these read-only operations write no
 * events.
 */
import { expect } from 'chai';
import { XMLValidator } from 'fast-xml-parser';
import { GENERAL, MANAGED, seed, startTestApp, type TestApp } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import { expectOutcome, type FhirResponse, fhir } from '../../support/fhir.js';

const SNOMED = 'http://snomed.info/sct';

for (const database of testDatabases) {
  describe(`Form backend $generate-narrative and $expand on ${database.name}`, () => {
    let app: TestApp;
    const suffix = Math.random().toString(36).slice(2, 8);
    const lobesUrl = `https://radiology.example.org/ValueSet/lung-lobes-${suffix}`;
    const wholeUrl = `https://radiology.example.org/ValueSet/all-snomed-${suffix}`;
    const questionnaireUrl = `https://radiology.example.org/Questionnaire/ct-chest-${suffix}`;
    let lobesId: string;

    const lobes = {
      resourceType: 'ValueSet',
      url: lobesUrl,
      version: '1.0.0',
      name: 'LungLobes',
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
              { code: '31094006', display: 'Left lower lobe' },
            ],
          },
        ],
      },
    };

    const questionnaire = {
      resourceType: 'Questionnaire',
      url: questionnaireUrl,
      version: '1.0.0',
      title: 'CT Chest <Report>',
      status: 'active',
      contained: [
        {
          resourceType: 'ValueSet',
          id: 'sides',
          status: 'active',
          compose: {
            include: [
              {
                system: SNOMED,
                concept: [
                  { code: '24028007', display: 'Right' },
                  { code: '7771000', display: 'Left' },
                  { code: '51440002', display: 'Both sides' },
                ],
              },
            ],
          },
        },
      ],
      item: [
        {
          linkId: 'findings',
          type: 'group',
          text: 'Findings',
          item: [
            { linkId: 'effusion', type: 'boolean', text: 'Pleural effusion' },
            { linkId: 'effusion-side', type: 'coding', text: 'Side', answerValueSet: '#sides' },
            { linkId: 'nodule-lobe', type: 'coding', text: 'Nodule location', answerValueSet: lobesUrl },
            { linkId: 'nodule-size', type: 'quantity', text: 'Nodule size' },
          ],
        },
        { linkId: 'impression', type: 'text', text: 'Impression' },
      ],
    };

    const response = {
      resourceType: 'QuestionnaireResponse',
      questionnaire: `${questionnaireUrl}|1.0.0`,
      status: 'completed',
      item: [
        {
          linkId: 'findings',
          item: [
            { linkId: 'effusion', answer: [{ valueBoolean: true }] },
            {
              linkId: 'effusion-side',
              answer: [{ valueCoding: { system: SNOMED, code: '24028007', display: 'Right' } }],
            },
            {
              linkId: 'nodule-lobe',
              answer: [{ valueCoding: { system: SNOMED, code: '45653009', display: 'Right upper lobe' } }],
            },
            { linkId: 'nodule-size', answer: [{ valueQuantity: { value: 8, unit: 'mm' } }] },
          ],
        },
        {
          linkId: 'impression',
          answer: [{ valueString: 'Small right effusion.\nFollow-up in 3 months & "compare".' }],
        },
      ],
    };

    before(async () => {
      app = await startTestApp(database);
      await seed(app);
      const created = await fhir(app, 'POST', '/ValueSet', { body: lobes });
      expect(created.status, JSON.stringify(created.body)).to.equal(201);
      lobesId = created.body.id;
      const whole = await fhir(app, 'POST', '/ValueSet', {
        body: {
          resourceType: 'ValueSet',
          url: wholeUrl,
          status: 'active',
          compose: { include: [{ system: SNOMED }] },
        },
      });
      expect(whole.status, JSON.stringify(whole.body)).to.equal(201);
      const q = await fhir(app, 'POST', '/Questionnaire', { body: questionnaire });
      expect(q.status, JSON.stringify(q.body)).to.equal(201);
      expect(q.body.contained).to.deep.equal(questionnaire.contained);
    });
    after(() => app?.close());

    const eventCount = async () => (await app.allEvents()).length;

    /** Runs a read-only request and asserts it wrote no events. */
    const readOnly = async (request: () => Promise<FhirResponse>): Promise<FhirResponse> => {
      const before = await eventCount();
      const res = await request();
      expect(await eventCount(), 'events written by a read-only operation').to.equal(before);
      return res;
    };

    const expandGet = (query: Record<string, string>, auth: string | null = GENERAL) =>
      readOnly(() => fhir(app, 'GET', `/ValueSet/$expand?${new URLSearchParams(query)}`, { auth }));

    const codesOf = (res: FhirResponse) =>
      (res.body.expansion.contains ?? []).map((c: { code: string }) => c.code);

    describe('GET /ValueSet/$expand', () => {
      it('expands a tenant ValueSet by url with filter and count', async () => {
        const res = await expandGet({ url: lobesUrl, filter: 'RIGHT', count: '2' });
        expect(res.status, JSON.stringify(res.body)).to.equal(200);
        expect(res.headers.get('content-type')).to.match(/^application\/fhir\+json/);
        expect(res.body).to.include({ resourceType: 'ValueSet', id: lobesId, url: lobesUrl });
        const { identifier, ...expansion } = res.body.expansion;
        expect(identifier).to.match(/^urn:uuid:[0-9a-f-]{36}$/);
        expect(expansion).to.deep.equal({
          timestamp: app.casebook.clock().toISOString(),
          total: 3,
          offset: 0,
          parameter: [
            { name: 'filter', valueString: 'RIGHT' },
            { name: 'count', valueInteger: 2 },
          ],
          contains: [
            { system: SNOMED, code: '45653009', display: 'Right upper lobe' },
            { system: SNOMED, code: '72481006', display: 'Right middle lobe' },
          ],
        });
        const again = await expandGet({ url: lobesUrl, filter: 'RIGHT', count: '2' });
        expect(again.body.expansion.identifier).to.equal(identifier);
      });

      it('pages with offset and resolves url|version', async () => {
        const res = await expandGet({ url: `${lobesUrl}|1.0.0`, offset: '3' });
        expect(res.status, JSON.stringify(res.body)).to.equal(200);
        expect(codesOf(res)).to.deep.equal(['44714003', '31094006']);
        expect(res.body.expansion).to.include({ total: 5, offset: 3 });
      });

      it('expands a ValueSet contained in a Questionnaire: url with #id, context, questionnaire + valueSet', async () => {
        for (const query of <Record<string, string>[]>[
          { url: `${questionnaireUrl}#sides` },
          { context: `${questionnaireUrl}#sides` },
          { context: `${questionnaireUrl}#effusion-side` },
          { questionnaire: questionnaireUrl, valueSet: '#sides' },
          { questionnaire: `${questionnaireUrl}|1.0.0`, url: '#sides' },
        ]) {
          const res = await expandGet({ ...query, filter: 'i' });
          expect(res.status, `${JSON.stringify(query)}: ${JSON.stringify(res.body)}`).to.equal(200);
          expect(res.body).to.include({ resourceType: 'ValueSet', id: 'sides' });
          expect(res.body.expansion.contains).to.deep.equal([
            { system: SNOMED, code: '24028007', display: 'Right' },
            { system: SNOMED, code: '51440002', display: 'Both sides' },
          ]);
        }
      });

      it("follows an item's answerValueSet canonical given as context", async () => {
        const res = await expandGet({ context: `${questionnaireUrl}#nodule-lobe`, filter: 'lower' });
        expect(res.status, JSON.stringify(res.body)).to.equal(200);
        expect(codesOf(res)).to.deep.equal(['266005', '31094006']);
      });

      it('answers 404 for an unknown ValueSet, Questionnaire or contained id', async () => {
        for (const query of <Record<string, string>[]>[
          { url: 'https://radiology.example.org/ValueSet/unknown' },
          { url: 'https://radiology.example.org/Questionnaire/unknown#sides' },
          { url: `${questionnaireUrl}#nope` },
          { questionnaire: questionnaireUrl, valueSet: '#nope' },
        ]) {
          const issue = expectOutcome(await expandGet(query), 404, 'not-found');
          expect(issue.diagnostics).to.be.a('string').and.not.equal('');
        }
      });

      it("answers 404 for another tenant's ValueSet", async () => {
        expectOutcome(await expandGet({ url: lobesUrl }, MANAGED), 404, 'not-found');
        expectOutcome(
          await readOnly(() => fhir(app, 'GET', `/ValueSet/${lobesId}/$expand`, { auth: MANAGED })),
          404,
          'not-found',
        );
      });

      it('answers 422 not-supported for a ValueSet that takes a whole code system', async () => {
        const issue = expectOutcome(await expandGet({ url: wholeUrl }), 422, 'not-supported');
        expect(issue.diagnostics).to.equal(
          `ValueSet ${wholeUrl}: compose.include takes the whole code system ${SNOMED}; casebook holds no code systems, so it expands only listed concepts (compose.include.concept)`,
        );
        expect(issue.expression).to.deep.equal(['ValueSet.compose.include[0]']);
      });

      it('answers 400 for no ValueSet, a bad count, a repeated or an unknown parameter', async () => {
        expectOutcome(await expandGet({ filter: 'x' }), 400, 'required');
        for (const count of ['-1', 'ten', '1.5'])
          expect(
            expectOutcome(await expandGet({ url: lobesUrl, count }), 400, 'invalid').expression,
          ).to.deep.equal(['count']);
        expectOutcome(
          await readOnly(() =>
            fhir(app, 'GET', `/ValueSet/$expand?url=${encodeURIComponent(lobesUrl)}&filter=a&filter=b`),
          ),
          400,
          'invalid',
        );
        expectOutcome(await expandGet({ url: lobesUrl, property: 'x' }), 400, 'not-supported');
      });

      it('answers 401 without credentials', async () => {
        expectOutcome(await expandGet({ url: lobesUrl }, null), 401, 'login');
      });
    });

    describe('GET and POST /ValueSet/{id}/$expand, POST /ValueSet/$expand', () => {
      it('expands a stored ValueSet by id', async () => {
        const res = await readOnly(() => fhir(app, 'GET', `/ValueSet/${lobesId}/$expand?filter=upper`));
        expect(res.status, JSON.stringify(res.body)).to.equal(200);
        expect(codesOf(res)).to.deep.equal(['45653009', '44714003']);
        expectOutcome(await readOnly(() => fhir(app, 'GET', '/ValueSet/999999/$expand')), 404, 'not-found');
      });

      it('takes Parameters: url, filter, count, offset', async () => {
        const res = await readOnly(() =>
          fhir(app, 'POST', '/ValueSet/$expand', {
            body: {
              resourceType: 'Parameters',
              parameter: [
                { name: 'url', valueUri: lobesUrl },
                { name: 'filter', valueString: 'lobe' },
                { name: 'count', valueInteger: 2 },
                { name: 'offset', valueInteger: 1 },
              ],
            },
          }),
        );
        expect(res.status, JSON.stringify(res.body)).to.equal(200);
        expect(codesOf(res)).to.deep.equal(['72481006', '266005']);
        expect(res.body.expansion).to.include({ total: 5, offset: 1 });
      });

      it('takes an inline ValueSet and a contained reference in Parameters', async () => {
        const inline = await readOnly(() =>
          fhir(app, 'POST', '/ValueSet/$expand', {
            body: {
              resourceType: 'Parameters',
              parameter: [{ name: 'valueSet', resource: questionnaire.contained[0] }],
            },
          }),
        );
        expect(inline.status, JSON.stringify(inline.body)).to.equal(200);
        expect(codesOf(inline)).to.deep.equal(['24028007', '7771000', '51440002']);
        const contained = await readOnly(() =>
          fhir(app, 'POST', '/ValueSet/$expand', {
            body: {
              resourceType: 'Parameters',
              parameter: [
                { name: 'questionnaire', valueCanonical: questionnaireUrl },
                { name: 'valueSet', valueString: '#sides' },
                { name: 'count', valueInteger: 1 },
              ],
            },
          }),
        );
        expect(contained.status, JSON.stringify(contained.body)).to.equal(200);
        expect(codesOf(contained)).to.deep.equal(['24028007']);
      });

      it('answers 400 for a body that is not Parameters or a malformed parameter', async () => {
        expectOutcome(
          await readOnly(() => fhir(app, 'POST', '/ValueSet/$expand', { body: lobes })),
          400,
          'invalid',
        );
        const issue = expectOutcome(
          await readOnly(() =>
            fhir(app, 'POST', '/ValueSet/$expand', {
              body: {
                resourceType: 'Parameters',
                parameter: [
                  { name: 'url', valueUri: lobesUrl },
                  { name: 'count', valueString: 'many' },
                ],
              },
            }),
          ),
          400,
          'invalid',
        );
        expect(issue.expression).to.deep.equal(['count']);
      });
    });

    describe('POST /QuestionnaireResponse/$generate-narrative', () => {
      const narrate = (
        body: unknown,
        options: { auth?: string | null; headers?: Record<string, string> } = {},
      ) =>
        readOnly(() =>
          fhir(app, 'POST', '/QuestionnaireResponse/$generate-narrative', {
            body,
            auth: options.auth === undefined ? GENERAL : options.auth,
            ...(options.headers ? { headers: options.headers } : {}),
          }),
        );
      const params = (res: FhirResponse) =>
        Object.fromEntries(
          (res.body.parameter as { name: string; valueString: string }[]).map((p) => [p.name, p.valueString]),
        );

      const EXPECTED_TEXT = [
        'CT Chest <Report>',
        '',
        'FINDINGS',
        'Pleural effusion: Yes',
        'Side: Right',
        'Nodule location: Right upper lobe',
        'Nodule size: 8 mm',
        '',
        'Impression:',
        '  Small right effusion.',
        '  Follow-up in 3 months & "compare".',
      ].join('\n');
      const EXPECTED_XHTML =
        '<div xmlns="http://www.w3.org/1999/xhtml"><h1>CT Chest &lt;Report&gt;</h1>' +
        '<div><h2>Findings</h2><dl><dt>Pleural effusion</dt><dd>Yes</dd><dt>Side</dt><dd>Right</dd>' +
        '<dt>Nodule location</dt><dd>Right upper lobe</dd><dt>Nodule size</dt><dd>8 mm</dd></dl></div>' +
        '<dl><dt>Impression</dt><dd>Small right effusion.<br/>Follow-up in 3 months &amp; &quot;compare&quot;.</dd></dl></div>';

      it('answers Parameters with the XHTML and the plain text, texts from the canonical Questionnaire', async () => {
        const res = await narrate(response);
        expect(res.status, JSON.stringify(res.body)).to.equal(200);
        expect(res.headers.get('content-type')).to.match(/^application\/fhir\+json/);
        expect(res.body.resourceType).to.equal('Parameters');
        expect(res.body.parameter.map((p: { name: string }) => p.name)).to.deep.equal(['narrative', 'text']);
        expect(params(res)).to.deep.equal({ narrative: EXPECTED_XHTML, text: EXPECTED_TEXT });
        expect(XMLValidator.validate(params(res).narrative!)).to.equal(true);
        // Deterministic: the same body gives the same answer.
        expect((await narrate(response)).body).to.deep.equal(res.body);
      });

      it('takes Parameters with the response as resource', async () => {
        const res = await narrate({
          resourceType: 'Parameters',
          parameter: [{ name: 'resource', resource: response }],
        });
        expect(res.status, JSON.stringify(res.body)).to.equal(200);
        expect(params(res)).to.deep.equal({ narrative: EXPECTED_XHTML, text: EXPECTED_TEXT });
      });

      it('narrates from the response alone when its Questionnaire is unknown or not the tenant’s', async () => {
        const alone = { ...response, questionnaire: 'https://radiology.example.org/Questionnaire/unknown' };
        const res = await narrate(alone);
        expect(res.status, JSON.stringify(res.body)).to.equal(200);
        expect(params(res).text!.split('\n').slice(0, 3)).to.deep.equal([
          'FINDINGS',
          'effusion: Yes',
          'effusion-side: Right',
        ]);
        const managed = await narrate(response, { auth: MANAGED });
        expect(managed.status, JSON.stringify(managed.body)).to.equal(200);
        expect(params(managed).text!.startsWith('FINDINGS\neffusion: Yes')).to.equal(true);
      });

      it('answers 400 for a body that is not a QuestionnaireResponse', async () => {
        expectOutcome(await narrate({ resourceType: 'Patient' }), 400, 'invalid');
        expectOutcome(await narrate([response]), 400, 'invalid');
        expectOutcome(await narrate({ resourceType: 'Parameters', parameter: [] }), 400, 'required');
        expectOutcome(await narrate('{"resourceType": '), 400, 'invalid');
      });

      it('answers 400 with every malformed element named', async () => {
        const res = await narrate({
          resourceType: 'QuestionnaireResponse',
          status: 'completed',
          item: [{ text: 'no linkId' }, { linkId: 'x', answer: 'yes' }],
        });
        expectOutcome(res, 400, 'invalid');
        expect(res.body.issue.map((i: { expression: string[] }) => i.expression[0])).to.deep.equal([
          'QuestionnaireResponse.item[0].linkId',
          'QuestionnaireResponse.item[1].answer',
        ]);
      });

      it('answers 401 without credentials and 415 for other content types', async () => {
        expectOutcome(await narrate(response, { auth: null }), 401, 'login');
        expectOutcome(
          await narrate(JSON.stringify(response), { headers: { 'Content-Type': 'text/plain' } }),
          415,
          'not-supported',
        );
      });
    });

    describe('CORS for the web SDK (spec §4.5)', () => {
      const appOrigin = () => new URL(app.casebook.config.appUrl).origin;
      const formBackend = (path: string) =>
        `${app.casebook.config.sdcUrl.replace('localhost', '127.0.0.1')}${path}`;

      it('allows the app origin with credentials, answers preflights, and ignores foreign origins', async () => {
        expect(appOrigin()).to.match(/^http:\/\/localhost:\d+$/);
        const simple = await fetch(formBackend(`/ValueSet/$expand?url=${encodeURIComponent(lobesUrl)}`), {
          headers: { Origin: appOrigin(), Authorization: GENERAL, Accept: 'application/fhir+json' },
        });
        expect(simple.status).to.equal(200);
        expect(simple.headers.get('access-control-allow-origin')).to.equal(appOrigin());
        expect(simple.headers.get('access-control-allow-credentials')).to.equal('true');

        const preflight = await fetch(formBackend('/QuestionnaireResponse/$generate-narrative'), {
          method: 'OPTIONS',
          headers: {
            Origin: appOrigin(),
            'Access-Control-Request-Method': 'POST',
            'Access-Control-Request-Headers': 'content-type,authorization',
          },
        });
        expect(preflight.status).to.equal(204);
        expect(preflight.headers.get('access-control-allow-origin')).to.equal(appOrigin());
        expect(preflight.headers.get('access-control-allow-credentials')).to.equal('true');
        expect(preflight.headers.get('access-control-allow-methods')).to.equal(
          'GET,HEAD,POST,PUT,DELETE,OPTIONS',
        );
        expect(preflight.headers.get('access-control-allow-headers')?.split(',')).to.include.members([
          'Content-Type',
          'Authorization',
          'If-Match',
          'If-None-Match',
          'If-None-Exist',
          'If-Modified-Since',
          'Prefer',
          'X-Request-Id',
          'X-Medplum',
        ]);
        // What a web client reads back (issue 13): ETag, Location, Last-Modified, Content-Location.
        expect(simple.headers.get('access-control-expose-headers')?.split(',')).to.include.members([
          'ETag',
          'Location',
          'Last-Modified',
          'Content-Location',
        ]);

        const foreign = await fetch(formBackend(`/ValueSet/$expand?url=${encodeURIComponent(lobesUrl)}`), {
          headers: { Origin: 'https://evil.example.com', Authorization: GENERAL },
        });
        expect(foreign.headers.get('access-control-allow-origin')).to.equal(null);
        const foreignPreflight = await fetch(formBackend('/QuestionnaireResponse/$generate-narrative'), {
          method: 'OPTIONS',
          headers: { Origin: 'https://evil.example.com', 'Access-Control-Request-Method': 'POST' },
        });
        expect(foreignPreflight.headers.get('access-control-allow-origin')).to.equal(null);
      });
    });
  });
}
