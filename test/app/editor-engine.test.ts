/**
 * The report editor on the form engine in real Chromium (issue 32 "One form engine", "Coded
 * answers, units"), with the 60-item CT chest form (test/support/ct-chest.ts): live calculated
 * values stored on save, units as text beside their fields and in the read-only view, the
 * narrative and the exported text, a stored ValueSet's choice list for a clinician session whose
 * scopes cannot read ValueSets, codings stored with system/code/display and shown back, each
 * field's check when it is left, enablement per repeat instance, and axe-core at 0 violations on
 * a phone and a desktop.
 */
import { AxeBuilder } from '@axe-core/playwright';
import { expect } from 'chai';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { GENERAL, seed, startTestApp, type TestApp } from '../support/app.js';
import { LUNG_RADS_SYSTEM } from '../support/ct-chest.js';
import { testDatabases } from '../support/databases.js';
import { fhir } from '../support/fhir.js';
import {
  answer,
  CHROMIUM,
  chromiumMissing,
  clickAndNavigate,
  create,
  engineIdle,
  launchBrowser,
  launchUrl,
  newPatient,
  newSession,
  newTask,
  open,
  screenshot,
  sessionBody,
  signIn,
  startReportIn,
  storeCtChest,
  unique,
} from './support.js';

/** The answer values of a stored response by linkId (all instances, in order). */
const answersOf = (qr: any): Record<string, unknown[]> => {
  const out: Record<string, unknown[]> = {};
  const walk = (items: any[] | undefined) => {
    for (const i of items ?? []) {
      for (const a of i.answer ?? []) {
        const key = Object.keys(a).find((k) => k.startsWith('value'))!;
        out[i.linkId] = [...(out[i.linkId] ?? []), a[key]];
        walk(a.item);
      }
      walk(i.item);
    }
  };
  walk(qr.item);
  return out;
};

const WCAG = ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22aa'];

/** axe-core's violations at WCAG 2.2 AA, as `rule: target` lines. */
const violations = async (page: Page): Promise<string[]> => {
  const result = await new AxeBuilder({ page }).withTags(WCAG).analyze();
  return result.violations.flatMap((v) =>
    v.nodes.map((n) => `${v.id}: ${n.target.join(' ')} — ${n.failureSummary}`),
  );
};

// What the page does here does not depend on the store: one store, the embedded default (PGlite).
// What these pages write is asserted on PGlite and PostgreSQL by test/http/app/; the browser tests
// where stored state is the point (report-work, report-versions) run on both.
for (const database of testDatabases.filter((d) => d.name === 'pglite')) {
  describe(`the report editor on the form engine, in a real browser, on ${database.name}`, function () {
    this.timeout(180_000);

    let browser: Browser;
    let app: TestApp;
    let questionnaireId: string;
    const contexts: BrowserContext[] = [];

    before(async function () {
      if (chromiumMissing()) {
        console.log(
          `      skipped: ${CHROMIUM} is missing (apt-get install chromium to run the browser tests)`,
        );
        this.skip();
      }
      app = await startTestApp(database, { start: new Date() });
      await seed(app);
      questionnaireId = await storeCtChest(app);
      browser = await launchBrowser();
    });
    after(async () => {
      for (const c of contexts) await c.close().catch(() => undefined);
      await browser?.close();
      await app?.close();
    });

    /** A clinician's browser (scopes `user/*.* patient/*.*`: no ValueSet of the tenant is readable) in the CT form. */
    const openCtReport = async (viewport = { width: 1366, height: 768 }) => {
      const patient = await newPatient(app);
      const task = await newTask(app, patient);
      const session = await newSession(
        app,
        sessionBody({ patient: Number(patient), deployment_mode: 'standalone' }),
      );
      const signed = await signIn(browser, app, session, launchUrl(app, { task: `Task/${task.id}` }));
      contexts.push(signed.context);
      await signed.page.setViewportSize(viewport);
      const problems: string[] = [];
      signed.page.on('pageerror', (e) => problems.push(e.message));
      signed.page.on('console', (m) => {
        // A refused submit answers the page with 422 on purpose; anything else is a problem.
        if (m.type() === 'error' && !/status of 422/.test(m.text())) problems.push(m.text());
      });
      await startReportIn(signed.page, app, task.id, questionnaireId);
      return { page: signed.page, taskId: task.id, problems };
    };

    const storedResponse = async (taskId: string) => {
      const task = await fhir(app, 'GET', `/Task/${taskId}`, { auth: GENERAL });
      const ref = (task.body as any).focus.reference as string;
      const qr = await fhir(app, 'GET', `/${ref}`, { auth: GENERAL });
      expect(qr.status).to.equal(200);
      return qr.body as any;
    };

    const field = (page: Page, key: string) => page.locator(`[data-key="${key}"]`);

    it('computes BMI from height and weight while typing, beside its label, and stores it on save', async () => {
      const { page, taskId, problems } = await openCtReport();
      const bmi = field(page, 'bmi').locator('output');
      expect(await bmi.innerText()).to.equal('—');
      await page.locator('[name="q:height"]').fill('180');
      await page.locator('[name="q:weight"]').fill('81');
      await bmi.filter({ hasText: '25 kg/m²' }).waitFor({ timeout: 2000 });
      // Read-only text beside its label: no input to type into.
      expect(await field(page, 'bmi').locator('input, textarea, select').count()).to.equal(0);
      expect(await field(page, 'bmi').locator('.q-label').innerText()).to.contain('Body mass index');
      await page.locator('[name="q:weight"]').fill('90');
      await bmi.filter({ hasText: '27.8 kg/m²' }).waitFor({ timeout: 2000 });
      const saved = await clickAndNavigate(page, 'button[name=action][value=save]');
      expect(saved.all.at(-1)!.status()).to.equal(200);
      const qr = await storedResponse(taskId);
      expect(answersOf(qr).bmi).to.deep.equal([27.8]);
      expect(answersOf(qr).height).to.deep.equal([180]);
      // And shown back after the reload, computed again by the engine.
      await engineIdle(page);
      expect(await field(page, 'bmi').locator('output').innerText()).to.equal('27.8 kg/m²');
      expect(problems).to.deep.equal([]);
    });

    it('writes units as text beside their fields, in the read-only view and in the narrative', async () => {
      const { page, taskId } = await openCtReport();
      for (const [key, unit] of [
        ['slice-thickness', 'mm'],
        ['height', 'cm'],
        ['contrast-volume', 'mL'],
        ['nodule[0]/nodule-size', 'mm'],
        ['follow-up-months', 'months'],
      ] as const) {
        const el = field(page, key).locator('.unit');
        expect(await el.innerText(), key).to.equal(unit);
        // Linked to the field, so a screen reader reads it with the input.
        const input = field(page, key).locator('input[name^="q:"]');
        expect(await input.getAttribute('aria-describedby'), key).to.contain(await el.getAttribute('id'));
      }
      await answer(page, 'nodules-present', true);
      await engineIdle(page);
      await field(page, 'nodule[0]/nodule-size').locator('input').fill('7');
      await answer(page, 'slice-thickness', '1.25');
      const saved = await clickAndNavigate(page, 'button[name=action][value=save]');
      expect(saved.all.at(-1)!.status()).to.equal(200);
      // Read-only view.
      const readonly = await page.context().newPage();
      await open(readonly, launchUrl(app, { task: `Task/${taskId}`, readonly: 'yes' }));
      expect(
        await readonly.locator('[data-key="nodule[0]/nodule-size"] .answer-readonly').innerText(),
      ).to.equal('7 mm');
      expect(await readonly.locator('[data-key="slice-thickness"] .answer-readonly').innerText()).to.equal(
        '1.25 mm',
      );
      await readonly.close();
      // $generate-narrative (the exported report text is the same function).
      const qr = await storedResponse(taskId);
      const narrative = await fhir(app, 'POST', '/QuestionnaireResponse/$generate-narrative', { body: qr });
      expect(narrative.status, JSON.stringify(narrative.body)).to.equal(200);
      const text = (narrative.body as any).parameter.find((p: any) => p.name === 'text')
        .valueString as string;
      expect(text).to.contain('Mean diameter: 7 mm');
      expect(text).to.contain('Slice thickness: 1.25 mm');
    });

    it("lists a stored ValueSet's codes for a clinician session, stores system, code and display, and shows it back", async () => {
      const { page, taskId } = await openCtReport();
      await answer(page, 'nodules-present', true);
      await engineIdle(page);
      const select = page.locator('select[name="q:lung-rads"]');
      expect(await select.locator('option').allInnerTexts()).to.include('4A — Suspicious');
      await select.selectOption('4A');
      // A contained ValueSet (#lobes) and answerOptions list theirs too.
      await field(page, 'nodule[0]/nodule-lobe')
        .locator('select')
        .selectOption({ label: 'Right upper lobe' });
      await field(page, 'nodule[0]/nodule-size').locator('input').fill('6');
      await clickAndNavigate(page, 'button[name=action][value=save]');
      const coding = { system: LUNG_RADS_SYSTEM, code: '4A', display: '4A — Suspicious' };
      expect(answersOf(await storedResponse(taskId))['lung-rads']).to.deep.equal([coding]);
      expect(answersOf(await storedResponse(taskId))['nodule-lobe']).to.deep.equal([
        { system: 'http://snomed.info/sct', code: '45653009', display: 'Right upper lobe' },
      ]);
      // Shown back by its display, and a second save keeps it.
      expect(await page.locator('select[name="q:lung-rads"] option:checked').innerText()).to.equal(
        '4A — Suspicious',
      );
      await clickAndNavigate(page, 'button[name=action][value=save]');
      expect(answersOf(await storedResponse(taskId))['lung-rads']).to.deep.equal([coding]);
    });

    it('stores free text of an open choice as a string', async () => {
      const { page, taskId } = await openCtReport();
      await answer(page, 'lymph-nodes', true);
      await engineIdle(page);
      await field(page, 'lymph-node-station').locator('input[type=text]').fill('11L');
      await clickAndNavigate(page, 'button[name=action][value=save]');
      expect(answersOf(await storedResponse(taskId))['lymph-node-station']).to.deep.equal(['11L']);
    });

    it('checks a field when it is left: the message is linked to it, announced, and cleared when fixed', async () => {
      const { page } = await openCtReport();
      const input = page.locator('[name="q:height"]');
      await input.fill('abc');
      await page.locator('[name="q:weight"]').focus();
      await engineIdle(page);
      const error = field(page, 'height').locator('.field-error');
      expect(await error.innerText()).to.contain('Enter a number.');
      expect(await input.getAttribute('aria-invalid')).to.equal('true');
      expect(await input.getAttribute('aria-describedby')).to.contain(await error.getAttribute('id'));
      expect(await page.locator('#cb-live').innerText()).to.equal('Height: Enter a number.');
      await input.fill('400');
      await page.locator('[name="q:weight"]').focus();
      await engineIdle(page);
      expect(await error.innerText()).to.contain('The value must be at most 250 cm.');
      await input.fill('180.25');
      await page.locator('[name="q:weight"]').focus();
      await engineIdle(page);
      expect(await error.innerText()).to.contain('Use at most 1 decimal place.');
      await input.fill('180.5');
      await page.locator('[name="q:weight"]').focus();
      await engineIdle(page);
      expect(await error.count()).to.equal(0);
      expect(await input.getAttribute('aria-invalid')).to.equal(null);
      // Leaving an untouched required field says nothing; clearing a changed one does.
      const impression = page.locator('[name="q:impression"]');
      await impression.focus();
      await page.locator('[name="q:height"]').focus();
      await engineIdle(page);
      expect(await field(page, 'impression').locator('.field-error').count()).to.equal(0);
      await impression.fill('x');
      await impression.fill('');
      await page.locator('[name="q:height"]').focus();
      await engineIdle(page);
      expect(await field(page, 'impression').locator('.field-error').innerText()).to.contain(
        'An answer is required.',
      );
    });

    it('shows and hides items per Nodule instance, and the server stores what the page showed', async () => {
      const { page, taskId } = await openCtReport();
      expect(await field(page, 'nodule').isVisible()).to.equal(false);
      await answer(page, 'nodules-present', true);
      await field(page, 'nodule').waitFor({ state: 'visible' });
      await page.locator('button[data-add-group="nodule"]').click();
      await engineIdle(page);
      expect(await page.locator('fieldset.instance[data-linkid="nodule"]').count()).to.equal(2);
      await field(page, 'nodule[1]/nodule-type').locator('select').selectOption('part-solid');
      await engineIdle(page);
      expect(await field(page, 'nodule[1]/nodule-solid-size').isVisible()).to.equal(true);
      expect(await field(page, 'nodule[0]/nodule-solid-size').isVisible()).to.equal(false);
      await field(page, 'nodule[0]/nodule-size').locator('input').fill('4');
      await field(page, 'nodule[1]/nodule-size').locator('input').fill('9');
      await field(page, 'nodule[1]/nodule-solid-size').locator('input').fill('3');
      await screenshot(page, `${database.name}-ct-nodules`);
      await clickAndNavigate(page, 'button[name=action][value=save]');
      const stored = answersOf(await storedResponse(taskId));
      expect(stored['nodule-size']).to.deep.equal([4, 9]);
      expect(stored['nodule-solid-size']).to.deep.equal([3]);
      // $validate agrees with what the page showed.
      const validated = await fhir(app, 'POST', '/QuestionnaireResponse/$validate', {
        body: await storedResponse(taskId),
      });
      const disabled = ((validated.body as any).issue as any[]).filter((i) => i.code === 'business-rule');
      expect(disabled, JSON.stringify(validated.body)).to.deep.equal([]);
    });

    it('keeps a runaway enableWhenExpression within its budget in the browser: the page stays responsive, the item counts as enabled', async () => {
      const list = `(${Array.from({ length: 30 }, (_, i) => i).join('|')})`;
      const slow = `${list}.select(${list}.select(${list}.select(${list}.select(${list})))).count() > 0`;
      const url = `https://forms.example.org/Questionnaire/${unique('runaway')}`;
      const runaway = await create(app, {
        resourceType: 'Questionnaire',
        url,
        status: 'active',
        item: [
          { linkId: 'a', text: 'A', type: 'boolean' },
          {
            linkId: 'b',
            text: 'B',
            type: 'string',
            enableWhen: [{ question: 'a', operator: '=', answerBoolean: true }],
          },
          {
            linkId: 'slow',
            text: 'Slow',
            type: 'string',
            extension: [
              {
                url: 'http://hl7.org/fhir/uv/sdc/StructureDefinition/sdc-questionnaire-enableWhenExpression',
                valueExpression: { language: 'text/fhirpath', expression: slow },
              },
            ],
          },
        ],
      });
      const patient = await newPatient(app);
      const task = await newTask(app, patient);
      const session = await newSession(app, sessionBody({ patient: Number(patient) }));
      const signed = await signIn(browser, app, session, launchUrl(app, { task: `Task/${task.id}` }));
      contexts.push(signed.context);
      const { page } = signed;
      await open(page, launchUrl(app, { task: `Task/${task.id}` }));
      const picked = await clickAndNavigate(page, `button[name=questionnaire][value="${runaway}"]`);
      expect(picked.all.at(-1)!.status()).to.equal(200);
      // While the worker is stuck on the expression, the page answers at once.
      const started = Date.now();
      await page.evaluate(() => 1 + 1);
      expect(Date.now() - started).to.be.below(500);
      const waited = Date.now();
      await engineIdle(page);
      // The watchdog replaced the worker after twice the budget (400 ms) and the expression was refused.
      expect(Date.now() - waited).to.be.below(5000);
      expect(await field(page, 'slow').isVisible()).to.equal(true);
      // The engine still works for everything else.
      await answer(page, 'a', true);
      await field(page, 'b').waitFor({ state: 'visible', timeout: 3000 });
    });

    for (const [name, viewport] of [
      ['desktop', { width: 1366, height: 768 }],
      ['phone', { width: 390, height: 844 }],
    ] as const)
      it(`has no axe-core violations at WCAG 2.2 AA on a ${name}, empty, filled and refused`, async () => {
        const { page, problems } = await openCtReport(viewport);
        expect(await violations(page)).to.deep.equal([]);
        await screenshot(page, `${database.name}-ct-${name}-1-empty`);
        await answer(page, 'nodules-present', true);
        await answer(page, 'contrast', true);
        await answer(page, 'effusion', 'left');
        await page.locator('[name="q:height"]').fill('172');
        await page.locator('[name="q:weight"]').fill('70');
        await page.locator('[name="q:height"]').fill('17x');
        await page.locator('[name="q:weight"]').focus();
        await engineIdle(page);
        expect(await violations(page)).to.deep.equal([]);
        await screenshot(page, `${database.name}-ct-${name}-2-filled`);
        const refused = await clickAndNavigate(page, 'button[name=action][value=submit]');
        expect(refused.first.status()).to.equal(422);
        await engineIdle(page);
        expect(await page.locator('#error-summary li').count()).to.be.greaterThan(5);
        expect(await violations(page)).to.deep.equal([]);
        await screenshot(page, `${database.name}-ct-${name}-3-refused`);
        expect(problems).to.deep.equal([]);
      });
  });
}
