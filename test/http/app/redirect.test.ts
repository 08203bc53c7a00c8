/**
 * Where the report editor sends the browser after a successful submit (spec §2.1
 * post_submit_redirect, issue 5 "Report editor"): the session's post_submit_redirect wins over a
 * post-submit-redirect input carried by the Task; without one on the session the Task's is used;
 * `response` and `task` are appended and existing query parameters kept.
 */
import { expect } from 'chai';
import { newPatient, newTask, sessionBody, unique } from '../../app/support.js';
import { seed, startTestApp, type TestApp } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import { fhir, sessionCookie } from '../../support/fhir.js';

for (const database of testDatabases) {
  describe(`report submit redirect on ${database.name}`, () => {
    let app: TestApp;
    let questionnaireUrl: string;

    before(async () => {
      app = await startTestApp(database);
      await seed(app);
      questionnaireUrl = `https://forms.example/${unique('q')}`;
      const created = await fhir(app, 'POST', '/Questionnaire', {
        body: {
          resourceType: 'Questionnaire',
          url: questionnaireUrl,
          version: '1',
          status: 'active',
          item: [{ linkId: 'finding', text: 'Finding', type: 'string', required: true }],
        },
      });
      expect(created.status).to.equal(201);
    });
    after(() => app?.close());

    /** An in-progress Task with its QuestionnaireResponse and, optionally, a redirect input. */
    const taskWithResponse = async (taskRedirect?: string) => {
      const patientId = await newPatient(app);
      const qr = await fhir(app, 'POST', '/QuestionnaireResponse', {
        body: {
          resourceType: 'QuestionnaireResponse',
          questionnaire: `${questionnaireUrl}|1`,
          status: 'in-progress',
          subject: { reference: `Patient/${patientId}` },
        },
      });
      expect(qr.status).to.equal(201);
      const task = await newTask(app, patientId, {
        status: 'in-progress',
        focus: { reference: `QuestionnaireResponse/${qr.body.id}` },
        ...(taskRedirect
          ? { input: [{ type: { text: 'post-submit-redirect' }, valueUrl: taskRedirect }] }
          : {}),
      });
      return { patientId, responseId: qr.body.id as string, taskId: task.id };
    };

    const submit = async (cookie: string, taskId: string) => {
      const res = await fetch(`${app.baseUrl}/app/tasks/${taskId}/report`, {
        method: 'POST',
        redirect: 'manual',
        headers: {
          Cookie: cookie,
          'Content-Type': 'application/x-www-form-urlencoded',
          Origin: new URL(app.casebook.config.appUrl).origin,
        },
        body: new URLSearchParams({
          'q:finding': 'Small nodule',
          action: 'submit',
          base_version: '1',
        }).toString(),
      });
      expect(res.status, await res.clone().text()).to.equal(303);
      return new URL(res.headers.get('location')!);
    };

    it("sends the browser to the session's post_submit_redirect, not the Task's, keeping its query", async () => {
      const { patientId, responseId, taskId } = await taskWithResponse('https://ehr.example.org/task-done');
      const { cookie } = await sessionCookie(
        app,
        sessionBody({
          patient: Number(patientId),
          post_submit_redirect: 'https://ehr.example.org/session-done?case=7',
        }),
      );
      const target = await submit(cookie.cookie, taskId);
      expect(`${target.origin}${target.pathname}`).to.equal('https://ehr.example.org/session-done');
      expect([...target.searchParams]).to.deep.equal([
        ['case', '7'],
        ['response', `QuestionnaireResponse/${responseId}`],
        ['task', `Task/${taskId}`],
      ]);
    });

    it("uses the Task's post-submit-redirect input when the session has none", async () => {
      const { patientId, responseId, taskId } = await taskWithResponse('https://ehr.example.org/task-done');
      const { cookie } = await sessionCookie(app, sessionBody({ patient: Number(patientId) }));
      const target = await submit(cookie.cookie, taskId);
      expect(`${target.origin}${target.pathname}`).to.equal('https://ehr.example.org/task-done');
      expect(target.searchParams.get('response')).to.equal(`QuestionnaireResponse/${responseId}`);
      expect(target.searchParams.get('task')).to.equal(`Task/${taskId}`);
    });
  });
}
