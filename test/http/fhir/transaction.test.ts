/**
 * The transaction Bundle, POST {fhir_base_url} (issue 3; spec §1.6 launcher): conditional updates
 * of Patient/Encounter/Practitioner plus a Task create with ifNoneExist, urn:uuid references, a
 * transaction-response Bundle, all-or-nothing on the SQL stores, scopes checked per entry.
 */
import { randomUUID } from 'node:crypto';
import { expect } from 'chai';
import type { Seed } from '../../../src/commands/seed.js';
import { basic, GENERAL, MANAGED, seed, startTestApp, type TestApp } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import { type Credentials, expectOutcome, fhir } from '../../support/fhir.js';

const MRN = 'urn:test:mrn';
const VISIT = 'urn:test:visit';
const STAFF = 'urn:test:staff';
const TASK = 'urn:test:launch-task';

const NARROW_SEED: Seed = {
  tenants: [
    {
      name: 'General Hospital',
      ehr_managed: false,
      allowed_scopes: ['patient/*.*', 'user/*.*'],
      redirect_origins: ['https://ehr.example.org'],
      clients: [
        {
          // Context resources only: no Task access at all.
          client_id: 'context-only',
          client_secret: 'context-only-secret-0123456789',
          scopes: ['system/Patient.* system/Encounter.* system/Practitioner.*'],
          projects: [],
        },
        {
          // May create Tasks but not read them.
          client_id: 'task-writer',
          client_secret: 'task-writer-secret-0123456789',
          scopes: ['system/Task.c'],
          projects: [],
        },
      ],
      questionnaires: [],
    },
  ],
};
const CONTEXT_ONLY = basic('context-only', 'context-only-secret-0123456789');
const TASK_WRITER = basic('task-writer', 'task-writer-secret-0123456789');

interface LaunchIds {
  readonly mrn: string;
  readonly visit: string;
  readonly staff: string;
  readonly task: string;
}

const urn = () => `urn:uuid:${randomUUID()}`;
const token = (system: string, value: string) => `identifier=${encodeURIComponent(`${system}|${value}`)}`;

/** The bundle a launcher sends: conditional PUT Patient, Encounter, Practitioner; POST Task (ifNoneExist). */
const launcherBundle = (ids: LaunchIds, options: { family?: string; taskFirst?: boolean } = {}) => {
  const patient = urn();
  const encounter = urn();
  const practitioner = urn();
  const context = [
    {
      fullUrl: patient,
      resource: {
        resourceType: 'Patient',
        identifier: [{ system: MRN, value: ids.mrn }],
        name: [{ family: options.family ?? 'Doe', given: ['Jane'] }],
        birthDate: '1970-01-02',
        gender: 'female',
      },
      request: { method: 'PUT', url: `Patient?${token(MRN, ids.mrn)}` },
    },
    {
      fullUrl: encounter,
      resource: {
        resourceType: 'Encounter',
        identifier: [{ system: VISIT, value: ids.visit }],
        status: 'in-progress',
        subject: { reference: patient },
      },
      request: { method: 'PUT', url: `Encounter?${token(VISIT, ids.visit)}` },
    },
    {
      fullUrl: practitioner,
      resource: {
        resourceType: 'Practitioner',
        identifier: [{ system: STAFF, value: ids.staff }],
        name: [{ family: 'House' }],
      },
      request: { method: 'PUT', url: `Practitioner?${token(STAFF, ids.staff)}` },
    },
  ];
  const task = {
    fullUrl: urn(),
    resource: {
      resourceType: 'Task',
      identifier: [{ system: TASK, value: ids.task }],
      status: 'draft',
      intent: 'order',
      for: { reference: patient },
      encounter: { reference: encounter },
      owner: { reference: practitioner },
      input: [
        {
          type: { coding: [{ code: 'post-submit-redirect' }] },
          valueUrl: 'https://ehr.example.org/export?case=1',
        },
      ],
    },
    request: { method: 'POST', url: 'Task', ifNoneExist: token(TASK, ids.task) },
  };
  return {
    resourceType: 'Bundle',
    type: 'transaction',
    entry: options.taskFirst ? [task, ...context] : [...context, task],
  };
};

for (const database of testDatabases) {
  describe(`transaction Bundle on ${database.name}`, () => {
    let app: TestApp;
    let seq = 0;
    const unique = (prefix: string) => `${prefix}-${++seq}-${Math.random().toString(36).slice(2, 8)}`;
    const newIds = (): LaunchIds => ({
      mrn: unique('mrn'),
      visit: unique('visit'),
      staff: unique('staff'),
      task: unique('task'),
    });

    before(async () => {
      app = await startTestApp(database);
      await seed(app);
      await seed(app, NARROW_SEED);
    });
    after(() => app?.close());

    const eventCount = async () => (await app.allEvents()).length;
    const rowCount = async () =>
      Number(
        (await app.casebook.sql.query<{ n: number }>('SELECT count(*)::int AS n FROM rm_resources'))[0]!.n,
      );
    const post = (body: unknown, auth: Credentials = GENERAL, headers: Record<string, string> = {}) =>
      fhir(app, 'POST', '/', { body, auth, headers });
    const idOf = (location: string) => location.split('/')[1]!;
    const search = async (type: string, system: string, value: string, auth: Credentials = GENERAL) => {
      const res = await fhir(app, 'GET', `/${type}?${token(system, value)}`, { auth });
      expect(res.status, JSON.stringify(res.body)).to.equal(200);
      return res.body;
    };

    /** Asserts that `request` writes no event and no read-model row; returns its response. */
    const expectNothingWritten = async <T>(request: () => Promise<T>): Promise<T> => {
      const events = await eventCount();
      const rows = await rowCount();
      const res = await request();
      expect(await eventCount(), 'events appended').to.equal(events);
      expect(await rowCount(), 'read-model rows').to.equal(rows);
      return res;
    };

    describe('the launcher bundle', () => {
      it('creates Patient, Encounter, Practitioner and Task and answers a transaction-response', async () => {
        const ids = newIds();
        const before = await eventCount();
        const res = await post(launcherBundle(ids), GENERAL, { 'X-Request-Id': 'req-launch-1' });
        expect(res.status, JSON.stringify(res.body)).to.equal(200);
        expect(res.headers.get('content-type')).to.match(/^application\/fhir\+json/);
        expect(res.body.resourceType).to.equal('Bundle');
        expect(res.body.type).to.equal('transaction-response');
        expect(res.body.entry).to.have.length(4);
        const [patient, encounter, practitioner, task] = res.body.entry;
        // spec §4.3 rule 2: a conditional update that creates a Patient still answers 200; every
        // other type answers 201 as FHIR says (docs/interface.md §4.3 rule 12).
        expect(patient.response.status).to.equal('200 OK');
        expect(encounter.response.status).to.equal('201 Created');
        expect(practitioner.response.status).to.equal('201 Created');
        expect(task.response.status).to.equal('201 Created');
        expect(patient.response.location).to.match(/^Patient\/\d+\/_history\/1$/);
        expect(encounter.response.location).to.match(/^Encounter\/\d+\/_history\/1$/);
        expect(practitioner.response.location).to.match(/^Practitioner\/\d+\/_history\/1$/);
        expect(task.response.location).to.match(/^Task\/\d+\/_history\/1$/);
        expect(task.response.etag).to.equal('W/"1"');
        const patientId = idOf(patient.response.location);
        const encounterId = idOf(encounter.response.location);
        const practitionerId = idOf(practitioner.response.location);
        const taskId = idOf(task.response.location);

        // urn:uuid references are rewritten to the created resources.
        expect(encounter.resource.subject).to.deep.equal({ reference: `Patient/${patientId}` });
        expect(task.resource).to.deep.include({
          resourceType: 'Task',
          id: taskId,
          status: 'draft',
          for: { reference: `Patient/${patientId}` },
          encounter: { reference: `Encounter/${encounterId}` },
          owner: { reference: `Practitioner/${practitionerId}` },
        });
        expect(patient.resource).to.deep.include({
          id: patientId,
          birthDate: '1970-01-02',
          gender: 'female',
        });

        // Stored as such.
        const stored = await fhir(app, 'GET', `/Task/${taskId}`);
        expect(stored.status).to.equal(200);
        expect(stored.body.for).to.deep.equal({ reference: `Patient/${patientId}` });
        expect(stored.body.identifier).to.deep.equal([{ system: TASK, value: ids.task }]);
        expect((await fhir(app, 'GET', `/Encounter/${encounterId}`)).body.subject).to.deep.equal({
          reference: `Patient/${patientId}`,
        });
        const byIdentifier = await search('Task', TASK, ids.task);
        expect(byIdentifier.total).to.equal(1);

        const events = (await app.allEvents()).slice(before);
        expect(events.map((e) => e.type)).to.deep.equal([
          'ReservationClaimed',
          'PatientRegistered',
          'ReservationClaimed',
          'EncounterRegistered',
          'ReservationClaimed',
          'PractitionerRegistered',
          'ReservationClaimed',
          'TaskCreated',
        ]);
        for (const event of events)
          expect(event.metadata).to.deep.include({
            tenantId: 1,
            actor: { type: 'client', id: 'ehr-backend' },
            requestId: 'req-launch-1',
          });
      });

      it('reopens the same Task when sent again (200) and creates nothing new', async () => {
        const ids = newIds();
        const first = await post(launcherBundle(ids));
        expect(first.status, JSON.stringify(first.body)).to.equal(200);
        const locations = first.body.entry.map((e: any) => e.response.location.split('/_history')[0]);

        const again = await expectNothingWritten(() => post(launcherBundle(ids)));
        expect(again.status, JSON.stringify(again.body)).to.equal(200);
        expect(again.body.type).to.equal('transaction-response');
        expect(again.body.entry.map((e: any) => e.response.status)).to.deep.equal([
          '200 OK',
          '200 OK',
          '200 OK',
          '200 OK',
        ]);
        expect(again.body.entry.map((e: any) => e.response.location.split('/_history')[0])).to.deep.equal(
          locations,
        );
        // Unchanged resources keep their version.
        expect(again.body.entry.map((e: any) => e.response.location)).to.deep.equal(
          first.body.entry.map((e: any) => e.response.location),
        );
        expect((await search('Task', TASK, ids.task)).total).to.equal(1);
        expect((await search('Patient', MRN, ids.mrn)).total).to.equal(1);
      });

      it('updates changed context resources and still reopens the existing Task', async () => {
        const ids = newIds();
        const first = await post(launcherBundle(ids));
        const before = await eventCount();
        const again = await post(launcherBundle(ids, { family: 'Roe' }));
        expect(again.status, JSON.stringify(again.body)).to.equal(200);
        const [patient, , , task] = again.body.entry;
        expect(patient.response.status).to.equal('200 OK');
        expect(patient.response.location).to.equal(
          first.body.entry[0].response.location.replace('/_history/1', '/_history/2'),
        );
        expect(patient.resource.name).to.deep.equal([{ family: 'Roe', given: ['Jane'] }]);
        expect(task.response.status).to.equal('200 OK');
        expect(task.response.location).to.equal(first.body.entry[3].response.location);
        expect((await app.allEvents()).slice(before).map((e) => e.type)).to.deep.equal(['PatientUpdated']);
      });

      it('runs entries after the entries they reference and answers in request order', async () => {
        const ids = newIds();
        const res = await post(launcherBundle(ids, { taskFirst: true }));
        expect(res.status, JSON.stringify(res.body)).to.equal(200);
        expect(res.body.entry.map((e: any) => e.response.status)).to.deep.equal([
          '201 Created',
          '200 OK',
          '201 Created',
          '201 Created',
        ]);
        expect(res.body.entry.map((e: any) => e.resource.resourceType)).to.deep.equal([
          'Task',
          'Patient',
          'Encounter',
          'Practitioner',
        ]);
        expect(res.body.entry[0].resource.for).to.deep.equal({
          reference: res.body.entry[1].response.location.split('/_history')[0],
        });
      });
    });

    describe('updates by id', () => {
      const putTask = (ref: string, value: string, status: string, ifMatch?: string) => ({
        resourceType: 'Bundle',
        type: 'transaction',
        entry: [
          {
            resource: {
              resourceType: 'Task',
              identifier: [{ system: TASK, value }],
              status,
              intent: 'order',
            },
            request: { method: 'PUT', url: ref, ...(ifMatch !== undefined ? { ifMatch } : {}) },
          },
        ],
      });

      it('changes a Task status (TaskStatusChanged) honouring ifMatch: stale → 412, malformed → 400', async () => {
        const ids = newIds();
        const first = await post(launcherBundle(ids));
        const taskRef = first.body.entry[3].response.location.split('/_history')[0];
        const before = await eventCount();
        const res = await post(putTask(taskRef, ids.task, 'ready', 'W/"1"'));
        expect(res.status, JSON.stringify(res.body)).to.equal(200);
        expect(res.body.entry[0].response).to.deep.include({
          status: '200 OK',
          location: `${taskRef}/_history/2`,
          etag: 'W/"2"',
        });
        const events = (await app.allEvents()).slice(before);
        expect(events.map((e) => e.type)).to.deep.equal(['TaskStatusChanged']);
        expect(events[0]!.data).to.deep.include({ from: 'draft' });

        expectOutcome(
          await expectNothingWritten(() => post(putTask(taskRef, ids.task, 'in-progress', 'W/"1"'))),
          412,
          'conflict',
        );
        expectOutcome(
          await expectNothingWritten(() => post(putTask(taskRef, ids.task, 'in-progress', 'W/"two"'))),
          400,
          'invalid',
        );
      });
    });

    describe('all or nothing', () => {
      it('writes nothing when the last entry fails (409 duplicate Task identifier)', async () => {
        const existing = newIds();
        const first = await post(launcherBundle(existing));
        expect(first.status).to.equal(200);
        const ids = { ...newIds(), task: existing.task };
        const bundle = launcherBundle(ids);
        // Without ifNoneExist the Task create hits the identifier of the existing Task.
        const { ifNoneExist: _ignored, ...request } = bundle.entry[3]!.request as Record<string, string>;
        bundle.entry[3] = { ...bundle.entry[3]!, request } as (typeof bundle.entry)[number];

        const res = await expectNothingWritten(() => post(bundle));
        const issue = expectOutcome(res, 409, 'duplicate');
        expect(issue.diagnostics).to.match(/^Bundle\.entry\[3\]/);
        expect(res.headers.get('location')).to.equal(
          `${app.casebook.config.fhirUrl}/${first.body.entry[3].response.location.split('/_history')[0]}`,
        );
        // The context resources of the failed bundle do not exist.
        expect((await search('Patient', MRN, ids.mrn)).total).to.equal(0);
        expect((await search('Encounter', VISIT, ids.visit)).total).to.equal(0);
        expect((await search('Practitioner', STAFF, ids.staff)).total).to.equal(0);

        // The identifiers were not reserved either: the same bundle with a new Task succeeds.
        const retry = await post(launcherBundle({ ...ids, task: unique('task') }));
        expect(retry.status, JSON.stringify(retry.body)).to.equal(200);
        expect(retry.body.entry[0].response.location).to.match(/\/_history\/1$/);
      });

      it('writes nothing when an entry is invalid (422) after others succeeded', async () => {
        const ids = newIds();
        const bundle = launcherBundle(ids);
        (bundle.entry[3]!.resource as Record<string, unknown>).status = 'cancelled';
        const res = await expectNothingWritten(() => post(bundle));
        const issue = expectOutcome(res, 422, 'invalid');
        expect(issue.diagnostics).to.match(/^Bundle\.entry\[3\]/);
        expect(issue.expression).to.deep.equal(['Bundle.entry[3].resource.status']);
        expect((await search('Patient', MRN, ids.mrn)).total).to.equal(0);
      });

      it('writes nothing when a conditional update of an existing resource is followed by a failure', async () => {
        const ids = newIds();
        const first = await post(launcherBundle(ids));
        const patientRef = first.body.entry[0].response.location.split('/_history')[0];
        const bundle = launcherBundle(ids, { family: 'Changed' });
        bundle.entry.push({
          fullUrl: urn(),
          resource: {
            resourceType: 'QuestionnaireResponse',
            questionnaire: 'https://forms.example.org/q',
            status: 'in-progress',
            subject: { reference: 'Patient/999999' },
          },
          request: { method: 'PUT', url: 'QuestionnaireResponse/999999' },
        } as unknown as (typeof bundle.entry)[number]);
        const res = await expectNothingWritten(() => post(bundle));
        expect(res.status).to.be.oneOf([404, 422]);
        const patient = await fhir(app, 'GET', `/${patientRef}`);
        expect(patient.body.name).to.deep.equal([{ family: 'Doe', given: ['Jane'] }]);
        expect(patient.body.meta.versionId).to.equal('1');
      });
    });

    describe('scopes', () => {
      it('answers 403 for an entry outside the client scopes and writes nothing', async () => {
        const ids = newIds();
        const res = await expectNothingWritten(() => post(launcherBundle(ids), CONTEXT_ONLY));
        const issue = expectOutcome(res, 403, 'forbidden');
        expect(issue.diagnostics).to.match(/^Bundle\.entry\[3\]/);
        expect((await search('Patient', MRN, ids.mrn)).total).to.equal(0);
        // The context part alone is within its scopes.
        const bundle = launcherBundle(newIds());
        bundle.entry.pop();
        const ok = await post(bundle, CONTEXT_ONLY);
        expect(ok.status, JSON.stringify(ok.body)).to.equal(200);
        expect(ok.body.entry.map((e: any) => e.response.status)).to.deep.equal([
          '200 OK',
          '201 Created',
          '201 Created',
        ]);
      });

      it('checks ifNoneExist matches like the REST interaction: no read scope → 403', async () => {
        const ids = newIds();
        expect((await post(launcherBundle(ids))).status).to.equal(200);
        const taskOnly = (ifNoneExist: string) => ({
          resourceType: 'Bundle',
          type: 'transaction',
          entry: [
            {
              resource: { resourceType: 'Task', status: 'draft', intent: 'order' },
              request: { method: 'POST', url: 'Task', ifNoneExist },
            },
          ],
        });
        // REST: If-None-Exist matching a Task the client may not read is refused.
        expectOutcome(
          await fhir(app, 'POST', '/Task', {
            body: { resourceType: 'Task', status: 'draft', intent: 'order' },
            auth: TASK_WRITER,
            headers: { 'If-None-Exist': token(TASK, ids.task) },
          }),
          403,
          'forbidden',
        );
        // The transaction entry must not reveal it either.
        const res = await expectNothingWritten(() => post(taskOnly(token(TASK, ids.task)), TASK_WRITER));
        expectOutcome(res, 403, 'forbidden');
        // Without a match, it creates.
        const created = await post(taskOnly(token(TASK, unique('none'))), TASK_WRITER);
        expect(created.status, JSON.stringify(created.body)).to.equal(200);
        expect(created.body.entry[0].response.status).to.equal('201 Created');
      });

      it("treats another tenant's resources as missing (404) and writes nothing", async () => {
        const ids = newIds();
        const first = await post(launcherBundle(ids));
        const taskRef = first.body.entry[3].response.location.split('/_history')[0];
        const res = await expectNothingWritten(() =>
          post(
            {
              resourceType: 'Bundle',
              type: 'transaction',
              entry: [
                {
                  resource: { resourceType: 'Task', status: 'failed', intent: 'order' },
                  request: { method: 'PUT', url: taskRef },
                },
              ],
            },
            MANAGED,
          ),
        );
        expectOutcome(res, 404, 'not-found');
        // Conditional create by the other tenant does not match tenant 1's Task: it creates its own.
        const other = await post(launcherBundle(ids), MANAGED);
        expect(other.status, JSON.stringify(other.body)).to.equal(200);
        expect(other.body.entry[3].response.status).to.equal('201 Created');
        expect(other.body.entry[3].response.location).not.to.equal(first.body.entry[3].response.location);
      });

      it('answers 401 without credentials', async () => {
        const res = await expectNothingWritten(() => post(launcherBundle(newIds()), null));
        expectOutcome(res, 401, 'login');
      });
    });

    describe('malformed bundles', () => {
      const entry = (request: Record<string, unknown>, resource?: Record<string, unknown>) => ({
        ...(resource ? { resource } : {}),
        request,
      });
      const bundle = (entries: unknown[], extra: Record<string, unknown> = {}) => ({
        resourceType: 'Bundle',
        type: 'transaction',
        entry: entries,
        ...extra,
      });
      const patient = { resourceType: 'Patient', name: [{ family: 'X' }] };

      const cases: [string, unknown][] = [
        ['not a Bundle', { resourceType: 'Patient' }],
        ['a batch', bundle([], { type: 'batch' })],
        ['no type', { resourceType: 'Bundle', entry: [] }],
        ['entry not an array', bundle([], { entry: {} })],
        ['an entry without request', bundle([{ resource: patient }])],
        ['a GET entry', bundle([entry({ method: 'GET', url: 'Patient/1' })])],
        ['an entry without url', bundle([entry({ method: 'POST' }, patient)])],
        [
          'a resource that is not an object',
          bundle([{ resource: 'Patient', request: { method: 'POST', url: 'Patient' } }]),
        ],
        [
          'more than 200 entries',
          bundle(Array.from({ length: 201 }, () => entry({ method: 'POST', url: 'Patient' }, patient))),
        ],
        ['a POST to an id', bundle([entry({ method: 'POST', url: 'Patient/1' }, patient)])],
        [
          'a url with extra segments',
          bundle([entry({ method: 'PUT', url: 'Patient/1/_history/1' }, patient)]),
        ],
        ['a POST without a resource', bundle([entry({ method: 'POST', url: 'Patient' })])],
        [
          'an ifNoneExist without identifier',
          bundle([entry({ method: 'POST', url: 'Patient', ifNoneExist: 'name=x' }, patient)]),
        ],
        [
          'a resource of another type than the url',
          bundle([entry({ method: 'POST', url: 'Patient' }, { resourceType: 'Practitioner' })]),
        ],
      ];
      for (const [name, body] of cases)
        it(`answers 400 for ${name} and writes nothing`, async () => {
          const res = await expectNothingWritten(() => post(body));
          expectOutcome(res, 400, 'invalid');
        });

      it('answers 400 for invalid JSON and 415 for another content type', async () => {
        expectOutcome(await post('{"resourceType": "Bundle",'), 400, 'invalid');
        const res = await fhir(app, 'POST', '/', {
          body: JSON.stringify(bundle([])),
          headers: { 'Content-Type': 'text/plain' },
        });
        expectOutcome(res, 415, 'not-supported');
      });

      it('answers an empty transaction-response for an empty transaction', async () => {
        const res = await expectNothingWritten(() => post(bundle([])));
        expect(res.status).to.equal(200);
        // No empty arrays in FHIR JSON: no `entry` at all.
        expect(res.body).to.deep.equal({ resourceType: 'Bundle', type: 'transaction-response' });
      });

      it('answers 400 for an unresolved urn:uuid reference and writes nothing', async () => {
        const ids = newIds();
        const b = launcherBundle(ids);
        (b.entry[3]!.resource as Record<string, unknown>).for = { reference: `urn:uuid:${randomUUID()}` };
        const res = await expectNothingWritten(() => post(b));
        const issue = expectOutcome(res, 400, 'invalid');
        expect(issue.diagnostics).to.match(/Bundle\.entry\[3\].*urn:uuid:/);
        expect((await search('Patient', MRN, ids.mrn)).total).to.equal(0);
      });

      it('answers 400 for entries referencing each other in a cycle', async () => {
        const a = urn();
        const b = urn();
        const res = await expectNothingWritten(() =>
          post(
            bundle([
              {
                fullUrl: a,
                resource: { resourceType: 'Encounter', status: 'planned', subject: { reference: b } },
                request: { method: 'POST', url: 'Encounter' },
              },
              {
                fullUrl: b,
                resource: {
                  resourceType: 'Task',
                  status: 'draft',
                  intent: 'order',
                  encounter: { reference: a },
                },
                request: { method: 'POST', url: 'Task' },
              },
            ]),
          ),
        );
        expectOutcome(res, 400, 'invalid');
      });
    });
  });
}
