/**
 * The audit trail over HTTP (issue 14; docs/architecture.md "Audit trail"): one AuditEvent per
 * access, denials included, in the log before the answer; searchable by patient, entity, agent,
 * date, action and outcome, with paging; readable only by API clients with AuditEvent scopes; no
 * patient data beyond references. On PGlite and on a real Postgres server.
 */
import { expect } from 'chai';
import { registerClient } from '../../src/commands/tenants.js';
import { loadConfig } from '../../src/config.js';
import { auditEventsIn } from '../../src/fhir/audit-event.js';
import { basic, GENERAL, seed, startTestApp, type TestApp } from '../support/app.js';
import { testDatabases } from '../support/databases.js';
import { fhir, ROLE_NEW, sessionCookie } from '../support/fhir.js';

const AUDITOR = basic('auditor', 'auditor-secret-0123456789');
const PATIENTS_ONLY = basic('patients-only', 'patients-secret-0123456789');

for (const database of testDatabases) {
  describe(`audit trail on ${database.name}`, function () {
    this.timeout(60_000);
    let app: TestApp;
    let seq = 0;
    const unique = (prefix: string) => `${prefix}-${++seq}-${Math.random().toString(36).slice(2, 8)}`;

    before(async () => {
      app = await startTestApp(database);
      await seed(app);
      const ctx = app.casebook.context({ tenantId: 1, actor: { type: 'system', id: 'test' } });
      await registerClient(ctx, {
        clientId: 'auditor',
        tenantId: 1,
        secret: 'auditor-secret-0123456789',
        scopes: ['system/AuditEvent.rs'],
        projects: [],
      });
      await registerClient(ctx, {
        clientId: 'patients-only',
        tenantId: 1,
        secret: 'patients-secret-0123456789',
        scopes: ['system/Patient.rs'],
        projects: [],
      });
    });
    after(() => app?.close());

    const newPatient = async (value = unique('mrn')) => {
      const res = await fhir(app, 'POST', '/Patient', {
        body: {
          resourceType: 'Patient',
          identifier: [{ system: 'urn:audit:mrn', value }],
          name: [{ family: 'Secret' }],
        },
      });
      expect(res.status).to.equal(201);
      return { id: res.body.id as string, value };
    };

    /** The AuditEvents written to the log since `count` events. */
    const auditEventsSince = async (count: number) =>
      (await app.allEvents({ audit: true }))
        .slice(count)
        .flatMap((e) => auditEventsIn(e).map((a) => a.resource as any));

    const search = (query: string, auth = AUDITOR) => fhir(app, 'GET', `/AuditEvent?${query}`, { auth });

    it('records exactly one AuditEvent for a GET of a Patient: the client, the Patient, read, success', async () => {
      const patient = await newPatient();
      const before = (await app.allEvents({ audit: true })).length;
      const res = await fhir(app, 'GET', `/Patient/${patient.id}`, {
        headers: { 'X-Request-Id': 'req-audit-1' },
      });
      expect(res.status).to.equal(200);
      // In the log already when the answer arrived: durable before the response.
      const [event, ...more] = await auditEventsSince(before);
      expect(more).to.deep.equal([]);
      expect(event).to.deep.include({ resourceType: 'AuditEvent', action: 'R', severity: 'informational' });
      expect(event.code.coding[0]).to.deep.equal({
        system: 'http://hl7.org/fhir/restful-interaction',
        code: 'read',
      });
      expect(event.outcome.code.code).to.equal('0');
      expect(event.patient).to.deep.equal({ reference: `Patient/${patient.id}` });
      expect(event.entity).to.deep.equal([{ what: { reference: `Patient/${patient.id}` } }]);
      expect(event.agent[0].who.identifier).to.deep.equal({
        system: 'https://casebook.dev/fhir/NamingSystem/api-client',
        value: 'ehr-backend',
      });
      expect(event.agent[0].networkString).to.equal('127.0.0.1');
      expect(event.extension).to.deep.equal([
        { url: 'https://casebook.dev/fhir/StructureDefinition/request-id', valueString: 'req-audit-1' },
      ]);
      // References only: nothing of the Patient's content.
      expect(JSON.stringify(event)).to.not.include(patient.value).and.not.include('Secret');
    });

    it('records a refused read (403) with a failure outcome, the session and its Practitioner', async () => {
      const own = await newPatient();
      const other = await newPatient();
      const { cookie, session } = await sessionCookie(app, {
        scope: 'patient/*.rs',
        patient: Number(own.id),
        fhirContext: [
          {
            type: 'Practitioner',
            identifier: { system: 'urn:audit:staff', value: unique('dr') },
            role: ROLE_NEW,
          },
        ],
      });
      const before = (await app.allEvents({ audit: true })).length;
      const res = await fhir(app, 'GET', `/Patient/${other.id}`, { auth: cookie });
      expect(res.status).to.equal(403);
      const [event, ...more] = await auditEventsSince(before);
      expect(more).to.deep.equal([]);
      expect(event.outcome.code.code).to.equal('4');
      expect(event.outcome.detail).to.deep.equal([{ text: '403 Forbidden' }]);
      expect(event.severity).to.equal('warning');
      expect(event.entity).to.deep.equal([{ what: { reference: `Patient/${other.id}` } }]);
      const who = event.agent.map(
        (a: any) => a.who.reference ?? `${a.who.identifier.system}|${a.who.identifier.value}`,
      );
      expect(who).to.deep.equal([
        session.user.reference,
        `https://casebook.dev/fhir/NamingSystem/session|${session.id}`,
      ]);
    });

    it("appends the AuditEvent of a write, and of a session's creation, handover and end, in the same transaction", async () => {
      const before = (await app.allEvents({ audit: true })).length;
      const patient = await newPatient();
      const { session } = await sessionCookie(app, {
        fhirContext: [
          {
            type: 'Practitioner',
            identifier: { system: 'urn:audit:staff', value: unique('dr') },
            role: ROLE_NEW,
          },
        ],
      });
      const bundle = await fhir(app, 'POST', '/', {
        body: {
          resourceType: 'Bundle',
          type: 'transaction',
          entry: [
            {
              resource: {
                resourceType: 'Patient',
                identifier: [{ system: 'urn:audit:mrn', value: unique('tx') }],
              },
              request: { method: 'POST', url: 'Patient' },
            },
          ],
        },
      });
      expect(bundle.status).to.equal(200);
      const ended = await fetch(`${app.authUrl}/sessions/${session.id}`, {
        method: 'DELETE',
        headers: { authorization: GENERAL },
      });
      expect(ended.status).to.equal(204);
      const events = (await app.allEvents({ audit: true })).slice(before);
      const commitOf = (type: string) => events.find((e) => e.type === type)!.position.commit;
      const audits = events.filter((e) => e.type === 'AuditEventsRecorded');
      const auditOf = (code: string) =>
        audits.find((e) => auditEventsIn(e).some((a) => (a.resource as any).code.coding[0].code === code))!;
      // Each its own one-record batch, committed with the events it records.
      expect(auditOf('create').position.commit).to.equal(commitOf('PatientRegistered'));
      expect(
        auditEventsIn(auditOf('create')).map((a) => (a.resource as any).entity[0].what.reference),
      ).to.deep.equal([`Patient/${patient.id}`]);
      expect(auditOf('session-create').position.commit).to.equal(commitOf('SessionCreated'));
      expect(auditOf('session-handover').position.commit).to.equal(commitOf('SessionHandedOver'));
      expect(auditOf('session-end').position.commit).to.equal(commitOf('SessionEnded'));
      const transactionAudit = auditOf('transaction');
      const txPatient = events.filter((e) => e.type === 'PatientRegistered')[1]!;
      expect(transactionAudit.position.commit).to.equal(txPatient.position.commit);
      expect(
        auditEventsIn(transactionAudit).map((x) => (x.resource as any).entity[0].what.reference),
      ).to.deep.equal([`Patient/${(txPatient.data as { id: number }).id}`]);
      // The handover's agent is the session its token named, in the session's tenant.
      const handover = auditEventsIn(auditOf('session-handover'))[0]!.resource as any;
      expect(JSON.stringify(handover.agent)).to.include(String(session.id));
      expect(auditOf('session-handover').metadata.tenantId).to.equal(1);
      // Exactly one AuditEvent per request: none recorded again by the group commit.
      const codes = audits.flatMap((e) =>
        auditEventsIn(e).map((a) => (a.resource as any).code.coding[0].code),
      );
      expect(codes.filter((c) => c === 'create')).to.have.length(1);
      for (const code of ['session-create', 'session-handover', 'session-end', 'transaction'])
        expect(codes.filter((c) => c === code)).to.have.length(1);
    });

    it('records writes, sessions and their handover, and an unauthenticated attempt', async () => {
      const before = (await app.allEvents({ audit: true })).length;
      const patient = await newPatient();
      await fhir(app, 'PUT', `/Patient/${patient.id}`, {
        body: { resourceType: 'Patient', gender: 'other' },
      });
      await fhir(app, 'DELETE', `/Patient/${patient.id}`);
      const { session } = await sessionCookie(app, {
        fhirContext: [
          {
            type: 'Practitioner',
            identifier: { system: 'urn:audit:staff', value: unique('dr') },
            role: ROLE_NEW,
          },
        ],
      });
      expect((await fhir(app, 'GET', '/Patient', { auth: null })).status).to.equal(401);
      const events = await auditEventsSince(before);
      expect(events.map((e) => [e.code.coding[0].code, e.action, e.outcome.code.code])).to.deep.equal([
        ['create', 'C', '0'],
        ['update', 'U', '0'],
        ['delete', 'D', '0'],
        ['session-create', 'C', '0'],
        ['session-handover', 'U', '0'],
        ['search-type', 'R', '4'],
      ]);
      expect(events[3].entity).to.deep.equal([
        {
          what: {
            identifier: {
              system: 'https://casebook.dev/fhir/NamingSystem/session',
              value: String(session.id),
            },
          },
        },
      ]);
      expect(events[5].agent).to.deep.equal([
        { who: { display: 'unauthenticated' }, requestor: true, networkString: '127.0.0.1' },
      ]);
    });

    it('records operations as executes (E) naming what they read, and history, vread and delete with the patient', async () => {
      const patient = await newPatient();
      const task = await fhir(app, 'POST', '/Task', {
        body: {
          resourceType: 'Task',
          identifier: [{ system: 'urn:audit:task', value: unique('t') }],
          status: 'draft',
          intent: 'order',
          for: { reference: `Patient/${patient.id}` },
        },
      });
      expect(task.status, JSON.stringify(task.body)).to.equal(201);
      const before = (await app.allEvents({ audit: true })).length;
      const populated = await fhir(app, 'POST', '/Questionnaire/$populate', {
        body: {
          resourceType: 'Parameters',
          parameter: [
            {
              name: 'questionnaire',
              resource: {
                resourceType: 'Questionnaire',
                url: 'urn:audit:q',
                status: 'active',
                item: [{ linkId: 'a', type: 'string' }],
              },
            },
            { name: 'subject', valueReference: { reference: `Patient/${patient.id}` } },
            {
              name: 'context',
              part: [
                { name: 'name', valueString: 'patient' },
                { name: 'content', valueReference: { reference: `Patient/${patient.id}` } },
              ],
            },
          ],
        },
      });
      expect(populated.status, JSON.stringify(populated.body)).to.equal(200);
      expect((await fhir(app, 'GET', `/Task/${task.body.id}/_history`)).status).to.equal(200);
      expect((await fhir(app, 'GET', `/Task/${task.body.id}/_history/1`)).status).to.equal(200);
      expect((await fhir(app, 'DELETE', `/Task/${task.body.id}`)).status).to.equal(204);
      const events = await auditEventsSince(before);
      expect(events.map((e) => [e.action, e.code.coding[0].code])).to.deep.equal([
        ['E', 'operation'],
        ['R', 'history-instance'],
        ['R', 'vread'],
        ['D', 'delete'],
      ]);
      expect(events[0].entity).to.deep.equal([{ what: { reference: `Patient/${patient.id}` } }]);
      for (const e of events)
        expect(e.patient, e.code.coding[0].code).to.deep.equal({ reference: `Patient/${patient.id}` });
      for (const e of events.slice(1))
        expect(e.entity).to.deep.equal([
          {
            what: { reference: `Task/${task.body.id}` },
            detail: [{ type: { text: 'patient' }, valueString: `Patient/${patient.id}` }],
          },
        ]);
      // Found by the patient, whatever the action.
      await app.casebook.runner.waitForDeferred('audit-events');
      const found = await search(`patient=Patient/${patient.id}&action=D`);
      expect(found.status).to.equal(200);
      expect(found.body.entry.map((e: any) => e.resource.entity[0].what.reference)).to.deep.equal([
        `Task/${task.body.id}`,
      ]);
    });

    it("records a wrong secret for a known client under that client's tenant, where its auditors find it", async () => {
      const patient = await newPatient();
      const wrong = basic('patients-only', 'not-the-secret-0123456789');
      expect((await fhir(app, 'GET', `/Patient/${patient.id}`, { auth: wrong })).status).to.equal(401);
      const found = await search(`agent=patients-only&outcome=4&entity=Patient/${patient.id}`);
      expect(found.status).to.equal(200);
      expect(found.body.total).to.equal(1);
      const event = found.body.entry[0].resource;
      expect(event.action).to.equal('R');
      expect(event.outcome.detail).to.deep.equal([{ text: '401 Unauthorized' }]);
      // An unknown client_id names no tenant: nothing shows in this tenant's trail.
      const unknown = basic('nobody-at-all', 'whatever-0123456789');
      expect((await fhir(app, 'GET', `/Patient/${patient.id}`, { auth: unknown })).status).to.equal(401);
      expect((await search(`entity=Patient/${patient.id}&outcome=4`)).body.total).to.equal(1);
    });

    it('searches by patient, entity, agent, date, action and outcome, newest first, with paging', async () => {
      const patient = await newPatient();
      for (let i = 0; i < 3; i++) await fhir(app, 'GET', `/Patient/${patient.id}`);
      await fhir(app, 'GET', `/Patient/${patient.id}`, { auth: PATIENTS_ONLY });
      await fhir(app, 'DELETE', `/Patient/${patient.id}`, { auth: PATIENTS_ONLY });

      const byPatient = await search(`patient=Patient/${patient.id}`);
      expect(byPatient.status).to.equal(200);
      expect(byPatient.body).to.deep.include({ resourceType: 'Bundle', type: 'searchset', total: 6 });
      const recorded = byPatient.body.entry.map((e: any) => e.resource.recorded);
      expect([...recorded].sort().reverse()).to.deep.equal(recorded);

      expect((await search(`entity=Patient/${patient.id}`)).body.total).to.equal(6);
      expect((await search(`patient=${patient.id}&agent=patients-only`)).body.total).to.equal(2);
      expect((await search(`patient=${patient.id}&action=R`)).body.total).to.equal(4);
      expect((await search(`patient=${patient.id}&action=C,D`)).body.total).to.equal(2);
      expect((await search(`patient=${patient.id}&outcome=4`)).body.total).to.equal(1);
      const today = app.casebook.clock().toISOString().slice(0, 10);
      expect((await search(`patient=${patient.id}&date=ge${today}&date=le${today}`)).body.total).to.equal(6);
      expect((await search(`patient=${patient.id}&date=lt${today}`)).body.total).to.equal(0);

      // Paging: two pages of 4 and 2, each AuditEvent once, stable while more are recorded.
      const first = await search(`patient=${patient.id}&_count=4`);
      expect(first.body.entry).to.have.length(4);
      const next = first.body.link.find((l: any) => l.relation === 'next').url as string;
      await fhir(app, 'GET', `/Patient/${patient.id}`);
      const second = await fhir(app, 'GET', next.slice(next.indexOf('/AuditEvent')), { auth: AUDITOR });
      expect(second.body.entry).to.have.length(2);
      expect(second.body.link.some((l: any) => l.relation === 'next')).to.equal(false);
      const ids = [...first.body.entry, ...second.body.entry].map((e: any) => e.resource.id);
      expect(new Set(ids).size).to.equal(6);
      const one = await fhir(app, 'GET', `/AuditEvent/${ids[0]}`, { auth: AUDITOR });
      expect(one.status).to.equal(200);
      expect(one.body.id).to.equal(ids[0]);
    });

    it('pages newest first in numeric order across a power of ten of the view (999 → 1000)', async () => {
      const patient = await newPatient();
      // The view numbers its rows (`seq`); put the next ones just below a power of ten.
      const [{ max }] = (await app.casebook.sql.query<{ max: string }>(
        `SELECT coalesce(max(seq), 0)::text AS max FROM rm_audit_events`,
      )) as [{ max: string }];
      const below = 10 ** String(Number(max) + 10).length - 6;
      await app.casebook.sql.query(`SELECT setval(pg_get_serial_sequence('rm_audit_events', 'seq'), $1)`, [
        below,
      ]);
      const before = (await app.allEvents({ audit: true })).length;
      for (let i = 0; i < 12; i++)
        expect((await fhir(app, 'GET', `/Patient/${patient.id}`)).status).to.equal(200);
      const recorded = (await auditEventsSince(before)).map((a) => a.id as string);
      expect(recorded).to.have.length(12);
      const ids: string[] = [];
      let page = await search(`patient=${patient.id}&action=R&_count=5`);
      for (;;) {
        expect(page.status).to.equal(200);
        expect(page.body.total).to.equal(12);
        ids.push(...page.body.entry.map((e: any) => e.resource.id as string));
        const next = page.body.link.find((l: any) => l.relation === 'next')?.url as string | undefined;
        if (!next) break;
        page = await fhir(app, 'GET', next.slice(next.indexOf('/AuditEvent')), { auth: AUDITOR });
      }
      expect(ids, 'each record once, the newest first').to.deep.equal([...recorded].reverse());
    });

    it('lets only clients with AuditEvent scopes read the audit trail, never a session', async () => {
      expect((await search('action=R')).status).to.equal(200);
      // system/*.* covers AuditEvent for an API client.
      expect((await search('action=R', GENERAL)).status).to.equal(200);
      const refused = await search('action=R', PATIENTS_ONLY);
      expect(refused.status).to.equal(403);
      expect(refused.body.issue[0].code).to.equal('forbidden');
      const { cookie } = await sessionCookie(app, {
        scope: 'user/*.* patient/*.*',
        fhirContext: [
          {
            type: 'Practitioner',
            identifier: { system: 'urn:audit:staff', value: unique('dr') },
            role: ROLE_NEW,
          },
        ],
      });
      expect((await search('action=R', cookie as never)).status).to.equal(403);
      expect(
        (await fhir(app, 'POST', '/AuditEvent', { body: { resourceType: 'AuditEvent' }, auth: AUDITOR }))
          .status,
      ).to.equal(405);
      expect((await search('name=x')).status).to.equal(400);
    });

    it('answers 503 and no data when the AuditEvent cannot be written', async () => {
      const patient = await newPatient();
      // A read model this process does not know runs live (a newer version): the store refuses
      // every append, the audit record included.
      await app.casebook.sql.query(`INSERT INTO projection_state (name, status) VALUES ('audit-v9', 'live')`);
      try {
        const res = await fhir(app, 'GET', `/Patient/${patient.id}`);
        expect(res.status).to.equal(503);
        expect(JSON.stringify(res.body)).to.not.include(patient.value);
      } finally {
        await app.casebook.sql.query(`DELETE FROM projection_state WHERE name = 'audit-v9'`);
      }
    });

    it('keeps answering, and recording AuditEvents in the log, while the AuditEvent search view is stopped', async () => {
      const patient = await newPatient();
      await app.casebook.sql.query(
        `UPDATE projection_state SET status = 'stopped' WHERE name = 'audit-events'`,
      );
      try {
        const before = (await app.allEvents({ audit: true })).length;
        const res = await fhir(app, 'GET', `/Patient/${patient.id}`);
        expect(res.status).to.equal(200);
        expect(await auditEventsSince(before)).to.have.length(1);
        expect((await fetch(`${app.baseUrl}/readyz`)).status).to.equal(503);
      } finally {
        await app.casebook.sql.query(
          `UPDATE projection_state SET status = 'live' WHERE name = 'audit-events'`,
        );
      }
    });
  });
}

describe('AUDIT_READS=false', () => {
  it('is refused unless casebook listens on a loopback address, and turns off only the records of reads', () => {
    expect(() => loadConfig({ DATA_DIR: 'memory://', HOST: '0.0.0.0', AUDIT_READS: 'false' })).to.throw(
      /AUDIT_READS=false is only accepted when casebook listens on a loopback address/,
    );
    expect(
      loadConfig({ DATA_DIR: 'memory://', HOST: '127.0.0.1', AUDIT_READS: 'false' }).auditReads,
    ).to.equal(false);
    expect(loadConfig({ DATA_DIR: 'memory://', HOST: '0.0.0.0' }).auditReads).to.equal(true);
  });
});
