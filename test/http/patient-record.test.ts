/**
 * A patient's whole record (issue 14): `Patient/{id}/$everything` and the audit export of the
 * log, for a patient who had two launches, a report and its export — exactly their resources and
 * events, nothing of another patient. On PGlite and on a real Postgres server.
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { expect } from 'chai';
import type { RecordedEvent } from '../../src/eventstore/port.js';
import { auditEventsIn } from '../../src/fhir/audit-event.js';
import { replayUntil } from '../../src/projections/investigation.js';
import { patientEvents } from '../../src/queries/patient-events.js';
import { seed, startTestApp, type TestApp } from '../support/app.js';
import { testDatabases } from '../support/databases.js';
import { fhir } from '../support/fhir.js';
import { launchThrough, TEST_LAUNCH_SECRET } from '../support/launch.js';

const waitFor = async (check: () => Promise<boolean>, ms: number) => {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 100));
  }
  return true;
};

for (const database of testDatabases) {
  describe(`a patient's whole record on ${database.name}`, function () {
    this.timeout(90_000);
    let app: TestApp;
    let sink: Server;
    let delivered = 0;
    let a: { id: number; tasks: number[]; response: number; other: number };

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
        env: {
          LAUNCHER_CLIENT_ID: 'ehr-backend',
          LAUNCHER_CLIENT_SECRET: 'general-secret-0123456789',
          LAUNCHER_SHARED_SECRET: TEST_LAUNCH_SECRET,
          EXPORT_SINK: `http://127.0.0.1:${(sink.address() as AddressInfo).port}/reports`,
        },
      });
      await seed(app);
      // Patient A: two launches (two encounters), a report, its export. Patient B: one launch.
      const first = await launchThrough(app, { patient: 'PR-A', encounter: 'PR-E1', user: 'dr-record' });
      const second = await launchThrough(app, { patient: 'PR-A', encounter: 'PR-E2', user: 'dr-record' });
      await launchThrough(app, { patient: 'PR-B', encounter: 'PR-E3', user: 'dr-record' });
      const task = (await fhir(app, 'GET', `/Task/${first.taskId}`)).body;
      const patientId = Number(task.for.reference.split('/')[1]);
      const response = await fhir(app, 'POST', '/QuestionnaireResponse', {
        body: {
          resourceType: 'QuestionnaireResponse',
          questionnaire: 'https://example.org/Questionnaire/record',
          status: 'completed',
          subject: { reference: `Patient/${patientId}` },
          item: [{ linkId: 'impression', text: 'Impression', answer: [{ valueString: 'Normal' }] }],
        },
      });
      expect(response.status).to.equal(201);
      expect(await waitFor(async () => delivered >= 1, 20_000), 'the report was exported').to.equal(true);
      const other = (await fhir(app, 'GET', '/Patient?identifier=urn:casebook:hospital:patient%7CPR-B')).body
        .entry[0].resource.id;
      a = {
        id: patientId,
        tasks: [first.taskId, second.taskId],
        response: Number(response.body.id),
        other: Number(other),
      };
      // Every delivery is recorded before the test reads the log.
      await waitFor(async () => (await app.allEvents()).some((e) => e.type === 'ReportExported'), 10_000);
      await app.casebook.audit.drain();
    });
    after(async () => {
      await app?.close();
      sink?.close();
    });

    it('$everything returns the Patient, its encounters, tasks and report, and the Practitioner, nothing else', async () => {
      const res = await fhir(app, 'GET', `/Patient/${a.id}/$everything`);
      expect(res.status).to.equal(200);
      expect(res.body).to.deep.include({ resourceType: 'Bundle', type: 'searchset' });
      const refs: string[] = res.body.entry.map((e: any) => `${e.resource.resourceType}/${e.resource.id}`);
      expect(refs[0]).to.equal(`Patient/${a.id}`);
      expect(refs.filter((r) => r.startsWith('Encounter/'))).to.have.length(2);
      expect(refs.filter((r) => r.startsWith('Task/')).sort()).to.deep.equal(
        a.tasks.map((t) => `Task/${t}`).sort(),
      );
      expect(refs).to.include(`QuestionnaireResponse/${a.response}`);
      expect(refs.filter((r) => r.startsWith('Practitioner/'))).to.have.length(1);
      expect(refs).to.not.include(`Patient/${a.other}`);
      for (const entry of res.body.entry) {
        const subject = entry.resource.subject ?? entry.resource.for;
        if (subject) expect(subject.reference).to.equal(`Patient/${a.id}`);
      }
      // Paged: the same resources, each once, two at a time.
      const seen: string[] = [];
      let next: string | undefined = `/Patient/${a.id}/$everything?_count=2`;
      while (next) {
        const page = await fhir(app, 'GET', next);
        expect(page.body.total).to.equal(refs.length);
        seen.push(...page.body.entry.map((e: any) => `${e.resource.resourceType}/${e.resource.id}`));
        const link = page.body.link.find((l: any) => l.relation === 'next')?.url as string | undefined;
        next = link ? link.slice(link.indexOf('/Patient/')) : undefined;
      }
      expect(seen).to.deep.equal(refs);
    });

    it('$everything answers the same from rows written before its link columns (NULL until a rebuild)', async () => {
      const everything = async () => {
        const seen: string[] = [];
        let next: string | undefined = `/Patient/${a.id}/$everything?_count=3`;
        while (next) {
          const page = await fhir(app, 'GET', next);
          expect(page.status).to.equal(200);
          seen.push(...page.body.entry.map((e: any) => JSON.stringify(e.resource)));
          const link = page.body.link.find((l: any) => l.relation === 'next')?.url as string | undefined;
          next = link ? link.slice(link.indexOf('/Patient/')) : undefined;
        }
        return seen;
      };
      const current = await everything();
      const columns = await app.casebook.sql.query(
        `SELECT resource_type, practitioner_ids, questionnaire FROM rm_resources WHERE patient_id = $1 AND resource_type <> 'Patient' ORDER BY resource_type, id`,
        [a.id],
      );
      // Written by the projection: the Tasks name their Practitioner, the report its Questionnaire.
      expect(
        columns
          .filter((c) => c.resource_type === 'Task')
          .every((c) => (c.practitioner_ids as number[]).length === 1),
      ).to.equal(true);
      expect(columns.find((c) => c.resource_type === 'QuestionnaireResponse')?.questionnaire).to.equal(
        'https://example.org/Questionnaire/record',
      );
      await app.casebook.sql.query(
        'UPDATE rm_resources SET practitioner_ids = NULL, questionnaire = NULL WHERE patient_id = $1',
        [a.id],
      );
      // Later tests of this file read these rows too: the fallback serves them.
      expect(await everything()).to.deep.equal(current);
    });

    it("the audit export holds exactly the patient's events, in log order, and nothing of the other patient", async () => {
      const events: RecordedEvent[] = [];
      for await (const e of patientEvents(app.casebook.store, 1, a.id)) events.push(e);
      const count = (type: string) => events.filter((e) => e.type === type).length;
      expect(count('PatientRegistered')).to.equal(1);
      expect(count('EncounterRegistered')).to.equal(2);
      expect(count('TaskCreated')).to.equal(2);
      expect(count('QuestionnaireResponseCreated')).to.equal(1);
      expect(count('SessionCreated')).to.equal(2);
      expect(count('SessionHandedOver')).to.equal(2);
      expect(count('LaunchAccepted')).to.equal(2);
      expect(count('ReportExported')).to.equal(1);
      // Audit batches hold only this patient's records: the launches, reads and writes about it.
      const records = events.flatMap((e) => auditEventsIn(e).map((x) => x.resource));
      expect(records.length).to.be.at.least(4);
      for (const r of records) expect(JSON.stringify(r)).to.include(`Patient/${a.id}`);
      // Each launch's AuditEvent was committed with the launch itself.
      const launchCommits = events.filter((e) => e.type === 'LaunchAccepted').map((e) => e.position.commit);
      const launchAudits = events.filter((e) =>
        auditEventsIn(e).some((x) => (x.resource as any).code.coding[0].code === 'launch'),
      );
      expect(launchAudits.map((e) => e.position.commit)).to.deep.equal(launchCommits);
      // In log order.
      const positions = events.map((e) => e.position);
      for (let i = 1; i < positions.length; i++)
        expect(
          positions[i]!.commit > positions[i - 1]!.commit ||
            (positions[i]!.commit === positions[i - 1]!.commit &&
              positions[i]!.prepare > positions[i - 1]!.prepare),
        ).to.equal(true);
      // Nothing of patient B: not its stream, not its launch or session, no AuditEvent about it only.
      const text = JSON.stringify(events, (_key, value) =>
        typeof value === 'bigint' ? String(value) : value,
      );
      expect(events.map((e) => e.streamName)).to.not.include(`Patient-${a.other}`);
      expect(text).to.not.include('PR-B').and.not.include('PR-E3');
      for (const e of events.filter((x) => x.type === 'LaunchAccepted' || x.type === 'SessionCreated'))
        expect((e.data as { patientId: number }).patientId).to.equal(a.id);
      // --since/--until bound by when the events were recorded.
      const none: RecordedEvent[] = [];
      for await (const e of patientEvents(app.casebook.store, 1, a.id, { until: '2000-01-01T00:00:00Z' }))
        none.push(e);
      expect(none).to.deep.equal([]);
      // Another tenant's view of the same patient id is empty.
      const foreign: RecordedEvent[] = [];
      for await (const e of patientEvents(app.casebook.store, 2, a.id)) foreign.push(e);
      expect(foreign).to.deep.equal([]);
    });

    it('replay --until builds the read models as they stood at a position, into a separate schema', async () => {
      const before = (await app.allEvents()).find((e) => e.type === 'QuestionnaireResponseCreated')!;
      const schema = `investigation_${database.name}_${Date.now()}`;
      // Up to the event before the report: the report does not exist there; it does live.
      const all = await app.allEvents({ audit: true });
      const cut = all[all.findIndex((e) => e.id === before.id) - 1]!.position;
      await replayUntil(app.casebook, schema, cut);
      try {
        const rows = await app.casebook.sql.query<{ n: string }>(
          `SELECT count(*)::text AS n FROM ${schema}.rm_resources WHERE resource_type = 'QuestionnaireResponse'`,
        );
        expect(rows[0]!.n).to.equal('0');
        const tasks = await app.casebook.sql.query<{ n: string }>(
          `SELECT count(*)::text AS n FROM ${schema}.rm_resources WHERE resource_type = 'Task'`,
        );
        expect(Number(tasks[0]!.n)).to.equal(3);
        const live = await app.casebook.sql.query<{ n: string }>(
          `SELECT count(*)::text AS n FROM rm_resources WHERE resource_type = 'QuestionnaireResponse'`,
        );
        expect(live[0]!.n).to.equal('1');
        // The live store still works after the investigation.
        expect((await fhir(app, 'GET', `/Patient/${a.id}`)).status).to.equal(200);
      } finally {
        // The investigation schema sits beside the test's own on the server: not left behind.
        await app.casebook.sql.exec(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      }
    });
  });
}
