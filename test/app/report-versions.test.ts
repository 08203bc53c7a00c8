/**
 * Report versions in a real browser (issue 32): two tabs on one report — the stale tab's save is
 * refused, the newer answers survive, the conflict page keeps the stale tab's answers and applies
 * its non-colliding changes onto the newer version; then the signed-off report opens read-only
 * and is amended with a reason. axe-core finds 0 WCAG 2.2 AA violations at phone and desktop size
 * on the conflict page, after the merge, on the read-only view (dates in UTC, saying so), with the
 * amendment's Reason typed, while amending and on the amended view. On PGlite and PostgreSQL.
 */
import { expect } from 'chai';
import type { Browser, BrowserContext } from 'playwright-core';
import { GENERAL, seed, startTestApp, type TestApp } from '../support/app.js';
import { testDatabases } from '../support/databases.js';
import { fhir } from '../support/fhir.js';
import {
  appUrl,
  axeAtBothSizes,
  CHROMIUM,
  chromiumMissing,
  clickAndNavigate,
  create,
  launchBrowser,
  newPatient,
  newSession,
  newTask,
  open,
  sessionBody,
  signIn,
  unique,
} from './support.js';

// Browser globals inside page.evaluate callbacks (the tests' tsconfig has no DOM library).
declare const window: any;

for (const database of testDatabases) {
  describe(`report versions in a real browser on ${database.name}`, function () {
    this.timeout(240_000);

    let browser: Browser;
    let app: TestApp;
    let questionnaireUrl: string;
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
      questionnaireUrl = `https://forms.example/${unique('versions')}`;
      await create(app, {
        resourceType: 'Questionnaire',
        url: questionnaireUrl,
        version: '1',
        title: 'CT chest',
        status: 'active',
        item: [
          { linkId: 'indication', text: 'Indication', type: 'string' },
          { linkId: 'impression', text: 'Impression', type: 'string', required: true },
          { linkId: 'referrer', text: 'Referrer', type: 'string' },
          { linkId: 'studied', text: 'Study date', type: 'date' },
        ],
      });
      browser = await launchBrowser();
    });
    after(async () => {
      for (const c of contexts) await c.close().catch(() => undefined);
      await browser?.close();
      await app?.close();
    });

    const stored = async (responseId: string) => {
      const res = await fhir(app, 'GET', `/QuestionnaireResponse/${responseId}`, { auth: GENERAL });
      expect(res.status).to.equal(200);
      const answers = Object.fromEntries(
        ((res.body.item ?? []) as any[]).map((i) => [
          i.linkId,
          i.answer?.[0]?.valueString ?? i.answer?.[0]?.valueDate,
        ]),
      );
      return { status: res.body.status as string, version: res.body.meta.versionId as string, answers };
    };

    it('refuses the stale tab, keeps its answers on the conflict page, merges them, then locks and amends the report', async () => {
      const patientId = await newPatient(app);
      const qr = await fhir(app, 'POST', '/QuestionnaireResponse', {
        auth: GENERAL,
        body: {
          resourceType: 'QuestionnaireResponse',
          questionnaire: `${questionnaireUrl}|1`,
          status: 'in-progress',
          subject: { reference: `Patient/${patientId}` },
        },
      });
      const responseId = String(qr.body.id);
      const task = await newTask(app, patientId, {
        status: 'in-progress',
        focus: { reference: `QuestionnaireResponse/${responseId}` },
      });
      const reportUrl = `${appUrl(app)}/tasks/${task.id}/report`;
      const session = await newSession(
        app,
        sessionBody({ patient: Number(patientId), deployment_mode: 'standalone' }),
      );
      const signed = await signIn(browser, app, session, reportUrl);
      contexts.push(signed.context);
      const tabA = signed.page;
      const tabB = await signed.context.newPage();
      await open(tabB, reportUrl);
      expect(await tabA.locator('input[name=base_version]').inputValue()).to.equal('1');
      expect(await tabB.locator('input[name=base_version]').inputValue()).to.equal('1');

      // Tab A saves first.
      await tabA.getByLabel('Impression').fill('No nodule');
      await tabA.getByLabel('Indication').fill('Cough');
      const savedA = await clickAndNavigate(tabA, 'button[name=action][value=save]');
      expect(savedA.all.at(-1)!.status()).to.equal(200);
      expect(await stored(responseId)).to.deep.include({ version: '2' });

      // Tab B, stale, changes the referrer and the indication: refused, nothing stored.
      await tabB.getByLabel('Referrer').fill('Dr Stale');
      await tabB.getByLabel('Indication').fill('Fever');
      const staleB = await clickAndNavigate(tabB, 'button[name=action][value=save]');
      expect(staleB.all.at(-1)!.status()).to.equal(409);
      await tabB
        .getByRole('heading', { name: 'This report was changed elsewhere since you opened it' })
        .waitFor();
      expect(await tabB.getByLabel('Referrer').inputValue()).to.equal('Dr Stale');
      expect(await tabB.getByLabel('Indication').inputValue()).to.equal('Fever');
      const table = await tabB.locator('table.changes').innerText();
      expect(table).to.contain('No nodule');
      expect(table).to.contain('Changed by both');
      expect(await stored(responseId)).to.deep.equal({
        status: 'in-progress',
        version: '2',
        answers: { impression: 'No nodule', indication: 'Cough' },
      });
      expect(await axeAtBothSizes(tabB, 'conflict')).to.deep.equal([]);

      // Apply the stale tab's non-colliding change (referrer) onto version 2; the indication collides.
      const merged = await clickAndNavigate(tabB, 'button[name=action][value=merge]');
      expect(merged.all.at(-1)!.status()).to.equal(200);
      expect(await tabB.locator('input[name=base_version]').inputValue()).to.equal('2');
      expect(await tabB.getByLabel('Referrer').inputValue()).to.equal('Dr Stale');
      expect(await tabB.getByLabel('Impression').inputValue()).to.equal('No nodule');
      expect(await tabB.getByLabel('Indication').inputValue()).to.equal('Cough');
      // Merged answers are not stored yet: the page says so and leaving asks.
      expect(await tabB.locator('#cb-save-status').innerText()).to.equal('Not saved yet');
      expect(
        await tabB.evaluate(() => {
          const leaving = new Event('beforeunload', { cancelable: true });
          window.dispatchEvent(leaving);
          return leaving.defaultPrevented;
        }),
      ).to.equal(true);
      expect(await axeAtBothSizes(tabB, 'merged')).to.deep.equal([]);
      expect(await stored(responseId)).to.deep.include({ version: '2' });
      await tabB.getByLabel('Study date').fill('2026-11-03');
      const submitted = await clickAndNavigate(tabB, 'button[name=action][value=submit]');
      expect(submitted.all.at(-1)!.status()).to.equal(200);
      expect(await stored(responseId)).to.deep.equal({
        status: 'completed',
        version: '3',
        answers: {
          impression: 'No nodule',
          indication: 'Cough',
          referrer: 'Dr Stale',
          studied: '2026-11-03',
        },
      });

      // Back in tab A (a relaunch too): read-only, with Amend and Entered in error.
      const reopened = await open(tabA, reportUrl);
      expect(reopened.final.status()).to.equal(200);
      // Dates and times for people, one way throughout the view: the time in UTC, and saying so.
      expect(await tabA.locator('.status-line').innerText()).to.match(
        /^Final report · version 3 · .+ · \d{1,2} [A-Z][a-z]{2} \d{4}, \d{2}:\d{2} UTC$/m,
      );
      expect(await tabA.locator('.report').innerText()).to.contain('3 Nov 2026');
      expect(await tabA.locator('.report').innerText()).not.to.match(/\d{4}-\d{2}-\d{2}/);
      expect(await tabA.locator('button[value=submit]').count()).to.equal(0);
      expect(await tabA.getByRole('button', { name: 'Print' }).isVisible()).to.equal(true);
      expect(await axeAtBothSizes(tabA, 'readonly')).to.deep.equal([]);

      // The Reason of the amendment, typed: the view's Amend form in that state too.
      await tabA.getByRole('textbox', { name: 'Reason' }).first().fill('Referrer was wrong');
      expect(await axeAtBothSizes(tabA, 'amend-reason')).to.deep.equal([]);
      const amending = await clickAndNavigate(tabA, 'button[name=action][value=amend]');
      expect(amending.all.at(-1)!.status()).to.equal(200);
      expect(await axeAtBothSizes(tabA, 'amending')).to.deep.equal([]);
      await tabA.getByLabel('Referrer').fill('Dr Right');
      const amended = await clickAndNavigate(tabA, 'button[name=action][value=submit]');
      expect(amended.all.at(-1)!.status()).to.equal(200);
      expect(await stored(responseId)).to.deep.include({ status: 'amended', version: '4' });
      await open(tabA, reportUrl);
      expect(await tabA.locator('.status-line').innerText()).to.match(
        /Amended report · version 4[\s\S]*Reason: Referrer was wrong/,
      );
      expect(await axeAtBothSizes(tabA, 'amended')).to.deep.equal([]);
    });
  });
}
