import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import type { Browser } from 'playwright-core';
import { DEMO_QUESTIONNAIRE } from '../../src/commands/seed.js';
import { signLaunch } from '../../src/integration/launch-signature.js';
import { chromiumMissing, launchBrowser, screenshot } from '../app/support.js';
import { TEST_LAUNCH_SECRET } from '../support/launch.js';
import { freePort, type RunningServer, startServer } from '../support/process.js';

const CLIENT_ID = 'hospital';
const CLIENT_SECRET = 'hospital-secret-0123456789';
const HOSPITAL = `Basic ${Buffer.from(`${CLIENT_ID}:${CLIENT_SECRET}`).toString('base64')}`;
const PATIENT_SYSTEM = 'urn:casebook:hospital:patient';
const ENCOUNTER_SYSTEM = 'urn:casebook:hospital:encounter';
const DEMO_URL = DEMO_QUESTIONNAIRE.url as string;
const CODES = 'https://casebook.dev/fhir/CodeSystem/demo';

// ---------------------------------------------------------------------------------------------
// Helpers

interface Delivery {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

interface Sink {
  readonly port: number;
  readonly deliveries: Delivery[];
  close(): Promise<void>;
}

/** An HTTP export sink on 127.0.0.1 (on `port`, or a free one) that records every request. */
const startSink = async (port = 0): Promise<Sink> => {
  const deliveries: Delivery[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      deliveries.push({
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
      });
      res.writeHead(200, { 'Content-Type': 'text/plain' });
      res.end('ok');
    });
  });
  server.listen(port, '127.0.0.1');
  await once(server, 'listening');
  return {
    port: (server.address() as AddressInfo).port,
    deliveries,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
};

/** A DATA_DIR and a seed file (tenant, the 'hospital' client, the demo Questionnaire) in a tmp dir. */
const prepare = (): { dir: string; env: Record<string, string> } => {
  const dir = mkdtempSync(join(tmpdir(), 'casebook-hospital-e2e-'));
  const seedFile = join(dir, 'seed.json');
  writeFileSync(
    seedFile,
    JSON.stringify({
      tenants: [
        {
          name: 'Hospital',
          allowed_scopes: 'user/*.* patient/*.*',
          redirect_origins: [],
          clients: [
            { client_id: CLIENT_ID, client_secret: CLIENT_SECRET, scopes: 'system/*.*', projects: ['demo'] },
          ],
          questionnaires: [{ project: 'demo', resource: DEMO_QUESTIONNAIRE }],
        },
      ],
    }),
  );
  return {
    dir,
    env: {
      DATA_DIR: join(dir, 'data'),
      CASEBOOK_SEED: seedFile,
      LAUNCHER_CLIENT_ID: CLIENT_ID,
      LAUNCHER_CLIENT_SECRET: CLIENT_SECRET,
      LAUNCHER_SHARED_SECRET: TEST_LAUNCH_SECRET,
    },
  };
};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `check` every 200 ms until it answers true or `ms` pass; answers the last result. */
const waitFor = async (check: () => boolean | Promise<boolean>, ms: number): Promise<boolean> => {
  const deadline = Date.now() + ms;
  for (;;) {
    if (await check()) return true;
    if (Date.now() > deadline) return false;
    await sleep(200);
  }
};

const posts = (sink: Sink) => sink.deliveries.filter((d) => d.method === 'POST');

/** A launch path signed now with the hospital's shared secret (a fresh nonce each call, as the EHR signs per click). */
const launchQuery = (params: Record<string, string>) =>
  `/launch?${signLaunch(params, TEST_LAUNCH_SECRET, new Date()).toString()}`;

// ---------------------------------------------------------------------------------------------

describe('hospital flow end to end (real processes)', function () {
  this.timeout(120_000);

  describe('launch, report in the browser, export to the sink', () => {
    let browser: Browser | undefined;
    let server: RunningServer | undefined;
    let sink: Sink | undefined;
    let dir: string | undefined;

    before(async function () {
      if (chromiumMissing()) {
        console.log('    (skipped: /usr/bin/chromium is not installed)');
        this.skip();
      }
      sink = await startSink();
      const prepared = prepare();
      dir = prepared.dir;
      server = await startServer({
        ...prepared.env,
        EXPORT_SINK: `http://127.0.0.1:${sink.port}/reports`,
      });
      browser = await launchBrowser();
    });

    after(async () => {
      await browser?.close();
      await server?.stop();
      await sink?.close();
      if (dir) rmSync(dir, { recursive: true, force: true });
    });

    it('refuses invalid launch links with a 400 page and creates nothing', async () => {
      const base = `http://localhost:${server!.port}`;
      const cases: [Record<string, string>, RegExp][] = [
        [{ patient: 'P-1001', user: 'dr-grey' }, /no encounter number/],
        [{ patient: 'P-1001', encounter: 'E-2001', user: 'dr-grey', dob: '1980-02-30' }, /not a real date/],
        [{ patient: 'P-1001', encounter: 'E-2001', user: 'dr-grey', sex: 'X' }, /not a known code/],
      ];
      for (const [params, message] of cases) {
        const res = await fetch(`${base}${launchQuery(params)}`, { redirect: 'manual' });
        expect(res.status, JSON.stringify(params)).to.equal(400);
        expect(res.headers.get('content-type')).to.match(/text\/html/);
        const body = await res.text();
        expect(body).to.match(/<html/i);
        expect(body.replace(/&quot;|&#34;/g, '"')).to.match(message);
      }
      // Nothing was created: the store has no Task yet.
      const tasks = await fetch(`http://127.0.0.1:${server!.port}/fhir/r5/Task`, {
        headers: { Authorization: HOSPITAL, Accept: 'application/fhir+json' },
      });
      expect(tasks.status).to.equal(200);
      expect(((await tasks.json()) as any).entry ?? []).to.have.length(0);
    });

    it('launches, fills and submits the demo report, delivers it (one delivery per key); a relaunch reopens the Task', async () => {
      const context = await browser!.newContext();
      const page = await context.newPage();
      try {
        const launch = {
          patient: 'P-1001',
          encounter: 'E-2001',
          user: 'dr-grey',
          dob: '1980-04-12',
          sex: 'F',
        };
        const url = () => `http://localhost:${server!.port}${launchQuery(launch)}`;
        await page.goto(url());
        const button = page.getByRole('button', { name: /Chest X-ray report/ }).first();
        await button.waitFor({ timeout: 20_000 });
        await Promise.all([
          page.waitForURL(/\/app\/tasks\/[^/]+\/report/, { timeout: 20_000 }),
          button.click(),
        ]);
        const taskId = /\/app\/tasks\/([^/]+)\/report/.exec(page.url())![1]!;
        // The first Task of the store: the invalid launches created nothing.
        expect(taskId).to.equal('1');

        await page.locator('[name="q:indication"]').first().fill('Cough and fever');
        await page.locator('[data-linkid="findings.lungs"] input[value="consolidation"]').first().check();
        await page.locator('[name="q:impression"]').first().fill('Right lower lobe pneumonia');
        await Promise.all([
          page.waitForURL(/\/launch\/submitted\?/, { timeout: 20_000 }),
          page.locator('button[name=action][value=submit]').first().click(),
        ]);
        const submitted = new URL(page.url());
        expect(submitted.pathname).to.equal('/launch/submitted');
        expect(submitted.searchParams.get('task')).to.equal(`Task/${taskId}`);
        const response = submitted.searchParams.get('response')!;
        expect(response).to.match(/^QuestionnaireResponse\/\d+$/);
        const text = await page.locator('body').innerText();
        expect(text).to.include('Report submitted');
        expect(text).to.match(/Export to the hospital system/);
        expect(text).to.match(/Status: (sending|delivered)/);
        await screenshot(page, 'hospital-e2e-submitted');

        const arrived = await waitFor(() => posts(sink!).length >= 1, 20_000);
        expect(arrived, `no delivery; server output: ${server!.output()}`).to.equal(true);
        const [delivery] = posts(sink!);
        expect(delivery!.url).to.equal('/reports');
        expect(delivery!.headers['content-type']).to.match(/^text\/plain/);
        expect(delivery!.body).to.include('Impression: Right lower lobe pneumonia');
        expect(delivery!.headers['idempotency-key']).to.be.a('string').and.not.equal('');
        expect(delivery!.headers['x-patient-identifier']).to.equal(`${PATIENT_SYSTEM}|P-1001`);
        expect(delivery!.headers['x-encounter-identifier']).to.equal(`${ENCOUNTER_SYSTEM}|E-2001`);
        await sleep(2000);
        expect(posts(sink!)).to.have.length(1);

        // The same patient and encounter again (a new signed link): the same Task, straight into its editor.
        await page.goto(url());
        await page.waitForURL(new RegExp(`/app/tasks/${taskId}/report`), { timeout: 20_000 });
        expect(new URL(page.url()).pathname).to.equal(`/app/tasks/${taskId}/report`);
      } catch (error) {
        await screenshot(page, 'hospital-e2e-failure').catch(() => undefined);
        throw error;
      } finally {
        await context.close();
      }
    });
  });

  describe('the server is killed between submit and delivery', () => {
    let server: RunningServer | undefined;
    let sink: Sink | undefined;
    let dir: string | undefined;

    after(async () => {
      await server?.kill();
      await sink?.close();
      if (dir) rmSync(dir, { recursive: true, force: true });
    });

    it('delivers the report after a restart on the same data, one delivery per key', async () => {
      const prepared = prepare();
      dir = prepared.dir;
      const sinkPort = await freePort(); // nothing listens there yet
      const env = { ...prepared.env, EXPORT_SINK: `http://127.0.0.1:${sinkPort}/reports` };
      server = await startServer(env);
      const fhirBase = `http://127.0.0.1:${server.port}/fhir/r5`;
      const post = async (body: Record<string, unknown>) => {
        const res = await fetch(`${fhirBase}/${body.resourceType}`, {
          method: 'POST',
          headers: {
            Authorization: HOSPITAL,
            'Content-Type': 'application/fhir+json',
            Accept: 'application/fhir+json',
          },
          body: JSON.stringify(body),
        });
        const json = (await res.json()) as any;
        expect(res.status, JSON.stringify(json)).to.equal(201);
        return json.id as string;
      };
      const patientId = await post({
        resourceType: 'Patient',
        identifier: [{ system: PATIENT_SYSTEM, value: 'P-3001' }],
        name: [{ family: 'Doe', given: ['Jane'] }],
        birthDate: '1975-06-01',
      });
      const responseId = await post({
        resourceType: 'QuestionnaireResponse',
        questionnaire: DEMO_URL,
        status: 'completed',
        subject: { reference: `Patient/${patientId}` },
        authored: '2026-03-01T09:30:00Z',
        item: [
          { linkId: 'indication', text: 'Clinical indication', answer: [{ valueString: 'Trauma' }] },
          {
            linkId: 'findings',
            text: 'Findings',
            item: [
              {
                linkId: 'findings.lungs',
                text: 'Lungs',
                answer: [{ valueCoding: { system: CODES, code: 'clear', display: 'Clear' } }],
              },
            ],
          },
          { linkId: 'impression', text: 'Impression', answer: [{ valueString: 'No fracture seen' }] },
        ],
      });

      // At least one delivery attempt failed (the sink port is closed): /metrics counts it (the
      // status page needs a session cookie since issue 15).
      expect(responseId).to.be.a('string');
      const failed = await waitFor(async () => {
        const metrics = await (await fetch(`http://127.0.0.1:${server!.port}/metrics`)).text();
        return /casebook_export_deliveries_total\{outcome="failed",sink="[^"]+"\} [1-9]/.test(metrics);
      }, 20_000);
      expect(failed, `no failed attempt; server output: ${server.output()}`).to.equal(true);

      await server.kill();
      sink = await startSink(sinkPort);
      server = await startServer(env);

      const arrived = await waitFor(() => posts(sink!).length >= 1, 20_000);
      expect(arrived, `no delivery after restart; server output: ${server.output()}`).to.equal(true);
      const [delivery] = posts(sink!);
      expect(delivery!.body).to.include('Impression: No fracture seen');
      expect(delivery!.headers['x-patient-identifier']).to.equal(`${PATIENT_SYSTEM}|P-3001`);
      await sleep(2000);
      expect(posts(sink!)).to.have.length(1);
    });
  });
});
