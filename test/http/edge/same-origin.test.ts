/**
 * The app host's cross-site request forgery check (issue 33 finding 8; src/http/edge/same-origin.ts):
 * a form post must carry the app's own `Origin`, or, without `Origin`, a `Sec-Fetch-Site` of
 * `same-origin` or `same-site`; anything else is 403 `CrossSiteRequest` before the session or the
 * form is read, and writes nothing but its AuditEvent. (test/app/browser.test.ts saves and submits
 * the editor in Chromium through the same check.)
 */
import { expect } from 'chai';
import { isSameOriginRequest } from '../../../src/http/edge/same-origin.js';
import { newPatient, newTask, sessionBody } from '../../app/support.js';
import { seed, startTestApp, type TestApp } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import { fhir, sessionCookie } from '../../support/fhir.js';

const APP = 'https://app.example.org';

describe('isSameOriginRequest', () => {
  it('takes Origin when present, else Sec-Fetch-Site, and refuses a request with neither', () => {
    for (const [origin, site, expected] of [
      [APP, '', true],
      [APP, 'cross-site', true],
      ['https://evil.example', 'same-origin', false],
      ['https://app.example.org:8443', '', false],
      ['null', '', false],
      ['', 'same-origin', true],
      ['', 'same-site', true],
      ['', 'SAME-ORIGIN', true],
      ['', 'cross-site', false],
      ['', 'none', false],
      ['', '', false],
    ] as const)
      expect(
        isSameOriginRequest(APP, origin, site),
        `Origin ${origin || '-'} Sec-Fetch-Site ${site || '-'}`,
      ).to.equal(expected);
  });
});

for (const database of testDatabases) {
  describe(`app host form posts on ${database.name} (issue 33 finding 8)`, function () {
    this.timeout(60_000);
    let app: TestApp;
    let cookie: string;
    let taskId: string;
    let questionnaireId: string;
    before(async () => {
      app = await startTestApp(database);
      await seed(app);
      const q = await fhir(app, 'POST', '/Questionnaire', {
        body: {
          resourceType: 'Questionnaire',
          url: 'https://forms.example/origin',
          status: 'active',
          item: [{ linkId: 'findings', text: 'Findings', type: 'string' }],
        },
      });
      questionnaireId = q.body.id;
      const patientId = await newPatient(app);
      taskId = (await newTask(app, patientId)).id;
      cookie = (await sessionCookie(app, sessionBody({ patient: Number(patientId) }))).cookie.cookie;
    });
    after(() => app?.close());

    const post = (path: string, form: Record<string, string>, headers: Record<string, string>) =>
      fetch(`${app.casebook.config.appUrl.replace('localhost', '127.0.0.1')}${path}`, {
        method: 'POST',
        redirect: 'manual',
        headers: { Cookie: cookie, 'Content-Type': 'application/x-www-form-urlencoded', ...headers },
        body: new URLSearchParams(form).toString(),
      });

    it('refuses a post without Origin that says cross-site, or says nothing, and writes nothing', async () => {
      const origin = new URL(app.casebook.config.appUrl).origin;
      const refusedHeaders: Record<string, string>[] = [
        { 'Sec-Fetch-Site': 'cross-site' },
        {},
        { Origin: 'https://evil.example' },
        { Origin: 'null', 'Sec-Fetch-Site': 'same-origin' },
        { 'Sec-Fetch-Site': 'none' },
      ];
      for (const headers of refusedHeaders) {
        const before = (await app.allEvents()).length;
        for (const path of [`/tasks/${taskId}/forms`, `/tasks/${taskId}/report`]) {
          const res = await post(path, { questionnaire: questionnaireId, action: 'save' }, headers);
          expect(res.status, `${path} ${JSON.stringify(headers)}`).to.equal(403);
          expect(await res.text()).to.include('This form cannot be sent from here');
        }
        expect((await app.allEvents()).length, JSON.stringify(headers)).to.equal(before);
      }
      // The same post from the app's own page goes through: with its Origin, or same-origin without one.
      const started = await post(
        `/tasks/${taskId}/forms`,
        { questionnaire: questionnaireId },
        { Origin: origin },
      );
      expect(started.status, await started.clone().text()).to.equal(303);
      // Every save names the version it was based on (issue 32): the editor form's base_version.
      const editor = await fetch(
        `${app.casebook.config.appUrl.replace('localhost', '127.0.0.1')}/tasks/${taskId}/report`,
        { headers: { Cookie: cookie } },
      );
      const baseVersion = /name="base_version" value="(\d+)"/.exec(await editor.text())?.[1];
      expect(baseVersion, 'the editor names its base version').to.be.a('string');
      const saved = await post(
        `/tasks/${taskId}/report`,
        { action: 'save', base_version: String(baseVersion), 'q:findings': 'clear' },
        { 'Sec-Fetch-Site': 'same-origin' },
      );
      expect(saved.status, await saved.clone().text()).to.be.below(400);
    });
  });
}
