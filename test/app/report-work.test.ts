/**
 * The report editor's browser side in real Chromium (issue 32 "Work is never lost", "Long forms
 * and the edges", the patient banner), with the 60-item CT chest form (test/support/ct-chest.ts):
 * autosave and reopening, a session deleted mid-edit and the answers offered back after a new
 * handover, Submit sent once, unique ids with three repeat instances and their removal, the
 * embedded banner in the first viewport and after scrolling on a desktop and a phone, the whole
 * form filled and submitted by keyboard with no focus stop under the sticky bars, axe-core at
 * WCAG 2.2 AA on each page state, a used handover link as HTML and as problem+json, and a
 * handover link in a frame of another site.
 */
import { mkdirSync } from 'node:fs';
import { expect } from 'chai';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { GENERAL, seed, startTestApp, TEST_SEED, type TestApp } from '../support/app.js';
import { testDatabases } from '../support/databases.js';
import { fhir } from '../support/fhir.js';
import {
  answer,
  appUrl,
  axeAtBothSizes,
  CHROMIUM,
  chestCtQuestionnaire,
  chromiumMissing,
  clickAndNavigate,
  create,
  DESKTOP,
  deleteSession,
  type Ehr,
  engineIdle,
  handoverUrl,
  html,
  launchBrowser,
  launchUrl,
  newSession,
  newTask,
  open,
  PHONE,
  pathOf,
  SHOTS,
  sessionBody,
  signIn,
  startEhr,
  startReportIn,
  storeCtChest,
  unique,
  violations,
} from './support.js';

// Browser globals inside page.evaluate callbacks (the tests' tsconfig has no DOM library).
declare const document: any;
declare const window: any;
type HTMLElement = any;
type HTMLInputElement = any;
type HTMLDetailsElement = any;

const MRN_SYSTEM = 'urn:test:mrn';

/** `/tmp/i32-shots/<name>.png` of the viewport (the state as the clinician sees it). */
const shot = (page: Page, name: string, fullPage = false) => {
  mkdirSync(SHOTS, { recursive: true });
  return page.screenshot({ path: `${SHOTS}/${name}.png`, fullPage });
};

/** Duplicate ids of the page. */
const duplicateIds = (page: Page): Promise<string[]> =>
  page.evaluate(() => {
    const seen = new Map<string, number>();
    for (const el of document.querySelectorAll('[id]')) seen.set(el.id, (seen.get(el.id) ?? 0) + 1);
    return [...seen].filter(([, n]) => n > 1).map(([id]) => id);
  });

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

for (const database of testDatabases) {
  describe(`the report editor keeps the clinician's work, in a real browser, on ${database.name}`, function () {
    this.timeout(240_000);

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
      app = await startTestApp(database, {
        start: new Date(),
        env: { ALLOWED_REDIRECT_ORIGINS: ehr.origin },
      });
      // The tenant names its MRN system: the banner shows that identifier, not the first.
      await seed(app, {
        ...TEST_SEED,
        tenants: TEST_SEED.tenants.map((t) => ({ ...t, mrn_system: MRN_SYSTEM })),
      });
      questionnaireId = await storeCtChest(app);
      browser = await launchBrowser();
    });
    after(async () => {
      for (const c of contexts) await c.close().catch(() => undefined);
      await browser?.close();
      await app?.close();
      await ehr?.close();
    });

    const newPatient = async () => {
      const mrn = unique('MRN');
      const family = unique('Banner').replace(/-/g, '');
      const id = await create(app, {
        resourceType: 'Patient',
        identifier: [
          { system: 'urn:test:other', value: unique('other') },
          { system: MRN_SYSTEM, value: mrn },
        ],
        name: [{ family, given: ['Jane'] }],
        gender: 'female',
        birthDate: '1970-01-01',
      });
      return { id, mrn, family };
    };

    /** A clinician's browser in the CT form of a new Task; `problems` collects script errors. */
    const openCtReport = async (
      options: {
        viewport?: { width: number; height: number };
        mode?: 'embedded' | 'standalone';
        extra?: object;
      } = {},
    ) => {
      const patient = await newPatient();
      const task = await newTask(app, patient.id);
      const session = await newSession(
        app,
        sessionBody({
          patient: Number(patient.id),
          deployment_mode: options.mode ?? 'standalone',
          ...options.extra,
        }),
      );
      const signed = await signIn(browser, app, session, launchUrl(app, { task: `Task/${task.id}` }));
      contexts.push(signed.context);
      await signed.page.setViewportSize(options.viewport ?? DESKTOP);
      const problems: string[] = [];
      signed.page.on('pageerror', (e) => problems.push(e.message));
      if (process.env.I32_DEBUG) {
        signed.page.on('pageerror', (e) => console.log('PAGEERROR', e.message, e.stack));
        signed.page.on('console', (m) => console.log('CONSOLE', m.type(), m.text()));
      }
      signed.page.on('console', (m) => {
        // Refusals answer with 4xx on purpose (a 422 submit, a 401 save); anything else is a problem.
        if (m.type() === 'error' && !/status of 4(22|01)/.test(m.text())) problems.push(m.text());
      });
      await startReportIn(signed.page, app, task.id, questionnaireId);
      return { page: signed.page, context: signed.context, taskId: task.id, session, patient, problems };
    };

    const storedResponse = async (taskId: string) => {
      const task = await fhir(app, 'GET', `/Task/${taskId}`, { auth: GENERAL });
      const qr = await fhir(app, 'GET', `/${(task.body as any).focus.reference}`, { auth: GENERAL });
      expect(qr.status).to.equal(200);
      return qr.body as any;
    };

    const status = (page: Page) => page.locator('#cb-save-status');

    it('autosaves 3 s after the last keystroke with the focus still in the field; a closed tab reopens with the answers', async () => {
      const { page, context, taskId, problems } = await openCtReport();
      const indication = page.locator('[name="q:indication"]');
      await indication.click();
      await page.keyboard.type('Cough for six weeks');
      expect(await status(page).innerText()).to.match(/not saved yet/i);
      // Leaving now would lose the words: the browser asks.
      const asked = new Promise<string>((resolve) =>
        page.once('dialog', (d) => {
          resolve(d.type());
          void d.dismiss();
        }),
      );
      await page.close({ runBeforeUnload: true });
      expect(await asked).to.equal('beforeunload');
      expect(page.isClosed()).to.equal(false);
      // The focus never left the field; the save comes by itself.
      await page.waitForSelector('#report-form[data-autosave="saved"]', { timeout: 8000 });
      expect(await page.evaluate(() => document.activeElement?.getAttribute('name'))).to.equal(
        'q:indication',
      );
      expect(await status(page).innerText()).to.match(/^Saved \d{1,2}:\d{2}/);
      expect(await status(page).getAttribute('role')).to.equal('status');
      expect(answersOf(await storedResponse(taskId)).indication).to.deep.equal(['Cough for six weeks']);
      expect(await axeAtBothSizes(page, 'autosaved')).to.deep.equal([]);
      // Saved: closing asks nothing, and a new tab opens the report with the answer.
      await page.close({ runBeforeUnload: true });
      const reopened = await context.newPage();
      const { final } = await open(reopened, launchUrl(app, { task: `Task/${taskId}` }));
      expect(final.status()).to.equal(200);
      expect(await reopened.locator('[name="q:indication"]').inputValue()).to.equal('Cough for six weeks');
      expect(await reopened.locator('#cb-draft').isHidden()).to.equal(true);
      expect(problems).to.deep.equal([]);
    });

    it('saves when the page is hidden', async () => {
      const { page, taskId } = await openCtReport();
      await page.locator('[name="q:referrer"]').fill('Dr Hidden');
      await page.evaluate(() => {
        Object.defineProperty(document, 'visibilityState', { value: 'hidden', configurable: true });
        document.dispatchEvent(new Event('visibilitychange'));
      });
      await page.waitForSelector('#report-form[data-autosave="saved"]', { timeout: 3000 });
      expect(answersOf(await storedResponse(taskId)).referrer).to.deep.equal(['Dr Hidden']);
    });

    it('keeps the answers when the session is deleted mid-edit, says so in view on a phone, and offers them back after a new handover', async () => {
      const { page, taskId, session, patient } = await openCtReport({ viewport: PHONE });
      await page.locator('[name="q:indication"]').fill('Typed before the session ended');
      await page.locator('[name="q:referrer"]').fill('Dr Kept');
      expect(await deleteSession(app, session.id)).to.equal(204);
      // Save from the top of the 60-item form: the answer is 401; the page and its answers stay,
      // with a clear message where the clinician is looking.
      await page.evaluate(() => window.scrollTo(0, 0));
      // A tap where the button is (a locator's click would scroll it clear of the scroll padding).
      const save = (await page.locator('button[name=action][value=save]').boundingBox())!;
      await page.mouse.click(save.x + save.width / 2, save.y + save.height / 2);
      await page.waitForSelector('#report-form[data-autosave="failed"]');
      expect(pathOf(page.url())).to.equal(`/app/tasks/${taskId}/report`);
      expect(await status(page).innerText()).to.equal('Not saved');
      const problem = page.locator('#cb-save-problem');
      expect(await problem.innerText()).to.match(/session has ended.*kept in this browser/i);
      // In the viewport, and on top there (not under the sticky bars): the whole message is readable.
      expect(
        await problem.evaluate((el) => {
          const r = el.getBoundingClientRect();
          // Inside the rounded corners: the four corners of the text and its centre.
          const inset = 8;
          const points = [
            [r.left + inset, r.top + inset],
            [r.right - inset, r.top + inset],
            [r.left + inset, r.bottom - inset],
            [r.right - inset, r.bottom - inset],
            [(r.left + r.right) / 2, (r.top + r.bottom) / 2],
          ];
          const covering = points
            .map(([x, y]) => document.elementFromPoint(x, y))
            .filter((hit) => !el.contains(hit))
            .map((hit) => (hit ? `${hit.tagName}.${hit.className}` : 'outside the viewport'));
          return {
            inViewport:
              r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight && r.right <= window.innerWidth,
            covering,
          };
        }),
      ).to.deep.equal({ inViewport: true, covering: [] });
      expect(await page.evaluate(() => window.scrollY)).to.be.below(200);
      expect(await page.locator('[name="q:indication"]').inputValue()).to.equal(
        'Typed before the session ended',
      );
      expect(await axeAtBothSizes(page, 'session-ended-save')).to.deep.equal([]);
      expect(answersOf(await storedResponse(taskId)).indication).to.equal(undefined);
      // Reloading shows the 401 page, which says the answers are kept.
      page.once('dialog', (d) => void d.accept());
      const reloaded = await page.reload();
      expect(reloaded!.status()).to.equal(401);
      expect(await page.locator('main').innerText()).to.match(/answers you typed are kept in this browser/i);
      expect(await axeAtBothSizes(page, 'session-ended-401')).to.deep.equal([]);
      // The EHR launches again in the same window: the answers are offered back.
      const again = await newSession(
        app,
        sessionBody({ patient: Number(patient.id), deployment_mode: 'standalone' }),
      );
      const { final } = await open(
        page,
        handoverUrl(app, again.handover_token, launchUrl(app, { task: `Task/${taskId}` })),
      );
      expect(final.status()).to.equal(200);
      await engineIdle(page);
      const offer = page.getByRole('region', { name: 'Unsaved answers found' });
      await offer.waitFor({ state: 'visible' });
      expect(await page.locator('[name="q:indication"]').inputValue()).to.equal('');
      expect(await axeAtBothSizes(page, 'draft-offered')).to.deep.equal([]);
      await offer.getByRole('button', { name: 'Restore unsaved answers' }).click();
      expect(await page.locator('[name="q:indication"]').inputValue()).to.equal(
        'Typed before the session ended',
      );
      expect(await page.locator('[name="q:referrer"]').inputValue()).to.equal('Dr Kept');
      await page.waitForSelector('#report-form[data-autosave="saved"]', { timeout: 8000 });
      const stored = answersOf(await storedResponse(taskId));
      expect(stored.indication).to.deep.equal(['Typed before the session ended']);
      expect(stored.referrer).to.deep.equal(['Dr Kept']);
    });

    it('Discard drops the offered draft', async () => {
      const { page, taskId, session, patient } = await openCtReport();
      expect(await deleteSession(app, session.id)).to.equal(204);
      await page.locator('[name="q:referrer"]').fill('Dr Dropped');
      await page.waitForSelector('#report-form[data-autosave="failed"]', { timeout: 8000 });
      const again = await newSession(
        app,
        sessionBody({ patient: Number(patient.id), deployment_mode: 'standalone' }),
      );
      // The 401 page first: an editor page unloading after the new handover would save its answers
      // with the new session's cookie (nothing lost, but no draft left to discard).
      page.once('dialog', (d) => void d.accept());
      expect((await page.reload())!.status()).to.equal(401);
      await open(page, handoverUrl(app, again.handover_token, launchUrl(app, { task: `Task/${taskId}` })));
      await engineIdle(page);
      const offer = page.getByRole('region', { name: 'Unsaved answers found' });
      await offer.waitFor({ state: 'visible' });
      await offer.getByRole('button', { name: 'Discard' }).click();
      expect(await offer.isHidden()).to.equal(true);
      await page.reload();
      await engineIdle(page);
      expect(await page.locator('#cb-draft').isHidden()).to.equal(true);
      expect(await page.locator('[name="q:referrer"]').inputValue()).to.equal('');
      expect(answersOf(await storedResponse(taskId)).referrer).to.equal(undefined);
    });

    it('sends Submit once: "Submitting…", buttons disabled, one POST', async () => {
      const { page, taskId } = await openCtReport({ extra: { post_submit_redirect: `${ehr.origin}/done` } });
      const posts: string[] = [];
      page.on('request', (r) => {
        if (r.method() === 'POST' && pathOf(r.url()) === `/app/tasks/${taskId}/report`)
          posts.push(r.postData() ?? '');
      });
      // The server answers slowly: a second click would have time to send again.
      await page.route(`**/app/tasks/${taskId}/report**`, async (route) => {
        if (route.request().method() === 'POST') await new Promise((r) => setTimeout(r, 3000));
        await route.continue().catch(() => undefined);
      });
      // One script run inside the server's 3 s: click, look, click again, submit by script.
      const seen = await page.evaluate(async () => {
        const button = document.querySelector('button[name=action][value=submit]');
        button.click();
        await new Promise((r) => setTimeout(r, 50));
        const state = { disabled: button.disabled, text: button.textContent };
        button.click();
        document.getElementById('report-form').requestSubmit();
        return state;
      });
      expect(seen).to.deep.equal({ disabled: true, text: 'Submitting…' });
      await page.waitForTimeout(4500);
      await page.waitForLoadState('load');
      const submits = posts.filter((p) => /(^|&)action=submit(&|$)/.test(p));
      expect(submits.length, posts.join('\n')).to.equal(1);
    });

    it('Cancel asks before discarding unsaved answers; "Keep editing" stays', async () => {
      const { page } = await openCtReport();
      await page.locator('[name="q:referrer"]').fill('Dr Cancel');
      await page.locator('button[name=action][value=cancel]').click();
      const dialog = page.getByRole('dialog', { name: 'Discard unsaved changes?' });
      await dialog.waitFor({ state: 'visible' });
      expect(await axeAtBothSizes(page, 'cancel-dialog')).to.deep.equal([]);
      await dialog.getByRole('button', { name: 'Keep editing' }).click();
      expect(await dialog.isHidden()).to.equal(true);
      expect(await page.locator('[name="q:referrer"]').inputValue()).to.equal('Dr Cancel');
    });

    it('gives three Nodule instances unique ids, removes one by keyboard and stores the other two', async () => {
      const { page, taskId, problems } = await openCtReport();
      await answer(page, 'nodules-present', true);
      await engineIdle(page);
      const add = page.getByRole('button', { name: 'Add another Nodule' });
      await add.click();
      await add.click();
      await engineIdle(page);
      const instances = page.locator('fieldset.instance[data-linkid="nodule"]');
      expect(await instances.count()).to.equal(3);
      expect(await duplicateIds(page)).to.deep.equal([]);
      // Each instance's labels point at its own fields.
      for (let k = 0; k < 3; k++) {
        const size = instances.nth(k).locator('[name="q:nodule-size"]');
        const id = await size.getAttribute('id');
        expect(await instances.nth(k).locator(`label[for="${id}"]`).count()).to.equal(1);
        await size.fill(String(4 + k));
      }
      await page.locator('[name="q:nodule-size"]').nth(2).blur();
      await engineIdle(page);
      expect(await violations(page)).to.deep.equal([]);
      await shot(page, 'three-nodules', true);
      // Remove the second by keyboard.
      const remove = page.getByRole('button', { name: 'Remove Nodule 2' });
      await remove.focus();
      await page.keyboard.press('Enter');
      await engineIdle(page);
      expect(await instances.count()).to.equal(2);
      expect(await duplicateIds(page)).to.deep.equal([]);
      expect(await instances.nth(1).getAttribute('data-key')).to.equal('nodule[1]');
      expect(
        await page.evaluate(() =>
          document.activeElement?.closest('fieldset.instance')?.getAttribute('data-key'),
        ),
      ).to.equal('nodule[1]');
      expect(await page.getByRole('button', { name: 'Remove Nodule 2' }).count()).to.equal(1);
      await clickAndNavigate(page, 'button[name=action][value=save]');
      expect(answersOf(await storedResponse(taskId))['nodule-size']).to.deep.equal([4, 6]);
      expect(await duplicateIds(page)).to.deep.equal([]);
      expect(problems).to.deep.equal([]);
    });

    it('links help text to its field and moves the focus from an error link to its field', async () => {
      const { page } = await openCtReport();
      const described = await page.evaluate(() =>
        [...document.querySelectorAll('p.help')].map((p) => ({
          id: p.id,
          field: document.querySelector(`[aria-describedby~="${p.id}"]`)?.getAttribute('name') ?? null,
        })),
      );
      expect(described.length).to.be.greaterThan(0);
      for (const d of described) expect(d.field, d.id).to.not.equal(null);
      const refused = await clickAndNavigate(page, 'button[name=action][value=submit]');
      expect(refused.first.status()).to.equal(422);
      await engineIdle(page);
      // The section list counts the messages of each section.
      expect(await page.locator('nav.sections .section-errors:not([hidden])').count()).to.be.greaterThan(1);
      const link = page.locator('#error-summary a').first();
      const target = (await link.getAttribute('href'))!.slice(1);
      await link.click();
      const focused = await page.evaluate(() => document.activeElement?.closest('[data-key]')?.id);
      expect(focused).to.equal(target);
      expect(await violations(page)).to.deep.equal([]);
      await shot(page, 'error-link-focus');
    });

    for (const [name, viewport] of [
      ['desktop', DESKTOP],
      ['phone', PHONE],
    ] as const)
      it(`shows the embedded patient banner in the first viewport and after scrolling on a ${name}`, async () => {
        const { page, patient } = await openCtReport({ viewport, mode: 'embedded' });
        const banner = page.getByRole('region', { name: 'Patient' });
        expect(await page.locator('header, nav.topbar, [role=banner]').count()).to.equal(0);
        expect(await banner.evaluate((el) => el.tagName)).to.equal('SECTION');
        const text = await banner.innerText();
        expect(text).to.contain(patient.family.toUpperCase());
        expect(text).to.contain('1970-01-01');
        expect(text).to.match(/\(5\d y\)/);
        expect(text).to.contain(patient.mrn);
        expect(text).to.match(/In progress, version \d+/);
        const inView = () =>
          banner.evaluate((el) => {
            const r = el.getBoundingClientRect();
            return r.top >= 0 && r.bottom <= window.innerHeight && r.height > 0;
          });
        expect(await inView()).to.equal(true);
        expect(await violations(page)).to.deep.equal([]);
        await shot(page, `banner-${name}-top`);
        await page.evaluate(() => window.scrollTo(0, document.body.scrollHeight));
        await page.waitForTimeout(100);
        expect(await page.evaluate(() => window.scrollY)).to.be.greaterThan(500);
        expect(await inView()).to.equal(true);
        await shot(page, `banner-${name}-scrolled`);
        // The section list: a sidebar on a desktop, a closed menu on a phone.
        const open = await page
          .locator('nav.sections details')
          .evaluate((d) => (d as HTMLDetailsElement).open);
        expect(open).to.equal(name === 'desktop');
      });

    for (const [name, viewport] of [
      ['desktop', DESKTOP],
      ['phone', PHONE],
    ] as const)
      it(`fills and submits the 60-item CT form by keyboard alone, no focus stop under the sticky bars, on a ${name}`, async () => {
        const { page, taskId, problems } = await openCtReport({
          viewport,
          mode: 'embedded',
          extra: { post_submit_redirect: `${ehr.origin}/done` },
        });
        await page.evaluate(() => (document.activeElement as HTMLElement | null)?.blur());
        const obscured: string[] = [];
        let submitted = false;
        for (let stop = 0; stop < 250 && !submitted; stop++) {
          await page.keyboard.press('Tab');
          const focus = await page.evaluate(() => {
            const el = document.activeElement as HTMLInputElement | null;
            if (!el || el === document.body) return undefined;
            const r = el.getBoundingClientRect();
            const banner = document.querySelector('.patient-banner')?.getBoundingClientRect();
            const bar = document.querySelector('.actions')?.getBoundingClientRect();
            // The skip link and the bars' own controls sit above everything else.
            const inBar = !!el.closest('.actions, .patient-banner, .skip');
            const covered =
              !inBar &&
              r.height > 0 &&
              ((banner !== undefined && r.top < banner.bottom - 1) ||
                (bar !== undefined && r.bottom > bar.top + 1));
            const choices = el.closest('fieldset.choices');
            return {
              tag: el.tagName,
              type: el.type ?? '',
              name: el.name ?? '',
              value: el.value ?? '',
              label: el.closest('[data-linkid]')?.getAttribute('data-linkid') ?? el.textContent ?? '',
              covered,
              required:
                el.getAttribute('aria-required') === 'true' ||
                !!choices?.querySelector(':scope > legend .req'),
              empty: choices ? !choices.querySelector('input:checked') : el.value === '',
            };
          });
          if (!focus) continue;
          if (focus.covered) obscured.push(`${focus.label} ${focus.name}`);
          if (focus.tag === 'BUTTON' && focus.value === 'submit') {
            await page.keyboard.press('Enter');
            submitted = true;
            break;
          }
          if (!focus.required || !focus.empty) continue;
          if (focus.type === 'radio') {
            // Booleans: "No" (the second option); other choices: the first.
            const isBoolean = await page.evaluate(
              () => document.activeElement?.closest('[data-type]')?.getAttribute('data-type') === 'boolean',
            );
            await page.keyboard.press(isBoolean ? 'ArrowRight' : 'Space');
          } else if (focus.tag === 'SELECT') await page.keyboard.press('ArrowDown');
          else if (focus.type === 'date') await page.keyboard.type('11202026');
          else if (focus.tag === 'TEXTAREA' || focus.type === 'text') {
            const values: Record<string, string> = {
              'q:height': '172',
              'q:weight': '70',
              'q:slice-thickness': '1',
            };
            await page.keyboard.type(
              values[focus.name] ??
                (/numeric|decimal/.test(
                  await page.evaluate(() => document.activeElement?.getAttribute('inputmode') ?? ''),
                )
                  ? '1'
                  : 'Typed by keyboard'),
            );
          }
          await engineIdle(page);
        }
        expect(submitted, 'Tab never reached Submit').to.equal(true);
        await page.waitForURL(`${ehr.origin}/done**`, { timeout: 10_000 }).catch(async () => {
          throw new Error(
            `not submitted: ${await page
              .locator('#error-summary')
              .innerText()
              .catch(() => page.url())}`,
          );
        });
        expect(obscured, obscured.join('\n')).to.deep.equal([]);
        const stored = await storedResponse(taskId);
        expect(stored.status).to.equal('completed');
        expect(answersOf(stored).height).to.deep.equal([172]);
        expect(problems).to.deep.equal([]);
      });

    it('answers a used handover link with an HTML page to a browser and problem+json to an API client', async () => {
      const patient = await newPatient();
      const session = await newSession(app, sessionBody({ patient: Number(patient.id) }));
      const url = handoverUrl(app, session.handover_token, `${appUrl(app)}/`);
      const first = await signIn(browser, app, session, `${appUrl(app)}/`);
      contexts.push(first.context);
      const { final } = await open(first.page, url);
      expect(final.status()).to.equal(401);
      expect(final.headers()['content-type']).to.match(/^text\/html/);
      expect(await first.page.locator('h1').innerText()).to.equal('This link was already used');
      expect(await first.page.locator('main').innerText()).to.match(/open the report from there again/i);
      expect(await violations(first.page)).to.deep.equal([]);
      await shot(first.page, 'handover-used');
      await first.page.setViewportSize(PHONE);
      expect(await violations(first.page)).to.deep.equal([]);
      const api = await fetch(url, { headers: { Accept: 'application/json' }, redirect: 'manual' });
      expect(api.status).to.equal(401);
      expect(api.headers.get('content-type')).to.match(/^application\/problem\+json/);
      expect(((await api.json()) as any).code ?? 'HandoverTokenInvalid').to.match(/Handover/);
    });

    it('in a frame of another site, keeps the handover token and offers the report in a new window', async () => {
      const patient = await newPatient();
      const task = await newTask(app, patient.id);
      const session = await newSession(app, sessionBody({ patient: Number(patient.id) }));
      const url = handoverUrl(app, session.handover_token, launchUrl(app, { task: `Task/${task.id}` }));
      const chart = ehr.page(() =>
        html(
          'Chart',
          `<h1>EHR chart</h1><iframe title="casebook report" src="${url.replace(/&/g, '&amp;')}" width="900" height="600"></iframe>`,
        ),
      );
      const context = await browser.newContext();
      contexts.push(context);
      const page = await context.newPage();
      await page.setViewportSize(DESKTOP);
      await page.goto(chart);
      const frame = page.frameLocator('iframe');
      const openLink = frame.getByRole('link', { name: 'Open in a new window' });
      await openLink.waitFor({ state: 'visible' });
      expect(await frame.locator('main').innerText()).to.match(/same site.*top-level web view/is);
      await shot(page, 'cross-site-frame');
      const [popup] = await Promise.all([context.waitForEvent('page'), openLink.click()]);
      await popup.waitForURL(`**/app/tasks/${task.id}/forms**`, { timeout: 10_000 });
      expect(await popup.locator('h1').innerText()).to.equal('Choose a report form');
      expect(await popup.getByRole('region', { name: 'Patient' }).innerText()).to.contain(patient.mrn);
      expect(await violations(popup)).to.deep.equal([]);
      await shot(popup, 'forms-page');
    });

    it('in a frame of the same site, sends Cancel and the post-submit redirect to the top window', async () => {
      // The EHR's chart reached as localhost: the same site as casebook (the port does not count).
      const sameSite = (url: string) => url.replace('//127.0.0.1:', '//localhost:');
      const formId = await create(
        app,
        chestCtQuestionnaire(`https://forms.example.org/Questionnaire/${unique('framed')}`),
      );
      const context = await browser.newContext();
      contexts.push(context);
      const page = await context.newPage();
      await page.setViewportSize(DESKTOP);
      /** The chart page with the report of a new Task in its frame, at the editor of the small form. */
      const framedReport = async () => {
        const patient = await newPatient();
        const task = await newTask(app, patient.id);
        const session = await newSession(
          app,
          sessionBody({
            patient: Number(patient.id),
            post_submit_redirect: `${ehr.origin}/done`,
            post_cancel_redirect: `${ehr.origin}/cancelled`,
          }),
        );
        const url = handoverUrl(app, session.handover_token, launchUrl(app, { task: `Task/${task.id}` }));
        const chart = sameSite(
          ehr.page(() =>
            html(
              'Chart',
              `<h1>EHR chart</h1><iframe title="casebook report" src="${url.replace(/&/g, '&amp;')}" width="1000" height="650"></iframe>`,
            ),
          ),
        );
        expect(new URL(chart).hostname).to.equal('localhost');
        await page.goto(chart);
        const frame = page.frameLocator('iframe');
        await frame.locator(`button[name=questionnaire][value="${formId}"]`).click();
        await frame.locator('#report-form[data-engine="idle"]').waitFor({ timeout: 10_000 });
        return { frame, taskId: task.id };
      };
      const topLocation = () => page.evaluate(() => window.top.location.href as string);

      // Cancel with an unsaved answer: the dialog in the frame, then the EHR's page in the top window.
      const cancelled = await framedReport();
      await cancelled.frame.locator('[name="q:findings"]').fill('Not wanted');
      await cancelled.frame.locator('button[name=action][value=cancel]').click();
      await cancelled.frame.getByRole('dialog', { name: 'Discard unsaved changes?' }).waitFor();
      await cancelled.frame.locator('#cb-discard button[value=discard]').click();
      await page.waitForURL(`${ehr.origin}/cancelled`, { timeout: 10_000 });
      expect(await topLocation()).to.equal(`${ehr.origin}/cancelled`);
      expect(await page.locator('#ehr-cancelled').isVisible()).to.equal(true);
      expect(page.frames()).to.have.length(1);

      // Submit: the post-submit redirect in the top window too.
      const submitted = await framedReport();
      await submitted.frame.locator('[name="q:findings"]').fill('No acute findings');
      await submitted.frame.locator('[name="q:findings"]').blur();
      await submitted.frame.locator('#report-form[data-engine="idle"]').waitFor();
      await submitted.frame.locator('button[name=action][value=submit]').click();
      await page.waitForURL(`${ehr.origin}/done**`, { timeout: 10_000 });
      const done = new URL(await topLocation());
      expect(`${done.origin}${done.pathname}`).to.equal(`${ehr.origin}/done`);
      expect(done.searchParams.get('task')).to.equal(`Task/${submitted.taskId}`);
      expect(await page.locator('#ehr-done').isVisible()).to.equal(true);
      expect(page.frames()).to.have.length(1);
      expect((await storedResponse(submitted.taskId)).status).to.equal('completed');
    });
  });
}
