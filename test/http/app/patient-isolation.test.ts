/**
 * The report editor never shows another patient's report (issue 33 finding 1; docs/interface.md
 * §2.6, §3.2, §4.2; docs/architecture.md "Security"): a session of P1 cannot open, read-only or
 * not, save or submit a Task of P1 that points at P2's report or Encounter — 403, not a redirect,
 * not a page without the data — and cannot make such a Task on the data server in the first place.
 * On PGlite and PostgreSQL.
 */
import { expect } from 'chai';
import { GENERAL, seed, startTestApp, type TestApp, unique } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import { expectOutcome, fhir } from '../../support/fhir.js';
import {
  appUrlOf,
  givenTwoPatients,
  leakedIn,
  p1Session,
  SESSION_SCOPES,
  TASK_SYSTEM,
  type TwoPatients,
} from '../../support/isolation.js';

for (const database of testDatabases) {
  describe(`the report editor keeps to the session's patient on ${database.name}`, function () {
    this.timeout(120_000);
    let app: TestApp;
    let given: TwoPatients;
    let ownTask: number;
    const cookies = new Map<string, string>();

    before(async () => {
      app = await startTestApp(database);
      await seed(app);
      given = await givenTwoPatients(app);
      for (const scope of SESSION_SCOPES) cookies.set(scope, await p1Session(app, given, scope));
      // P1's own report and Task: the editor opens it for a session that may read P1.
      const own = await fhir(app, 'POST', '/QuestionnaireResponse', {
        body: {
          resourceType: 'QuestionnaireResponse',
          questionnaire: given.questionnaireUrl,
          status: 'in-progress',
          subject: { reference: `Patient/${given.p1.patient}` },
          item: [{ linkId: 'findings', text: 'Findings', answer: [{ valueString: 'P1 own answer' }] }],
        },
      });
      expect(own.status).to.equal(201);
      const task = await fhir(app, 'POST', '/Task', {
        body: {
          resourceType: 'Task',
          status: 'ready',
          intent: 'order',
          for: { reference: `Patient/${given.p1.patient}` },
          focus: { reference: `QuestionnaireResponse/${own.body.id}` },
        },
      });
      expect(task.status).to.equal(201);
      ownTask = Number(task.body.id);
    });
    after(() => app?.close());

    /** A page of the app host as the browser of `cookie` gets it (no redirect followed). */
    const page = async (cookie: string, path: string, form?: Record<string, string>) => {
      const { url, origin } = appUrlOf(app);
      const res = await fetch(`${url}${path}`, {
        redirect: 'manual',
        method: form ? 'POST' : 'GET',
        headers: {
          Cookie: cookie,
          ...(form ? { 'Content-Type': 'application/x-www-form-urlencoded', Origin: origin } : {}),
        },
        ...(form ? { body: new URLSearchParams(form).toString() } : {}),
      });
      const html = await res.text();
      const headers = [...res.headers].map(([k, v]) => `${k}: ${v}`).join('\n');
      expect(leakedIn(given, `${html}\n${headers}`), `${path}: ${html}`).to.deep.equal([]);
      return { status: res.status, html, location: res.headers.get('location') };
    };
    const eventCount = async () => (await app.allEvents()).length;

    for (const scope of SESSION_SCOPES)
      describe(`a session of P1 with ${scope}`, () => {
        const cookie = () => cookies.get(scope)!;
        const crossing = () =>
          [
            ['focus', given.crossing.focus],
            ['output', given.crossing.output],
            ['an absolute output', given.crossing.absoluteOutput],
          ] as const;

        it('cannot open a P1 Task whose report is P2’s: 403 on the editor, read-only or not', async () => {
          for (const [how, task] of crossing())
            for (const query of ['', '?readonly=yes', '?viewMode=standalone&readonly=yes']) {
              const res = await page(cookie(), `/tasks/${task}/report${query}`);
              expect(res.status, `${how}${query}: ${res.html}`).to.equal(403);
            }
        });

        it('cannot launch it either: 403 at the launch entry point, not a redirect', async () => {
          for (const [how, task] of crossing()) {
            const res = await page(cookie(), `/external/v1?task=Task/${task}`);
            expect(res.status, `${how}: ${res.html}`).to.equal(403);
            expect(res.location).to.equal(null);
          }
          const encounter = await page(cookie(), `/external/v1?task=Task/${given.crossing.encounter}`);
          expect(encounter.status).to.equal(403);
        });

        it('cannot save, submit, cancel or choose a form on it: 403, nothing written', async () => {
          const before = await eventCount();
          for (const [, task] of crossing())
            for (const action of ['save', 'submit', 'cancel']) {
              const res = await page(cookie(), `/tasks/${task}/report`, {
                action,
                'q:findings': 'Overwritten',
              });
              expect(res.status, `${action}: ${res.html}`).to.equal(403);
            }
          for (const task of [given.crossing.encounter, given.p2.draftTask]) {
            expect((await page(cookie(), `/tasks/${task}/forms`)).status).to.equal(403);
            expect(
              (await page(cookie(), `/tasks/${task}/forms`, { questionnaire: String(given.questionnaire) }))
                .status,
            ).to.equal(403);
          }
          expect(await eventCount()).to.equal(before);
          const r2 = await fhir(app, 'GET', `/QuestionnaireResponse/${given.p2.response}`, { auth: GENERAL });
          expect(r2.body.meta.versionId).to.equal('1');
        });

        it('cannot make a Task that points at P2’s report or Encounter (403), nor move one there', async () => {
          const before = await eventCount();
          const task = (extra: Record<string, unknown>) => ({
            resourceType: 'Task',
            identifier: [{ system: TASK_SYSTEM, value: unique('probe') }],
            status: 'ready',
            intent: 'order',
            for: { reference: `Patient/${given.p1.patient}` },
            ...extra,
          });
          const r2 = { reference: `QuestionnaireResponse/${given.p2.response}` };
          const pointing = [
            task({ focus: r2 }),
            task({ output: [{ type: { text: 'questionnaire-response' }, valueReference: r2 }] }),
            task({
              output: [
                {
                  type: { text: 'questionnaire-response' },
                  valueReference: {
                    reference: `${app.casebook.config.fhirUrl}/QuestionnaireResponse/${given.p2.response}`,
                  },
                },
              ],
            }),
            task({ encounter: { reference: `Encounter/${given.p2.encounter}` } }),
            task({ for: { reference: `Patient/${given.p2.patient}` } }),
          ];
          for (const body of pointing) {
            const created = await fhir(app, 'POST', '/Task', { auth: { cookie: cookie() }, body });
            expectOutcome(created, 403, 'forbidden');
            const bundled = await fhir(app, 'POST', '/', {
              auth: { cookie: cookie() },
              body: {
                resourceType: 'Bundle',
                type: 'transaction',
                entry: [{ resource: body, request: { method: 'POST', url: 'Task' } }],
              },
            });
            expectOutcome(bundled, 403, 'forbidden');
          }
          expect(await eventCount()).to.equal(before);
          if (scope === 'user/*.*') return;
          // A Task the session made for P1 cannot be moved to P2's report by an update.
          const own = await fhir(app, 'POST', '/Task', { auth: { cookie: cookie() }, body: task({}) });
          expect(own.status, JSON.stringify(own.body)).to.equal(201);
          const moved = await fhir(app, 'PUT', `/Task/${own.body.id}`, {
            auth: { cookie: cookie() },
            body: { ...task({ focus: r2 }), identifier: own.body.identifier, id: own.body.id },
          });
          const issue = expectOutcome(moved, 403, 'forbidden');
          expect(issue.expression).to.deep.equal(['Task.focus']);
        });

        it('opens P1’s own report when it may read P1', async () => {
          const res = await page(cookie(), `/tasks/${ownTask}/report?viewMode=standalone`);
          if (scope === 'user/*.*') return expect(res.status).to.equal(403);
          expect(res.status, res.html).to.equal(200);
          expect(res.html).to.include('P1 own answer');
          expect(res.html).to.include('ONESSON'); // the top bar's patient
        });
      });
  });
}
