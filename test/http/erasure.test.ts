/**
 * Erasure of a patient (docs/architecture.md "Erasure"; issue 36), end to end on PGlite and
 * PostgreSQL: a patient with two launches (two Encounters and Tasks, a session each), a submitted
 * and exported report, and another patient. `POST /Patient/{id}/$erase` with system/Patient.d
 * destroys the patient's data key and leaves: reads 410 Gone, searches finding nothing, none of
 * its name, MRN, birth date or report sentence anywhere in the database (every table of the
 * schema, event log included, as text), a PHI-free `PatientErased` in the log; erasing again
 * succeeds and adds nothing; the other patient readable; a replay rebuilds the read models the
 * same for everyone else. A session's scopes cannot erase, nor can a request without a reason.
 */
import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { expect } from 'chai';
import { pino } from 'pino';
import { completeErasures } from '../../src/commands/erasure.js';
import { execute } from '../../src/commands/handler.js';
import type { AuditEventsRecordedData } from '../../src/domain/audit/audit.js';
import { erasureDecider, erasureStream } from '../../src/domain/erasure/erasure.js';
import { tenantDecider, tenantStream } from '../../src/domain/tenant/tenant.js';
import type { RecordedEvent } from '../../src/eventstore/port.js';
import { Sealer } from '../../src/eventstore/sealer.js';
import { shreddingCodec } from '../../src/eventstore/shredding/codec.js';
import { DataKeyUnknown } from '../../src/eventstore/shredding/envelope.js';
import { FileKeyRecords } from '../../src/eventstore/shredding/file-key-store.js';
import { LocalKek } from '../../src/eventstore/shredding/kek.js';
import { KeyStore } from '../../src/eventstore/shredding/key-store.js';
import { SqlEventStore } from '../../src/eventstore/sql-event-store.js';
import { logHead, verifyAgainst, verifyLog } from '../../src/eventstore/verify.js';
import { toAuditEvent } from '../../src/fhir/audit-event.js';
import { phiSubjectOf } from '../../src/fhir/phi.js';
import { patientEvents } from '../../src/queries/patient-events.js';
import { seed, startTestApp, type TestApp } from '../support/app.js';
import { POSTGRES_TEST_URL, testDatabases } from '../support/databases.js';
import { fhir } from '../support/fhir.js';
import { launchThrough, TEST_LAUNCH_SECRET } from '../support/launch.js';

const execFileAsync = promisify(execFile);
const SENTENCE = 'Quillon-shaped opacity in the left apex, unchanged since March';
const FAMILY = 'Zebedeeson';
const BIRTH_DATE = '1957-08-23';

const waitFor = async (check: () => Promise<boolean>, ms: number) => {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 100));
  }
  return true;
};

const erase = (app: TestApp, id: number, reason: unknown = 'created for the wrong person') =>
  fhir(app, 'POST', `/Patient/${id}/$erase`, {
    body: { resourceType: 'Parameters', parameter: [{ name: 'reason', valueString: reason }] },
  });

for (const database of testDatabases) {
  describe(`erasing a patient on ${database.name}`, function () {
    this.timeout(120_000);
    let app: TestApp;
    let sink: Server;
    let delivered = 0;
    let patient: number;
    let other: number;
    let encounters: number[];
    let response: number;
    /** A Task of the erased patient and the clinician session that opened it. */
    let erasedTask: { taskId: number; cookie: string };
    /** What the server logged (debug and up), from its start. */
    const logLines: string[] = [];

    /**
     * Every row of every table of the schema (event log, read models, seals), as text; with
     * `prefix`, of the tables named so only (`es_`: the event log and its seals, what a backup of
     * the log holds).
     */
    const dump = async (prefix = ''): Promise<string> => {
      const tables = await app.casebook.sql.query<{ name: string }>(
        `SELECT tablename AS name FROM pg_tables
          WHERE schemaname = current_schema() AND starts_with(tablename, $1) ORDER BY 1`,
        [prefix],
      );
      const parts: string[] = [];
      for (const { name } of tables) {
        const rows = await app.casebook.sql.query<{ t: string }>(`SELECT t::text AS t FROM "${name}" t`);
        parts.push(...rows.map((r) => `${name}: ${r.t}`));
      }
      return parts.join('\n');
    };

    before(async () => {
      sink = createServer((req, res) => {
        req.resume();
        req.on('end', () => {
          delivered++;
          res.writeHead(204).end();
        });
      });
      sink.listen(0, '127.0.0.1');
      await once(sink, 'listening');
      app = await startTestApp(database, {
        logLines,
        env: {
          LAUNCHER_CLIENT_ID: 'ehr-backend',
          LAUNCHER_CLIENT_SECRET: 'general-secret-0123456789',
          LAUNCHER_SHARED_SECRET: TEST_LAUNCH_SECRET,
          EXPORT_SINK: `http://127.0.0.1:${(sink.address() as AddressInfo).port}/reports`,
        },
      });
      await seed(app);
      const first = await launchThrough(app, {
        patient: 'ER-MRN-4711',
        encounter: 'ER-E1',
        user: 'dr-erase',
      });
      const second = await launchThrough(app, {
        patient: 'ER-MRN-4711',
        encounter: 'ER-E2',
        user: 'dr-erase',
      });
      await launchThrough(app, { patient: 'ER-MRN-0002', encounter: 'ER-E3', user: 'dr-erase' });
      erasedTask = first;
      const task = (await fhir(app, 'GET', `/Task/${first.taskId}`)).body;
      patient = Number(task.for.reference.split('/')[1]);
      encounters = [
        Number(task.encounter.reference.split('/')[1]),
        Number((await fhir(app, 'GET', `/Task/${second.taskId}`)).body.encounter.reference.split('/')[1]),
      ];
      const current = (await fhir(app, 'GET', `/Patient/${patient}`)).body;
      const updated = await fhir(app, 'PUT', `/Patient/${patient}`, {
        body: { ...current, name: [{ family: FAMILY, given: ['Ada'] }], birthDate: BIRTH_DATE },
      });
      expect(updated.status).to.equal(200);
      const submitted = await fhir(app, 'POST', '/QuestionnaireResponse', {
        body: {
          resourceType: 'QuestionnaireResponse',
          questionnaire: 'https://example.org/Questionnaire/erase',
          status: 'completed',
          subject: { reference: `Patient/${patient}` },
          encounter: { reference: `Encounter/${encounters[0]}` },
          item: [{ linkId: 'impression', text: 'Impression', answer: [{ valueString: SENTENCE }] }],
        },
      });
      expect(submitted.status).to.equal(201);
      response = Number(submitted.body.id);
      expect(await waitFor(async () => delivered >= 1, 20_000), 'the report was exported').to.equal(true);
      await waitFor(async () => (await app.allEvents()).some((e) => e.type === 'ReportExported'), 10_000);
      other = Number(
        (await fhir(app, 'GET', '/Patient?identifier=urn:casebook:hospital:patient%7CER-MRN-0002')).body
          .entry[0].resource.id,
      );
      await app.casebook.audit.drain();
    });
    after(async () => {
      await app?.close();
      sink?.close();
    });

    it('is refused without a reason, and for a patient the tenant does not have', async () => {
      const missing = await fhir(app, 'POST', `/Patient/${patient}/$erase`, {
        body: { resourceType: 'Parameters', parameter: [] },
      });
      expect(missing.status).to.equal(400);
      expect((await fhir(app, 'GET', `/Patient/${patient}`)).status).to.equal(200);
      const unknown = await erase(app, 999_999);
      expect(unknown.status).to.equal(404);
    });

    it("destroys the patient's data for good and leaves the log verifiable and the others whole", async () => {
      // The log sealed up to here: erasure must leave every seal and leaf as it was.
      const sealer = new Sealer(app.casebook.store, app.casebook.sql, pino({ level: 'silent' }));
      await sealer.migrate();
      await sealer.sealAll();
      const before = await dump();
      // What the dump would show: the read models hold the PHI in the clear until the erasure.
      for (const phi of ['ER-MRN-0002', FAMILY, BIRTH_DATE, SENTENCE.slice(0, 20)])
        expect(before, phi).to.include(phi);
      const headBefore = await logHead(app.casebook.store, new Date(Date.now()));

      // A backup of the log taken now (its tables: events, streams, seals), restored without the
      // key store: the patient's PHI is in it only encrypted — its metadata in the clear — and a
      // store over it with any other key store cannot read the patient's events.
      const logBackup = await dump('es_');
      expect(logBackup).to.include(`Patient-${patient}`);
      for (const phi of [FAMILY, 'ER-MRN-4711', BIRTH_DATE, SENTENCE.slice(0, 20)])
        expect(logBackup, `log backup: ${phi}`).not.to.include(phi);
      const withoutKeys = await SqlEventStore.open(app.casebook.sql, {
        codec: shreddingCodec(
          await KeyStore.open(FileKeyRecords.open(undefined), LocalKek.random()),
          phiSubjectOf,
        ),
      });
      const unreadable = await withoutKeys.readStream(`Patient-${patient}`).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(unreadable).to.be.instanceOf(DataKeyUnknown);
      const otherBefore = (await fhir(app, 'GET', `/Patient/${other}`)).body;

      const res = await erase(app, patient);
      expect(res.status).to.equal(200);
      expect(res.body.resourceType).to.equal('OperationOutcome');

      // Reads answer 410 Gone, searches find nothing.
      expect((await fhir(app, 'GET', `/Patient/${patient}`)).status).to.equal(410);
      for (const e of encounters) expect((await fhir(app, 'GET', `/Encounter/${e}`)).status).to.equal(410);
      expect((await fhir(app, 'GET', `/QuestionnaireResponse/${response}`)).status).to.equal(410);
      // The clinician's editor of one of its Tasks, opened before: 410, said in a page, no PHI.
      for (const path of [
        `/tasks/${erasedTask.taskId}/report`,
        `/tasks/${erasedTask.taskId}/forms`,
        `/external/v1?task=Task/${erasedTask.taskId}`,
      ]) {
        const page = await fetch(`${app.baseUrl}/app${path}`, {
          headers: { cookie: erasedTask.cookie },
          redirect: 'manual',
        });
        const html = await page.text();
        expect(page.status, path).to.equal(410);
        expect(html, path).to.include('This patient&#39;s record was erased');
        for (const phi of [FAMILY, 'ER-MRN-4711', BIRTH_DATE])
          expect(html, `${path}: ${phi}`).not.to.include(phi);
      }
      // The same session (a patient-scoped one, of the erased patient) on the FHIR server: 410
      // whatever its scopes (docs/interface.md §4.3 rule 17), never its 403 or the data.
      const fhirBase = app.casebook.config.fhirUrl
        .replace('//localhost:', '//127.0.0.1:')
        .replace(/\/+$/, '');
      for (const path of [
        `/Patient/${patient}`,
        `/Encounter/${encounters[0]}`,
        `/QuestionnaireResponse/${response}`,
      ]) {
        const read = await fetch(`${fhirBase}${path}`, {
          headers: { cookie: erasedTask.cookie, accept: 'application/fhir+json' },
        });
        const text = await read.text();
        expect(read.status, `session ${path}`).to.equal(410);
        expect(JSON.parse(text).resourceType, path).to.equal('OperationOutcome');
        for (const phi of [FAMILY, 'ER-MRN-4711', BIRTH_DATE])
          expect(text, `${path}: ${phi}`).not.to.include(phi);
      }
      // docs/interface.md §4.3 rule 17: vread and history 410 too, and a write about the patient.
      expect((await fhir(app, 'GET', `/Patient/${patient}/_history`)).status).to.equal(410);
      expect((await fhir(app, 'GET', `/Patient/${patient}/_history/1`)).status).to.equal(410);
      const rewrite = await fhir(app, 'PUT', `/Patient/${patient}`, {
        body: { resourceType: 'Patient', id: String(patient), name: [{ family: FAMILY }] },
      });
      expect(rewrite.status).to.equal(410);
      for (const query of [
        `/Patient?_id=${patient}`,
        '/Patient?identifier=urn:casebook:hospital:patient%7CER-MRN-4711',
        `/Encounter?patient=${patient}`,
        `/QuestionnaireResponse?patient=${patient}`,
      ]) {
        const found = await fhir(app, 'GET', query);
        expect(found.status, query).to.equal(200);
        expect(found.body.entry ?? [], query).to.deep.equal([]);
      }

      // On PostgreSQL, the database's own dump of the schema says the same (data and definitions).
      if (database.name === 'postgres') {
        const [{ schema } = { schema: '' }] = await app.casebook.sql.query<{ schema: string }>(
          `SELECT current_schema() AS schema`,
        );
        const { stdout } = await execFileAsync(
          'pg_dump',
          ['--schema', schema, '--no-owner', POSTGRES_TEST_URL.replace(/\?.*$/, '')],
          { maxBuffer: 256 * 1024 * 1024 },
        );
        expect(stdout).to.include('ER-MRN-0002');
        for (const phi of [FAMILY, 'ER-MRN-4711', BIRTH_DATE, SENTENCE.slice(0, 20)])
          expect(stdout, `pg_dump: ${phi}`).not.to.include(phi);
      }

      // Its reports are never sent again.
      expect(
        await app.casebook.sql.query(`SELECT * FROM rm_export_outbox WHERE response_id = $1`, [response]),
      ).to.deep.equal([]);

      // Nothing of the patient's PHI is left in any table, event log included.
      const after = await dump();
      for (const phi of [FAMILY, 'ER-MRN-4711', BIRTH_DATE, SENTENCE.slice(0, 20)])
        expect(after, phi).not.to.include(phi);
      // Nor in the server's log (debug and up), which never held it: the searches by MRN above
      // and the launches with it included.
      expect(logLines.length).to.be.greaterThan(0);
      for (const phi of [FAMILY, 'ER-MRN-4711', BIRTH_DATE, SENTENCE.slice(0, 20)])
        expect(logLines.join(''), `log: ${phi}`).not.to.include(phi);

      // The log says so, without PHI; the other patient is as it was.
      const events = await app.allEvents();
      const erased = events.filter((e) => e.type === 'PatientErased');
      expect(erased).to.have.length(1);
      expect(erased[0]!.data).to.deep.include({ patientId: patient, reason: 'created for the wrong person' });
      expect(events.filter((e) => e.erased).length).to.be.greaterThan(5);
      // Its AuditEvent (who, when, why) is appended in the same transaction (docs/interface.md §4.3
      // rule 17): the client, the Patient, the reason.
      const audits = (await app.allEvents({ audit: true })).filter(
        (e) => e.type === 'AuditEventsRecorded' && e.position.commit === erased[0]!.position.commit,
      );
      const records = audits.flatMap((e) => (e.data as AuditEventsRecordedData).records);
      expect(records).to.have.length(1);
      expect(records[0]).to.deep.include({ interaction: 'operation', action: 'D', status: 200 });
      expect(records[0]!.agent).to.deep.include({ kind: 'client' });
      expect(records[0]!.entities).to.deep.equal([
        { reference: `Patient/${patient}`, patientId: patient, reason: 'created for the wrong person' },
      ]);
      const shown = toAuditEvent(records[0]!) as { entity?: { detail?: unknown[] }[] };
      expect(shown.entity?.[0]?.detail).to.deep.include({
        type: { text: 'reason' },
        valueString: 'created for the wrong person',
      });
      expect((await fhir(app, 'GET', `/Patient/${other}`)).body).to.deep.equal(otherBefore);

      // The sealed log still verifies, erasure and all.
      await sealer.sealAll();
      const verified = await verifyLog(app.casebook.store, app.casebook.sql, { now: new Date(Date.now()) });
      expect(verified.ok, JSON.stringify(verified.problem)).to.equal(true);
      // And against the head an auditor kept from before the erasure (`verify --against`).
      const against = await verifyAgainst(app.casebook.store, headBefore);
      expect(against.ok, JSON.stringify(against.problem)).to.equal(true);

      // The audit export lists the patient's events, erased, with their metadata, and the erasure.
      const exported: RecordedEvent[] = [];
      for await (const e of patientEvents(app.casebook.store, 1, patient)) exported.push(e);
      const ofPatient = exported.filter((e) => e.type !== 'AuditEventsRecorded');
      expect(ofPatient.filter((e) => e.erased).map((e) => e.streamName)).to.include.members([
        `Patient-${patient}`,
        ...encounters.map((e) => `Encounter-${e}`),
        `QuestionnaireResponse-${response}`,
      ]);
      expect(ofPatient.at(-1)!.type).to.equal('PatientErased');
      expect(JSON.stringify(exported.map((e) => e.data))).not.to.include(FAMILY);

      // Again: succeeds, adds nothing.
      const again = await erase(app, patient);
      expect(again.status).to.equal(200);
      expect((await app.allEvents()).filter((e) => e.type === 'PatientErased')).to.have.length(1);
    });

    it('an erasure cut short after its event (kill -9) completes at the next start', async () => {
      const created = await fhir(app, 'POST', '/Patient', {
        body: { resourceType: 'Patient', name: [{ family: 'Halfway' }], birthDate: '1970-01-01' },
      });
      expect(created.status).to.equal(201);
      const id = Number(created.body.id);
      // The event, as erasePatient records it, without the key's destruction that follows it.
      const ctx = app.casebook.context({ tenantId: 1, actor: { type: 'system', id: 'test' } });
      await execute(ctx, (uow) =>
        uow.decide(erasureStream(id), erasureDecider, {
          type: 'ErasePatient',
          patientId: id,
          tenantId: 1,
          resources: [{ resourceType: 'Patient', id }],
          reason: 'cut short',
          forced: false,
          now: uow.now,
        }),
      );
      expect((await fhir(app, 'GET', `/Patient/${id}`)).status).to.equal(410);
      const [live] = await app.casebook.store.readStream(`Patient-${id}`);
      expect(live!.erased).to.equal(undefined);
      // What openCasebook runs at start.
      expect(await completeErasures(app.casebook.sql, app.casebook.keys)).to.equal(1);
      const [gone] = await app.casebook.store.readStream(`Patient-${id}`);
      expect(gone!.erased).to.equal(true);
      expect(await completeErasures(app.casebook.sql, app.casebook.keys)).to.equal(0);
    });

    it("is refused inside the tenant's retention period unless forced, and the force is recorded", async () => {
      const ctx = app.casebook.context({ tenantId: null, actor: { type: 'system', id: 'test' } });
      const configure = (retentionDays: number | undefined) =>
        execute(ctx, (uow) =>
          uow.decide(tenantStream(1), tenantDecider, (state) => {
            if (state.status !== 'active') throw new Error('no tenant 1');
            const { status: _s, tenantId: _t, name: _n, retentionDays: _r, ...settings } = state;
            return {
              type: 'ConfigureTenant' as const,
              ...settings,
              ...(retentionDays !== undefined ? { retentionDays } : {}),
              now: uow.now,
            };
          }),
        );
      await configure(3650);
      try {
        const created = await fhir(app, 'POST', '/Patient', {
          body: { resourceType: 'Patient', name: [{ family: 'Retained' }] },
        });
        const id = Number(created.body.id);
        const refused = await erase(app, id);
        expect(refused.status).to.equal(422);
        expect(JSON.stringify(refused.body)).to.include('retention period of 3650 days');
        expect((await fhir(app, 'GET', `/Patient/${id}`)).status).to.equal(200);
        const forced = await fhir(app, 'POST', `/Patient/${id}/$erase`, {
          body: {
            resourceType: 'Parameters',
            parameter: [
              { name: 'reason', valueString: 'court order 2026/17' },
              { name: 'force', valueBoolean: true },
            ],
          },
        });
        expect(forced.status).to.equal(200);
        expect((await fhir(app, 'GET', `/Patient/${id}`)).status).to.equal(410);
        const [event] = await app.casebook.store.readStream(erasureStream(id));
        expect(event!.data).to.deep.include({ forced: true, reason: 'court order 2026/17' });
        const audit = (await app.allEvents({ audit: true }))
          .filter((e) => e.type === 'AuditEventsRecorded' && e.position.commit === event!.position.commit)
          .flatMap((e) => (e.data as AuditEventsRecordedData).records);
        expect(audit.map((r) => r.entities)).to.deep.equal([
          [
            {
              reference: `Patient/${id}`,
              patientId: id,
              reason: 'forced inside the retention period: court order 2026/17',
            },
          ],
        ]);
      } finally {
        await configure(undefined);
      }
    });

    it('a replay rebuilds the read models without the patient and the same for everyone else', async () => {
      const rows = async () =>
        app.casebook.sql.query(
          `SELECT resource_type, id, version_id, deleted, content::text AS content FROM rm_resources ORDER BY 1, 2`,
        );
      const identifiers = async () =>
        app.casebook.sql.query(
          `SELECT * FROM rm_resource_identifiers ORDER BY resource_type, id, system, value`,
        );
      const before = { rows: await rows(), identifiers: await identifiers() };
      const result = await app.casebook.runner.rebuild();
      expect([...result.stopped.keys()]).to.deep.equal([]);
      expect({ rows: await rows(), identifiers: await identifiers() }).to.deep.equal(before);
      expect((await fhir(app, 'GET', `/Patient/${patient}`)).status).to.equal(410);
      expect((await fhir(app, 'GET', `/Patient/${other}`)).status).to.equal(200);
    });
  });
}

describe('erasing a patient whose reports went to a drop directory (PGlite)', function () {
  this.timeout(120_000);

  it("removes the patient's report files from the installation's drop directory, and only those", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'casebook-drop-'));
    const app = await startTestApp(testDatabases[0]!, { env: { EXPORT_SINK: pathToFileURL(dir).href } });
    try {
      await seed(app);
      const report = async (family: string, sentence: string) => {
        const patient = await fhir(app, 'POST', '/Patient', {
          body: { resourceType: 'Patient', name: [{ family }] },
        });
        const response = await fhir(app, 'POST', '/QuestionnaireResponse', {
          body: {
            resourceType: 'QuestionnaireResponse',
            questionnaire: 'https://example.org/Questionnaire/drop',
            status: 'completed',
            subject: { reference: `Patient/${patient.body.id}` },
            item: [{ linkId: 'impression', text: 'Impression', answer: [{ valueString: sentence }] }],
          },
        });
        expect(response.status).to.equal(201);
        return Number(patient.body.id);
      };
      const erased = await report('Dropsworth', 'Erased sentence about the right kidney');
      await report('Keepsake', 'Kept sentence about the left kidney');
      const files = () => readdirSync(dir).map((f) => readFileSync(join(dir, f), 'utf8'));
      expect(await waitFor(async () => files().length === 2, 20_000), 'both reports written').to.equal(true);

      const res = await erase(app, erased);
      expect(res.status).to.equal(200);
      expect(files()).to.have.length(1);
      expect(files()[0]).to.include('Kept sentence');
      expect(files().join('\n')).not.to.include('Erased sentence');
    } finally {
      await app.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
