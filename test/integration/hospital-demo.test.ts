/**
 * The README's hospital walkthrough as a newcomer runs it (issue 6 "Done when"): one command,
 * `npm run hospital-demo`, then the printed launch URL in a real browser — form selection, the
 * demo report, submit — and the report text printed by the demo sink.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { expect } from 'chai';
import type { Browser } from 'playwright-core';
import { chromiumMissing, launchBrowser } from '../app/support.js';
import { freePort, ROOT } from '../support/process.js';

describe('README hospital walkthrough: npm run hospital-demo', function () {
  this.timeout(120_000);
  let browser: Browser | undefined;
  let demo: ChildProcess | undefined;

  before(function () {
    if (chromiumMissing()) {
      console.log(
        '  hospital demo walkthrough skipped: /usr/bin/chromium is not installed (apt-get install chromium)',
      );
      this.skip();
    }
  });
  after(async () => {
    await browser?.close();
    if (demo && demo.exitCode === null) {
      demo.kill('SIGTERM');
      await once(demo, 'exit');
    }
  });

  it('launches, submits the demo report and the demo sink prints its text with the hospital identifiers', async () => {
    const [port, sinkPort] = [await freePort(), await freePort()];
    let output = '';
    demo = spawn(
      process.execPath,
      ['--import', 'tsx', 'src/cli/main.ts', 'hospital-demo', '--sink-port', String(sinkPort)],
      {
        cwd: ROOT,
        env: { ...process.env, PORT: String(port), LOG_LEVEL: 'warn' },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    demo.stdout!.on('data', (d) => {
      output += d;
    });
    demo.stderr!.on('data', (d) => {
      output += d;
    });
    const waitFor = async (pattern: RegExp, ms: number) => {
      const deadline = Date.now() + ms;
      while (!pattern.test(output)) {
        if (Date.now() > deadline || demo!.exitCode !== null) throw new Error(`no ${pattern} in:\n${output}`);
        await new Promise((r) => setTimeout(r, 100));
      }
      return pattern.exec(output)!;
    };
    const launch = (await waitFor(/^\s+(http:\/\/localhost:\d+\/launch\?\S+)$/m, 60_000))[1]!;
    const printed = new URL(launch);
    expect(`${printed.origin}${printed.pathname}`).to.equal(`http://localhost:${port}/launch`);
    expect([...printed.searchParams.keys()]).to.deep.equal([
      'patient',
      'encounter',
      'user',
      'dob',
      'sex',
      'ts',
      'nonce',
      'sig',
    ]);
    expect(printed.searchParams.get('patient')).to.equal('P-1001');
    const ehr = (await waitFor(/^\s+(http:\/\/127\.0\.0\.1:\d+\/)$/m, 10_000))[1]!;
    expect(ehr).to.equal(`http://127.0.0.1:${sinkPort}/`);

    browser = await launchBrowser();
    const page = await browser.newPage();
    await page.goto(launch);
    await page.waitForURL(/\/app\/tasks\/\d+\/forms/);
    await page.getByRole('button', { name: /Chest X-ray report/ }).click();
    await page.waitForURL(/\/app\/tasks\/\d+\/report/);
    await page.fill('[name="q:indication"]', 'Cough and fever for 5 days');
    await page.check('[data-linkid="findings.lungs"] input[value="consolidation"]');
    await page.fill('[name="q:impression"]', 'Right lower lobe pneumonia.');
    await page.click('button[name=action][value=submit]');
    await page.waitForURL(/\/launch\/submitted\?response=QuestionnaireResponse%2F\d+&task=Task%2F\d+/);

    await waitFor(/Impression: Right lower lobe pneumonia\.\n─+/, 30_000);
    const received = output.slice(output.indexOf('Report received by the demo sink'));
    expect(received).to.include('patient:   urn:casebook:hospital:patient|P-1001');
    expect(received).to.include('encounter: urn:casebook:hospital:encounter|E-2001');
    expect(received).to.match(/key: {7}[0-9a-f-]{36}:qr-\d+-v\d+/);
    expect(received).to.include(
      [
        'Chest X-ray report',
        '',
        'PATIENT',
        'Date of birth: 1815-12-10',
        '',
        'Clinical indication: Cough and fever for 5 days',
      ].join('\n'),
    );
    // One delivery: the sink answered at once (the contract is at least once, by key).
    await new Promise((r) => setTimeout(r, 2000));
    expect(output.match(/Report received by the demo sink/g)).to.have.length(1);

    // The printed link was used: it cannot open a second session.
    const replay = await fetch(launch, { redirect: 'manual' });
    expect(replay.status).to.equal(401);
    // From the demo EHR's page (which signs a fresh link per click), the same encounter reopens the
    // same Task, now in the report editor.
    await page.goto(ehr);
    await page.getByRole('link', { name: /Write the chest X-ray report/ }).click();
    await page.waitForURL(/\/app\/tasks\/\d+\/report/);

    // The demo made its own data directory: stopping it removes it.
    const dataDir = (await waitFor(/data in (\S+) \(removed when the demo stops\)/, 1000))[1]!;
    expect(existsSync(dataDir), dataDir).to.equal(true);
    demo.kill('SIGTERM');
    await once(demo, 'exit');
    expect(existsSync(dataDir), `${dataDir} left behind`).to.equal(false);
  });
});
