/**
 * Credentials before a request body (src/http/edge/authenticate.ts; docs/architecture.md
 * "Security"), on PGlite and PostgreSQL: the data server, the form backend and `POST /sessions`
 * answer 401 to a body without valid credentials before reading it, so a body that would be
 * refused (malformed, too deep) tells that it was never parsed. The handover, which carries no
 * credentials, takes a JSON body of at most 64 KiB.
 */
import { expect } from 'chai';
import { basic, GENERAL, seed, startTestApp, type TestApp } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import { FHIR_JSON } from '../../support/fhir.js';

/** JSON that does not parse, a little under 1 MiB: a 400 shows it was read, a 401 that it was not. */
const MALFORMED = `{"resourceType":"Patient","extension":[${'{"url":"urn:x"},'.repeat(60_000)}`;

for (const database of testDatabases) {
  describe(`credentials before the body on ${database.name}`, () => {
    let app: TestApp;
    before(async () => {
      app = await startTestApp(database);
      await seed(app);
    });
    after(() => app?.close());

    const post = (url: string, body: string, headers: Record<string, string>) =>
      fetch(url, { method: 'POST', headers: { 'Content-Type': FHIR_JSON, ...headers }, body });
    const fhirUrl = () => app.casebook.config.fhirUrl.replace('localhost', '127.0.0.1');

    it('answers 401 with WWW-Authenticate, not 400, to a malformed body without or with wrong credentials', async () => {
      for (const [name, headers] of [
        ['none', {}],
        ['wrong secret', { Authorization: basic('ehr-backend', 'wrong-secret-0123456789') }],
        ['unknown client', { Authorization: basic('nobody-here', 'wrong-secret-0123456789') }],
        ['invalid cookie', { Cookie: 'auth_session=not-a-session' }],
      ] as const) {
        for (const path of ['/Patient', '/', '/Questionnaire/$populate']) {
          const res = await post(`${fhirUrl()}${path}`, MALFORMED, headers);
          expect(res.status, `${name} ${path}`).to.equal(401);
          const body = (await res.json()) as { resourceType: string };
          expect(body.resourceType).to.equal('OperationOutcome');
          if (name === 'none') expect(res.headers.get('WWW-Authenticate'), path).to.match(/^Basic/);
        }
      }
    });

    it('reads the body once the credentials are good: 400 for the same malformed body', async () => {
      const res = await post(`${fhirUrl()}/Patient`, MALFORMED, { Authorization: GENERAL });
      expect(res.status).to.equal(400);
    });

    it('answers POST /sessions 401 before its body, and still creates a session with good credentials', async () => {
      const refused = await post(`${app.authUrl}/sessions`, MALFORMED, {
        'Content-Type': 'application/json',
      });
      expect(refused.status).to.equal(401);
      expect(refused.headers.get('Content-Type')).to.match(/^application\/problem\+json/);
      const created = await post(`${app.authUrl}/sessions`, JSON.stringify({ patient: undefined }), {
        'Content-Type': 'application/json',
        Authorization: GENERAL,
      });
      // The body was read and judged: a session needs a user (422), not a credential.
      expect(created.status).to.equal(422);
    });

    it('holds a JSON handover body to 64 KiB (413), and answers a small one as a handover', async () => {
      const large = await post(
        `${app.authUrl}/sessions/$handover`,
        JSON.stringify({ token: 'x', next: 'y'.repeat(70_000) }),
        { 'Content-Type': 'application/json' },
      );
      expect(large.status).to.equal(413);
      const small = await post(`${app.authUrl}/sessions/$handover`, JSON.stringify({ token: '1.unknown' }), {
        'Content-Type': 'application/json',
      });
      // Read and judged by the handover itself: it names the field that is missing.
      expect(small.status).to.equal(400);
      expect(await small.text()).to.match(/next is required/);
    });
  });
}
