/**
 * The README's application walkthrough as a newcomer runs it: `npm start` on the embedded
 * default, scripts/app-walkthrough.sh, then the printed link in a real browser — form selection,
 * the demo "Chest X-ray report", submit — ending at the post-submit redirect (issue 5 "Done when").
 */
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import type { Browser } from 'playwright-core';
import { script, startServer } from '../support/process.js';
import { chromiumMissing, launchBrowser, screenshot } from './support.js';

describe('README application walkthrough in a real browser', function () {
  this.timeout(120_000);
  let browser: Browser | undefined;

  before(function () {
    if (chromiumMissing()) {
      console.log(
        '  browser walkthrough skipped: /usr/bin/chromium is not installed (apt-get install chromium)',
      );
      this.skip();
    }
  });
  after(() => browser?.close());

  it('goes from the handover link through form selection and the editor to the post-submit redirect', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'casebook-app-'));
    // The hospital's page the browser returns to after submitting.
    const ehr = createServer((_req, res) =>
      res.end('<!doctype html><title>EHR</title><p>back in the EHR</p>'),
    );
    ehr.listen(0, '127.0.0.1');
    await once(ehr, 'listening');
    const ehrOrigin = `http://127.0.0.1:${(ehr.address() as AddressInfo).port}`;
    const server = await startServer({ DATA_DIR: dir, ALLOWED_REDIRECT_ORIGINS: ehrOrigin });
    try {
      const secret = /export CASEBOOK_CLIENT_SECRET=(\S+)/.exec(server.output())![1]!;
      const base = `http://localhost:${server.port}`;
      const out = await script('scripts/app-walkthrough.sh', {
        CASEBOOK_CLIENT_ID: 'demo-ehr',
        CASEBOOK_CLIENT_SECRET: secret,
        CASEBOOK_AUTH_URL: `${base}/auth`,
        CASEBOOK_FHIR_URL: `${base}/fhir/r5`,
        CASEBOOK_APP_URL: `${base}/app`,
        POST_SUBMIT_REDIRECT: `${ehrOrigin}/report-done`,
      });
      const handover = /^\s+(http:\/\/localhost:\d+\/auth\/sessions\/\$handover\?\S+)$/m.exec(out)?.[1];
      expect(handover, out).to.be.a('string');
      const taskId = /Task\/(\d+) \(draft\)/.exec(out)![1];

      browser = await launchBrowser();
      const page = await browser.newPage();
      await page.goto(handover!);
      await page.waitForURL(/\/app\/tasks\/\d+\/forms/);
      await page.getByRole('button', { name: /Chest X-ray report/ }).click();
      await page.waitForURL(/\/app\/tasks\/\d+\/report/);
      // $populate filled the patient's name from the launch context: a readOnly item, shown, not editable.
      expect(await page.locator('[data-linkid="patient.name"] .answer-readonly').innerText()).to.equal(
        'Ada Lovelace',
      );
      expect(await page.locator('[name="q:patient.name"]').count()).to.equal(0);
      await page.fill('[name="q:indication"]', 'Cough and fever for 5 days');
      await page.check('[data-linkid="findings.lungs"] input[value="consolidation"]');
      await page.fill('[name="q:impression"]', 'Right lower lobe pneumonia.');
      await screenshot(page, 'readme-walkthrough-editor');
      await page.click('button[name=action][value=submit]');
      await page.waitForURL(new RegExp(`^${ehrOrigin}/report-done`)).catch(async (error) => {
        await screenshot(page, 'readme-walkthrough-after-submit');
        throw new Error(
          `${error.message}\nat ${page.url()}: ${await page
            .locator('main')
            .innerText()
            .catch(() => '')}\n${server.output()}`,
        );
      });
      const done = new URL(page.url());
      expect(done.searchParams.get('task')).to.equal(`Task/${taskId}`);
      expect(done.searchParams.get('response')).to.match(/^QuestionnaireResponse\/\d+$/);
      // The stored report: completed, the populated read-only answer kept, the clinician's answers in.
      const auth = `Basic ${Buffer.from(`demo-ehr:${secret}`).toString('base64')}`;
      const res = await fetch(`${base}/fhir/r5/${done.searchParams.get('response')}`, {
        headers: { Authorization: auth },
      });
      const stored = JSON.stringify(await res.json());
      expect(res.status).to.equal(200);
      expect(stored).to.include('"status":"completed"');
      expect(stored).to.include(
        '{"linkId":"patient.name","text":"Name","answer":[{"valueString":"Ada Lovelace"}]}',
      );
      expect(stored).to.include('"valueString":"Right lower lobe pneumonia."');
    } finally {
      await server.stop();
      ehr.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
