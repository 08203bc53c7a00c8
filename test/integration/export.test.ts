/**
 * Report export (issue 6, docs/architecture.md "Processes and hosts", role `export`, §5 EXPORT_SINK): a QuestionnaireResponse
 * reaching `completed` is rendered as plain text and delivered to a real HTTP receiver, a real
 * MLLP listener and a drop directory; retries after a sink outage, amendments, outbox replay and
 * a restart before delivery — on PGlite and on the Postgres server.
 */

import { once } from 'node:events';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { type AddressInfo, createServer as createTcpServer, type Server as TcpServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { expect } from 'chai';
import pino from 'pino';
import { type Casebook, openCasebook } from '../../src/casebook.js';
import { applySeed } from '../../src/commands/seed.js';
import { loadConfig } from '../../src/config.js';
import type { Sql } from '../../src/db/sql.js';
import type { RecordedEvent } from '../../src/eventstore/port.js';
import { createHttpApp } from '../../src/http/app.js';
import { exportStatus } from '../../src/integration/export/status.js';
import { exportOutboxProjection } from '../../src/projections/export-outbox.js';
import { generateNarrative } from '../../src/sdc/narrative.js';
import type { QuestionnaireResponse } from '../../src/sdc/types.js';
import { seed, startTestApp, TEST_SEED, type TestApp } from '../support/app.js';
import { type OpenedDatabase, testDatabases } from '../support/databases.js';
import { fhir } from '../support/fhir.js';
import { keysOf } from '../support/keys.js';

const PATIENT_SYSTEM = 'urn:test:hospital:patient';
const ENCOUNTER_SYSTEM = 'urn:test:hospital:encounter';
const HOSPITAL_ENV = { LAUNCHER_PATIENT_SYSTEM: PATIENT_SYSTEM, LAUNCHER_ENCOUNTER_SYSTEM: ENCOUNTER_SYSTEM };

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `check` until it returns a truthy value. */
const eventually = async <T>(check: () => Promise<T> | T, what: string, timeoutMs = 20_000): Promise<T> => {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
};

// ---------------------------------------------------------------------------------------------
// Receivers
// ---------------------------------------------------------------------------------------------

interface HttpDelivery {
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
  readonly method: string;
  readonly url: string;
  readonly accepted: boolean;
}

/** A real HTTP receiver on 127.0.0.1 that answers `status` (200 = up). */
const httpReceiver = async () => {
  const deliveries: HttpDelivery[] = [];
  const state = { status: 200 };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      deliveries.push({
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
        method: req.method ?? '',
        url: req.url ?? '',
        accepted: state.status < 300,
      });
      res.statusCode = state.status;
      res.end();
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/reports`,
    port,
    state,
    deliveries,
    accepted: (key: string) => deliveries.filter((d) => d.accepted && d.headers['idempotency-key'] === key),
    close: () => {
      server.closeAllConnections();
      server.close();
    },
  };
};

/** A real MLLP listener that ACKs every message with `state.code` (MSA|AA unless changed). */
const mllpListener = async () => {
  const messages: string[] = [];
  const state = { code: 'AA' };
  const server: TcpServer = createTcpServer((socket) => {
    let buffer = Buffer.alloc(0);
    socket.on('data', (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk]);
      for (;;) {
        const start = buffer.indexOf(0x0b);
        const end = buffer.indexOf(0x1c, start + 1);
        if (start < 0 || end < 0 || buffer[end + 1] !== 0x0d) return;
        const message = buffer.subarray(start + 1, end).toString('utf8');
        buffer = buffer.subarray(end + 2);
        messages.push(message);
        const controlId = message.split('\r')[0]!.split('|')[9];
        const ack = `MSH|^~\\&|RECEIVER|HOSPITAL|CASEBOOK|CASEBOOK|20260301100000||ACK^R01^ACK|ack-1|P|2.5\rMSA|${state.code}|${controlId}`;
        socket.write(Buffer.concat([Buffer.from([0x0b]), Buffer.from(ack), Buffer.from([0x1c, 0x0d])]));
      }
    });
    socket.on('error', () => undefined);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as AddressInfo).port;
  return { url: `mllp://127.0.0.1:${port}`, messages, state, close: () => server.close() };
};

// ---------------------------------------------------------------------------------------------
// Clinical data
// ---------------------------------------------------------------------------------------------

let seq = 0;
const unique = (prefix: string) => `${prefix}-${++seq}-${Math.random().toString(36).slice(2, 8)}`;

const create = async (app: TestApp, body: Record<string, unknown>): Promise<any> => {
  const res = await fhir(app, 'POST', `/${body.resourceType}`, { body });
  expect(res.status, JSON.stringify(res.body)).to.equal(201);
  return res.body;
};

interface Scenario {
  readonly patientMrn: string;
  readonly visit: string;
  readonly responseId: string;
  readonly body: Record<string, unknown>;
}

/** A Patient (two identifiers, the hospital one second), an Encounter and a response in `status`. */
const newResponse = async (
  app: TestApp,
  status: string,
  findings = 'No acute findings',
): Promise<Scenario> => {
  const patientMrn = unique('mrn');
  const visit = unique('visit');
  const patient = await create(app, {
    resourceType: 'Patient',
    identifier: [
      { system: 'urn:test:insurance', value: unique('ins') },
      { system: PATIENT_SYSTEM, value: patientMrn },
    ],
    name: [{ family: 'Doe', given: ['Jane'] }],
  });
  const encounter = await create(app, {
    resourceType: 'Encounter',
    identifier: [{ system: ENCOUNTER_SYSTEM, value: visit }],
    status: 'in-progress',
    subject: { reference: `Patient/${patient.id}` },
  });
  const body = {
    resourceType: 'QuestionnaireResponse',
    questionnaire: 'https://forms.example.org/Questionnaire/chest-ct|1.0',
    status,
    subject: { reference: `Patient/${patient.id}` },
    encounter: { reference: `Encounter/${encounter.id}` },
    authored: '2026-03-01T09:30:00Z',
    item: [
      { linkId: 'findings', text: 'Findings', answer: [{ valueString: findings }] },
      { linkId: 'contrast', text: 'Contrast given?', answer: [{ valueBoolean: true }] },
    ],
  };
  const response = await create(app, body);
  return { patientMrn, visit, responseId: response.id, body };
};

const put = async (app: TestApp, id: string, body: Record<string, unknown>) => {
  const res = await fhir(app, 'PUT', `/QuestionnaireResponse/${id}`, { body: { ...body, id } });
  expect(res.status, JSON.stringify(res.body)).to.equal(200);
  return res.body;
};

/** The plain text the current version of a response renders to (no Questionnaire in the tenant). */
const expectedText = async (app: TestApp, id: string) => {
  const res = await fhir(app, 'GET', `/QuestionnaireResponse/${id}`);
  return generateNarrative(res.body as QuestionnaireResponse).text;
};

/** The export stream of a response (ReportExportQueued, ReportExported, …). */
const exportStreamOf = async (casebook: Casebook, id: string): Promise<RecordedEvent[]> =>
  casebook.store.readStream(`export-QuestionnaireResponse-${id}`);

/** The delivery outcomes of a response (its export stream without ReportExportQueued). */
const exportEvents = async (casebook: Casebook, id: string): Promise<RecordedEvent[]> =>
  (await exportStreamOf(casebook, id)).filter((e) => e.type !== 'ReportExportQueued');

/** The installation id of a store (InstallationCreated). */
const installationOf = async (casebook: Casebook): Promise<string> => {
  const [created] = await casebook.store.readStream('installation');
  return (created!.data as { installationId: string }).installationId;
};

/** The idempotency key of a report version: `<installation>:qr-<id>-v<version>`. */
const keyOf = async (app: TestApp, id: string, version: number) =>
  `${await installationOf(app.casebook)}:qr-${id}-v${version}`;

/** The rows the outbox projection makes of the whole log, applied in one rolled-back transaction. */
const replayOutbox = async (sql: Sql, events: readonly RecordedEvent[]) => {
  let rows: unknown[] = [];
  await sql
    .transaction(async (tx) => {
      await tx.query(`DELETE FROM rm_export_outbox`);
      for (const event of events)
        if (exportOutboxProjection.handles(event.type))
          await exportOutboxProjection.apply([event], tx, 'catch-up');
      rows = await tx.query(`SELECT * FROM rm_export_outbox ORDER BY response_id, version_id`);
      throw new Error('rollback');
    })
    .catch((error: Error) => {
      if (error.message !== 'rollback') throw error;
    });
  return rows;
};

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
    logger: pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' }),
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

for (const database of testDatabases) {
  describe(`report export on ${database.name}`, () => {
    describe('to an HTTP endpoint', () => {
      let app: TestApp;
      let receiver: Awaited<ReturnType<typeof httpReceiver>>;

      before(async () => {
        receiver = await httpReceiver();
        app = await startTestApp(database, { env: { ...HOSPITAL_ENV, EXPORT_SINK: receiver.url } });
        await seed(app);
      });
      after(async () => {
        await app?.close();
        receiver?.close();
      });

      it('POSTs the plain text with the idempotency key and the hospital identifiers when the response is completed', async () => {
        const s = await newResponse(app, 'in-progress');
        await sleep(1500);
        expect(receiver.deliveries, 'nothing leaves while in progress').to.have.length(0);
        await put(app, s.responseId, { ...s.body, status: 'completed' });
        const key = await keyOf(app, s.responseId, 2);
        await eventually(() => receiver.accepted(key).length > 0, 'the delivery');
        const [delivery] = receiver.deliveries;
        expect(delivery!.method).to.equal('POST');
        expect(delivery!.url).to.equal('/reports');
        expect(delivery!.headers['content-type']).to.equal('text/plain; charset=utf-8');
        expect(delivery!.headers['idempotency-key']).to.equal(key);
        expect(delivery!.headers['x-patient-identifier']).to.equal(`${PATIENT_SYSTEM}|${s.patientMrn}`);
        expect(delivery!.headers['x-encounter-identifier']).to.equal(`${ENCOUNTER_SYSTEM}|${s.visit}`);
        const text = await expectedText(app, s.responseId);
        expect(text).to.include('Findings: No acute findings');
        expect(delivery!.body).to.equal(text);
        expect(delivery!.body).not.to.include('Doe');

        await sleep(1500);
        expect(receiver.deliveries, 'one delivery while the sink answers at once').to.have.length(1);
        const events = await exportEvents(app.casebook, s.responseId);
        expect(events.map((e) => e.type)).to.deep.equal(['ReportExported']);
        expect(events[0]!.data).to.deep.include({
          responseId: Number(s.responseId),
          version: 2,
          sink: `http://127.0.0.1:${receiver.port}`,
          attempt: 1,
        });
        expect(events[0]!.metadata.actor).to.deep.equal({ type: 'system', id: 'export' });
        expect(events[0]!.metadata.tenantId).to.equal(1);
        const status = await exportStatus(app.casebook.sql, Number(s.responseId), app.casebook.config);
        expect(status).to.deep.include({ state: 'delivered', attempts: 1 });
        expect(status!.deliveredAt).to.be.a('string');
      });

      it('writes units in the exported text: an item’s questionnaire-unit beside its number (issue 32)', async () => {
        const url = `https://forms.example.org/Questionnaire/${unique('units')}`;
        await create(app, {
          resourceType: 'Questionnaire',
          url,
          version: '1',
          status: 'active',
          item: [
            {
              linkId: 'size',
              type: 'decimal',
              text: 'Mean diameter',
              extension: [
                {
                  url: 'http://hl7.org/fhir/StructureDefinition/questionnaire-unit',
                  valueCoding: { system: 'http://unitsofmeasure.org', code: 'mm' },
                },
              ],
            },
          ],
        });
        const s = await newResponse(app, 'in-progress');
        await put(app, s.responseId, {
          ...s.body,
          questionnaire: `${url}|1`,
          status: 'completed',
          item: [{ linkId: 'size', text: 'Mean diameter', answer: [{ valueDecimal: 7 }] }],
        });
        const key = await keyOf(app, s.responseId, 2);
        await eventually(() => receiver.accepted(key).length > 0, 'the delivery');
        expect(receiver.accepted(key)[0]!.body).to.include('Mean diameter: 7 mm');
      });

      it('exports an amended report again as a new version', async () => {
        const s = await newResponse(app, 'completed');
        await eventually(
          async () => receiver.accepted(await keyOf(app, s.responseId, 1)).length > 0,
          'version 1',
        );
        const amended = {
          ...s.body,
          status: 'amended',
          item: [
            { linkId: 'findings', text: 'Findings', answer: [{ valueString: 'Small nodule, left lung' }] },
          ],
        };
        await put(app, s.responseId, amended);
        await eventually(
          async () => receiver.accepted(await keyOf(app, s.responseId, 2)).length > 0,
          'version 2',
        );
        const [v2] = receiver.accepted(await keyOf(app, s.responseId, 2));
        expect(v2!.body).to.equal(await expectedText(app, s.responseId));
        expect(v2!.body).to.include('Small nodule, left lung');
        // issue 32: a correction of what was sent, never a second original.
        expect(v2!.body).to.include('AMENDED REPORT');
        expect(v2!.headers['x-report-status']).to.equal('corrected');
        expect(receiver.accepted(await keyOf(app, s.responseId, 1))[0]!.headers['x-report-status']).to.equal(
          'final',
        );
        await sleep(1000);
        expect(receiver.accepted(await keyOf(app, s.responseId, 1))).to.have.length(1);
        expect(receiver.accepted(await keyOf(app, s.responseId, 2))).to.have.length(1);
        expect(
          (await exportEvents(app.casebook, s.responseId)).map((e) => [e.type, (e.data as any).version]),
        ).to.deep.equal([
          ['ReportExported', 1],
          ['ReportExported', 2],
        ]);
      });

      it('retries with jittered backoff while the sink is down and delivers when it is back', async () => {
        receiver.state.status = 503;
        const s = await newResponse(app, 'completed');
        const key = await keyOf(app, s.responseId, 1);
        await eventually(
          async () => (await exportEvents(app.casebook, s.responseId)).length >= 2,
          'two failed attempts',
        );
        const status = await exportStatus(app.casebook.sql, Number(s.responseId));
        expect(status).to.deep.include({ state: 'failed', lastError: 'HTTP 503 from the export sink' });
        receiver.state.status = 200;
        await eventually(() => receiver.accepted(key).length > 0, 'the delivery after the outage');
        await sleep(1500);
        expect(receiver.accepted(key)).to.have.length(1);
        const events = await exportEvents(app.casebook, s.responseId);
        const types = events.map((e) => e.type);
        expect(types.at(-1)).to.equal('ReportExported');
        expect(types.slice(0, -1)).to.have.length.of.at.least(2);
        expect(new Set(types.slice(0, -1))).to.deep.equal(new Set(['ReportExportFailed']));
        const failures = events.slice(0, -1).map((e) => e.data as any);
        failures.forEach((f, i) => {
          expect(f.attempt).to.equal(i + 1);
          expect(f.error).to.equal('HTTP 503 from the export sink');
          // Full jitter below an exponential ceiling: [0, 1 s), [0, 2 s), [0, 4 s) …
          const delay = Date.parse(f.nextAttemptAt) - Date.parse(f.at);
          expect(delay)
            .to.be.at.least(10)
            .and.below(1000 * 2 ** i);
        });
        expect((events.at(-1)!.data as any).attempt).to.equal(failures.length + 1);
        expect(await exportStatus(app.casebook.sql, Number(s.responseId))).to.deep.include({
          state: 'delivered',
          attempts: failures.length + 1,
        });
      });

      it('replaying the outbox projection twice gives the same rows', async () => {
        const events = await app.allEvents();
        const live = await app.casebook.sql.query(
          `SELECT * FROM rm_export_outbox ORDER BY response_id, version_id`,
        );
        const first = await replayOutbox(app.casebook.sql, events);
        const second = await replayOutbox(app.casebook.sql, events);
        expect(first).to.have.length.of.at.least(4);
        expect(first).to.deep.equal(second);
        expect(first).to.deep.equal(live);
      });

      it('reports "disabled" status when no sink is configured', async () => {
        const [row] = await app.casebook.sql.query<{ response_id: number }>(
          `SELECT response_id FROM rm_export_outbox LIMIT 1`,
        );
        expect(
          await exportStatus(app.casebook.sql, Number(row!.response_id), { exportSink: undefined }),
        ).to.deep.equal({ state: 'disabled', attempts: 0 });
        expect(await exportStatus(app.casebook.sql, 999_999)).to.equal(undefined);
      });
    });

    describe('to an HL7 v2 receiver over MLLP', () => {
      let app: TestApp;
      let listener: Awaited<ReturnType<typeof mllpListener>>;

      before(async () => {
        listener = await mllpListener();
        app = await startTestApp(database, { env: { ...HOSPITAL_ENV, EXPORT_SINK: listener.url } });
        await seed(app);
      });
      after(async () => {
        await app?.close();
        listener?.close();
      });

      it('sends one ORU^R01 with the identifiers and one OBX per text line, HL7-escaped, and waits for the ACK', async () => {
        const s = await newResponse(app, 'in-progress', 'a|b^c&d~e\\f');
        await put(app, s.responseId, { ...s.body, status: 'completed' });
        await eventually(
          async () =>
            (await exportEvents(app.casebook, s.responseId)).some((e) => e.type === 'ReportExported'),
          'the ACKed export',
        );
        expect(listener.messages).to.have.length(1);
        const segments = listener.messages[0]!.split('\r');
        const fields = (name: string) => segments.find((seg) => seg.startsWith(`${name}|`))!.split('|');
        const msh = fields('MSH');
        expect(msh[1]).to.equal('^~\\&');
        expect(msh[8]).to.equal('ORU^R01^ORU_R01');
        expect(msh[9]).to.equal(await keyOf(app, s.responseId, 2));
        expect(msh[11]).to.equal('2.5');
        expect(fields('PID')[3]).to.equal(`${s.patientMrn}^^^&${PATIENT_SYSTEM}&URI`);
        expect(fields('PV1')[19]).to.equal(`${s.visit}^^^&${ENCOUNTER_SYSTEM}&URI`);
        expect(fields('OBR')[7]).to.equal('20260301093000');
        const obx = segments.filter((seg) => seg.startsWith('OBX|')).map((seg) => seg.split('|'));
        const text = await expectedText(app, s.responseId);
        const lines = text.split('\n');
        expect(obx).to.have.length(lines.length);
        obx.forEach((f, i) => {
          expect(f[1]).to.equal(String(i + 1));
          expect(f[2]).to.equal('TX');
        });
        const hl7Unescape = (v: string) =>
          v.replace(/\\([FSTRE])\\/g, (_m, c: string) => ({ F: '|', S: '^', T: '&', R: '~', E: '\\' })[c]!);
        expect(obx.map((f) => hl7Unescape(f[5]!))).to.deep.equal(lines);
        expect(obx.map((f) => f[5]).join('\n')).to.include('a\\F\\b\\S\\c\\T\\d\\R\\e\\E\\f');
        const exported = (await exportEvents(app.casebook, s.responseId))[0]!;
        expect(exported.data).to.deep.include({ sink: listener.url, version: 2 });
        // The first completed version is the original (F), though it is version 2 (issue 32).
        expect(fields('OBR')[25]).to.equal('F');
        expect(obx.every((f) => f[11] === 'F')).to.equal(true);
      });

      it('sends an amendment as one correction (C) and entered-in-error as one retraction (W), issue 32', async () => {
        const s = await newResponse(app, 'in-progress');
        const ofThis = () =>
          listener.messages
            .map((m) => m.split('\r').map((seg) => seg.split('|')))
            .filter((segs) =>
              segs.some((f) => f[0] === 'OBR' && f[3]!.startsWith(`QuestionnaireResponse/${s.responseId}/`)),
            );
        const statuses = () =>
          ofThis().map((segs) => {
            const obr = segs.find((f) => f[0] === 'OBR')!;
            const obx = segs.filter((f) => f[0] === 'OBX').map((f) => f[11]);
            return { version: obr[3]!.split('/').at(-1), obr25: obr[25], obx11: [...new Set(obx)] };
          });
        await put(app, s.responseId, { ...s.body, status: 'completed' });
        await eventually(() => ofThis().length === 1, 'the original');
        await put(app, s.responseId, {
          ...s.body,
          status: 'amended',
          item: [{ linkId: 'findings', text: 'Findings', answer: [{ valueString: 'Corrected' }] }],
        });
        await eventually(() => ofThis().length === 2, 'the correction');
        await put(app, s.responseId, { ...s.body, status: 'entered-in-error' });
        await eventually(() => ofThis().length === 3, 'the retraction');
        await sleep(1000);
        expect(statuses()).to.deep.equal([
          { version: '2', obr25: 'F', obx11: ['F'] },
          { version: '3', obr25: 'C', obx11: ['C'] },
          { version: '4', obr25: 'W', obx11: ['W'] },
        ]);
        const retraction = ofThis()[2]!
          .filter((f) => f[0] === 'OBX')
          .map((f) => f[5]);
        expect(retraction.join('\n')).to.include('ENTERED IN ERROR');
      });
    });

    describe('to an MLLP receiver whose ACK holds NUL and control characters', () => {
      let app: TestApp;
      let listener: Awaited<ReturnType<typeof mllpListener>>;

      before(async () => {
        listener = await mllpListener();
        listener.state.code = 'A\u0000E\u0007\u001b[31m';
        app = await startTestApp(database, {
          env: { ...HOSPITAL_ENV, EXPORT_SINK: listener.url },
        });
        await seed(app);
      });
      after(async () => {
        await app?.close();
        listener?.close();
      });

      it('records the failure in readable form, keeps every read model going, and delivers once the receiver answers AA', async () => {
        const s = await newResponse(app, 'completed');
        await eventually(
          async () =>
            (await exportEvents(app.casebook, s.responseId)).some((e) => e.type === 'ReportExportFailed'),
          'the refused export recorded',
        );
        const failed = (await exportEvents(app.casebook, s.responseId)).find(
          (e) => e.type === 'ReportExportFailed',
        )!;
        expect((failed.data as { error: string }).error).to.equal(
          'HL7 receiver answered A\\x00E\\x07\\x1b[31m',
        );
        // The service keeps answering, and new writes stay visible.
        const later = await newResponse(app, 'in-progress');
        const read = await fhir(app, 'GET', `/QuestionnaireResponse/${later.responseId}`);
        expect(read.status).to.equal(200);
        const ready = await fetch(`${app.baseUrl}/readyz`);
        expect(ready.status, await ready.text()).to.equal(200);
        listener.state.code = 'AA';
        app.advance(10 * 60_000); // past the retry's backoff
        await eventually(
          async () =>
            (await exportEvents(app.casebook, s.responseId)).some((e) => e.type === 'ReportExported'),
          'the export delivered after AA',
        );
      });
    });

    describe('to a drop directory', () => {
      let app: TestApp;
      let dir: string;

      before(async () => {
        dir = join(mkdtempSync(join(tmpdir(), 'casebook-export-')), 'drop', 'reports');
        app = await startTestApp(database, {
          env: { ...HOSPITAL_ENV, EXPORT_SINK: pathToFileURL(dir).href },
        });
        await seed(app);
      });
      after(async () => {
        await app?.close();
        rmSync(join(dir, '..', '..'), { recursive: true, force: true });
      });

      it('writes one <installation>_qr-<id>-v<version>.txt per report (created directory, no temporary file left)', async () => {
        const s = await newResponse(app, 'in-progress');
        await put(app, s.responseId, { ...s.body, status: 'completed' });
        const name = `${(await keyOf(app, s.responseId, 2)).replace(':', '_')}.txt`;
        const file = join(dir, name);
        await eventually(() => existsSync(file), 'the report file');
        expect(readFileSync(file, 'utf8')).to.equal(await expectedText(app, s.responseId));
        await sleep(1000);
        expect(readdirSync(dir)).to.deep.equal([name]);
        expect((await exportEvents(app.casebook, s.responseId)).map((e) => e.data)).to.satisfy(
          (data: any[]) => data.length === 1 && data[0].sink === 'file://',
        );
      });
    });

    describe('across a restart', () => {
      it('loses nothing: a report not delivered before the stop is delivered by the next process', async () => {
        const opened = await database.open();
        const receiver = await httpReceiver();
        receiver.state.status = 503;
        const env = { ...HOSPITAL_ENV, EXPORT_SINK: receiver.url };
        try {
          const first = await startOn(opened, env);
          let s: Scenario;
          let key: string;
          try {
            await applySeed(first.casebook, TEST_SEED);
            s = await newResponse(first, 'completed');
            await eventually(
              async () => (await exportEvents(first.casebook, s.responseId)).length >= 1,
              'a failed attempt',
            );
            key = await keyOf(first, s.responseId, 1);
          } finally {
            await first.close();
          }
          expect(receiver.accepted(key)).to.have.length(0);
          receiver.state.status = 200;
          const second = await startOn(opened, env);
          try {
            await eventually(() => receiver.accepted(key).length > 0, 'the delivery');
            await sleep(1000);
            expect(receiver.accepted(key)).to.have.length(1);
            expect(receiver.accepted(key)[0]!.body).to.equal(await expectedText(second, s.responseId));
            const types = (await exportEvents(second.casebook, s.responseId)).map((e) => e.type);
            expect(types.at(-1)).to.equal('ReportExported');
            expect(types.slice(0, -1)).to.include('ReportExportFailed');
          } finally {
            await second.close();
          }
        } finally {
          receiver.close();
          await opened.dispose();
        }
      });
    });
  });
}
