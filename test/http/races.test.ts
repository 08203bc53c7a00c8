/**
 * Convergence under concurrency (issue 11): N concurrent requests for one new identifier give one
 * resource and N successes — never a 409 "changed concurrently" or a 5xx — on both SQL stores:
 * a conditional PUT, a transaction with ifNoneExist, a session with fhirContext role new, and a
 * launch of one new encounter.
 */
import { expect } from 'chai';
import { seed, startTestApp, type TestApp } from '../support/app.js';
import { testDatabases } from '../support/databases.js';
import { fhir, ROLE_NEW } from '../support/fhir.js';
import { launchUrlOf, TEST_LAUNCH_SECRET } from '../support/launch.js';

const N = 50;
const LAUNCHER_ENV = {
  LAUNCHER_CLIENT_ID: 'ehr-backend',
  LAUNCHER_CLIENT_SECRET: 'general-secret-0123456789',
  LAUNCHER_SHARED_SECRET: TEST_LAUNCH_SECRET,
};

const statusesOf = (statuses: readonly number[]) => {
  const counts: Record<number, number> = {};
  for (const s of statuses) counts[s] = (counts[s] ?? 0) + 1;
  return counts;
};

for (const database of testDatabases) {
  describe(`races on ${database.name}`, function () {
    this.timeout(120_000);
    let app: TestApp;
    let seq = 0;
    const unique = (prefix: string) => `${prefix}-${++seq}-${Math.random().toString(36).slice(2, 8)}`;

    before(async () => {
      app = await startTestApp(database, { env: LAUNCHER_ENV });
      await seed(app);
    });
    after(() => app?.close());

    const idsWithIdentifier = async (type: string, system: string, value: string) => {
      const res = await fhir(app, 'GET', `/${type}?identifier=${encodeURIComponent(`${system}|${value}`)}`);
      expect(res.status).to.equal(200);
      return (res.body.entry ?? []).map((e: any) => e.resource.id);
    };

    it(`${N} concurrent conditional PUTs of one new identifier give one Patient and ${N} × 200`, async () => {
      const value = unique('mrn');
      const responses = await Promise.all(
        Array.from({ length: N }, (_, i) =>
          fhir(app, 'PUT', `/Patient?identifier=${encodeURIComponent(`urn:race:mrn|${value}`)}`, {
            body: {
              resourceType: 'Patient',
              identifier: [{ system: 'urn:race:mrn', value }],
              gender: 'female',
              birthDate: `19${50 + (i % 2)}-01-01`,
            },
          }),
        ),
      );
      expect(statusesOf(responses.map((r) => r.status))).to.deep.equal({ 200: N });
      const ids = new Set(responses.map((r) => r.body.id));
      expect(ids.size).to.equal(1);
      expect(await idsWithIdentifier('Patient', 'urn:race:mrn', value)).to.deep.equal([...ids]);
      const registered = (await app.allEvents()).filter(
        (e) => e.type === 'PatientRegistered' && JSON.stringify(e.data).includes(value),
      );
      expect(registered).to.have.length(1);
    });

    it(`${N} concurrent transactions with ifNoneExist give one Task and ${N} × 200`, async () => {
      const patient = await fhir(app, 'POST', '/Patient', {
        body: { resourceType: 'Patient', identifier: [{ system: 'urn:race:mrn', value: unique('p') }] },
      });
      const value = unique('task');
      const bundle = {
        resourceType: 'Bundle',
        type: 'transaction',
        entry: [
          {
            fullUrl: 'urn:uuid:6a1c2f40-0000-4000-8000-000000000001',
            resource: {
              resourceType: 'Task',
              identifier: [{ system: 'urn:race:task', value }],
              status: 'draft',
              intent: 'order',
              for: { reference: `Patient/${patient.body.id}` },
            },
            request: {
              method: 'POST',
              url: 'Task',
              ifNoneExist: `identifier=${encodeURIComponent(`urn:race:task|${value}`)}`,
            },
          },
        ],
      };
      const responses = await Promise.all(
        Array.from({ length: N }, () => fhir(app, 'POST', '/', { body: bundle })),
      );
      expect(statusesOf(responses.map((r) => r.status))).to.deep.equal({ 200: N });
      const entryStatuses = responses.map((r) => r.body.entry[0].response.status);
      expect(statusesOf(entryStatuses.map((s: string) => Number(s.slice(0, 3))))).to.deep.equal({
        201: 1,
        200: N - 1,
      });
      const locations = new Set(
        responses.map((r) => r.body.entry[0].response.location.split('/_history')[0]),
      );
      expect(locations.size).to.equal(1);
      expect(await idsWithIdentifier('Task', 'urn:race:task', value)).to.have.length(1);
    });

    it(`${N} concurrent sessions with one new Patient (role new) give one Patient and ${N} sessions`, async () => {
      const value = unique('mrn');
      const staff = unique('dr');
      const responses = await Promise.all(
        Array.from({ length: N }, () =>
          fetch(`${app.authUrl}/sessions`, {
            method: 'POST',
            headers: {
              Authorization: `Basic ${Buffer.from('ehr-backend:general-secret-0123456789').toString('base64')}`,
              'Content-Type': 'application/json',
            },
            body: JSON.stringify({
              fhirContext: [
                {
                  type: 'Practitioner',
                  identifier: { system: 'urn:race:staff', value: staff },
                  role: ROLE_NEW,
                },
                { type: 'Patient', identifier: { system: 'urn:race:mrn', value }, role: ROLE_NEW },
              ],
            }),
          }).then(async (r) => ({ status: r.status, body: (await r.json()) as any })),
        ),
      );
      expect(statusesOf(responses.map((r) => r.status))).to.deep.equal({ 201: N });
      expect(new Set(responses.map((r) => r.body.id)).size).to.equal(N);
      expect(new Set(responses.map((r) => r.body.patient.reference)).size).to.equal(1);
      expect(new Set(responses.map((r) => r.body.user.reference)).size).to.equal(1);
      expect(await idsWithIdentifier('Patient', 'urn:race:mrn', value)).to.have.length(1);
    });

    it(`${N} concurrent launches of one new encounter give one Patient, Encounter and Task, and ${N} sessions`, async () => {
      const patient = unique('P');
      const encounter = unique('E');
      const responses = await Promise.all(
        Array.from({ length: N }, () =>
          fetch(launchUrlOf(app, { patient, encounter, user: 'dr-race' }), { redirect: 'manual' }).then(
            async (r) => ({
              status: r.status,
              location: r.headers.get('location'),
              text: r.status === 303 ? '' : await r.text(),
            }),
          ),
        ),
      );
      expect(
        statusesOf(responses.map((r) => r.status)),
        responses.find((r) => r.status !== 303)?.text,
      ).to.deep.equal({
        303: N,
      });
      const tasks = new Set(
        responses.map((r) => new URL(r.location!).searchParams.get('next')!.replace(/^.*task=Task\//, '')),
      );
      expect(tasks.size).to.equal(1);
      const { launcher } = app.casebook.config;
      expect(await idsWithIdentifier('Patient', launcher.patientSystem, patient)).to.have.length(1);
      expect(await idsWithIdentifier('Encounter', launcher.encounterSystem, encounter)).to.have.length(1);
      expect(await idsWithIdentifier('Task', launcher.taskSystem, encounter)).to.deep.equal([...tasks]);
      const sessions = (await app.allEvents()).filter((e) => e.type === 'SessionCreated');
      expect(sessions.length).to.be.at.least(N);
    });
  });
}
