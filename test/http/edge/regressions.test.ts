/**
 * The reproductions of issue 10, each as a named regression test on PGlite and PostgreSQL: a NUL
 * in an identifier (FHIR and session interface), a catastrophic Questionnaire regex, and the
 * inputs that answered 5xx (NUL in Basic credentials, queries and a $populate canonical, a
 * Content-Encoding that is not what the body is, and stack overflows from deep nesting).
 */
import { gzipSync } from 'node:zlib';
import { expect } from 'chai';
import { LaunchError, parseLaunchParams } from '../../../src/integration/launcher.js';
import { basic, GENERAL, seed, startTestApp, type TestApp } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import { expectOutcome, FHIR_JSON, fhir, ROLE_NEW } from '../../support/fhir.js';

/** `{ item: [{ linkId, item: [...] }] }` nested `depth` items deep. */
const nestedItems = (depth: number, withAnswer = false): Record<string, unknown>[] => {
  let items: Record<string, unknown>[] = [
    { linkId: `l${depth}`, ...(withAnswer ? { answer: [{ valueString: 'x' }] } : {}) },
  ];
  for (let i = depth - 1; i >= 1; i--) items = [{ linkId: `l${i}`, item: items }];
  return items;
};

/** `{"url":…,"extension":[{…}]}` nested `depth` extensions deep, as text (JSON.stringify would overflow). */
const nestedExtensionJson = (depth: number): string =>
  `${'{"url":"urn:x","extension":['.repeat(depth)}{"url":"urn:x","valueString":"x"}${']}'.repeat(depth)}`;

describe('issue 10 regressions without a database', () => {
  it('refuses sex=__proto__ at the launcher with 400 (it found Object.prototype and answered 502)', () => {
    expect(() => parseLaunchParams({ patient: 'P', encounter: 'E', user: 'U', sex: '__proto__' })).to.throw(
      LaunchError,
      /not a known code/,
    );
  });
});

for (const database of testDatabases) {
  describe(`issue 10 regressions on ${database.name}`, () => {
    let app: TestApp;
    let seq = 0;
    const unique = (prefix: string) => `${prefix}-${++seq}-${Math.random().toString(36).slice(2, 8)}`;

    before(async () => {
      app = await startTestApp(database);
      await seed(app);
    });
    after(() => app?.close());

    const eventCount = async () => (await app.allEvents()).length;

    /** A normal write is readable right away: the read models still follow the log. */
    const expectWritesVisible = async () => {
      const created = await fhir(app, 'POST', '/Patient', {
        body: { resourceType: 'Patient', identifier: [{ system: 'urn:test:mrn', value: unique('mrn') }] },
      });
      expect(created.status, JSON.stringify(created.body)).to.equal(201);
      const read = await fhir(app, 'GET', `/Patient/${created.body.id}`);
      expect(read.status).to.equal(200);
    };

    const post = (path: string, body: string | Buffer, headers: Record<string, string> = {}) =>
      fetch(`${app.casebook.config.fhirUrl.replace('localhost', '127.0.0.1')}${path}`, {
        method: 'POST',
        headers: { Authorization: GENERAL, 'Content-Type': FHIR_JSON, ...headers },
        body,
      });

    describe('a NUL character in an identifier', () => {
      it('answers 422 naming Patient.identifier[0].value for POST /Patient, and writes nothing', async () => {
        const before = await eventCount();
        const res = await fhir(app, 'POST', '/Patient', {
          body: { resourceType: 'Patient', identifier: [{ system: 'urn:x', value: 'a\u0000b' }] },
        });
        const issue = expectOutcome(res, 422, 'invalid');
        expect(issue.expression).to.deep.equal(['Patient.identifier[0].value']);
        expect(issue.diagnostics).to.match(/control character U\+0000/);
        expect(await eventCount()).to.equal(before);
        await expectWritesVisible();
      });

      it('answers 400 naming fhirContext[1].identifier.value for POST /sessions with role new, and writes nothing', async () => {
        const before = await eventCount();
        const res = await fetch(`${app.authUrl}/sessions`, {
          method: 'POST',
          headers: { Authorization: GENERAL, 'Content-Type': 'application/json' },
          body: JSON.stringify({
            fhirContext: [
              { type: 'Practitioner', identifier: { system: 'urn:s', value: unique('dr') }, role: ROLE_NEW },
              { type: 'Patient', identifier: { system: 'urn:x', value: 'a\u0000b' }, role: ROLE_NEW },
            ],
          }),
        });
        const body = (await res.json()) as any;
        expect(res.status).to.equal(400);
        expect(res.headers.get('content-type')).to.match(/^application\/problem\+json/);
        expect(body.errors.map((e: { path: string }) => e.path)).to.deep.equal([
          'fhirContext[1].identifier.value',
        ]);
        expect(await eventCount()).to.equal(before);
        // The session interface still works and its writes are visible.
        const ok = await fetch(`${app.authUrl}/sessions`, {
          method: 'POST',
          headers: { Authorization: GENERAL, 'Content-Type': 'application/json' },
          body: JSON.stringify({
            fhirContext: [
              { type: 'Practitioner', identifier: { system: 'urn:s', value: unique('dr') }, role: ROLE_NEW },
            ],
          }),
        });
        const session = (await ok.json()) as any;
        expect(ok.status, JSON.stringify(session)).to.equal(201);
        const read = await fetch(`${app.authUrl}/sessions/${session.id}`, {
          headers: { Authorization: GENERAL },
        });
        expect(read.status).to.equal(200);
        await expectWritesVisible();
      });

      it('answers 422 for a lone surrogate in an object key, naming the element', async () => {
        const res = await post('/Patient', '{"resourceType":"Patient","name":[{"\\ud800x":"a"}]}');
        const body = (await res.json()) as any;
        expect(res.status).to.equal(422);
        expect(body.issue[0].expression).to.deep.equal(['Patient.name[0]["\\\\uD800x"]']);
        expect(body.issue[0].diagnostics).to.match(/lone surrogate U\+D800/);
      });
    });

    describe('a Questionnaire regex that backtracks catastrophically', () => {
      it('answers $validate fast on RE2 while /healthz stays responsive', async () => {
        const body = {
          resourceType: 'Parameters',
          parameter: [
            {
              name: 'resource',
              resource: {
                resourceType: 'QuestionnaireResponse',
                status: 'completed',
                item: [{ linkId: 'code', answer: [{ valueString: `${'a'.repeat(30)}!` }] }],
              },
            },
            {
              name: 'questionnaire',
              resource: {
                resourceType: 'Questionnaire',
                status: 'active',
                item: [
                  {
                    linkId: 'code',
                    type: 'string',
                    extension: [
                      { url: 'http://hl7.org/fhir/StructureDefinition/regex', valueString: '(a+)+$' },
                    ],
                  },
                ],
              },
            },
          ],
        };
        const started = performance.now();
        const validating = fhir(app, 'POST', '/QuestionnaireResponse/$validate', { body }).then((res) => ({
          res,
          ms: performance.now() - started,
        }));
        const health = (async () => {
          const t = performance.now();
          const res = await fetch(`${app.baseUrl}/healthz`);
          return { status: res.status, ms: performance.now() - t };
        })();
        const [{ res, ms }, healthz] = await Promise.all([validating, health]);
        expect(res.status).to.equal(200);
        const issue = res.body.issue.find((i: { code: string }) => i.code === 'value');
        expect(issue?.diagnostics).to.match(/does not match the pattern/);
        expect(issue?.expression).to.deep.equal(['QuestionnaireResponse.item[0].answer[0]']);
        expect(ms, 'the $validate duration (ms)').to.be.below(1000);
        expect(healthz.status).to.equal(200);
        expect(healthz.ms, 'the /healthz duration (ms)').to.be.below(1000);
      });
    });

    describe('inputs that answered 5xx', () => {
      it('answers 401 with WWW-Authenticate for a NUL in the Basic-auth user (Basic ADoA)', async () => {
        for (const url of [
          `${app.casebook.config.fhirUrl.replace('localhost', '127.0.0.1')}/Patient/1`,
          `${app.authUrl}/sessions/1`,
        ]) {
          const res = await fetch(url, { headers: { Authorization: 'Basic ADoA' } });
          expect(res.status, url).to.equal(401);
          expect(res.headers.get('www-authenticate')).to.match(/^Basic /);
        }
      });

      it('answers 401 for malformed Authorization headers: bad base64, no colon, unknown scheme', async () => {
        const url = `${app.casebook.config.fhirUrl.replace('localhost', '127.0.0.1')}/Patient/1`;
        for (const header of [
          'Basic !!!',
          `Basic ${Buffer.from('no-colon').toString('base64')}`,
          'Bearer abc',
          'Basic',
          basic('ehr-backend\u0001', 'x'),
        ]) {
          const res = await fetch(url, { headers: { Authorization: header } });
          expect(res.status, header).to.equal(401);
          expect(res.headers.get('www-authenticate'), header).to.match(/^Basic /);
        }
      });

      it('answers 400 naming the parameter for a NUL in a query value (identifier, Questionnaire url)', async () => {
        const before = await eventCount();
        const search = await fhir(app, 'GET', '/Patient?identifier=urn:x%7C%00');
        expect(expectOutcome(search, 400, 'invalid').expression).to.deep.equal(['identifier']);
        const questionnaires = await fhir(app, 'GET', '/Questionnaire?url=%00');
        expect(expectOutcome(questionnaires, 400, 'invalid').expression).to.deep.equal(['url']);
        const conditional = await fhir(app, 'PUT', '/Patient?identifier=urn:x%7Ca%00b', {
          body: { resourceType: 'Patient' },
        });
        expect(expectOutcome(conditional, 400, 'invalid').expression).to.deep.equal(['identifier']);
        const ifNoneExist = await fhir(app, 'POST', '/Patient', {
          body: { resourceType: 'Patient' },
          headers: { 'If-None-Exist': 'identifier=urn:x%7C%00' },
        });
        expect(expectOutcome(ifNoneExist, 400, 'invalid').expression).to.deep.equal(['If-None-Exist']);
        expect(await eventCount()).to.equal(before);
      });

      it('answers 422 for a NUL in a $populate canonical', async () => {
        const res = await fhir(app, 'POST', '/Questionnaire/$populate', {
          body: {
            resourceType: 'Parameters',
            parameter: [{ name: 'canonical', valueCanonical: 'urn:q\u0000' }],
          },
        });
        expect(expectOutcome(res, 422, 'invalid').expression).to.deep.equal([
          'Parameters.parameter[0].valueCanonical',
        ]);
      });

      it('answers 422 for a NUL in a transaction entry URL, percent-encoded, and writes nothing', async () => {
        const before = await eventCount();
        const res = await fhir(app, 'POST', '/', {
          body: {
            resourceType: 'Bundle',
            type: 'transaction',
            entry: [
              {
                resource: { resourceType: 'Patient' },
                request: { method: 'PUT', url: 'Patient?identifier=urn:x%7Ca%00b' },
              },
            ],
          },
        });
        expect(expectOutcome(res, 422, 'invalid').expression).to.deep.equal(['Bundle.entry[0].request.url']);
        expect(await eventCount()).to.equal(before);
      });

      it('answers 400 for Content-Encoding gzip, deflate or br on a body that is not compressed', async () => {
        const before = await eventCount();
        for (const encoding of ['gzip', 'deflate', 'br']) {
          const res = await post('/Patient', '{"resourceType":"Patient"}', { 'Content-Encoding': encoding });
          const body = (await res.json()) as any;
          expect(res.status, encoding).to.equal(400);
          expect(body.issue[0].diagnostics).to.match(new RegExp(`Content-Encoding ${encoding}`));
        }
        expect(await eventCount()).to.equal(before);
      });

      it('answers 415 for an unsupported Content-Encoding, and accepts a real gzip body', async () => {
        const unsupported = await post('/Patient', '{"resourceType":"Patient"}', {
          'Content-Encoding': 'compress',
        });
        expect(unsupported.status).to.equal(415);
        const gzipped = await post(
          '/Patient',
          gzipSync(JSON.stringify({ resourceType: 'Patient', gender: 'female' })),
          { 'Content-Encoding': 'gzip' },
        );
        expect(gzipped.status).to.equal(201);
      });

      it('answers 413 naming the limit for a 5 MB body, as sent and as decoded (a gzip bomb)', async () => {
        const big = JSON.stringify({ resourceType: 'Patient', text: 'x'.repeat(5_000_000) });
        const plain = await post('/Patient', big);
        expect(plain.status).to.equal(413);
        expect(((await plain.json()) as any).issue[0].diagnostics).to.match(/limit of 1048576 bytes/);
        const bomb = await post('/Patient', gzipSync(big), { 'Content-Encoding': 'gzip' });
        expect(bomb.status).to.equal(413);
        expect(((await bomb.json()) as any).issue[0].diagnostics).to.match(/decoded JSON body/);
      });

      it('answers 400 naming the depth limit for a transaction extension 3,000 deep', async () => {
        const before = await eventCount();
        const res = await fhir(app, 'POST', '/', {
          body: `{"resourceType":"Bundle","type":"transaction","entry":[{"request":{"method":"POST","url":"Patient"},"resource":{"resourceType":"Patient","extension":[${nestedExtensionJson(3000)}]}}]}`,
        });
        const issue = expectOutcome(res, 400, 'invalid');
        expect(issue.diagnostics).to.match(/deeper than the limit of 64 levels/);
        expect(await eventCount()).to.equal(before);
      });

      it('answers 400 for a QuestionnaireResponse item 1,000 deep in $generate-narrative', async () => {
        const res = await fhir(app, 'POST', '/QuestionnaireResponse/$generate-narrative', {
          body: { resourceType: 'QuestionnaireResponse', status: 'completed', item: nestedItems(1000, true) },
        });
        expect(expectOutcome(res, 400, 'invalid').diagnostics).to.match(/limit of 64 levels/);
      });

      it('answers 400 for items 2,000 deep in $validate and $populate', async () => {
        const validate = await fhir(app, 'POST', '/QuestionnaireResponse/$validate', {
          body: { resourceType: 'QuestionnaireResponse', status: 'completed', item: nestedItems(2000, true) },
        });
        expect(expectOutcome(validate, 400, 'invalid').diagnostics).to.match(/limit of 64 levels/);
        const populate = await fhir(app, 'POST', '/Questionnaire/$populate', {
          body: {
            resourceType: 'Parameters',
            parameter: [
              {
                name: 'questionnaire',
                resource: { resourceType: 'Questionnaire', status: 'active', item: nestedItems(2000) },
              },
            ],
          },
        });
        expect(expectOutcome(populate, 400, 'invalid').diagnostics).to.match(/limit of 64 levels/);
        await expectWritesVisible();
      });
    });
  });
}
