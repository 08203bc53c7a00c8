/**
 * The application host in a real browser (issue 5 "Tests in a real browser"; spec §1.2–1.3, §3.2,
 * §4.1–4.2, §7; docs/architecture.md "Security"): Debian chromium via playwright-core against a real casebook
 * (PGlite and the Postgres server), with an EHR page on another site (127.0.0.1) handing the
 * session over to casebook (localhost): the SameSite=Strict cookie bounce, form selection, the
 * report editor (validation, enableWhen, read-only, chrome), submit and cancel redirects, and every
 * launch error status.
 */
import { expect } from 'chai';
import type { Browser, BrowserContext, Page, Response } from 'playwright-core';
import type { RecordedEvent } from '../../src/eventstore/port.js';
import { GENERAL, seed, startTestApp, type TestApp } from '../support/app.js';
import { testDatabases } from '../support/databases.js';
import { fhir, ROLE_NEW } from '../support/fhir.js';
import {
  answer,
  appUrl,
  CHROMIUM,
  chestCtQuestionnaire,
  chromiumMissing,
  clearAnswer,
  clickAndNavigate,
  create,
  deleteSession,
  type Ehr,
  handoverUrl,
  html,
  launchBrowser,
  launchUrl,
  link,
  newPatient,
  newSession,
  newTask,
  open,
  pathOf,
  recordNavigations,
  screenshot,
  sessionBody,
  settle,
  signIn,
  startEhr,
  TASK_SYSTEM,
  unique,
} from './support.js';

// What the page does here does not depend on the store: one store, the embedded default (PGlite).
// What these pages write is asserted on PGlite and PostgreSQL by test/http/app/; the browser tests
// where stored state is the point (report-work, report-versions) run on both.
for (const database of testDatabases.filter((d) => d.name === 'pglite')) {
  describe(`application host in a real browser on ${database.name}`, function () {
    this.timeout(120_000);

    let browser: Browser;
    let app: TestApp;
    let ehr: Ehr;
    let questionnaireId: string;
    const contexts: BrowserContext[] = [];

    before(async function () {
      if (chromiumMissing()) {
        console.log(
          `      skipped: ${CHROMIUM} is missing (apt-get install chromium to run the browser tests)`,
        );
        this.skip();
      }
      ehr = await startEhr();
      // The browser drops cookies whose Expires lies in the past: run the server clock at real time.
      app = await startTestApp(database, {
        start: new Date(),
        env: { ALLOWED_REDIRECT_ORIGINS: ehr.origin },
      });
      await seed(app);
      questionnaireId = await create(
        app,
        chestCtQuestionnaire(`https://forms.example.org/Questionnaire/${unique('chest-ct')}`),
      );
      browser = await launchBrowser();
    });
    after(async () => {
      for (const c of contexts) await c.close().catch(() => undefined);
      await browser?.close();
      await app?.close();
      await ehr?.close();
    });

    /** A fresh browser context (closed after the suite). */
    const newContext = async (): Promise<{ context: BrowserContext; page: Page }> => {
      const context = await browser.newContext();
      contexts.push(context);
      return { context, page: await context.newPage() };
    };

    /** A browser holding a new session (created with `body`, see sessionBody) whose first stop is `next`. */
    const browse = async (body: Record<string, unknown>, next = `${appUrl(app)}/`) => {
      const session = await newSession(app, sessionBody(body));
      const signed = await signIn(browser, app, session, next);
      contexts.push(signed.context);
      return { ...signed, session };
    };

    const formsPath = (taskId: string) => `/app/tasks/${taskId}/forms`;
    const reportPath = (taskId: string) => `/app/tasks/${taskId}/report`;
    const statusesOf = (responses: Response[]) => responses.map((r) => `${r.status()} ${r.url()}`);

    /** Asserts the last response is an HTML error page with `status`. */
    const expectErrorPage = async (page: Page, final: Response, status: number, all: Response[]) => {
      expect(final.status(), statusesOf(all).join('\n')).to.equal(status);
      expect(final.headers()['content-type']).to.match(/^text\/html/);
      expect(await page.locator('body').innerText()).to.contain(String(status));
    };

    /** Opens a draft Task in `page` and picks the test form: the page ends in the editor. */
    const startReport = async (page: Page, taskId: string) => {
      const { final, all } = await open(page, launchUrl(app, { task: `Task/${taskId}` }));
      expect(final.status(), statusesOf(all).join('\n')).to.equal(200);
      expect(pathOf(page.url())).to.equal(formsPath(taskId));
      const picked = await clickAndNavigate(page, `button[name=questionnaire][value="${questionnaireId}"]`);
      expect(pathOf(page.url()), statusesOf(picked.all).join('\n')).to.equal(reportPath(taskId));
      expect(picked.all.at(-1)!.status()).to.equal(200);
    };

    const fhirGet = async (path: string) => {
      const res = await fhir(app, 'GET', path, { auth: GENERAL });
      expect(res.status, JSON.stringify(res.body)).to.equal(200);
      return res.body;
    };

    const answersOf = (qr: any): Record<string, unknown[]> => {
      const out: Record<string, unknown[]> = {};
      const walk = (items: any[] | undefined) => {
        for (const i of items ?? []) {
          out[i.linkId] = (i.answer ?? []).map((a: any) => {
            const key = Object.keys(a).find((k) => k.startsWith('value'))!;
            return a[key];
          });
          walk(i.item);
          for (const a of i.answer ?? []) walk(a.item);
        }
      };
      walk(qr.item);
      return out;
    };

    describe('the report flow from an EHR page on another site (scenarios 1 and 6)', () => {
      it('hands over, bounces once for the Strict cookie, picks a form, validates, submits and returns to the EHR', async () => {
        let session: any;
        let taskId = '';
        const chart = ehr.page(async () => {
          session = await newSession(app, {
            fhirContext: [
              {
                type: 'Practitioner',
                identifier: { system: 'urn:test:staff', value: unique('dr') },
                role: ROLE_NEW,
              },
              {
                type: 'Patient',
                identifier: { system: 'urn:test:mrn', value: unique('mrn') },
                role: ROLE_NEW,
              },
            ],
            scope: 'user/*.* patient/*.*',
            post_submit_redirect: `${ehr.origin}/done?keep=1`,
            post_cancel_redirect: `${ehr.origin}/cancelled`,
          });
          const task = await newTask(app, session.patient.reference.split('/')[1]);
          taskId = task.id;
          const next = launchUrl(app, `?task=Task/${taskId}`);
          return html(
            'EHR chart',
            `<h1>Chart</h1>${link(handoverUrl(app, session.handover_token, next), 'Open report')}`,
          );
        });

        const { page } = await newContext();
        const launchRequests: { url: string; cookie: boolean }[] = [];
        page.on('request', async (r) => {
          if (r.isNavigationRequest() && pathOf(r.url()) === '/app/external/v1') {
            const headers = await r.allHeaders();
            launchRequests.push({ url: r.url(), cookie: /(^|;\s*)auth_session=/.test(headers.cookie ?? '') });
          }
        });
        await page.goto(chart);
        expect(await page.locator('h1').innerText()).to.equal('Chart');
        const inactive = await fetch(`${app.authUrl}/sessions/${session.id}`, {
          headers: { Authorization: GENERAL },
        });
        expect(((await inactive.json()) as any).active).to.equal(false);

        // Scenario 6: the chain starts cross-site, so the launch first arrives without the cookie.
        const handover = await clickAndNavigate(page, '#open-report');
        const trail = statusesOf(handover.all).join('\n');
        expect(pathOf(page.url()), trail).to.equal(formsPath(taskId));
        expect(handover.all.at(-1)!.status(), trail).to.equal(200);
        expect(
          handover.all.map((r) => r.status()),
          trail,
        ).not.to.include(401);
        expect(launchRequests.length, JSON.stringify(launchRequests)).to.be.within(1, 2);
        if (launchRequests.length === 2) {
          expect(launchRequests[0]!.cookie, 'first launch request carries the cookie').to.equal(false);
          expect(launchRequests[1]!.cookie, 'bounced launch request lacks the cookie').to.equal(true);
        } else {
          console.log(
            '      note: chromium sent the Strict cookie on the first launch request (no bounce needed)',
          );
        }

        const active = await fetch(`${app.authUrl}/sessions/${session.id}`, {
          headers: { Authorization: GENERAL },
        });
        expect(((await active.json()) as any).active).to.equal(true);

        // The session was created with the default deployment_mode (embedded): no top bar.
        expect(await page.locator('header.topbar').count()).to.equal(0);

        // Form selection → editor (the Task goes in-progress).
        const picked = await clickAndNavigate(page, `button[name=questionnaire][value="${questionnaireId}"]`);
        expect(pathOf(page.url()), statusesOf(picked.all).join('\n')).to.equal(reportPath(taskId));
        expect((await fhirGet(`/Task/${taskId}`)).status).to.equal('in-progress');

        // Fill in everything but the required findings.
        await clearAnswer(page, 'findings');
        await answer(page, 'contrast', true);
        await answer(page, 'contrast-agent', 'Iodinated contrast');
        await answer(page, 'severity', 'mild');
        await screenshot(page, `${database.name}-editor-1-before-submit`);

        // The editor marks required questions with aria-required (no browser-side `required`), so the
        // POST reaches the server, which answers the editor again with 422.
        const refused = await clickAndNavigate(page, 'button[name=action][value=submit]');
        expect(refused.first.status(), statusesOf(refused.all).join('\n')).to.equal(422);
        const fieldError = page.locator('[data-linkid="findings"] .field-error');
        expect(await fieldError.count()).to.be.greaterThan(0);
        expect(await fieldError.first().isVisible()).to.equal(true);
        expect(await page.locator('#error-summary').isVisible()).to.equal(true);
        // The other answers survive the round trip.
        expect(
          await page.locator('[data-linkid="contrast-agent"] [name="q:contrast-agent"]').inputValue(),
        ).to.equal('Iodinated contrast');
        await screenshot(page, `${database.name}-editor-2-with-error`);

        await answer(page, 'findings', 'No acute findings');
        await screenshot(page, `${database.name}-editor-3-after-fix`);
        const submitted = await clickAndNavigate(page, 'button[name=action][value=submit]');
        const done = new URL(page.url());
        expect(`${done.origin}${done.pathname}`, statusesOf(submitted.all).join('\n')).to.equal(
          `${ehr.origin}/done`,
        );
        expect(done.searchParams.get('keep')).to.equal('1');
        const responseRef = done.searchParams.get('response') ?? '';
        expect(responseRef).to.match(/^QuestionnaireResponse\/\d+$/);
        expect(done.searchParams.get('task')).to.equal(`Task/${taskId}`);
        expect([...done.searchParams.keys()]).to.deep.equal(['keep', 'response', 'task']);
        expect(await page.locator('#ehr-done').isVisible()).to.equal(true);

        // The data server agrees (read as the client).
        const qr = await fhirGet(`/${responseRef}`);
        expect(qr.status).to.equal('completed');
        expect(qr.subject).to.deep.include({ reference: session.patient.reference });
        const answers = answersOf(qr);
        expect(answers.findings).to.deep.equal(['No acute findings']);
        expect(answers.contrast).to.deep.equal([true]);
        expect(answers['contrast-agent']).to.deep.equal(['Iodinated contrast']);
        expect(answers.severity).to.have.length(1);
        expect(answers.severity![0]).to.deep.include({ system: 'urn:test:severity', code: 'mild' });
        const task = await fhirGet(`/Task/${taskId}`);
        expect(task.status).to.equal('completed');

        // …and the event log names the session as the actor.
        const events = await app.allEvents();
        const responseId = Number(responseRef.split('/')[1]);
        const of = (type: string, id: number) =>
          events.filter((e: RecordedEvent) => e.type === type && (e.data as { id?: number }).id === id);
        const submittedEvents = of('QuestionnaireResponseSubmitted', responseId);
        const statusEvents = of('TaskStatusChanged', Number(taskId));
        expect(submittedEvents).to.have.length(1);
        expect(statusEvents.map((e) => (e.data as any).resource.status)).to.deep.equal([
          'in-progress',
          'completed',
        ]);
        for (const e of [...submittedEvents, ...statusEvents])
          expect(e.metadata.actor, e.type).to.deep.equal({ type: 'session', id: String(session.id) });
      });

      it('recovers when an EHR link opens the launch URL directly in a browser that already holds the session', async () => {
        const patient = await newPatient(app);
        const task = await newTask(app, patient);
        const { page, session } = await browse({ patient: Number(patient) });
        expect(session.active).to.equal(false);
        const direct = launchUrl(app, { task: `Task/${task.id}` });
        const chart = ehr.page(() => html('EHR chart', link(direct, 'Open report')));
        await page.goto(chart);
        const opened = await clickAndNavigate(page, '#open-report');
        const trail = statusesOf(opened.all).join('\n');
        expect(pathOf(page.url()), trail).to.equal(formsPath(task.id));
        expect(opened.all.at(-1)!.status(), trail).to.equal(200);
        expect(
          opened.all.map((r) => r.status()),
          trail,
        ).not.to.include(401);
        // At most one bounce: the launch URL is requested once or twice.
        expect(opened.all.filter((r) => pathOf(r.url()) === '/app/external/v1').length, trail).to.be.within(
          1,
          2,
        );
      });
    });

    describe('the report editor', () => {
      it('loads its bundle under the CSP and shows and hides the enableWhen-dependent item live (scenario 2)', async () => {
        const patient = await newPatient(app);
        const task = await newTask(app, patient);
        const { page } = await browse({ patient: Number(patient), deployment_mode: 'standalone' });
        // The page's script is the esbuild bundle, from casebook's origin, under the page's CSP.
        const problems: string[] = [];
        page.on('console', (m) => {
          if (m.type() === 'error' || m.type() === 'warning') problems.push(m.text());
        });
        page.on('pageerror', (e) => problems.push(e.message));
        await startReport(page, task.id);
        const scripts = await page
          .locator('script[src]')
          .evaluateAll((els) => els.map((e) => (e as unknown as { src: string }).src));
        expect(scripts).to.have.length(1);
        expect(scripts[0]).to.match(new RegExp(`^${appUrl(app)}/assets/editor-[A-Z0-9]{8}\\.js$`));
        expect(
          await page.locator('meta[http-equiv="Content-Security-Policy"]').getAttribute('content'),
        ).to.contain("script-src 'self'");
        expect(await page.locator('script:not([src]):not([type="application/json"])').count()).to.equal(0);
        const dependent = page.locator('[data-linkid="contrast-agent"]');
        expect(await dependent.isVisible(), 'dependent item visible before the boolean is answered').to.equal(
          false,
        );
        await answer(page, 'contrast', true);
        await dependent.waitFor({ state: 'visible', timeout: 5000 });
        await answer(page, 'contrast-agent', 'Gadolinium');
        await answer(page, 'contrast', false);
        await dependent.waitFor({ state: 'hidden', timeout: 5000 });
        await answer(page, 'contrast', true);
        await dependent.waitFor({ state: 'visible', timeout: 5000 });
        await screenshot(page, `${database.name}-editor-enable-when`);
        expect(problems).to.deep.equal([]);
      });

      describe('read-only and chrome (scenario 3)', () => {
        let patient: string;
        let taskId: string;
        before(async () => {
          patient = await newPatient(app);
          taskId = (await newTask(app, patient)).id;
          const { page } = await browse({ patient: Number(patient) });
          await startReport(page, taskId);
          await answer(page, 'findings', 'Small nodule');
          const saved = await clickAndNavigate(page, 'button[name=action][value=save]');
          expect(saved.all.at(-1)!.status(), statusesOf(saved.all).join('\n')).to.equal(200);
        });

        const launchAs = async (
          deploymentMode: 'embedded' | 'standalone',
          params: Record<string, string>,
        ) => {
          const { page } = await browse({ patient: Number(patient), deployment_mode: deploymentMode });
          const { final, all } = await open(page, launchUrl(app, { task: `Task/${taskId}`, ...params }));
          expect(final.status(), statusesOf(all).join('\n')).to.equal(200);
          expect(pathOf(page.url())).to.equal(reportPath(taskId));
          return page;
        };
        const topbar = (page: Page) => page.locator('header.topbar').count();

        it('readonly=yes opens the editor with the answers and no inputs', async () => {
          const page = await launchAs('standalone', { readonly: 'yes' });
          expect(await page.locator('.answer-readonly').count()).to.be.greaterThan(0);
          expect(await page.locator('[data-linkid="findings"] .answer-readonly').innerText()).to.contain(
            'Small nodule',
          );
          expect(await page.locator('[name^="q:"]').count()).to.equal(0);
          expect(await page.locator('button[name=action][value=submit]').count()).to.equal(0);
          await screenshot(page, `${database.name}-editor-readonly`);
        });

        it('any readonly value other than yes opens the editor editable', async () => {
          const page = await launchAs('standalone', { readonly: 'true' });
          expect(await page.locator('[name="q:findings"]').count()).to.equal(1);
        });

        it('an embedded session hides the top bar; viewMode=standalone shows it', async () => {
          expect(await topbar(await launchAs('embedded', {}))).to.equal(0);
          expect(await topbar(await launchAs('embedded', { viewMode: 'standalone' }))).to.equal(1);
        });

        it('a standalone session shows the top bar; viewMode=embedded hides it', async () => {
          expect(await topbar(await launchAs('standalone', {}))).to.equal(1);
          expect(await topbar(await launchAs('standalone', { viewMode: 'embedded' }))).to.equal(0);
        });
      });

      it('cancel sends the browser to post_cancel_redirect (scenario 4)', async () => {
        const patient = await newPatient(app);
        const task = await newTask(app, patient);
        const { page } = await browse({
          patient: Number(patient),
          post_submit_redirect: `${ehr.origin}/done`,
          post_cancel_redirect: `${ehr.origin}/cancelled?case=7`,
        });
        await startReport(page, task.id);
        await answer(page, 'findings', 'Not finished');
        // Unsaved answers: Cancel asks first (issue 32 "Leaving").
        await page.locator('button[name=action][value=cancel]').click();
        const dialog = page.getByRole('dialog', { name: 'Discard unsaved changes?' });
        await dialog.waitFor({ state: 'visible' });
        await clickAndNavigate(page, '#cb-discard button[value=discard]');
        expect(page.url()).to.equal(`${ehr.origin}/cancelled?case=7`);
        expect(await page.locator('#ehr-cancelled').isVisible()).to.equal(true);
        expect((await fhirGet(`/Task/${task.id}`)).status).not.to.equal('completed');
      });
    });

    it('refuses a report form posted from the EHR site (no cookie cross-site, Origin checked) and changes nothing', async () => {
      const patient = await newPatient(app);
      const task = await newTask(app, patient);
      const { page } = await browse({ patient: Number(patient) });
      await startReport(page, task.id);
      const before = await fhirGet(`/Task/${task.id}`);
      const forged = ehr.page(() =>
        html(
          'Forged',
          `<form method="post" action="${appUrl(app)}/tasks/${task.id}/report">` +
            '<input type="hidden" name="q:findings" value="forged">' +
            '<button id="forge" name="action" value="submit">Send</button></form>',
        ),
      );
      await page.goto(forged);
      const sent = await clickAndNavigate(page, '#forge');
      expect(sent.first.status(), statusesOf(sent.all).join('\n')).to.be.oneOf([401, 403]);
      const after = await fhirGet(`/Task/${task.id}`);
      expect(after.meta.versionId).to.equal(before.meta.versionId);
      expect(after.status).to.equal('in-progress');
    });

    describe('launch errors (scenario 5; spec §7)', () => {
      let page: Page;
      let patient: string;
      before(async () => {
        patient = await newPatient(app);
        ({ page } = await browse({ patient: Number(patient) }));
      });

      const launch = async (query: string | Record<string, string>) => {
        const { final, all } = await open(page, launchUrl(app, query));
        return { final, all };
      };
      const expectLaunch = async (query: string | Record<string, string>, status: number) => {
        const { final, all } = await launch(query);
        await expectErrorPage(page, final, status, all);
      };

      it('400 without task or task:identifier', () => expectLaunch('', 400));
      it('400 for a malformed task reference (task=Patient/1)', () =>
        expectLaunch({ task: 'Patient/1' }, 400));
      it('400 for a task:identifier without a bar', () => expectLaunch({ 'task:identifier': 'no-bar' }, 400));

      it('404 for an unknown Task (by id and by identifier)', async () => {
        await expectLaunch({ task: 'Task/987654321' }, 404);
        await expectLaunch({ 'task:identifier': `${TASK_SYSTEM}|${unique('none')}` }, 404);
      });

      it('opens a Task found by task:identifier (URL-encoded bar and colon)', async () => {
        const task = await newTask(app, patient);
        const query = `?task%3Aidentifier=${encodeURIComponent(`${TASK_SYSTEM}|${task.identifier}`)}`;
        expect(query).to.contain('%7C');
        const { final, all } = await launch(query);
        expect(final.status(), statusesOf(all).join('\n')).to.equal(200);
        expect(pathOf(page.url())).to.equal(formsPath(task.id));
      });

      it('409 for several Tasks with one identifier cannot arise: the identifier is unique in the tenant', async () => {
        const task = await newTask(app, patient);
        const duplicate = await fhir(app, 'POST', '/Task', {
          body: {
            resourceType: 'Task',
            identifier: [{ system: TASK_SYSTEM, value: task.identifier }],
            status: 'draft',
            intent: 'order',
            for: { reference: `Patient/${patient}` },
          },
        });
        expect(duplicate.status).to.equal(409);
        const other = await newTask(app, patient);
        const moved = await fhir(app, 'PUT', `/Task/${other.id}`, {
          body: {
            resourceType: 'Task',
            id: other.id,
            identifier: [{ system: TASK_SYSTEM, value: task.identifier }],
            status: 'draft',
            intent: 'order',
            for: { reference: `Patient/${patient}` },
          },
        });
        expect(moved.status).to.equal(409);
        // So the identifier still names exactly one Task, which opens.
        const { final, all } = await launch({ 'task:identifier': `${TASK_SYSTEM}|${task.identifier}` });
        expect(final.status(), statusesOf(all).join('\n')).to.equal(200);
        expect(pathOf(page.url())).to.equal(formsPath(task.id));
      });

      it('422 for a failed Task', async () => {
        const task = await newTask(app, patient, { status: 'failed' });
        await expectLaunch({ task: `Task/${task.id}` }, 422);
      });

      it('422 for a ready or in-progress Task without a QuestionnaireResponse', async () => {
        for (const status of ['ready', 'in-progress']) {
          const task = await newTask(app, patient, { status });
          await expectLaunch({ task: `Task/${task.id}` }, 422);
        }
      });

      it('403 for a Task of another patient than the patient/ scope allows', async () => {
        const other = await newPatient(app, 'Roe');
        const task = await newTask(app, other);
        const scoped = await browse({ patient: Number(patient), scope: 'patient/*.*' });
        const { final, all } = await open(scoped.page, launchUrl(app, { task: `Task/${task.id}` }));
        await expectErrorPage(scoped.page, final, 403, all);
        // The patient's own Task opens in the same session.
        const own = await newTask(app, patient);
        const ok = await open(scoped.page, launchUrl(app, { task: `Task/${own.id}` }));
        expect(ok.final.status(), statusesOf(ok.all).join('\n')).to.equal(200);
      });

      it('401 without a session, after exactly one same-site bounce', async () => {
        const task = await newTask(app, patient);
        const { page: fresh } = await newContext();
        const { final, all } = await open(fresh, launchUrl(app, { task: `Task/${task.id}` }));
        await expectErrorPage(fresh, final, 401, all);
        const launches = all.filter((r) => pathOf(r.url()) === '/app/external/v1');
        expect(launches.length, statusesOf(all).join('\n')).to.equal(2);
        expect(launches[0]!.status()).to.equal(200);
        // Reloading the error page does not loop.
        const reloaded = recordNavigations(fresh);
        await fresh.reload();
        await settle(fresh, reloaded);
        expect(reloaded.at(-1)!.status(), statusesOf(reloaded).join('\n')).to.equal(401);
      });

      it('401 once the session is deleted (DELETE /sessions/{id}), on reload', async () => {
        const task = await newTask(app, patient);
        const signed = await browse(
          { patient: Number(patient) },
          launchUrl(app, { task: `Task/${task.id}` }),
        );
        expect(signed.final.status(), statusesOf(signed.all).join('\n')).to.equal(200);
        expect(pathOf(signed.page.url())).to.equal(formsPath(task.id));
        await signed.page.goto(launchUrl(app, { task: `Task/${task.id}` }));
        expect(await deleteSession(app, signed.session.id)).to.equal(204);
        const reloaded = recordNavigations(signed.page);
        await signed.page.reload();
        await settle(signed.page, reloaded);
        await expectErrorPage(signed.page, reloaded.at(-1)!, 401, reloaded);
        const again = await open(signed.page, launchUrl(app, { task: `Task/${task.id}` }));
        await expectErrorPage(signed.page, again.final, 401, again.all);
      });
    });
  });
}
