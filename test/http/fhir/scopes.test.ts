/**
 * Authentication and scope enforcement on {fhir_base_url} (issue 3; spec §5 rule 4, §5.3, §7):
 * Basic clients under their own scopes, auth_session cookies under the session's stored v2 scopes
 * (patient/ compartment, user/ authorship), r vs s, project-filtered Questionnaire access,
 * tenant isolation (404) and the actor recorded for cookie calls.
 */
import { expect } from 'chai';
import type { Seed } from '../../../src/commands/seed.js';
import { basic, GENERAL, MANAGED, seed, startTestApp, type TestApp } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import { type Credentials, entryRefs, expectOutcome, fhir, sessionCookie } from '../../support/fhir.js';

const EXTRA_SEED: Seed = {
  tenants: [
    {
      name: 'General Hospital',
      ehr_managed: false,
      allowed_scopes: ['patient/*.*', 'user/*.*'],
      redirect_origins: ['https://ehr.example.org'],
      clients: [
        {
          client_id: 'oncology-backend',
          client_secret: 'oncology-secret-0123456789',
          scopes: ['system/*.*'],
          projects: ['oncology'],
        },
        {
          client_id: 'patient-reader',
          client_secret: 'patient-reader-secret-0123456789',
          scopes: ['system/Patient.r'],
          projects: [],
        },
        {
          client_id: 'patient-searcher',
          client_secret: 'patient-searcher-secret-0123456789',
          scopes: ['system/Patient.s'],
          projects: [],
        },
      ],
      questionnaires: [],
    },
  ],
};
const ONCOLOGY = basic('oncology-backend', 'oncology-secret-0123456789');
const PATIENT_READER = basic('patient-reader', 'patient-reader-secret-0123456789');
const PATIENT_SEARCHER = basic('patient-searcher', 'patient-searcher-secret-0123456789');

for (const database of testDatabases) {
  describe(`data-server scopes on ${database.name}`, () => {
    let app: TestApp;
    let seq = 0;
    const unique = (prefix: string) => `${prefix}-${++seq}-${Math.random().toString(36).slice(2, 8)}`;

    /** Tenant 1: user (Practitioner), patients A and B, an encounter of A, client-created QRs and Tasks. */
    let userId: string;
    let otherUserId: string;
    let patientA: string;
    let patientB: string;
    let encounterA: string;
    let responseA: string;
    let responseB: string;
    let taskA: string;
    let taskB: string;
    let radiologyUrl: string;
    let radiology: string;
    let radiology2: string;
    let oncology: string;

    const eventCount = async () => (await app.allEvents()).length;
    const create = async (body: Record<string, unknown>, auth: Credentials = GENERAL): Promise<string> => {
      const res = await fhir(app, 'POST', `/${body.resourceType}`, { body, auth });
      expect(res.status, JSON.stringify(res.body)).to.equal(201);
      return res.body.id as string;
    };
    const patient = (auth: Credentials = GENERAL) =>
      create(
        {
          resourceType: 'Patient',
          identifier: [{ system: 'urn:test:mrn', value: unique('mrn') }],
          name: [{ family: 'Doe' }],
        },
        auth,
      );
    const practitioner = (auth: Credentials = GENERAL) =>
      create(
        {
          resourceType: 'Practitioner',
          identifier: [{ system: 'urn:test:staff', value: unique('dr') }],
          name: [{ family: 'House' }],
        },
        auth,
      );
    const response = (patientId: string, extra: Record<string, unknown> = {}) => ({
      resourceType: 'QuestionnaireResponse',
      questionnaire: 'https://forms.example.org/Questionnaire/chest-ct',
      status: 'in-progress',
      subject: { reference: `Patient/${patientId}` },
      item: [{ linkId: 'findings', answer: [{ valueString: 'Normal' }] }],
      ...extra,
    });
    const task = (patientId: string) => ({
      resourceType: 'Task',
      identifier: [{ system: 'urn:test:task', value: unique('task') }],
      status: 'ready',
      intent: 'order',
      for: { reference: `Patient/${patientId}` },
    });
    const questionnaire = (url: string) => ({
      resourceType: 'Questionnaire',
      url,
      version: '1',
      status: 'active',
      item: [{ linkId: 'a', type: 'string' }],
    });

    /** A session of the user in tenant 1 (POST /sessions + handover). */
    const session = async (scope: string | undefined, extra: Record<string, unknown> = {}) =>
      sessionCookie(app, {
        user: Number(userId),
        patient: Number(patientA),
        ...(scope !== undefined ? { scope } : {}),
        ...extra,
      });

    before(async () => {
      app = await startTestApp(database);
      await seed(app);
      await seed(app, EXTRA_SEED);
      userId = await practitioner();
      otherUserId = await practitioner();
      patientA = await patient();
      patientB = await patient();
      encounterA = await create({
        resourceType: 'Encounter',
        status: 'in-progress',
        subject: { reference: `Patient/${patientA}` },
      });
      responseA = await create(response(patientA, { encounter: { reference: `Encounter/${encounterA}` } }));
      responseB = await create(response(patientB));
      taskA = await create(task(patientA));
      taskB = await create(task(patientB));
      radiologyUrl = `https://forms.example.org/Questionnaire/${unique('rad')}`;
      radiology = await create(questionnaire(radiologyUrl));
      radiology2 = await create(questionnaire(`https://forms.example.org/Questionnaire/${unique('rad')}`));
      oncology = await create(
        questionnaire(`https://forms.example.org/Questionnaire/${unique('onc')}`),
        ONCOLOGY,
      );
    });
    after(() => app?.close());

    describe('authentication', () => {
      it('answers 401 without credentials, with a wrong secret or an unknown cookie', async () => {
        const none = await fhir(app, 'GET', `/Patient/${patientA}`, { auth: null });
        expectOutcome(none, 401, 'login');
        expect(none.headers.get('www-authenticate')).to.match(/^Basic/);
        expectOutcome(
          await fhir(app, 'GET', `/Patient/${patientA}`, {
            auth: basic('ehr-backend', 'wrong-secret-0123456789'),
          }),
          401,
          'login',
        );
        expectOutcome(
          await fhir(app, 'GET', `/Patient/${patientA}`, { auth: { cookie: 'auth_session=not-a-session' } }),
          401,
          'login',
        );
        const before = await eventCount();
        expectOutcome(
          await fhir(app, 'POST', '/QuestionnaireResponse', { body: response(patientA), auth: null }),
          401,
          'login',
        );
        expect(await eventCount()).to.equal(before);
      });

      it('refuses the cookie once the session is ended (401)', async () => {
        const { cookie, session: s } = await session('patient/*.*');
        expect((await fhir(app, 'GET', `/Patient/${patientA}`, { auth: cookie })).status).to.equal(200);
        const ended = await fetch(`${app.authUrl}/sessions/${s.id}`, {
          method: 'DELETE',
          headers: { Authorization: GENERAL },
        });
        expect(ended.status).to.equal(204);
        expectOutcome(await fhir(app, 'GET', `/Patient/${patientA}`, { auth: cookie }), 401, 'login');
      });
    });

    describe('API clients (their own scopes, spec §5 rule 4)', () => {
      it('read needs r and search needs s', async () => {
        expect((await fhir(app, 'GET', `/Patient/${patientA}`, { auth: PATIENT_READER })).status).to.equal(
          200,
        );
        expectOutcome(
          await fhir(app, 'GET', `/Patient?_id=${patientA}`, { auth: PATIENT_READER }),
          403,
          'forbidden',
        );
        const searched = await fhir(app, 'GET', `/Patient?_id=${patientA}`, { auth: PATIENT_SEARCHER });
        expect(searched.status).to.equal(200);
        expect(entryRefs(searched.body)).to.deep.equal([`Patient/${patientA}`]);
        expectOutcome(
          await fhir(app, 'GET', `/Patient/${patientA}`, { auth: PATIENT_SEARCHER }),
          403,
          'forbidden',
        );
      });

      it('refuses other resource types and writes not granted, writing nothing', async () => {
        const before = await eventCount();
        expectOutcome(
          await fhir(app, 'GET', `/QuestionnaireResponse/${responseA}`, { auth: PATIENT_READER }),
          403,
          'forbidden',
        );
        expectOutcome(
          await fhir(app, 'POST', '/Patient', { body: { resourceType: 'Patient' }, auth: PATIENT_READER }),
          403,
          'forbidden',
        );
        expectOutcome(
          await fhir(app, 'PUT', `/Patient/${patientA}`, {
            body: { resourceType: 'Patient', id: patientA, gender: 'other' },
            auth: PATIENT_READER,
          }),
          403,
          'forbidden',
        );
        expectOutcome(
          await fhir(app, 'DELETE', `/Patient/${patientB}`, { auth: PATIENT_READER }),
          403,
          'forbidden',
        );
        expect(await eventCount()).to.equal(before);
      });

      it('gives `*` clients the Questionnaires of their projects only', async () => {
        expect((await fhir(app, 'GET', `/Questionnaire/${radiology}`)).status).to.equal(200);
        expectOutcome(await fhir(app, 'GET', `/Questionnaire/${oncology}`), 403, 'forbidden');
        expect((await fhir(app, 'GET', `/Questionnaire/${oncology}`, { auth: ONCOLOGY })).status).to.equal(
          200,
        );
        expectOutcome(
          await fhir(app, 'GET', `/Questionnaire/${radiology}`, { auth: ONCOLOGY }),
          403,
          'forbidden',
        );
        const all = await fhir(app, 'GET', '/Questionnaire');
        expect(entryRefs(all.body)).to.include(`Questionnaire/${radiology}`);
        expect(entryRefs(all.body)).not.to.include(`Questionnaire/${oncology}`);
        // Updating another project's Questionnaire is refused too.
        const before = await eventCount();
        expectOutcome(
          await fhir(app, 'PUT', `/Questionnaire/${oncology}`, {
            body: { ...questionnaire('https://forms.example.org/Questionnaire/x'), id: oncology },
          }),
          403,
          'forbidden',
        );
        expect(await eventCount()).to.equal(before);
      });
    });

    describe('patient/ session scopes', () => {
      it("read the session patient and its responses and tasks, not another patient's (403)", async () => {
        const { cookie, session: s } = await session('patient/*.*');
        expect(s.fhir_server.scope).to.deep.equal(['patient/*.cruds']);
        const auth = cookie;
        expect((await fhir(app, 'GET', `/Patient/${patientA}`, { auth })).status).to.equal(200);
        expect((await fhir(app, 'GET', `/Encounter/${encounterA}`, { auth })).status).to.equal(200);
        expect((await fhir(app, 'GET', `/QuestionnaireResponse/${responseA}`, { auth })).status).to.equal(
          200,
        );
        expect((await fhir(app, 'GET', `/Task/${taskA}`, { auth })).status).to.equal(200);
        expectOutcome(await fhir(app, 'GET', `/Patient/${patientB}`, { auth }), 403, 'forbidden');
        expectOutcome(
          await fhir(app, 'GET', `/QuestionnaireResponse/${responseB}`, { auth }),
          403,
          'forbidden',
        );
        expectOutcome(await fhir(app, 'GET', `/Task/${taskB}`, { auth }), 403, 'forbidden');
        // Templates are outside any patient compartment.
        expectOutcome(await fhir(app, 'GET', `/Questionnaire/${radiology}`, { auth }), 403, 'forbidden');
      });

      it("search returns only the session patient's compartment", async () => {
        const { cookie: auth } = await session('patient/*.*');
        const all = await fhir(app, 'GET', '/QuestionnaireResponse', { auth });
        expect(all.status).to.equal(200);
        expect(entryRefs(all.body)).to.include(`QuestionnaireResponse/${responseA}`);
        expect(entryRefs(all.body)).not.to.include(`QuestionnaireResponse/${responseB}`);
        expect(
          all.body.entry.every((e: any) => e.resource.subject.reference === `Patient/${patientA}`),
        ).to.equal(true);
        const ofB = await fhir(app, 'GET', `/QuestionnaireResponse?subject=Patient/${patientB}`, { auth });
        expect(ofB.status).to.equal(200);
        expect(ofB.body.total).to.equal(0);
        const included = await fhir(
          app,
          'GET',
          `/QuestionnaireResponse?_id=${responseA}&_include=QuestionnaireResponse:subject&_include=QuestionnaireResponse:encounter`,
          { auth },
        );
        expect(entryRefs(included.body, 'include')).to.have.members([
          `Patient/${patientA}`,
          `Encounter/${encounterA}`,
        ]);
      });

      it("creates responses for the session patient (actor = session), refuses another patient's (403)", async () => {
        const { cookie: auth, session: s } = await session('patient/*.*');
        let before = await eventCount();
        const res = await fhir(app, 'POST', '/QuestionnaireResponse', {
          body: response(patientA),
          auth,
          headers: { 'X-Request-Id': 'req-cookie-1' },
        });
        expect(res.status, JSON.stringify(res.body)).to.equal(201);
        const events = (await app.allEvents()).slice(before);
        expect(events.map((e) => e.type)).to.deep.equal(['QuestionnaireResponseCreated']);
        expect(events[0]!.metadata).to.deep.include({
          tenantId: 1,
          actor: { type: 'session', id: String(s.id) },
          requestId: 'req-cookie-1',
        });
        expect(events[0]!.data).to.deep.include({ author: `Practitioner/${userId}`, tenantId: 1 });

        before = await eventCount();
        const submitted = await fhir(app, 'PUT', `/QuestionnaireResponse/${res.body.id}`, {
          body: { ...res.body, status: 'completed' },
          auth,
        });
        expect(submitted.status, JSON.stringify(submitted.body)).to.equal(200);
        const submission = (await app.allEvents()).slice(before);
        expect(submission.map((e) => e.type)).to.deep.equal(['QuestionnaireResponseSubmitted']);
        expect(submission[0]!.metadata).to.deep.include({
          tenantId: 1,
          actor: { type: 'session', id: String(s.id) },
        });

        before = await eventCount();
        expectOutcome(
          await fhir(app, 'POST', '/QuestionnaireResponse', { body: response(patientB), auth }),
          403,
          'forbidden',
        );
        // Moving a response out of the compartment is refused as well.
        expectOutcome(
          await fhir(app, 'PUT', `/QuestionnaireResponse/${res.body.id}`, {
            body: { ...submitted.body, subject: { reference: `Patient/${patientB}` } },
            auth,
          }),
          403,
          'forbidden',
        );
        expect(await eventCount()).to.equal(before);
      });

      it('checks every transaction entry: one outside the compartment → 403 and nothing written', async () => {
        const { cookie: auth, session: s } = await session('patient/*.*');
        const before = await eventCount();
        const res = await fhir(app, 'POST', '/', {
          auth,
          body: {
            resourceType: 'Bundle',
            type: 'transaction',
            entry: [
              { resource: response(patientA), request: { method: 'POST', url: 'QuestionnaireResponse' } },
              { resource: response(patientB), request: { method: 'POST', url: 'QuestionnaireResponse' } },
            ],
          },
        });
        const issue = expectOutcome(res, 403, 'forbidden');
        expect(issue.diagnostics).to.match(/^Bundle\.entry\[1\]/);
        expect(await eventCount()).to.equal(before);

        // Within the compartment it goes through, recorded as the session's.
        const ok = await fhir(app, 'POST', '/', {
          auth,
          body: {
            resourceType: 'Bundle',
            type: 'transaction',
            entry: [
              { resource: response(patientA), request: { method: 'POST', url: 'QuestionnaireResponse' } },
            ],
          },
        });
        expect(ok.status, JSON.stringify(ok.body)).to.equal(200);
        expect(ok.body.entry[0].response.status).to.equal('201 Created');
        const events = (await app.allEvents()).slice(before);
        expect(events.map((e) => e.type)).to.deep.equal(['QuestionnaireResponseCreated']);
        expect(events[0]!.metadata).to.deep.include({
          tenantId: 1,
          actor: { type: 'session', id: String(s.id) },
        });
      });

      it('grants nothing without a patient in the session', async () => {
        const { cookie: auth, session: s } = await sessionCookie(app, {
          user: Number(userId),
          scope: 'patient/*.* user/Practitioner.r',
        });
        expect(s.fhir_server.scope).to.deep.equal(['user/Practitioner.r']);
        expectOutcome(await fhir(app, 'GET', `/Patient/${patientA}`, { auth }), 403, 'forbidden');
      });
    });

    describe('user/ session scopes', () => {
      it('read what the session user authored, not what the client created (403)', async () => {
        const { cookie: auth, session: s } = await session('user/*.*');
        expect(s.fhir_server.scope).to.deep.equal([
          'user/*.cruds',
          'user/Questionnaire.rs?project=radiology',
        ]);
        const created = await fhir(app, 'POST', '/QuestionnaireResponse', { body: response(patientA), auth });
        expect(created.status, JSON.stringify(created.body)).to.equal(201);
        const own = created.body.id as string;
        expect((await fhir(app, 'GET', `/QuestionnaireResponse/${own}`, { auth })).status).to.equal(200);
        expectOutcome(
          await fhir(app, 'GET', `/QuestionnaireResponse/${responseA}`, { auth }),
          403,
          'forbidden',
        );
        expectOutcome(await fhir(app, 'GET', `/Patient/${patientA}`, { auth }), 403, 'forbidden');
        // The user's own Practitioner is theirs.
        expect((await fhir(app, 'GET', `/Practitioner/${userId}`, { auth })).status).to.equal(200);
        expectOutcome(await fhir(app, 'GET', `/Practitioner/${otherUserId}`, { auth }), 403, 'forbidden');

        const found = await fhir(app, 'GET', `/QuestionnaireResponse?subject=Patient/${patientA}`, { auth });
        expect(found.status).to.equal(200);
        expect(entryRefs(found.body)).to.include(`QuestionnaireResponse/${own}`);
        expect(entryRefs(found.body)).not.to.include(`QuestionnaireResponse/${responseA}`);

        // Authorship belongs to the user: another session of the same user reads it, another user's does not.
        const { cookie: again } = await session('user/*.*');
        expect((await fhir(app, 'GET', `/QuestionnaireResponse/${own}`, { auth: again })).status).to.equal(
          200,
        );
        const { cookie: other } = await sessionCookie(app, { user: Number(otherUserId), scope: 'user/*.*' });
        expectOutcome(
          await fhir(app, 'GET', `/QuestionnaireResponse/${own}`, { auth: other }),
          403,
          'forbidden',
        );
        // The client still reads everything of its tenant.
        expect((await fhir(app, 'GET', `/QuestionnaireResponse/${own}`)).status).to.equal(200);
      });

      it('updates only what the user authored', async () => {
        const { cookie: auth } = await session('user/*.*');
        const before = await eventCount();
        const current = await fhir(app, 'GET', `/QuestionnaireResponse/${responseB}`);
        expectOutcome(
          await fhir(app, 'PUT', `/QuestionnaireResponse/${responseB}`, {
            body: { ...current.body, status: 'completed' },
            auth,
          }),
          403,
          'forbidden',
        );
        expect(await eventCount()).to.equal(before);
      });
    });

    describe('read (r) and search (s) are distinct', () => {
      it('a session with only .r reads by id (200) but may not search (403)', async () => {
        const { cookie: auth, session: s } = await session(
          'patient/QuestionnaireResponse.r patient/Patient.r',
        );
        expect(s.fhir_server.scope).to.deep.equal(['patient/Patient.r', 'patient/QuestionnaireResponse.r']);
        expect((await fhir(app, 'GET', `/QuestionnaireResponse/${responseA}`, { auth })).status).to.equal(
          200,
        );
        expect((await fhir(app, 'GET', `/Patient/${patientA}`, { auth })).status).to.equal(200);
        expectOutcome(
          await fhir(app, 'GET', `/QuestionnaireResponse?subject=Patient/${patientA}`, { auth }),
          403,
          'forbidden',
        );
        expectOutcome(await fhir(app, 'GET', `/Patient?_id=${patientA}`, { auth }), 403, 'forbidden');
        // No write either.
        expectOutcome(
          await fhir(app, 'POST', '/QuestionnaireResponse', { body: response(patientA), auth }),
          403,
          'forbidden',
        );
      });

      it('a session with only .s searches (200) but may not read by id (403)', async () => {
        const { cookie: auth } = await session('patient/QuestionnaireResponse.s');
        const found = await fhir(app, 'GET', `/QuestionnaireResponse?_id=${responseA}`, { auth });
        expect(found.status).to.equal(200);
        expect(entryRefs(found.body)).to.deep.equal([`QuestionnaireResponse/${responseA}`]);
        expectOutcome(
          await fhir(app, 'GET', `/QuestionnaireResponse/${responseA}`, { auth }),
          403,
          'forbidden',
        );
        // _include needs read on the included resources.
        const included = await fhir(
          app,
          'GET',
          `/QuestionnaireResponse?_id=${responseA}&_include=QuestionnaireResponse:subject`,
          { auth },
        );
        expect(entryRefs(included.body, 'include')).to.deep.equal([]);
      });

      it('v1 .read grants both', async () => {
        const { cookie: auth, session: s } = await session('patient/QuestionnaireResponse.read');
        expect(s.fhir_server.scope).to.deep.equal(['patient/QuestionnaireResponse.rs']);
        expect((await fhir(app, 'GET', `/QuestionnaireResponse/${responseA}`, { auth })).status).to.equal(
          200,
        );
        expect((await fhir(app, 'GET', `/QuestionnaireResponse?_id=${responseA}`, { auth })).status).to.equal(
          200,
        );
      });
    });

    describe('Questionnaire access through project-filtered scopes (spec §5.3 rule 3)', () => {
      it("a session of the radiology client sees radiology Questionnaires, not another project's", async () => {
        const { cookie: auth } = await session('user/*.*');
        expect((await fhir(app, 'GET', `/Questionnaire/${radiology}`, { auth })).status).to.equal(200);
        expectOutcome(await fhir(app, 'GET', `/Questionnaire/${oncology}`, { auth }), 403, 'forbidden');
        const all = await fhir(app, 'GET', '/Questionnaire', { auth });
        expect(all.status).to.equal(200);
        expect(entryRefs(all.body)).to.include.members([
          `Questionnaire/${radiology}`,
          `Questionnaire/${radiology2}`,
        ]);
        expect(entryRefs(all.body)).not.to.include(`Questionnaire/${oncology}`);
        // rs only: no creating templates from a session.
        const before = await eventCount();
        expectOutcome(
          await fhir(app, 'POST', '/Questionnaire', {
            body: questionnaire('https://forms.example.org/Questionnaire/from-session'),
            auth,
          }),
          403,
          'forbidden',
        );
        expect(await eventCount()).to.equal(before);
      });

      it('a url filter narrows to that template', async () => {
        const { cookie: auth, session: s } = await session(
          `user/Questionnaire.rs?url=${encodeURIComponent(radiologyUrl)}`,
        );
        expect(s.fhir_server.scope).to.deep.equal([
          `user/Questionnaire.rs?project=radiology&url=${encodeURIComponent(radiologyUrl)}`,
        ]);
        expect((await fhir(app, 'GET', `/Questionnaire/${radiology}`, { auth })).status).to.equal(200);
        expectOutcome(await fhir(app, 'GET', `/Questionnaire/${radiology2}`, { auth }), 403, 'forbidden');
        const all = await fhir(app, 'GET', '/Questionnaire', { auth });
        expect(entryRefs(all.body)).to.deep.equal([`Questionnaire/${radiology}`]);
      });

      it('a session of a client with another project sees that project only', async () => {
        const { cookie: auth } = await sessionCookie(
          app,
          { user: Number(userId), scope: 'user/Questionnaire.rs' },
          ONCOLOGY,
        );
        expect((await fhir(app, 'GET', `/Questionnaire/${oncology}`, { auth })).status).to.equal(200);
        expectOutcome(await fhir(app, 'GET', `/Questionnaire/${radiology}`, { auth }), 403, 'forbidden');
      });
    });

    describe('tenants', () => {
      it("answers 404 for another tenant's resources, to clients and sessions alike", async () => {
        for (const path of [
          `/Patient/${patientA}`,
          `/Task/${taskA}`,
          `/QuestionnaireResponse/${responseA}`,
          `/Questionnaire/${radiology}`,
        ])
          expectOutcome(await fhir(app, 'GET', path, { auth: MANAGED }), 404, 'not-found');
        const before = await eventCount();
        expectOutcome(await fhir(app, 'DELETE', `/Task/${taskA}`, { auth: MANAGED }), 404, 'not-found');
        expectOutcome(
          await fhir(app, 'PUT', `/QuestionnaireResponse/${responseA}`, {
            body: { ...response(patientA), id: responseA, status: 'completed' },
            auth: MANAGED,
          }),
          404,
          'not-found',
        );
        expect(await eventCount()).to.equal(before);

        const managedUser = await practitioner(MANAGED);
        const { cookie: auth } = await sessionCookie(app, { user: Number(managedUser) }, MANAGED);
        expectOutcome(
          await fhir(app, 'GET', `/QuestionnaireResponse/${responseA}`, { auth }),
          404,
          'not-found',
        );
        expectOutcome(await fhir(app, 'GET', `/Patient/${patientA}`, { auth }), 404, 'not-found');
      });

      it('caps context resources to read by id in EHR-managed sessions (spec §5.3 rule 2)', async () => {
        const managedUser = await practitioner(MANAGED);
        const managedPatient = await patient(MANAGED);
        const { cookie: auth, session: s } = await sessionCookie(
          app,
          { user: Number(managedUser), patient: Number(managedPatient), scope: 'system/*.*' },
          MANAGED,
        );
        expect(s.fhir_server.scope).to.include('system/Patient.r');
        expect((await fhir(app, 'GET', `/Patient/${managedPatient}`, { auth })).status).to.equal(200);
        expectOutcome(await fhir(app, 'GET', `/Patient?_id=${managedPatient}`, { auth }), 403, 'forbidden');
        expectOutcome(
          await fhir(app, 'POST', '/Patient', { body: { resourceType: 'Patient' }, auth }),
          403,
          'forbidden',
        );
        // Full QuestionnaireResponse access.
        const before = await eventCount();
        const created = await fhir(app, 'POST', '/QuestionnaireResponse', {
          body: response(managedPatient),
          auth,
        });
        expect(created.status, JSON.stringify(created.body)).to.equal(201);
        const events = (await app.allEvents()).slice(before);
        expect(events[0]!.metadata).to.deep.include({
          tenantId: 2,
          actor: { type: 'session', id: String(s.id) },
        });
        const searched = await fhir(app, 'GET', `/QuestionnaireResponse?subject=${managedPatient}`, { auth });
        expect(entryRefs(searched.body)).to.deep.equal([`QuestionnaireResponse/${created.body.id}`]);
      });
    });
  });
}
