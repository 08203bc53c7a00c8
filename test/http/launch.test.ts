/**
 * The hospital launcher over HTTP (issue 6; spec §1.6, §4.6): GET {launch_url} validates, sends
 * the transaction Bundle and creates the session with the launcher's client credentials, then
 * redirects through the handover to the app's launch URL; GET {launch_url}/submitted.
 */
import { expect } from 'chai';
import { seed, startTestApp, type TestApp } from '../support/app.js';
import { testDatabases } from '../support/databases.js';
import { fhir } from '../support/fhir.js';
import { launchUrlOf, TEST_LAUNCH_SECRET } from '../support/launch.js';

const LAUNCHER_ENV = {
  LAUNCHER_CLIENT_ID: 'ehr-backend',
  LAUNCHER_CLIENT_SECRET: 'general-secret-0123456789',
  LAUNCHER_SHARED_SECRET: TEST_LAUNCH_SECRET,
};

for (const database of testDatabases) {
  describe(`launcher GET /launch on ${database.name}`, () => {
    let app: TestApp;
    let seq = 0;
    const unique = (prefix: string) => `${prefix}-${++seq}-${Math.random().toString(36).slice(2, 8)}`;

    before(async () => {
      app = await startTestApp(database, { env: LAUNCHER_ENV });
      await seed(app);
    });
    after(() => app?.close());

    const local = (url: string) => url.replace('//localhost:', '//127.0.0.1:');
    const get = (url: string, headers: Record<string, string> = {}) =>
      fetch(local(url), { redirect: 'manual', headers });
    const launchUrl = (params: Record<string, string>) => launchUrlOf(app, params);

    /** Launches, follows the handover and the app's launch URL; returns every step. */
    const launchThrough = async (params: Record<string, string>) => {
      const launch = await get(launchUrl(params));
      expect(launch.status, await launch.clone().text()).to.equal(303);
      const launchEvents = (await app.allEvents()).length;
      const handover = new URL(launch.headers.get('location')!);
      expect(`${handover.origin}${handover.pathname}`).to.equal(
        `${app.casebook.config.authUrl}/sessions/$handover`,
      );
      expect(handover.searchParams.get('token')).to.be.a('string').and.not.empty;
      const next = handover.searchParams.get('next')!;
      const taskId = /^.*\/external\/v1\?task=Task\/(\d+)$/.exec(next)?.[1];
      expect(next).to.equal(`${app.casebook.config.appUrl}/external/v1?task=Task/${taskId}`);
      const handed = await get(handover.href);
      expect(handed.status).to.equal(303);
      expect(handed.headers.get('location')).to.equal(next);
      const cookie = /auth_session=[^;]+/.exec(handed.headers.get('set-cookie') ?? '')?.[0];
      expect(cookie, 'session cookie').to.be.a('string');
      const opened = await get(next, { Cookie: cookie! });
      return { taskId: Number(taskId), cookie: cookie!, opened, launchEvents };
    };

    it('creates the context resources and a Task and opens form selection for a new Task', async () => {
      const encounter = unique('enc');
      const patient = unique('pat');
      const before = (await app.allEvents()).length;
      const { taskId, opened, cookie, launchEvents } = await launchThrough({
        patient,
        encounter,
        user: 'dr-who',
        supervisor: 'dr-house',
        dob: '1970-01-02',
        sex: 'F',
      });
      expect(opened.status).to.equal(303);
      expect(opened.headers.get('location')).to.equal(`${app.casebook.config.appUrl}/tasks/${taskId}/forms`);

      // Every event GET /launch wrote is the launcher's client's.
      const written = (await app.allEvents()).slice(before, launchEvents);
      expect(written.length).to.be.greaterThan(0);
      for (const e of written) expect(e.metadata.actor).to.deep.equal({ type: 'client', id: 'ehr-backend' });
      expect(written.map((e) => e.type)).to.include('SessionCreated');

      // The data as the hospital sent it.
      const { patientSystem, encounterSystem, taskSystem } = app.casebook.config.launcher;
      const task = await fhir(app, 'GET', `/Task/${taskId}`);
      expect(task.status).to.equal(200);
      expect(task.body).to.deep.include({ status: 'draft', intent: 'order' });
      expect(task.body.identifier).to.deep.equal([{ system: taskSystem, value: encounter }]);
      const patientId = /^Patient\/(\d+)$/.exec(task.body.for.reference)![1];
      const pat = await fhir(app, 'GET', `/Patient/${patientId}`);
      expect(pat.body).to.deep.include({ birthDate: '1970-01-02', gender: 'female' });
      expect(pat.body.identifier).to.deep.equal([{ system: patientSystem, value: patient }]);
      const enc = await fhir(app, 'GET', `/${task.body.encounter.reference}`);
      expect(enc.body.identifier).to.deep.equal([{ system: encounterSystem, value: encounter }]);
      expect(enc.body.subject).to.deep.equal({ reference: `Patient/${patientId}` });
      const owner = await fhir(app, 'GET', `/${task.body.owner.reference}`);
      expect(owner.body.identifier[0].value).to.equal('dr-who');

      // The session: the user, with patient/encounter context.
      const current = await fetch(local(`${app.casebook.config.authUrl}/sessions/current`), {
        headers: { Cookie: cookie },
      });
      const session = (await current.json()) as Record<string, unknown>;
      expect(session.user).to.deep.equal({ type: 'Practitioner', reference: task.body.owner.reference });
      expect(session.patient).to.deep.equal({ type: 'Patient', reference: `Patient/${patientId}` });
      expect(session.encounter).to.deep.equal({
        type: 'Encounter',
        reference: task.body.encounter.reference,
      });
    });

    it('reopens the same Task for the same encounter, in the report editor once it has a response', async () => {
      const params = { patient: unique('pat'), encounter: unique('enc'), supervisor: 'dr-house' };
      const first = await launchThrough(params);
      const second = await launchThrough(params);
      expect(second.taskId).to.equal(first.taskId);
      expect(second.opened.headers.get('location')).to.equal(
        `${app.casebook.config.appUrl}/tasks/${first.taskId}/forms`,
      );

      // The report is started: a QuestionnaireResponse on the Task.
      const task = (await fhir(app, 'GET', `/Task/${first.taskId}`)).body;
      const qr = await fhir(app, 'POST', '/QuestionnaireResponse', {
        body: {
          resourceType: 'QuestionnaireResponse',
          questionnaire: 'http://example.org/Questionnaire/launch-test',
          status: 'in-progress',
          subject: task.for,
        },
      });
      expect(qr.status, JSON.stringify(qr.body)).to.equal(201);
      const { meta: _meta, ...rest } = task;
      const updated = await fhir(app, 'PUT', `/Task/${first.taskId}`, {
        body: { ...rest, status: 'in-progress', focus: { reference: `QuestionnaireResponse/${qr.body.id}` } },
      });
      expect(updated.status, JSON.stringify(updated.body)).to.equal(200);

      const third = await launchThrough(params);
      expect(third.taskId).to.equal(first.taskId);
      expect(third.opened.status).to.equal(303);
      expect(third.opened.headers.get('location')).to.match(
        new RegExp(`^${app.casebook.config.appUrl}/tasks/${first.taskId}/report(\\?|$)`),
      );
    });

    const invalid: [string, Record<string, string>, RegExp][] = [
      ['no patient', { encounter: 'E', user: 'U' }, /no patient number/],
      ['no encounter', { patient: 'P', user: 'U' }, /no encounter number/],
      [
        'neither user nor supervisor',
        { patient: 'P', encounter: 'E' },
        /user or supervisor is required to open a session/i,
      ],
      ['a malformed dob', { patient: 'P', encounter: 'E', user: 'U', dob: '02/01/1970' }, /YYYY-MM-DD/],
      [
        'an impossible dob',
        { patient: 'P', encounter: 'E', user: 'U', dob: '1970-02-30' },
        /not a real date/,
      ],
      [
        'an unknown sex code',
        { patient: 'P', encounter: 'E', user: 'U', sex: 'Z' },
        /sex &quot;Z&quot; is not a known code/i,
      ],
    ];
    for (const [name, params, message] of invalid)
      it(`answers 400 with an error page and writes nothing for ${name}`, async () => {
        const before = (await app.allEvents()).length;
        const res = await get(launchUrl(params));
        expect(res.status).to.equal(400);
        expect(res.headers.get('content-type')).to.match(/^text\/html/);
        const html = await res.text();
        expect(html).to.match(message);
        expect(html).to.include('This link is not valid');
        expect((await app.allEvents()).length).to.equal(before);
      });

    it('answers 401 on the submitted page without the session cookie (the export status is not public)', async () => {
      const res = await get(`${app.baseUrl}/launch/submitted?response=QuestionnaireResponse/12&task=Task/34`);
      expect(res.status).to.equal(401);
      expect(res.headers.get('content-type')).to.match(/^text\/html/);
      const html = await res.text();
      expect(html).not.to.include('Status: <span class="badge');
      expect(html).to.include('auth_session');
    });

    it('answers 400 on the submitted page without valid references', async () => {
      const res = await get(`${app.baseUrl}/launch/submitted?response=12&task=Task/34`);
      expect(res.status).to.equal(400);
      expect(res.headers.get('content-type')).to.match(/^text\/html/);
      expect(await res.text()).to.include('Response must be a reference such as QuestionnaireResponse/123');
    });
  });
}

describe('launcher failures', () => {
  const pglite = testDatabases.find((d) => d.name === 'pglite')!;

  it('answers 503 when the launcher has no client credentials', async () => {
    const app = await startTestApp(pglite);
    try {
      const res = await fetch(`${app.baseUrl}/launch?patient=P&encounter=E&user=U`, { redirect: 'manual' });
      expect(res.status).to.equal(503);
      expect(res.headers.get('content-type')).to.match(/^text\/html/);
      expect(await res.text()).to.include('The launcher is not configured');
    } finally {
      await app.close();
    }
  });

  it('answers 503 when the launcher credentials do not match its API client, and writes nothing', async () => {
    const app = await startTestApp(pglite, {
      env: {
        LAUNCHER_CLIENT_ID: 'ehr-backend',
        LAUNCHER_CLIENT_SECRET: 'wrong-secret-0123456789',
        LAUNCHER_SHARED_SECRET: TEST_LAUNCH_SECRET,
      },
    });
    try {
      await seed(app);
      const before = (await app.allEvents()).length;
      const res = await fetch(launchUrlOf(app, { patient: 'P', encounter: 'E', user: 'U' }), {
        redirect: 'manual',
      });
      // The launcher runs in-process with its client's identity: a wrong secret is a misconfiguration.
      expect(res.status).to.equal(503);
      expect(res.headers.get('content-type')).to.match(/^text\/html/);
      expect(await res.text()).to.include('do not match an API client');
      expect((await app.allEvents()).length).to.equal(before);
    } finally {
      await app.close();
    }
  });
});
