/**
 * The session interface on {auth_url} (spec §2.1–2.4, §3.1, §4.1, §5, §7, §8), asserted over HTTP
 * against a real casebook on PGlite and on the Postgres server.
 */
import { expect } from 'chai';
import { basic, GENERAL, MANAGED, seed, startTestApp, type TestApp } from '../support/app.js';
import { testDatabases } from '../support/databases.js';

const ROLE_NEW = 'https://casebook.example/fhir/role/new';
const ROLE_FIND = 'https://casebook.example/fhir/role/find';
const MINUTE = 60_000;
const DAY = 24 * 60 * MINUTE;

const item = (type: string, value: string, role?: string) => ({
  type,
  identifier: { system: `urn:test:${type.toLowerCase()}`, value },
  ...(role ? { role } : {}),
});

for (const database of testDatabases) {
  describe(`session interface on ${database.name}`, () => {
    let app: TestApp;
    let seq = 0;
    const unique = (prefix: string) => `${prefix}-${++seq}-${Math.random().toString(36).slice(2, 8)}`;

    before(async () => {
      app = await startTestApp(database);
      await seed(app);
    });
    after(() => app?.close());

    const createSession = (body: unknown, auth: string | null = GENERAL, contentType = 'application/json') =>
      fetch(`${app.authUrl}/sessions`, {
        method: 'POST',
        headers: { ...(auth ? { Authorization: auth } : {}), 'Content-Type': contentType },
        body: typeof body === 'string' ? body : JSON.stringify(body),
      });

    /** A valid session body: a new Practitioner and Patient, unique per call. */
    const validBody = (extra: Record<string, unknown> = {}) => ({
      fhirContext: [item('Practitioner', unique('dr'), ROLE_NEW), item('Patient', unique('mrn'), ROLE_NEW)],
      ...extra,
    });

    const created = async (body: unknown = validBody(), auth = GENERAL) => {
      const res = await createSession(body, auth);
      const json = (await res.json()) as Record<string, any>;
      expect(res.status, JSON.stringify(json)).to.equal(201);
      return json;
    };

    const handover = (token: string, next: string, method: 'GET' | 'POST' = 'GET') =>
      method === 'GET'
        ? fetch(`${app.authUrl}/sessions/$handover?${new URLSearchParams({ token, next })}`, {
            redirect: 'manual',
          })
        : fetch(`${app.authUrl}/sessions/$handover`, {
            method: 'POST',
            redirect: 'manual',
            headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
            body: new URLSearchParams({ token, next }).toString(),
          });

    const cookieOf = (res: Response) => {
      const header = res.headers.getSetCookie().find((c) => c.startsWith('auth_session='));
      expect(header, 'Set-Cookie auth_session').to.be.a('string');
      return header!.split(';')[0]!;
    };

    const current = (cookie?: string) =>
      fetch(`${app.authUrl}/sessions/current`, { headers: cookie ? { Cookie: cookie } : {} });

    const eventCount = async () => (await app.allEvents()).length;

    /** Asserts a problem+json answer with `status`, and that no event was appended by `request`. */
    const expectRefused = async (request: () => Promise<Response>, status: number, detail?: RegExp) => {
      const before = await eventCount();
      const res = await request();
      expect(res.status).to.equal(status);
      expect(res.headers.get('content-type')).to.match(/^application\/problem\+json/);
      const body = (await res.json()) as { status: number; detail: string; title: string };
      expect(body.status).to.equal(status);
      expect(body.detail).to.be.a('string').and.not.empty;
      if (detail) expect(body.detail).to.match(detail);
      expect(await eventCount(), 'events appended by a refused request').to.equal(before);
      return body;
    };

    describe('POST /sessions', () => {
      it('answers 201 with exactly the fields of spec §2.3', async () => {
        const res = await createSession(
          validBody({ post_submit_redirect: 'https://ehr.example.org/done?x=1' }),
        );
        expect(res.status).to.equal(201);
        const body = (await res.json()) as Record<string, any>;
        expect(Object.keys(body).sort()).to.deep.equal(
          [
            'active',
            'data_tenant',
            'deployment_mode',
            'encounter',
            'expired_timestamp',
            'fhir_server',
            'handover_token',
            'id',
            'patient',
            'post_submit_redirect',
            'user',
          ].sort(),
        );
        expect(body.id).to.be.a('number');
        expect(res.headers.get('location')).to.equal(`${app.casebook.config.authUrl}/sessions/${body.id}`);
        expect(res.headers.get('cache-control')).to.equal('no-store');
        expect(body.handover_token).to.be.a('string').with.length.greaterThan(40);
        expect(body.active).to.equal(false);
        expect(body.user).to.deep.include({ type: 'Practitioner' });
        expect(body.user.reference).to.match(/^Practitioner\/\d+$/);
        expect(body.patient.type).to.equal('Patient');
        expect(body.patient.reference).to.match(/^Patient\/\d+$/);
        expect(body.encounter).to.equal(null);
        expect(body.data_tenant).to.deep.equal({ id: 1, name: 'General Hospital' });
        expect(body.deployment_mode).to.equal('embedded');
        expect(body.fhir_server.address).to.equal(null);
        expect(body.fhir_server.scope).to.deep.equal([
          'patient/*.cruds',
          'user/*.cruds',
          'user/Questionnaire.rs?project=radiology',
        ]);
        expect(body.post_submit_redirect).to.equal('https://ehr.example.org/done?x=1');
        expect(body.expired_timestamp).to.equal(
          new Date(app.casebook.clock().getTime() + 7.5 * DAY).toISOString(),
        );
      });

      it('records the session, the created context resources and metadata as events', async () => {
        const before = await eventCount();
        const res = await fetch(`${app.authUrl}/sessions`, {
          method: 'POST',
          headers: {
            Authorization: GENERAL,
            'Content-Type': 'application/json',
            'X-Request-Id': 'req-meta-1',
          },
          body: JSON.stringify(validBody()),
        });
        const body = (await res.json()) as { id: number };
        const events = (await app.allEvents()).slice(before);
        expect(events.map((e) => e.type)).to.deep.equal([
          'ReservationClaimed',
          'PatientRegistered',
          'ReservationClaimed',
          'PractitionerRegistered',
          'SessionCreated',
        ]);
        const session = events.at(-1)!;
        expect(session.streamName).to.equal(`session-${body.id}`);
        expect(session.revision).to.equal(0n);
        expect(session.metadata).to.deep.equal({
          tenantId: 1,
          actor: { type: 'client', id: 'ehr-backend' },
          correlationId: 'req-meta-1',
          causationId: 'req-meta-1',
          requestId: 'req-meta-1',
          recordedAt: app.casebook.clock().toISOString(),
        });
        const data = session.data as Record<string, unknown>;
        expect(data.handoverTokenHash).to.match(/^[0-9a-f]{64}$/);
        expect(JSON.stringify(data)).not.to.include(
          (body as unknown as { handover_token: string }).handover_token ?? 'x',
        );
      });

      it('accepts scope as a string or an array, v1 or v2, and stores v2', async () => {
        const fromString = await created(
          validBody({ scope: 'user/Patient.read user/Observation.write openid launch' }),
        );
        expect(fromString.fhir_server.scope).to.deep.equal(['user/Observation.cud', 'user/Patient.rs']);
        const fromArray = await created(validBody({ scope: ['user/Patient.rs', 'user/Observation.*'] }));
        expect(fromArray.fhir_server.scope).to.deep.equal(['user/Observation.cruds', 'user/Patient.rs']);
      });

      it('grants the tenant allowed scopes when scope is omitted', async () => {
        const body = await created(validBody());
        expect(body.fhir_server.scope).to.deep.equal([
          'patient/*.cruds',
          'user/*.cruds',
          'user/Questionnaire.rs?project=radiology',
        ]);
      });

      it('downgrades system/ to user/ outside EHR-managed tenants (spec §5.3)', async () => {
        const body = await created(validBody({ scope: 'system/Patient.read' }));
        expect(body.fhir_server.scope).to.deep.equal(['user/Patient.rs']);
      });

      it('drops patient/ scopes without a patient in context', async () => {
        const body = await created({
          fhirContext: [item('Practitioner', unique('dr'), ROLE_NEW)],
          scope: 'patient/Patient.read user/Task.read',
        });
        expect(body.fhir_server.scope).to.deep.equal(['user/Task.rs']);
        expect(body.patient).to.equal(null);
      });

      it('caps context resources and expands * in EHR-managed tenants (spec §5.3 rule 2)', async () => {
        const body = await created(validBody({ scope: 'user/*.*' }), MANAGED);
        expect(body.data_tenant).to.deep.equal({ id: 2, name: 'Managed Clinic' });
        expect(body.fhir_server.scope).to.deep.equal([
          'user/DocumentReference.r',
          'user/Encounter.r',
          'user/Patient.r',
          'user/Practitioner.r',
          'user/Questionnaire.rs?project=cardiology',
          'user/QuestionnaireResponse.cruds',
        ]);
        const system = await created(
          validBody({ scope: 'system/Patient.* system/Observation.read' }),
          MANAGED,
        );
        expect(system.fhir_server.scope).to.deep.equal(['system/Observation.rs', 'system/Patient.r']);
      });

      it("limits Questionnaire scopes to the client's projects with their filters (spec §5.3 rule 3)", async () => {
        const own = await created(
          validBody({ scope: 'user/Questionnaire.read?project=radiology&url=http://forms.example/ct' }),
        );
        expect(own.fhir_server.scope).to.deep.equal([
          'user/Questionnaire.rs?project=radiology&url=http%3A%2F%2Fforms.example%2Fct',
        ]);
        const foreign = await created(validBody({ scope: 'user/Questionnaire.read?project=cardiology' }));
        expect(foreign.fhir_server.scope).to.deep.equal([]);
      });

      it('answers 400 for a malformed scope and writes nothing', async () => {
        await expectRefused(() => createSession(validBody({ scope: 'user/Patient.fly' })), 400, /scope/);
      });

      it('creates context resources with role new once, then finds them', async () => {
        const dr = item('Practitioner', unique('dr'), ROLE_NEW);
        const pt = item('Patient', unique('mrn'), ROLE_NEW);
        const first = await created({ fhirContext: [dr, pt] });
        const before = await eventCount();
        const second = await created({ fhirContext: [dr, pt] });
        expect(second.user).to.deep.equal(first.user);
        expect(second.patient).to.deep.equal(first.patient);
        const events = (await app.allEvents()).slice(before);
        expect(events.map((e) => e.type)).to.deep.equal(['SessionCreated']);
        const found = await created({
          fhirContext: [
            { ...dr, role: ROLE_FIND },
            { ...pt, role: undefined },
          ],
        });
        expect(found.user).to.deep.equal(first.user);
        expect(found.patient).to.deep.equal(first.patient);
      });

      it('creates one Patient when two sessions register the same identifier concurrently', async () => {
        const pt = item('Patient', unique('mrn'), ROLE_NEW);
        const bodies = await Promise.all(
          [1, 2, 3].map(() => created({ fhirContext: [item('Practitioner', unique('dr'), ROLE_NEW), pt] })),
        );
        expect(new Set(bodies.map((b) => b.patient.reference)).size).to.equal(1);
        const registered = (await app.allEvents()).filter(
          (e) => e.type === 'PatientRegistered' && JSON.stringify(e.data).includes(pt.identifier.value),
        );
        expect(registered).to.have.length(1);
      });

      it('answers 404 for a fhirContext item of role find or launch without a match (spec §7)', async () => {
        const dr = item('Practitioner', unique('dr'), ROLE_NEW);
        await expectRefused(
          () => createSession({ fhirContext: [dr, item('Patient', unique('none'), ROLE_FIND)] }),
          404,
          /fhirContext\[1\]/,
        );
        await expectRefused(() => createSession({ fhirContext: [dr, item('Patient', unique('none'))] }), 404);
        await expectRefused(
          () => createSession({ fhirContext: [item('Practitioner', unique('none'), ROLE_FIND)] }),
          404,
        );
      });

      it('answers 422 without a resolvable user (spec §7)', async () => {
        await expectRefused(
          () => createSession({ fhirContext: [item('Patient', unique('mrn'), ROLE_NEW)] }),
          422,
          /user/,
        );
        await expectRefused(() => createSession({ user: 999_999 }), 422, /Practitioner\/999999/);
      });

      it('lets user win over a Practitioner fhirContext item', async () => {
        const first = await created();
        const userId = Number(first.user.reference.split('/')[1]);
        const before = await eventCount();
        const body = await created({
          user: userId,
          fhirContext: [item('Practitioner', unique('ignored'), ROLE_NEW)],
        });
        expect(body.user).to.deep.equal({ type: 'Practitioner', reference: `Practitioner/${userId}` });
        const types = (await app.allEvents()).slice(before).map((e) => e.type);
        expect(types).to.deep.equal(['SessionCreated']);
      });

      it('checks patient, encounter and user ids exist in the caller tenant', async () => {
        const general = await created();
        const patientId = Number(general.patient.reference.split('/')[1]);
        const userId = Number(general.user.reference.split('/')[1]);
        const ok = await created({ user: userId, patient: patientId });
        expect(ok.patient).to.deep.equal(general.patient);
        await expectRefused(() => createSession({ user: userId, patient: 987_654 }), 404, /Patient\/987654/);
        await expectRefused(
          () => createSession({ user: userId, encounter: 987_654 }),
          404,
          /Encounter\/987654/,
        );
        // Another tenant's resources read as missing.
        await expectRefused(() => createSession({ user: userId }, MANAGED), 422, /Practitioner/);
        const managedUser = await created(
          { fhirContext: [item('Practitioner', unique('dr'), ROLE_NEW)] },
          MANAGED,
        );
        const managedUserId = Number(managedUser.user.reference.split('/')[1]);
        await expectRefused(() => createSession({ user: managedUserId, patient: patientId }, MANAGED), 404);
      });

      it('registers a new Encounter for the session patient and derives the patient from an encounter', async () => {
        const dr = item('Practitioner', unique('dr'), ROLE_NEW);
        const pt = item('Patient', unique('mrn'), ROLE_NEW);
        const enc = item('Encounter', unique('enc'), ROLE_NEW);
        const body = await created({ fhirContext: [dr, pt, enc] });
        expect(body.encounter.reference).to.match(/^Encounter\/\d+$/);
        const encounterId = Number(body.encounter.reference.split('/')[1]);
        const registered = (await app.allEvents()).find(
          (e) => e.type === 'EncounterRegistered' && e.streamName === `Encounter-${encounterId}`,
        );
        expect(
          (registered!.data as { resource: { subject: { reference: string } } }).resource.subject.reference,
        ).to.equal(`Patient/${Number(body.patient.reference.split('/')[1])}`);
        const derived = await created({ fhirContext: [dr], encounter: encounterId });
        expect(derived.patient).to.deep.equal(body.patient);
        expect(derived.fhir_server.scope).to.include('patient/*.cruds');
      });

      it('answers 422 when the encounter belongs to another patient, or a new encounter has no patient', async () => {
        const dr = item('Practitioner', unique('dr'), ROLE_NEW);
        const body = await created({
          fhirContext: [
            dr,
            item('Patient', unique('mrn'), ROLE_NEW),
            item('Encounter', unique('enc'), ROLE_NEW),
          ],
        });
        const other = await created({ fhirContext: [dr, item('Patient', unique('mrn'), ROLE_NEW)] });
        const encounterId = Number(body.encounter.reference.split('/')[1]);
        const otherPatient = Number(other.patient.reference.split('/')[1]);
        await expectRefused(
          () => createSession({ fhirContext: [dr], encounter: encounterId, patient: otherPatient }),
          422,
          /another patient/,
        );
        await expectRefused(
          () => createSession({ fhirContext: [dr, item('Encounter', unique('enc'), ROLE_NEW)] }),
          422,
          /patient/,
        );
      });

      it('validates every field of spec §2.1 and reports every problem', async () => {
        const problem = await expectRefused(
          () =>
            createSession({
              patient: '12',
              deployment_mode: 'kiosk',
              colour: 'red',
              fhirContext: [item('Practitioner', 'x', ROLE_NEW)],
            }),
          400,
        );
        const paths = (problem as unknown as { errors: { path: string }[] }).errors.map((e) => e.path).sort();
        expect(paths).to.deep.equal(['', 'deployment_mode', 'patient']);
        expect(problem.detail).to.match(/colour/);
        await expectRefused(
          () =>
            createSession({
              fhirContext: [
                {
                  ...item('Practitioner', 'x', ROLE_NEW),
                  identifier: { system: 's', value: 'v', use: 'official' },
                },
              ],
            }),
          400,
          /use/,
        );
        await expectRefused(
          () =>
            createSession({ fhirContext: [item('Practitioner', 'x', 'https://evil.example/role/admin')] }),
          400,
          /role/,
        );
        await expectRefused(
          () => createSession({ fhirContext: [item('Practitioner', 'x'), item('Practitioner', 'y')] }),
          400,
          /one fhirContext item per type/,
        );
        await expectRefused(() => createSession({ fhirContext: [item('Observation', 'x')] }), 400, /type/);
        await expectRefused(() => createSession({ user: 1.5 }), 400, /user/);
        await expectRefused(() => createSession('{"user": 1', GENERAL), 400, /JSON/);
        await expectRefused(() => createSession('user=1', GENERAL, 'application/x-www-form-urlencoded'), 415);
      });

      it('answers 400 for redirects outside the allowed origins (no open redirect)', async () => {
        await expectRefused(
          () => createSession(validBody({ post_submit_redirect: 'https://evil.example/x' })),
          400,
          /post_submit_redirect/,
        );
        await expectRefused(
          () => createSession(validBody({ post_cancel_redirect: 'javascript:alert(1)' })),
          400,
          /post_cancel_redirect/,
        );
        const ok = await created(validBody({ post_submit_redirect: `${app.casebook.config.appUrl}/done` }));
        expect(ok.post_submit_redirect).to.equal(`${app.casebook.config.appUrl}/done`);
      });

      it('answers 401 with a Basic challenge for missing or wrong client credentials', async () => {
        const missing = await expectRefused(() => createSession(validBody(), null), 401);
        expect(missing.detail).to.match(/credentials/);
        const res = await createSession(validBody(), basic('ehr-backend', 'wrong-secret-000000000'));
        expect(res.status).to.equal(401);
        expect(res.headers.get('www-authenticate')).to.match(/^Basic realm="casebook"/);
        expect(
          (await createSession(validBody(), basic('nobody', 'general-secret-0123456789'))).status,
        ).to.equal(401);
      });

      it('keeps deployment_mode standalone when asked', async () => {
        const body = await created(validBody({ deployment_mode: 'standalone' }));
        expect(body.deployment_mode).to.equal('standalone');
      });
    });

    describe('GET and DELETE /sessions/{id}', () => {
      it('reads a session with exactly the fields of spec §2.4', async () => {
        const s = await created();
        const res = await fetch(`${app.authUrl}/sessions/${s.id}`, { headers: { Authorization: GENERAL } });
        expect(res.status).to.equal(200);
        const body = (await res.json()) as Record<string, any>;
        const now = app.casebook.clock().toISOString();
        expect(body).to.deep.equal({
          id: s.id,
          user: s.user,
          data_tenant: { id: 1, name: 'General Hospital' },
          patient: s.patient,
          encounter: null,
          active: false,
          expired_timestamp: s.expired_timestamp,
          created_timestamp: now,
          last_modified_timestamp: now,
          deployment_mode: 'embedded',
          fhir_server: { address: null, scope: s.fhir_server.scope },
        });
      });

      it("answers 404 for another tenant's session, a missing one and a non-integer id (spec §5 rule 1)", async () => {
        const s = await created();
        await expectRefused(
          () => fetch(`${app.authUrl}/sessions/${s.id}`, { headers: { Authorization: MANAGED } }),
          404,
        );
        await expectRefused(
          () =>
            fetch(`${app.authUrl}/sessions/${s.id}`, {
              method: 'DELETE',
              headers: { Authorization: MANAGED },
            }),
          404,
        );
        await expectRefused(
          () => fetch(`${app.authUrl}/sessions/99999999`, { headers: { Authorization: GENERAL } }),
          404,
        );
        await expectRefused(
          () => fetch(`${app.authUrl}/sessions/abc`, { headers: { Authorization: GENERAL } }),
          404,
        );
        await expectRefused(() => fetch(`${app.authUrl}/sessions/${s.id}`), 401);
      });

      it('ends a session with 204; ending it again changes nothing', async () => {
        const s = await created();
        const res = await fetch(`${app.authUrl}/sessions/${s.id}`, {
          method: 'DELETE',
          headers: { Authorization: GENERAL },
        });
        expect(res.status).to.equal(204);
        expect(await res.text()).to.equal('');
        const ended = (await app.allEvents())
          .filter((e) => e.streamName === `session-${s.id}`)
          .map((e) => e.type);
        expect(ended).to.deep.equal(['SessionCreated', 'SessionEnded']);
        const before = await eventCount();
        const again = await fetch(`${app.authUrl}/sessions/${s.id}`, {
          method: 'DELETE',
          headers: { Authorization: GENERAL },
        });
        expect(again.status).to.equal(204);
        expect(await eventCount()).to.equal(before);
        const read = await fetch(`${app.authUrl}/sessions/${s.id}`, { headers: { Authorization: GENERAL } });
        expect(((await read.json()) as { active: boolean }).active).to.equal(false);
      });
    });

    describe('/sessions/$handover', () => {
      const next = () => `${app.casebook.config.appUrl}/external/v1?task=Task/1`;

      it('answers 303 to next with the auth_session cookie (spec §4.1 rule 3)', async () => {
        const s = await created();
        const res = await handover(s.handover_token, next());
        expect(res.status).to.equal(303);
        expect(res.headers.get('location')).to.equal(next());
        const setCookie = res.headers.getSetCookie().find((c) => c.startsWith('auth_session='))!;
        const attributes = setCookie.split(';').map((a) => a.trim());
        expect(attributes).to.include.members(['HttpOnly', 'Secure', 'SameSite=Strict', 'Path=/']);
        expect(attributes.find((a) => a.startsWith('Expires='))).to.equal(
          `Expires=${new Date(s.expired_timestamp).toUTCString()}`,
        );
        const events = (await app.allEvents()).filter((e) => e.streamName === `session-${s.id}`);
        expect(events.map((e) => e.type)).to.deep.equal(['SessionCreated', 'SessionHandedOver']);
        expect(events[1]!.metadata.actor).to.deep.equal({ type: 'session', id: String(s.id) });
        expect(events[1]!.metadata.tenantId).to.equal(1);
      });

      it('accepts a form-encoded POST', async () => {
        const s = await created();
        const res = await handover(s.handover_token, next(), 'POST');
        expect(res.status).to.equal(303);
        expect(res.headers.get('location')).to.equal(next());
        const me = await current(cookieOf(res));
        expect(me.status).to.equal(200);
      });

      it('answers 401 for a token used twice', async () => {
        const s = await created();
        expect((await handover(s.handover_token, next())).status).to.equal(303);
        const body = await expectRefused(() => handover(s.handover_token, next()), 401);
        expect(body.detail).to.match(/already used|not valid/);
      });

      it('lets exactly one of two racing handovers succeed', async () => {
        const s = await created();
        const results = await Promise.all([1, 2, 3, 4].map(() => handover(s.handover_token, next())));
        expect(results.map((r) => r.status).sort()).to.deep.equal([303, 401, 401, 401]);
        const handedOver = (await app.allEvents()).filter(
          (e) => e.streamName === `session-${s.id}` && e.type === 'SessionHandedOver',
        );
        expect(handedOver).to.have.length(1);
      });

      it('answers 401 for a token older than 5 minutes (spec §7, §8)', async () => {
        const early = await created();
        const late = await created();
        app.advance(5 * MINUTE - 1);
        expect((await handover(early.handover_token, next())).status).to.equal(303);
        app.advance(1);
        const body = await expectRefused(() => handover(late.handover_token, next()), 401, /expired/);
        expect((body as unknown as { code: string }).code).to.equal('HandoverTokenExpired');
      });

      it('answers 400 for next outside the allowed origins and leaves the token usable', async () => {
        const s = await created();
        await expectRefused(() => handover(s.handover_token, 'https://evil.example/phish'), 400, /next/);
        await expectRefused(() => handover(s.handover_token, '/relative/path'), 400, /next/);
        const ok = await handover(s.handover_token, 'https://ehr.example.org/back');
        expect(ok.status).to.equal(303);
        expect(ok.headers.get('location')).to.equal('https://ehr.example.org/back');
      });

      it('answers 400 without token or next and 401 for a malformed token', async () => {
        await expectRefused(
          () =>
            fetch(`${app.authUrl}/sessions/$handover?next=${encodeURIComponent(next())}`, {
              redirect: 'manual',
            }),
          400,
          /token/,
        );
        await expectRefused(
          () => fetch(`${app.authUrl}/sessions/$handover?token=abc`, { redirect: 'manual' }),
          400,
          /next/,
        );
        await expectRefused(() => handover('not-a-token', next()), 401);
        await expectRefused(() => handover(`1.${'A'.repeat(43)}`, next()), 401);
      });
    });

    describe('GET /sessions/current', () => {
      const activate = async (extra: Record<string, unknown> = {}) => {
        const s = await created(validBody(extra));
        const res = await handover(s.handover_token, `${app.casebook.config.appUrl}/`);
        return { session: s, cookie: cookieOf(res) };
      };

      it('answers 200 with the session of the cookie (spec §2.4)', async () => {
        const { session, cookie } = await activate({ deployment_mode: 'standalone' });
        const res = await current(cookie);
        expect(res.status).to.equal(200);
        const body = (await res.json()) as Record<string, any>;
        expect(body.id).to.equal(session.id);
        expect(body.active).to.equal(true);
        expect(body.deployment_mode).to.equal('standalone');
        expect(body.fhir_server).to.deep.equal({ address: null, scope: session.fhir_server.scope });
        expect(Object.keys(body).sort()).to.deep.equal(
          [
            'active',
            'created_timestamp',
            'data_tenant',
            'deployment_mode',
            'encounter',
            'expired_timestamp',
            'fhir_server',
            'id',
            'last_modified_timestamp',
            'patient',
            'user',
          ].sort(),
        );
      });

      it('answers 401 without a cookie or with an unknown one', async () => {
        await expectRefused(() => current(), 401, /auth_session/);
        await expectRefused(() => current('auth_session=forged'), 401);
      });

      it('refuses the cookie immediately after DELETE', async () => {
        const { session, cookie } = await activate();
        expect((await current(cookie)).status).to.equal(200);
        const del = await fetch(`${app.authUrl}/sessions/${session.id}`, {
          method: 'DELETE',
          headers: { Authorization: GENERAL },
        });
        expect(del.status).to.equal(204);
        await expectRefused(() => current(cookie), 401);
      });

      it('refuses the cookie once the session is 7.5 days old', async () => {
        const { session, cookie } = await activate();
        app.advance(7.5 * DAY - 1);
        expect((await current(cookie)).status).to.equal(200);
        app.advance(1);
        await expectRefused(() => current(cookie), 401);
        const read = await fetch(`${app.authUrl}/sessions/${session.id}`, {
          headers: { Authorization: GENERAL },
        });
        expect(((await read.json()) as { active: boolean }).active).to.equal(false);
      });
    });
  });
}
