/**
 * Creating a session reads the log once for everything its context lookups start from (the
 * tenant, the resources named by id, the reservations of fhirContext identifiers) and once more
 * for the resource a reservation names — not once per lookup (src/commands/sessions.ts
 * `openSession`). On PGlite and on a real Postgres server.
 */
import { expect } from 'chai';
import { GENERAL, seed, startTestApp, type TestApp } from '../support/app.js';
import { type TestDatabase, testDatabases } from '../support/databases.js';
import { recordingSql } from '../support/sql.js';

const ROLE_NEW = 'https://casebook.example/fhir/role/new';
const ROLE_FIND = 'https://casebook.example/fhir/role/find';
/** A read of whole streams from the log (readStream, readStreams). */
const isStreamRead = (text: string) => /FROM es_events\s+WHERE stream_name/.test(text);

for (const database of testDatabases) {
  describe(`session creation's reads of the log on ${database.name}`, () => {
    const statements: string[] = [];
    let app: TestApp;

    before(async () => {
      const recorded: TestDatabase = {
        name: database.name,
        open: async () => {
          const opened = await database.open();
          return { ...opened, sql: recordingSql(statements)(opened.sql) };
        },
      };
      app = await startTestApp(recorded);
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
  });
}
