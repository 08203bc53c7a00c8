/**
 * Report export a hospital can run on (issue 15), on PGlite and on the Postgres server, against
 * real HTTP, MLLP and file sinks started here and real casebook processes: outside text made safe,
 * a stuck report delaying only itself, the text pinned when queued, keys unique across stores,
 * the resend after kill -9, abandonment and `casebook export retry`, and the status page (real
 * Chromium) behind the session cookie.
 */

import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import pino from 'pino';
import type { Page } from 'playwright-core';
import { openCasebook } from '../../src/casebook.js';
import { decideBacklog, requeueExport } from '../../src/commands/export.js';
import { loadConfig } from '../../src/config.js';
import type { Sql } from '../../src/db/sql.js';
import type { RecordedEvent } from '../../src/eventstore/port.js';
import { createHttpApp } from '../../src/http/app.js';
import { sha256Hex } from '../../src/integration/export/exporter.js';
import { exportStatus } from '../../src/integration/export/status.js';
import { generateNarrative } from '../../src/sdc/narrative.js';
import type { QuestionnaireResponse } from '../../src/sdc/types.js';
import { chromiumMissing, launchBrowser, screenshot } from '../app/support.js';
import { basic, MANAGED, seed, startTestApp, type TestApp } from '../support/app.js';
import { type OpenedDatabase, POSTGRES_TEST_URL, testDatabases } from '../support/databases.js';
import { fhir, ROLE_NEW, sessionCookie } from '../support/fhir.js';
import { keysOf } from '../support/keys.js';
import { cli, type RunningServer, startServer } from '../support/process.js';
import { httpReceiver, mllpListener, type SinkUnderTest, sinkKinds } from '../support/sinks.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `check` until it returns a truthy value. */
const eventually = async <T>(check: () => Promise<T> | T, what: string, timeoutMs = 30_000): Promise<T> => {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
};

const QUESTIONNAIRE_URL = 'https://forms.example.org/Questionnaire/export-chest-ct';

/** A Patient of the general tenant (id). */
const newPatient = async (app: TestApp, auth?: string): Promise<string> => {
  const res = await fhir(app, 'POST', '/Patient', {
    body: { resourceType: 'Patient', name: [{ family: 'Doe' }] },
    ...(auth ? { auth } : {}),
  });
  expect(res.status, JSON.stringify(res.body)).to.equal(201);
  return res.body.id;
};

/** A completed QuestionnaireResponse about `patientId` (id). */
const completedResponse = async (app: TestApp, patientId: string, findings: string): Promise<string> => {
  const res = await fhir(app, 'POST', '/QuestionnaireResponse', {
    body: {
      resourceType: 'QuestionnaireResponse',
      questionnaire: QUESTIONNAIRE_URL,
      status: 'completed',
      subject: { reference: `Patient/${patientId}` },
      authored: '2026-03-01T09:30:00Z',
      item: [{ linkId: 'findings', answer: [{ valueString: findings }] }],
    },
  });
  expect(res.status, JSON.stringify(res.body)).to.equal(201);
  return res.body.id;
};

/** A session of `patientId`'s compartment (`patient/*.*`) for a new Practitioner: its cookie. */
const patientSession = async (app: TestApp, patientId: string, auth?: string) => {
  const { cookie } = await sessionCookie(
    app,
    {
      patient: Number(patientId),
      scope: 'patient/*.*',
      fhirContext: [
        {
          type: 'Practitioner',
          identifier: { system: 'urn:test:staff', value: `dr-${Math.random().toString(36).slice(2)}` },
          role: ROLE_NEW,
        },
      ],
    },
    ...(auth ? [auth] : []),
  );
  return cookie;
};

const streamOf = (app: TestApp, id: string): Promise<RecordedEvent[]> =>
  app.casebook.store.readStream(`export-QuestionnaireResponse-${id}`);

const eventOf = async (app: TestApp, id: string, type: string) =>
  (await streamOf(app, id)).find((e) => e.type === type);

const data = (e: RecordedEvent | undefined): any => e?.data;

/** The status page of a report, as the browser of `cookie`'s session sees it. */
const statusPage = (app: TestApp, id: string) =>
  `${app.baseUrl}/launch/submitted?response=QuestionnaireResponse/${id}&task=Task/1`;

for (const database of testDatabases) {
  describe(`report export a hospital can run on (${database.name})`, function () {
    this.timeout(120_000);

    describe('an HL7 acknowledgement with NUL and control characters', () => {
      let app: TestApp;
      let listener: Awaited<ReturnType<typeof mllpListener>>;
      before(async () => {
        listener = await mllpListener();
        app = await startTestApp(database, {
          env: { EXPORT_SINK: listener.url, EXPORT_RETRY_BASE_MS: '200', EXPORT_RETRY_MAX_MS: '400' },
        });
        await seed(app);
      });
      after(async () => {
        await app?.close();
        listener?.close();
      });

      it('is recorded readably, every read model keeps going, and the report is delivered when the listener answers AA', async () => {
        listener.state.code = 'A\u0000E';
        listener.state.text = 'bad\u0001\u0007text\u0000';
        const patient = await newPatient(app);
        const id = await completedResponse(app, patient, 'No acute findings');
        const failed = await eventually(() => eventOf(app, id, 'ReportExportFailed'), 'a failed attempt');
        expect(data(failed).error).to.equal('HL7 receiver answered A\\x00E: bad\\x01\\x07text\\x00');
        // biome-ignore lint/suspicious/noControlCharactersInRegex: asserting there are none
        expect(data(failed).error).not.to.match(/[\u0000-\u001f\u007f]/);
        // The outbox read model took it: the status shows the reason, and writes stay visible.
        await eventually(
          async () => (await exportStatus(app.casebook.sql, Number(id)))?.lastError === data(failed).error,
          'the readable reason in the outbox',
        );
        const other = await newPatient(app);
        expect((await fhir(app, 'GET', `/Patient/${other}`)).status).to.equal(200);
        const ready = await fetch(`${app.baseUrl}/readyz`);
        const readiness = (await ready.json()) as any;
        expect(ready.status, JSON.stringify(readiness)).to.equal(200);
        expect(readiness.projections.every((p: any) => p.status === 'live')).to.equal(true);

        listener.state.code = 'AA';
        listener.state.text = '';
        const exported = await eventually(() => eventOf(app, id, 'ReportExported'), 'the delivery on AA');
        const queued = await eventOf(app, id, 'ReportExportQueued');
        expect(data(exported).sha256).to.equal(data(queued).sha256);
        expect(await exportStatus(app.casebook.sql, Number(id))).to.deep.include({ state: 'delivered' });
      });
    });

    describe('one hanging report among 50', () => {
      let app: TestApp;
      let receiver: Awaited<ReturnType<typeof httpReceiver>>;
      before(async () => {
        receiver = await httpReceiver();
        receiver.state.hang = (body) => body.includes('HANG-ME');
        app = await startTestApp(database, {
          env: { EXPORT_SINK: receiver.url, EXPORT_PENDING_WARN_AFTER: '1s' },
        });
        await seed(app);
      });
      after(async () => {
        await app?.close();
        receiver?.close();
      });

      it('delays only itself: the other 49 are delivered within 2 s of their submission', async () => {
        const patient = await newPatient(app);
        const stuck = await completedResponse(app, patient, 'HANG-ME');
        const submitted = new Map<string, number>();
        for (let i = 0; i < 49; i++) {
          const id = await completedResponse(app, patient, `Report ${i}`);
          submitted.set(id, Date.now());
        }
        await eventually(() => receiver.accepted().length >= 49, '49 deliveries');
        const latencies = [...submitted].map(([id, at]) => {
          const delivery = receiver.accepted().find((d) => d.key.endsWith(`:qr-${id}-v1`));
          expect(delivery, `QuestionnaireResponse/${id}`).to.not.equal(undefined);
          return delivery!.at - at;
        });
        latencies.sort((a, b) => a - b);
        console.log(
          `      49 reports beside a hanging one: delivery latency p50 ${latencies[24]} ms, max ${latencies.at(-1)} ms`,
        );
        expect(latencies.at(-1)).to.be.below(2000);
        expect(receiver.accepted().some((d) => d.key.endsWith(`:qr-${stuck}-v1`))).to.equal(false);
        expect(await exportStatus(app.casebook.sql, Number(stuck))).to.deep.include({ state: 'pending' });

        // Visible: /metrics counts deliveries by outcome and sink and shows the outbox; /readyz
        // warns about the report pending too long, without failing.
        await sleep(1100);
        const metrics = await (await fetch(`${app.baseUrl}/metrics`)).text();
        const sink = `http://127.0.0.1:${receiver.port}`;
        expect(metrics).to.include(`casebook_export_deliveries_total{outcome="delivered",sink="${sink}"} 49`);
        const attempts = new RegExp(`casebook_export_attempts_total\\{sink="${sink}"\\} (\\d+)`).exec(
          metrics,
        );
        expect(Number(attempts?.[1])).to.be.at.least(50);
        expect(metrics).to.match(/casebook_export_pending 1\n/);
        expect(Number(/^casebook_export_oldest_pending_seconds (\S+)$/m.exec(metrics)![1])).to.be.above(1);
        const ready = await fetch(`${app.baseUrl}/readyz`);
        const body = (await ready.json()) as any;
        expect(ready.status).to.equal(200);
        expect(body.status).to.equal('ready');
        expect(body.export.pending).to.equal(1);
        expect(body.export.warnings.join(' ')).to.match(/a report has waited \d+ s for delivery/);
      });
    });

    for (const { kind, open } of sinkKinds) {
      describe(`the text of a report version (${kind} sink)`, () => {
        let app: TestApp;
        let sink: SinkUnderTest;
        before(async () => {
          sink = await open();
          app = await startTestApp(database, {
            env: { EXPORT_SINK: sink.url, EXPORT_RETRY_BASE_MS: '300', EXPORT_RETRY_MAX_MS: '300' },
          });
          await seed(app);
        });
        after(async () => {
          await app?.close();
          sink?.close();
        });

        it('is pinned when queued: deleting the Questionnaire between a failed and a successful attempt changes no byte, and the hash is in the log', async () => {
          console.log(`      ${kind} sink fails by: ${sink.failure}`);
          const q = await fhir(app, 'POST', '/Questionnaire', {
            body: {
              resourceType: 'Questionnaire',
              url: QUESTIONNAIRE_URL,
              title: 'Chest CT structured report',
              status: 'active',
              item: [{ linkId: 'findings', text: 'Findings of the chest CT', type: 'string' }],
            },
          });
          expect(q.status, JSON.stringify(q.body)).to.equal(201);
          sink.fail();
          const patient = await newPatient(app);
          const id = await completedResponse(app, patient, 'Small nodule');
          await eventually(() => eventOf(app, id, 'ReportExportFailed'), 'a failed attempt');
          const key: string = data(await eventOf(app, id, 'ReportExportQueued')).key;
          expect(key).to.match(new RegExp(`:qr-${id}-v1$`));
          const failures = async () =>
            (await streamOf(app, id)).filter((e) => e.type === 'ReportExportFailed').length;
          const before = await failures();
          const first = await sink.failedAttempt(key, () =>
            eventually(async () => (await failures()) > before, 'another failed attempt'),
          );
          expect(first.key).to.equal(key);
          // The reasons in the log name no server path (the drop directory's, for the file sink).
          for (const e of await streamOf(app, id))
            if (e.type === 'ReportExportFailed') expect(data(e).error).not.to.include(tmpdir());
          expect(first.text).to.include('Chest CT structured report');
          expect((await fhir(app, 'DELETE', `/Questionnaire/${q.body.id}`)).status).to.be.oneOf([200, 204]);
          sink.recover();
          const exported = await eventually(() => eventOf(app, id, 'ReportExported'), 'the delivery');
          const accepted = sink.accepted().filter((d) => d.key === first.key);
          expect(accepted).to.have.length(1);
          expect(accepted[0]!.body).to.equal(first.body);
          const queued = await eventOf(app, id, 'ReportExportQueued');
          expect(data(queued).text).to.equal(first.text);
          expect(data(queued).sha256).to.equal(sha256Hex(first.text));
          expect(data(queued).byteLength).to.equal(Buffer.byteLength(first.text));
          expect(data(exported)).to.deep.include({ sha256: sha256Hex(first.text), key: first.key });
          // Rendering again now would send other text: the pin is what kept it.
          const now = await fhir(app, 'GET', `/QuestionnaireResponse/${id}`);
          expect(generateNarrative(now.body as QuestionnaireResponse).text).not.to.equal(first.text);
        });
      });

      describe(`two stores and one ${kind} sink`, () => {
        it('never send the same key', async () => {
          const sink = await open();
          const apps: TestApp[] = [];
          try {
            apps.push(await startTestApp(database, { env: { EXPORT_SINK: sink.url } }));
            apps.push(await startTestApp(database, { env: { EXPORT_SINK: sink.url } }));
            const ids: string[] = [];
            for (const app of apps) {
              await seed(app);
              ids.push(await completedResponse(app, await newPatient(app), 'No acute findings'));
            }
            await eventually(() => sink.accepted().length >= 2, 'both deliveries');
            const keys = sink.accepted().map((d) => d.key);
            expect(new Set(keys).size).to.equal(keys.length);
            // The same resource id and version in both stores: only the installation tells them apart.
            expect(ids[0]).to.equal(ids[1]);
            expect(keys.map((k) => k.split(':')[1])).to.deep.equal([`qr-${ids[0]}-v1`, `qr-${ids[0]}-v1`]);
            // What each store recorded as sent is what the sink holds under that key.
            for (const [i, app] of apps.entries()) {
              const exported = await eventually(() => eventOf(app, ids[i]!, 'ReportExported'), 'the log');
              const received = sink.accepted().filter((d) => d.key === data(exported).key);
              expect(received, `store ${i + 1}`).to.have.length(1);
              expect(sha256Hex(received[0]!.text)).to.equal(data(exported).sha256);
            }
          } finally {
            for (const app of apps) await app.close();
            sink.close();
          }
        });
      });
    }

    describe('abandonment and `casebook export retry`', () => {
      let app: TestApp;
      let receiver: Awaited<ReturnType<typeof httpReceiver>>;
      before(async () => {
        receiver = await httpReceiver();
        app = await startTestApp(database, {
          env: {
            EXPORT_SINK: receiver.url,
            EXPORT_MAX_ATTEMPTS: '2',
            // Long enough to look at the status page between the first failed attempt and the abandonment.
            EXPORT_TIMEOUT_MS: '3000',
            EXPORT_RETRY_BASE_MS: '100',
            EXPORT_RETRY_MAX_MS: '200',
          },
        });
        await seed(app);
      });
      after(async () => {
        await app?.close();
        receiver?.close();
      });

      it('abandons after the limit, delivers after the retry, and the status page says so at each stage (Chromium)', async function () {
        if (chromiumMissing()) {
          console.log('      skipped: /usr/bin/chromium is not installed');
          this.skip();
        }
        const patient = await newPatient(app);
        const cookie = await patientSession(app, patient);
        const browser = await launchBrowser();
        try {
          const context = await browser.newContext();
          const [name, value] = cookie.cookie.split('=') as [string, string];
          await context.addCookies([{ name, value, url: app.baseUrl }]);
          const page = await context.newPage();
          const look = async (id: string, stage: string) => {
            const res = await page.goto(statusPage(app, id));
            expect(res!.status()).to.equal(200);
            await screenshot(page, `export-status-${database.name}-${stage}`);
            return { label: await page.locator('.badge').innerText(), text: await textOf(page) };
          };

          // 1. The sink does not answer: attempts time out; the report is still being sent.
          receiver.state.hang = () => true;
          const id = await completedResponse(app, patient, 'No acute findings');
          await eventually(() => streamOf(app, id).then((s) => s.length > 0), 'queued');
          const sending = await look(id, '1-sending');
          expect(sending.label).to.equal('sending');
          expect(sending.text).to.include('saved in casebook and is still being sent');
          expect(sending.text).not.to.include('contact IT');

          // 1b. The first attempt has failed and more follow: still "being sent", not a failure.
          await eventually(() => eventOf(app, id, 'ReportExportFailed'), 'the first failed attempt');
          await eventually(
            async () => (await exportStatus(app.casebook.sql, Number(id)))?.state === 'failed',
            'the failed (not abandoned) outbox row',
          );
          expect(
            await eventOf(app, id, 'ReportExportAbandoned'),
            'the second attempt is still waiting (EXPORT_TIMEOUT_MS too short for this machine?)',
          ).to.equal(undefined);
          const retrying = await look(id, '1b-failed-attempt');
          expect(retrying.label).to.equal('sending');
          expect(retrying.text).to.include('saved in casebook and is still being sent');
          expect(retrying.text).not.to.match(/failed/i);
          expect(retrying.text).not.to.include('contact IT');

          // 2. After EXPORT_MAX_ATTEMPTS the report version is abandoned, with the reason.
          const abandoned = await eventually(
            () => eventOf(app, id, 'ReportExportAbandoned'),
            'the abandonment',
          );
          expect(data(abandoned).reason).to.match(/^gave up after 2 attempts; last error: no answer from/);
          const events = await streamOf(app, id);
          expect(events.filter((e) => e.type === 'ReportExportFailed')).to.have.length(2);
          await eventually(
            async () => (await exportStatus(app.casebook.sql, Number(id)))?.state === 'abandoned',
            'the abandoned outbox row',
          );
          const failed = await look(id, '2-abandoned');
          expect(failed.label).to.equal('failed');
          expect(failed.text).to.include('Delivery to the hospital system failed');
          expect(failed.text).to.include('contact IT support');
          await sleep(500);
          expect((await streamOf(app, id)).length, 'no attempt after the abandonment').to.equal(
            events.length,
          );

          // 3. The sink is back; IT requeues the report (the CLI on the server; PGlite in memory
          // cannot be opened by a second process, so there the CLI's command runs in-process).
          receiver.state.hang = () => false;
          receiver.state.status = 200;
          if (database.name === 'postgres') {
            const [{ schema }] = (await app.casebook.sql.query<{ schema: string }>(
              `SELECT current_schema() AS schema`,
            )) as [{ schema: string }];
            const url = new URL(POSTGRES_TEST_URL);
            url.searchParams.set('options', `-c search_path=${schema}`);
            const out = await cli(['export', 'retry', '--report', id, '--tenant', '1'], {
              DATABASE_URL: url.toString(),
            });
            expect(JSON.parse(out)).to.deep.equal({ requeued: [`QuestionnaireResponse/${id}/_history/1`] });
          } else {
            await requeueExport(
              app.casebook.context({ tenantId: 1, actor: { type: 'system', id: 'cli:test' } }),
              Number(id),
              'cli:test',
            );
          }
          const exported = await eventually(() => eventOf(app, id, 'ReportExported'), 'the delivery');
          expect(data(exported).attempt).to.equal(3);
          const types = (await streamOf(app, id)).map((e) => e.type);
          expect(types).to.deep.equal([
            'ReportExportQueued',
            'ReportExportFailed',
            'ReportExportFailed',
            'ReportExportAbandoned',
            'ReportExportRequeued',
            'ReportExported',
          ]);
          await eventually(
            async () => (await exportStatus(app.casebook.sql, Number(id)))?.state === 'delivered',
            'the delivered outbox row',
          );
          const delivered = await look(id, '3-delivered');
          expect(delivered.label).to.equal('delivered');
          expect(delivered.text).to.include('The report was delivered to the hospital system');
        } finally {
          await browser.close();
        }
      });

      it('refuses a retry when nothing is abandoned (409 refusal, nothing written)', async () => {
        const id = await completedResponse(app, await newPatient(app), 'Nothing to retry');
        await eventually(() => eventOf(app, id, 'ReportExported'), 'the delivery');
        const before = (await streamOf(app, id)).length;
        let refused: unknown;
        try {
          await requeueExport(
            app.casebook.context({ tenantId: 1, actor: { type: 'system', id: 'cli:test' } }),
            Number(id),
            'cli:test',
          );
        } catch (error) {
          refused = error;
        }
        expect(refused).to.have.property('code', 'ExportNotAbandoned');
        expect((await streamOf(app, id)).length).to.equal(before);
      });

      it('the status page answers 401 without a cookie, 404 to another tenant and 403 to a session whose scopes do not cover it', async () => {
        const patient = await newPatient(app);
        const id = await completedResponse(app, patient, 'Private findings');
        const noCookie = await fetch(statusPage(app, id));
        expect(noCookie.status).to.equal(401);
        const page = await noCookie.text();
        expect(page).not.to.include('Status: <span');

        const managedPatient = await newPatient(app, MANAGED);
        const other = await patientSession(app, managedPatient, MANAGED);
        const otherTenant = await fetch(statusPage(app, id), { headers: { Cookie: other.cookie } });
        expect(otherTenant.status).to.equal(404);
        expect(await otherTenant.text()).not.to.include('Status: <span');

        const elsewhere = await patientSession(app, await newPatient(app));
        const uncovered = await fetch(statusPage(app, id), { headers: { Cookie: elsewhere.cookie } });
        expect(uncovered.status).to.equal(403);

        const own = await patientSession(app, patient);
        const covered = await fetch(statusPage(app, id), { headers: { Cookie: own.cookie } });
        expect(covered.status).to.equal(200);
        expect(await covered.text()).to.match(/Status: <span class="badge export-(sending|delivered)">/);
      });
    });

    describe('a store with reports older than the sink configuration', () => {
      it('holds the backlog until a choice, sends new reports at once, and sends only what the choice covers', async () => {
        const opened = await database.open();
        const receiver = await httpReceiver();
        try {
          const first = await startOn(opened, {});
          const old: string[] = [];
          let since = '';
          try {
            await seed(first);
            const patient = await newPatient(first);
            old.push(await completedResponse(first, patient, 'Backlog 1'));
            old.push(await completedResponse(first, patient, 'Backlog 2'));
            await sleep(20);
            since = new Date().toISOString();
            await sleep(20);
            old.push(await completedResponse(first, patient, 'Backlog 3'));
          } finally {
            await first.close();
          }
          if (database.name === 'postgres') {
            // `casebook export` asks for the choice instead of sending the backlog silently.
            const [{ schema }] = (await opened.sql.query<{ schema: string }>(
              `SELECT current_schema() AS schema`,
            )) as [{ schema: string }];
            const url = new URL(POSTGRES_TEST_URL);
            url.searchParams.set('options', `-c search_path=${schema}`);
            const refused = await cli(['export'], {
              DATABASE_URL: url.toString(),
              EXPORT_SINK: receiver.url,
            }).then(
              () => undefined,
              (error: { code?: number; stderr?: string }) => error,
            );
            expect(refused?.code).to.equal(2);
            expect(refused?.stderr).to.match(
              /3 report version\(s\) were written before the export sink was configured/,
            );
            expect(refused?.stderr).to.include('--since <instant>');
          }
          const second = await startOn(opened, { EXPORT_SINK: receiver.url });
          try {
            const fresh = await completedResponse(second, await newPatient(second), 'New report');
            await eventually(() => receiver.accepted().length === 1, 'the new report');
            expect(receiver.accepted()[0]!.key).to.match(new RegExp(`:qr-${fresh}-v1$`));
            await sleep(1000);
            expect(receiver.accepted(), 'the backlog is held').to.have.length(1);
            const ready = (await (await fetch(`${second.baseUrl}/readyz`)).json()) as any;
            expect(ready.status).to.equal('ready');
            expect(ready.export.heldBacklog).to.equal(3);
            expect(ready.export.warnings.join(' ')).to.include('older than the export sink configuration');

            await decideBacklog(
              second.casebook.context({ tenantId: null, actor: { type: 'system', id: 'cli:test' } }),
              {
                choice: 'since',
                since,
                source: 'casebook export --since',
              },
            );
            await eventually(() => receiver.accepted().length === 2, 'the backlog since the instant');
            expect(receiver.accepted()[1]!.key).to.match(new RegExp(`:qr-${old[2]}-v1$`));
            await sleep(1000);
            expect(receiver.accepted()).to.have.length(2);
            for (const id of old.slice(0, 2))
              expect(await exportStatus(second.casebook.sql, Number(id))).to.deep.include({
                state: 'skipped',
              });
            const decided = await second.casebook.store.readStream('export-sink');
            expect(decided.map((e) => e.type)).to.deep.equal([
              'ExportSinkConfigured',
              'ExportBacklogDecided',
            ]);
            expect(decided[1]!.data).to.deep.include({ choice: 'since', since });
          } finally {
            await second.close();
          }
        } finally {
          receiver.close();
          await opened.dispose();
        }
      });
    });

    describe('the time limit of retrying', () => {
      it('abandons a report still failing after EXPORT_GIVE_UP_AFTER, with the reason', async () => {
        const receiver = await httpReceiver();
        receiver.state.status = 503;
        const app = await startTestApp(database, {
          env: {
            EXPORT_SINK: receiver.url,
            EXPORT_GIVE_UP_AFTER: '1s',
            EXPORT_RETRY_BASE_MS: '100',
            EXPORT_RETRY_MAX_MS: '200',
          },
        });
        try {
          await seed(app);
          const id = await completedResponse(app, await newPatient(app), 'Never accepted');
          const abandoned = await eventually(
            () => eventOf(app, id, 'ReportExportAbandoned'),
            'the abandonment',
          );
          expect(data(abandoned).reason).to.equal(
            'gave up after 1 s of attempts; last error: HTTP 503 from the export sink',
          );
          const failures = (await streamOf(app, id)).filter((e) => e.type === 'ReportExportFailed');
          expect(failures.length).to.be.at.least(2);
          const metrics = await (await fetch(`${app.baseUrl}/metrics`)).text();
          expect(metrics).to.match(/casebook_export_deliveries_total\{outcome="abandoned",sink="[^"]+"\} 1/);
        } finally {
          await app.close();
          receiver.close();
        }
      });

      it('refuses an EXPORT_BACKLOG or EXPORT_GIVE_UP_AFTER it cannot read, naming it', () => {
        expect(() => loadConfig({ EXPORT_BACKLOG: 'later' })).to.throw(
          'EXPORT_BACKLOG must be all, skip or since:<ISO 8601 instant>',
        );
        expect(() => loadConfig({ EXPORT_GIVE_UP_AFTER: 'a day' })).to.throw(
          'EXPORT_GIVE_UP_AFTER must be a duration such as 24h',
        );
        expect(loadConfig({ EXPORT_BACKLOG: 'since:2026-03-01T00:00:00Z' }).export.backlog).to.deep.equal({
          choice: 'since',
          since: '2026-03-01T00:00:00.000Z',
        });
      });
    });

    describe('a released backlog', () => {
      it('goes out after new reports: a report written while the backlog drains overtakes it', async () => {
        const opened = await database.open();
        const receiver = await httpReceiver();
        try {
          const first = await startOn(opened, {});
          try {
            await seed(first);
            const patient = await newPatient(first);
            for (let i = 0; i < 40; i++) await completedResponse(first, patient, `Backlog ${i}`);
          } finally {
            await first.close();
          }
          // One delivery at a time, 50 ms each: the backlog takes at least 2 s.
          receiver.state.delayMs = 50;
          const second = await startOn(opened, {
            EXPORT_SINK: receiver.url,
            EXPORT_BACKLOG: 'all',
            EXPORT_CONCURRENCY: '1',
          });
          try {
            await eventually(() => receiver.accepted().length >= 3, 'the backlog draining');
            const fresh = await completedResponse(second, await newPatient(second), 'New report');
            await eventually(
              () => receiver.accepted().some((d) => d.key.endsWith(`:qr-${fresh}-v1`)),
              'the new report',
            );
            const position = receiver.accepted().findIndex((d) => d.key.endsWith(`:qr-${fresh}-v1`));
            console.log(`      the new report arrived as delivery ${position + 1} of 41`);
            expect(position).to.be.below(15);
            await eventually(() => receiver.accepted().length === 41, 'the whole backlog', 60_000);
            const decided = await second.casebook.store.readStream('export-sink');
            expect(decided[1]!.data).to.deep.include({ choice: 'all', source: 'EXPORT_BACKLOG' });
          } finally {
            await second.close();
          }
        } finally {
          receiver.close();
          await opened.dispose();
        }
      });
    });

    describe('kill -9 after the sink accepted (real process)', () => {
      let server: RunningServer | undefined;
      let cleanup: () => Promise<void> = async () => undefined;
      after(async () => {
        await server?.kill();
        await cleanup();
      });

      it('resends the same key and the same bytes', async () => {
        const receiver = await httpReceiver();
        const dir = mkdtempSync(join(tmpdir(), 'casebook-export-kill-'));
        const seedFile = join(dir, 'seed.json');
        writeFileSync(
          seedFile,
          JSON.stringify({
            tenants: [
              {
                name: 'Kill Hospital',
                allowed_scopes: 'user/*.* patient/*.*',
                clients: [
                  {
                    client_id: 'kill-ehr',
                    client_secret: 'kill-secret-0123456789',
                    scopes: 'system/*.*',
                    projects: ['demo'],
                  },
                ],
                questionnaires: [],
              },
            ],
          }),
        );
        let env: Record<string, string>;
        if (database.name === 'postgres') {
          const { PostgresSql } = await import('../../src/db/sql.js');
          const schema = `x_${Math.random().toString(16).slice(2, 12)}`;
          const admin = new PostgresSql(POSTGRES_TEST_URL, { max: 1 });
          await admin.exec(`CREATE SCHEMA ${schema}`);
          const url = new URL(POSTGRES_TEST_URL);
          url.searchParams.set('options', `-c search_path=${schema}`);
          env = { DATABASE_URL: url.toString() };
          cleanup = async () => {
            await admin.exec(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
            await admin.close();
            rmSync(dir, { recursive: true, force: true });
            receiver.close();
          };
        } else {
          env = { DATA_DIR: join(dir, 'data') };
          cleanup = async () => {
            rmSync(dir, { recursive: true, force: true });
            receiver.close();
          };
        }
        env = { ...env, CASEBOOK_SEED: seedFile, EXPORT_SINK: receiver.url };
        const auth = basic('kill-ehr', 'kill-secret-0123456789');
        // The sink stores the report, then the process dies before it hears the answer.
        let killed = false;
        receiver.state.onAccepted = async () => {
          if (killed) return;
          killed = true;
          await server!.kill();
        };
        server = await startServer(env);
        const api = async (path: string, body: unknown) => {
          const res = await fetch(`http://127.0.0.1:${server!.port}/fhir/r5${path}`, {
            method: 'POST',
            headers: { Authorization: auth, 'Content-Type': 'application/fhir+json' },
            body: JSON.stringify(body),
          });
          const json = (await res.json()) as { id: string };
          expect(res.status, JSON.stringify(json)).to.equal(201);
          return json;
        };
        const patient = await api('/Patient', { resourceType: 'Patient', name: [{ family: 'Doe' }] });
        const response = await api('/QuestionnaireResponse', {
          resourceType: 'QuestionnaireResponse',
          status: 'completed',
          questionnaire: QUESTIONNAIRE_URL,
          subject: { reference: `Patient/${patient.id}` },
          item: [{ linkId: 'findings', text: 'Findings', answer: [{ valueString: 'Crash course' }] }],
        });
        await eventually(
          () => killed && receiver.accepted().length === 1,
          'the first acceptance and the kill',
        );
        await sleep(200);
        server = await startServer(env);
        await eventually(() => receiver.accepted().length >= 2, 'the resend after the restart', 60_000);
        const [first, second] = receiver.accepted();
        expect(second!.key).to.equal(first!.key);
        expect(second!.key).to.match(new RegExp(`^[0-9a-f-]{36}:qr-${response.id}-v1$`));
        expect(second!.body).to.equal(first!.body);
        await server.stop();
        server = undefined;
        const out = await cli(
          ['events', 'export', '--stream', `export-QuestionnaireResponse-${response.id}`],
          env,
        );
        const events = out
          .trim()
          .split('\n')
          .map((line) => JSON.parse(line) as { type: string; data: any });
        expect(events.map((e) => e.type)).to.deep.equal(['ReportExportQueued', 'ReportExported']);
        expect(events[1]!.data).to.deep.include({ key: first!.key, sha256: sha256Hex(first!.body) });
      });
    });
  });
}

/** A casebook app on an already opened database that leaves the database open on close (restarts). */
const startOn = async (opened: OpenedDatabase, env: Record<string, string>): Promise<TestApp> => {
  const bare: Server = createServer();
  bare.listen(0, '127.0.0.1');
  await once(bare, 'listening');
  const port = (bare.address() as AddressInfo).port;
  const config = loadConfig({ ...env, PORT: String(port), DATA_DIR: 'memory://', LOG_LEVEL: 'silent' });
  const sql: Sql = Object.create(opened.sql, { close: { value: async () => undefined } });
  const casebook = await openCasebook(config, {
    sql,
    keys: await keysOf(opened),
    logger: pino({ level: 'silent' }),
  });
  bare.on('request', createHttpApp(casebook).callback());
  return {
    casebook,
    baseUrl: `http://127.0.0.1:${port}`,
    authUrl: config.authUrl.replace('localhost', '127.0.0.1'),
    advance: () => undefined,
    allEvents: async () => [],
    close: async () => {
      bare.closeAllConnections();
      bare.close();
      await casebook.close();
    },
  };
};

/** The visible text of the page's card. */
const textOf = (page: Page) => page.locator('main').innerText();
