/**
 * Commands that look several things up read the log in one go, not once per lookup: creating a
 * session reads once for everything its context lookups start from (the tenant, the resources
 * named by id, the reservations of fhirContext identifiers) and once more for the resource a
 * reservation names (src/commands/sessions.ts `openSession`); a transaction Bundle reads the
 * reservations of all its conditional entries' identifiers at once, then the resources they name
 * (src/commands/transaction.ts, `prefetchMatches`). On PGlite and on a real Postgres server.
 */
import { randomUUID } from 'node:crypto';
import { expect } from 'chai';
import { GENERAL, seed, startTestApp, type TestApp } from '../support/app.js';
import { recordingDatabase, testDatabases } from '../support/databases.js';

const ROLE_NEW = 'https://casebook.example/fhir/role/new';
const ROLE_FIND = 'https://casebook.example/fhir/role/find';
/** A read of whole streams from the log (readStream, readStreams). */
const isStreamRead = (text: string) => /FROM es_events\s+WHERE stream_name/.test(text);

for (const database of testDatabases) {
  describe(`reads of the log by commands on ${database.name}`, () => {
    const statements: string[] = [];
    let app: TestApp;

    before(async () => {
      app = await startTestApp(recordingDatabase(database, statements));
      await seed(app);
    });
    after(() => app?.close());

    const createSession = async (body: unknown) => {
      const res = await fetch(`${app.authUrl}/sessions`, {
        method: 'POST',
        headers: { Authorization: GENERAL, 'Content-Type': 'application/json' },
        body: JSON.stringify(body),
      });
      const json = (await res.json()) as Record<string, any>;
      expect(res.status, JSON.stringify(json)).to.equal(201);
      return json;
    };

    it('reads the tenant, the user and the reservation of a patient found by identifier in one read', async () => {
      const mrn = `mrn-${Math.random().toString(36).slice(2, 10)}`;
      const first = await createSession({
        fhirContext: [
          { type: 'Practitioner', identifier: { system: 'urn:test:dr', value: `dr-${mrn}` }, role: ROLE_NEW },
          { type: 'Patient', identifier: { system: 'urn:test:patient', value: mrn }, role: ROLE_NEW },
        ],
      });
      const user = Number(String(first.user.reference).split('/')[1]);
      statements.length = 0;
      const second = await createSession({
        user,
        fhirContext: [
          { type: 'Patient', identifier: { system: 'urn:test:patient', value: mrn }, role: ROLE_FIND },
        ],
      });
      expect(second.patient).to.deep.equal(first.patient);
      expect(second.user).to.deep.equal(first.user);
      // One read for the tenant, Practitioner/<user> and the identifier's reservation; one for the
      // Patient the reservation names. (One per lookup was four.)
      expect(statements.filter(isStreamRead)).to.have.length(2);
    });

    /** POST {fhir_base_url} (the FHIR JSON checks of the fhir() helper are other suites' concern). */
    const postBundle = async (bundle: unknown) => {
      const res = await fetch(`${app.casebook.config.fhirUrl.replace('localhost', '127.0.0.1')}/`, {
        method: 'POST',
        headers: { Authorization: GENERAL, 'Content-Type': 'application/fhir+json' },
        body: JSON.stringify(bundle),
      });
      return { status: res.status, body: (await res.json()) as Record<string, any> };
    };

    it('reads the conditional entries of a transaction Bundle in two reads, not two per entry', async () => {
      const run = Math.random().toString(36).slice(2, 10);
      const token = (system: string, value: string) =>
        `identifier=${encodeURIComponent(`${system}|${value}`)}`;
      const [patient, encounter, practitioner] = [randomUUID(), randomUUID(), randomUUID()].map(
        (u) => `urn:uuid:${u}`,
      );
      const bundle = {
        resourceType: 'Bundle',
        type: 'transaction',
        entry: [
          {
            fullUrl: patient,
            resource: { resourceType: 'Patient', identifier: [{ system: 'urn:test:mrn', value: run }] },
            request: { method: 'PUT', url: `Patient?${token('urn:test:mrn', run)}` },
          },
          {
            fullUrl: encounter,
            resource: {
              resourceType: 'Encounter',
              identifier: [{ system: 'urn:test:visit', value: run }],
              status: 'in-progress',
              subject: { reference: patient },
            },
            request: { method: 'PUT', url: `Encounter?${token('urn:test:visit', run)}` },
          },
          {
            fullUrl: practitioner,
            resource: {
              resourceType: 'Practitioner',
              identifier: [{ system: 'urn:test:staff', value: run }],
            },
            request: { method: 'PUT', url: `Practitioner?${token('urn:test:staff', run)}` },
          },
          {
            resource: {
              resourceType: 'Task',
              identifier: [{ system: 'urn:test:task', value: run }],
              status: 'draft',
              intent: 'order',
              for: { reference: patient },
              encounter: { reference: encounter },
              owner: { reference: practitioner },
            },
            request: { method: 'POST', url: 'Task', ifNoneExist: token('urn:test:task', run) },
          },
        ],
      };
      statements.length = 0;
      const first = await postBundle(bundle);
      expect(first.status, JSON.stringify(first.body)).to.equal(200);
      // Nothing holds these identifiers yet: one read of the four reservations, then creates.
      expect(statements.filter(isStreamRead)).to.have.length(1);
      statements.length = 0;
      const again = await postBundle(bundle);
      expect(again.status, JSON.stringify(again.body)).to.equal(200);
      const statuses = (again.body as { entry: { response: { status: string } }[] }).entry.map(
        (e) => e.response.status,
      );
      expect(statuses).to.deep.equal(['200 OK', '200 OK', '200 OK', '200 OK']);
      // The four reservations in one read, the four resources they name in another (eight before).
      expect(statements.filter(isStreamRead)).to.have.length(2);
    });
  });
}
