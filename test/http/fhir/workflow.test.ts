/**
 * Task, Questionnaire and QuestionnaireResponse on {fhir_base_url} (issue 3; spec §2.6, §3.2,
 * §5.3 rule 3): create, read, update (status events), search (incl. _include), project rules,
 * asserted over HTTP against a real casebook on PGlite and on the Postgres server.
 */
import { expect } from 'chai';
import type { Seed } from '../../../src/commands/seed.js';
import { basic, GENERAL, MANAGED, seed, startTestApp, type TestApp } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import { type Credentials, entryRefs, expectOutcome, fhir } from '../../support/fhir.js';

const PROJECT_TAG_SYSTEM = 'https://casebook.dev/fhir/CodeSystem/project';
const INPUT_SYSTEM = 'https://casebook.dev/fhir/CodeSystem/task-input';

/** Tenant 1 gets a client with two projects and one with another single project. */
const EXTRA_SEED: Seed = {
  tenants: [
    {
      name: 'General Hospital',
      ehr_managed: false,
      allowed_scopes: ['patient/*.*', 'user/*.*'],
      redirect_origins: ['https://ehr.example.org'],
      clients: [
        {
          client_id: 'two-projects',
          client_secret: 'two-projects-secret-0123456789',
          scopes: ['system/*.*'],
          projects: ['radiology', 'pathology'],
        },
        {
          client_id: 'oncology-backend',
          client_secret: 'oncology-secret-0123456789',
          scopes: ['system/*.*'],
          projects: ['oncology'],
        },
      ],
      questionnaires: [],
    },
  ],
};
const TWO_PROJECTS = basic('two-projects', 'two-projects-secret-0123456789');
const ONCOLOGY = basic('oncology-backend', 'oncology-secret-0123456789');

for (const database of testDatabases) {
  describe(`Task, Questionnaire and QuestionnaireResponse on ${database.name}`, () => {
    let app: TestApp;
    let seq = 0;
    const unique = (prefix: string) => `${prefix}-${++seq}-${Math.random().toString(36).slice(2, 8)}`;

    before(async () => {
      app = await startTestApp(database);
      await seed(app);
      await seed(app, EXTRA_SEED);
    });
    after(() => app?.close());

    const eventCount = async () => (await app.allEvents()).length;
    const eventsSince = async (before: number) => (await app.allEvents()).slice(before);

    /** POSTs a resource and returns its id (asserting 201). */
    const create = async (body: Record<string, unknown>, auth: Credentials = GENERAL): Promise<string> => {
      const res = await fhir(app, 'POST', `/${body.resourceType}`, { body, auth });
      expect(res.status, JSON.stringify(res.body)).to.equal(201);
      return res.body.id as string;
    };
    const newPatient = (auth: Credentials = GENERAL) =>
      create(
        {
          resourceType: 'Patient',
          identifier: [{ system: 'urn:test:mrn', value: unique('mrn') }],
          name: [{ family: 'Doe', given: ['Jane'] }],
        },
        auth,
      );
    const newEncounter = (patientId: string, auth: Credentials = GENERAL) =>
      create(
        {
          resourceType: 'Encounter',
          identifier: [{ system: 'urn:test:visit', value: unique('visit') }],
          status: 'in-progress',
          subject: { reference: `Patient/${patientId}` },
        },
        auth,
      );

    const redirectInput = (url: string) => ({
      type: { coding: [{ system: INPUT_SYSTEM, code: 'post-submit-redirect' }] },
      valueUrl: url,
    });

    const responseBody = (patientId: string, encounterId: string | undefined, extra = {}) => ({
      resourceType: 'QuestionnaireResponse',
      questionnaire: 'https://forms.example.org/Questionnaire/chest-ct|1.0',
      status: 'in-progress',
      subject: { reference: `Patient/${patientId}` },
      ...(encounterId ? { encounter: { reference: `Encounter/${encounterId}` } } : {}),
      item: [{ linkId: 'findings', text: 'Findings', answer: [{ valueString: 'No acute findings' }] }],
      ...extra,
    });

    describe('Task', () => {
      let patientId: string;
      let encounterId: string;
      let responseId: string;
      before(async () => {
        patientId = await newPatient();
        encounterId = await newEncounter(patientId);
        responseId = await create(responseBody(patientId, encounterId));
      });

      const taskBody = (extra: Record<string, unknown> = {}) => ({
        resourceType: 'Task',
        identifier: [{ system: 'urn:test:task', value: unique('task') }],
        status: 'ready',
        intent: 'order',
        for: { reference: `Patient/${patientId}` },
        encounter: { reference: `Encounter/${encounterId}` },
        focus: { reference: `QuestionnaireResponse/${responseId}` },
        input: [redirectInput('https://ehr.example.org/report-done?case=7')],
        output: [
          {
            type: { coding: [{ system: INPUT_SYSTEM, code: 'questionnaire-response' }] },
            valueReference: { reference: `QuestionnaireResponse/${responseId}` },
          },
        ],
        ...extra,
      });

      it('creates a Task with identifier, patient, encounter, redirect input and its response (201, TaskCreated)', async () => {
        const before = await eventCount();
        const body = taskBody();
        const res = await fhir(app, 'POST', '/Task', { body, headers: { 'X-Request-Id': 'req-task-1' } });
        expect(res.status, JSON.stringify(res.body)).to.equal(201);
        expect(res.body.resourceType).to.equal('Task');
        expect(res.body.id).to.match(/^\d+$/);
        expect(res.body.meta.versionId).to.equal('1');
        expect(res.headers.get('etag')).to.equal('W/"1"');
        expect(res.headers.get('location')).to.equal(
          `${app.casebook.config.fhirUrl}/Task/${res.body.id}/_history/1`,
        );
        const { resourceType: _r, ...content } = body;
        expect(res.body).to.deep.include(content);

        const events = await eventsSince(before);
        expect(events.map((e) => e.type)).to.deep.equal(['ReservationClaimed', 'TaskCreated']);
        const created = events[1]!;
        expect(created.streamName).to.equal(`Task-${res.body.id}`);
        expect(created.data).to.deep.include({ id: Number(res.body.id), tenantId: 1 });
        expect((created.data as { resource: unknown }).resource).to.deep.equal(content);
        expect(created.metadata).to.deep.include({
          tenantId: 1,
          actor: { type: 'client', id: 'ehr-backend' },
          requestId: 'req-task-1',
        });
      });

      it('accepts every status of spec §2.6 and refuses others with 422', async () => {
        for (const status of ['draft', 'ready', 'in-progress', 'completed', 'failed']) {
          const res = await fhir(app, 'POST', '/Task', { body: taskBody({ status }) });
          expect(res.status, `${status}: ${JSON.stringify(res.body)}`).to.equal(201);
          expect(res.body.status).to.equal(status);
        }
        const before = await eventCount();
        const refused = await fhir(app, 'POST', '/Task', { body: taskBody({ status: 'cancelled' }) });
        const issue = expectOutcome(refused, 422, 'invalid');
        expect(issue.expression).to.deep.equal(['Task.status']);
        expect(await eventCount()).to.equal(before);
      });

      it('reports a missing status as required (422)', async () => {
        const before = await eventCount();
        const issue = expectOutcome(
          await fhir(app, 'POST', '/Task', { body: taskBody({ status: undefined }) }),
          422,
          'required',
        );
        expect(issue.expression).to.deep.equal(['Task.status']);
        expect(await eventCount()).to.equal(before);
      });

      it('refuses references to resources missing in the tenant (422) and a duplicate identifier (409)', async () => {
        const before = await eventCount();
        const missing = await fhir(app, 'POST', '/Task', {
          body: taskBody({ for: { reference: 'Patient/999999' } }),
        });
        expectOutcome(missing, 422, 'not-found');
        const body = taskBody();
        await create(body);
        const afterFirst = await eventCount();
        expect(afterFirst).to.equal(before + 2);
        const duplicate = await fhir(app, 'POST', '/Task', {
          body: taskBody({ identifier: body.identifier }),
        });
        expectOutcome(duplicate, 409, 'duplicate');
        expect(await eventCount()).to.equal(afterFirst);
      });

      it('reads a Task by id (200 with ETag); missing or other tenant → 404', async () => {
        const body = taskBody();
        const id = await create(body);
        const res = await fhir(app, 'GET', `/Task/${id}`);
        expect(res.status).to.equal(200);
        expect(res.headers.get('etag')).to.equal('W/"1"');
        expect(res.body).to.deep.include({
          resourceType: 'Task',
          id,
          status: 'ready',
          identifier: body.identifier,
        });
        expect(res.body.for).to.deep.equal({ reference: `Patient/${patientId}` });
        expect(res.body.encounter).to.deep.equal({ reference: `Encounter/${encounterId}` });
        expect(res.body.input).to.deep.equal(body.input);
        expectOutcome(await fhir(app, 'GET', `/Task/${id}`, { auth: MANAGED }), 404, 'not-found');
        expectOutcome(await fhir(app, 'GET', '/Task/999999'), 404, 'not-found');
      });

      it('records a status change as TaskStatusChanged (with the old status), other edits as TaskUpdated', async () => {
        const body = taskBody({ status: 'draft', focus: undefined, output: undefined });
        const id = await create(body);
        let before = await eventCount();
        const started = await fhir(app, 'PUT', `/Task/${id}`, {
          body: {
            ...body,
            id,
            status: 'in-progress',
            focus: { reference: `QuestionnaireResponse/${responseId}` },
          },
        });
        expect(started.status, JSON.stringify(started.body)).to.equal(200);
        expect(started.body.status).to.equal('in-progress');
        expect(started.body.meta.versionId).to.equal('2');
        expect(started.headers.get('etag')).to.equal('W/"2"');
        let events = await eventsSince(before);
        expect(events.map((e) => e.type)).to.deep.equal(['TaskStatusChanged']);
        expect(events[0]!.streamName).to.equal(`Task-${id}`);
        expect(events[0]!.data).to.deep.include({ id: Number(id), from: 'draft' });
        expect((events[0]!.data as { resource: { status: string } }).resource.status).to.equal('in-progress');
        expect(events[0]!.metadata).to.deep.include({
          tenantId: 1,
          actor: { type: 'client', id: 'ehr-backend' },
        });

        before = await eventCount();
        const described = await fhir(app, 'PUT', `/Task/${id}`, {
          body: { ...started.body, description: 'Chest CT report' },
        });
        expect(described.status).to.equal(200);
        events = await eventsSince(before);
        expect(events.map((e) => e.type)).to.deep.equal(['TaskUpdated']);

        before = await eventCount();
        const completed = await fhir(app, 'PUT', `/Task/${id}`, {
          body: { ...described.body, status: 'completed' },
        });
        expect(completed.body.status).to.equal('completed');
        events = await eventsSince(before);
        expect(events.map((e) => e.type)).to.deep.equal(['TaskStatusChanged']);
        expect(events[0]!.data).to.deep.include({ from: 'in-progress' });

        // An update that changes nothing appends nothing and keeps the version.
        before = await eventCount();
        const same = await fhir(app, 'PUT', `/Task/${id}`, { body: completed.body });
        expect(same.status).to.equal(200);
        expect(same.body.meta.versionId).to.equal('4');
        expect(await eventCount()).to.equal(before);

        const read = await fhir(app, 'GET', `/Task/${id}`);
        expect(read.body).to.deep.include({ status: 'completed', description: 'Chest CT report' });
        expect(read.body.meta.versionId).to.equal('4');
      });

      it('replaces the Task on update (no partial update) and refuses updates of other tenants (404)', async () => {
        const body = taskBody();
        const id = await create(body);
        const { input: _input, output: _output, focus: _focus, ...rest } = body;
        const res = await fhir(app, 'PUT', `/Task/${id}`, { body: { ...rest, id } });
        expect(res.status).to.equal(200);
        expect(res.body).not.to.have.property('input');
        expect(res.body).not.to.have.property('focus');
        const before = await eventCount();
        expectOutcome(
          await fhir(app, 'PUT', `/Task/${id}`, { body: { ...body, id, status: 'failed' }, auth: MANAGED }),
          404,
          'not-found',
        );
        expect(await eventCount()).to.equal(before);
      });

      it('searches Tasks by identifier (system|value and value) as a searchset Bundle', async () => {
        const body = taskBody();
        const id = await create(body);
        await create(taskBody());
        const { system, value } = body.identifier[0]!;
        const res = await fhir(app, 'GET', `/Task?identifier=${encodeURIComponent(`${system}|${value}`)}`);
        expect(res.status).to.equal(200);
        expect(res.body).to.deep.include({ resourceType: 'Bundle', type: 'searchset', total: 1 });
        expect(entryRefs(res.body)).to.deep.equal([`Task/${id}`]);
        expect(res.body.entry[0].search).to.deep.equal({ mode: 'match' });
        expect(res.body.entry[0].fullUrl).to.equal(`${app.casebook.config.fhirUrl}/Task/${id}`);
        expect(res.body.entry[0].resource.identifier).to.deep.equal(body.identifier);

        const byValue = await fhir(app, 'GET', `/Task?identifier=${encodeURIComponent(value)}`);
        expect(entryRefs(byValue.body)).to.deep.equal([`Task/${id}`]);
        const otherSystem = await fhir(
          app,
          'GET',
          `/Task?identifier=${encodeURIComponent(`urn:other|${value}`)}`,
        );
        expect(otherSystem.body.total).to.equal(0);
        expect(otherSystem.body).not.to.have.property('entry'); // no empty arrays in FHIR JSON
        // Another tenant does not see it.
        const managed = await fhir(
          app,
          'GET',
          `/Task?identifier=${encodeURIComponent(`${system}|${value}`)}`,
          {
            auth: MANAGED,
          },
        );
        expect(managed.status).to.equal(200);
        expect(managed.body.total).to.equal(0);
      });

      it('answers 400 for an unsupported search parameter', async () => {
        expectOutcome(await fhir(app, 'GET', '/Task?owner=Practitioner/1'), 400, 'not-supported');
      });

      it('limits the entries with _count while total counts every match', async () => {
        const ids = [await create(taskBody()), await create(taskBody()), await create(taskBody())];
        const res = await fhir(app, 'GET', `/Task?_id=${ids.join(',')}&_count=2`);
        expect(res.status).to.equal(200);
        expect(entryRefs(res.body)).to.deep.equal(ids.slice(0, 2).map((id) => `Task/${id}`));
        expect(res.body.total).to.equal(3);
      });
    });

    describe('Questionnaire', () => {
      const questionnaire = (extra: Record<string, unknown> = {}) => ({
        resourceType: 'Questionnaire',
        url: `https://forms.example.org/Questionnaire/${unique('q')}`,
        version: '1.0',
        identifier: [{ system: 'urn:test:form', value: unique('form') }],
        name: 'ChestCT',
        title: 'Chest CT report',
        status: 'active',
        item: [{ linkId: 'findings', text: 'Findings', type: 'text' }],
        ...extra,
      });
      const tagged = (project: string) => ({
        meta: { tag: [{ system: PROJECT_TAG_SYSTEM, code: project }] },
      });

      it("creates a Questionnaire in the client's only project when it has no tag (QuestionnaireCreated)", async () => {
        const before = await eventCount();
        const body = questionnaire();
        const res = await fhir(app, 'POST', '/Questionnaire', { body });
        expect(res.status, JSON.stringify(res.body)).to.equal(201);
        expect(res.body).to.deep.include({ resourceType: 'Questionnaire', url: body.url, version: '1.0' });
        expect(res.body.item).to.deep.equal(body.item);
        const events = await eventsSince(before);
        expect(events.map((e) => e.type)).to.deep.equal(['QuestionnaireCreated']);
        expect(events[0]!.data).to.deep.include({
          id: Number(res.body.id),
          tenantId: 1,
          project: 'radiology',
        });
        expect(events[0]!.metadata).to.deep.include({
          tenantId: 1,
          actor: { type: 'client', id: 'ehr-backend' },
        });
      });

      it('takes the project from the meta.tag of the project system', async () => {
        const before = await eventCount();
        const res = await fhir(app, 'POST', '/Questionnaire', {
          body: questionnaire(tagged('pathology')),
          auth: TWO_PROJECTS,
        });
        expect(res.status, JSON.stringify(res.body)).to.equal(201);
        const events = await eventsSince(before);
        expect(events.map((e) => e.type)).to.deep.equal(['QuestionnaireCreated']);
        expect(events[0]!.data).to.deep.include({ project: 'pathology' });
        expect(events[0]!.metadata).to.deep.include({ actor: { type: 'client', id: 'two-projects' } });
      });

      it('refuses a foreign project tag with 403 and writes nothing (spec §5.3 rule 3)', async () => {
        const before = await eventCount();
        expectOutcome(
          await fhir(app, 'POST', '/Questionnaire', { body: questionnaire(tagged('cardiology')) }),
          403,
          'forbidden',
        );
        expectOutcome(
          await fhir(app, 'POST', '/Questionnaire', { body: questionnaire(tagged('oncology')) }),
          403,
          'forbidden',
        );
        expect(await eventCount()).to.equal(before);
      });

      it('answers 422 when a client with several projects names none', async () => {
        const before = await eventCount();
        expectOutcome(
          await fhir(app, 'POST', '/Questionnaire', { body: questionnaire(), auth: TWO_PROJECTS }),
          422,
          'required',
        );
        expect(await eventCount()).to.equal(before);
      });

      it('validates the Questionnaire (422)', async () => {
        expectOutcome(
          await fhir(app, 'POST', '/Questionnaire', { body: questionnaire({ status: 'published' }) }),
          422,
          'invalid',
        );
        expectOutcome(
          await fhir(app, 'POST', '/Questionnaire', { body: questionnaire({ item: [{ type: 'text' }] }) }),
          422,
          'required',
        );
      });

      it("reads a Questionnaire of the client's projects; another project's → 403, another tenant → 404", async () => {
        const body = questionnaire();
        const id = await create(body);
        const res = await fhir(app, 'GET', `/Questionnaire/${id}`);
        expect(res.status).to.equal(200);
        expect(res.body).to.deep.include({
          resourceType: 'Questionnaire',
          id,
          url: body.url,
          status: 'active',
        });
        expectOutcome(await fhir(app, 'GET', `/Questionnaire/${id}`, { auth: ONCOLOGY }), 403, 'forbidden');
        expect((await fhir(app, 'GET', `/Questionnaire/${id}`, { auth: TWO_PROJECTS })).status).to.equal(200);
        expectOutcome(await fhir(app, 'GET', `/Questionnaire/${id}`, { auth: MANAGED }), 404, 'not-found');
      });

      it('updates an existing Questionnaire on a conditional update instead of creating another', async () => {
        const body = questionnaire();
        const id = await create(body);
        const { system, value } = body.identifier[0]!;
        const before = await eventCount();
        const res = await fhir(
          app,
          'PUT',
          `/Questionnaire?identifier=${encodeURIComponent(`${system}|${value}`)}`,
          {
            body: { ...body, title: 'Chest CT report v2' },
          },
        );
        expect(res.status, JSON.stringify(res.body)).to.equal(200);
        expect(res.body.id).to.equal(id);
        expect(res.body.title).to.equal('Chest CT report v2');
        const events = await eventsSince(before);
        expect(events.map((e) => e.type)).to.deep.equal(['QuestionnaireUpdated']);
        const found = await fhir(
          app,
          'GET',
          `/Questionnaire?identifier=${encodeURIComponent(`${system}|${value}`)}`,
        );
        expect(entryRefs(found.body)).to.deep.equal([`Questionnaire/${id}`]);
      });

      it("creates a Questionnaire in the caller's project on a conditional update without a match", async () => {
        const body = questionnaire();
        const { system, value } = body.identifier[0]!;
        const before = await eventCount();
        const res = await fhir(
          app,
          'PUT',
          `/Questionnaire?identifier=${encodeURIComponent(`${system}|${value}`)}`,
          {
            body,
          },
        );
        expect(res.status, JSON.stringify(res.body)).to.equal(201);
        const events = await eventsSince(before);
        // The match is reserved with the creation, so racing conditional updates converge on one
        // Questionnaire (issue 11), although Questionnaire identifiers are not unique otherwise.
        expect(events.map((e) => e.type)).to.deep.equal(['ReservationClaimed', 'QuestionnaireCreated']);
        expect(events[1]!.data).to.deep.include({ project: 'radiology' });
        expect((await fhir(app, 'GET', `/Questionnaire/${res.body.id}`)).status).to.equal(200);
      });

      it('searches by _id, url, version and identifier, only within the caller projects', async () => {
        const url = `https://forms.example.org/Questionnaire/${unique('shared')}`;
        const v1 = questionnaire({ url, version: '1.0' });
        const v2 = questionnaire({ url, version: '2.0' });
        const id1 = await create(v1);
        const id2 = await create(v2);
        const oncology = await create(questionnaire({ url, version: '1.0' }), ONCOLOGY);

        const byUrl = await fhir(app, 'GET', `/Questionnaire?url=${encodeURIComponent(url)}`);
        expect(byUrl.status).to.equal(200);
        expect(byUrl.body).to.deep.include({ type: 'searchset', total: 2 });
        expect(entryRefs(byUrl.body, 'match')).to.deep.equal([
          `Questionnaire/${id1}`,
          `Questionnaire/${id2}`,
        ]);

        const byVersion = await fhir(app, 'GET', `/Questionnaire?url=${encodeURIComponent(url)}&version=2.0`);
        expect(entryRefs(byVersion.body)).to.deep.equal([`Questionnaire/${id2}`]);

        const byId = await fhir(app, 'GET', `/Questionnaire?_id=${id1}`);
        expect(entryRefs(byId.body)).to.deep.equal([`Questionnaire/${id1}`]);

        const { system, value } = v2.identifier[0]!;
        const byIdentifier = await fhir(
          app,
          'GET',
          `/Questionnaire?identifier=${encodeURIComponent(`${system}|${value}`)}`,
        );
        expect(entryRefs(byIdentifier.body)).to.deep.equal([`Questionnaire/${id2}`]);

        // The oncology client sees only its own, even by _id.
        const asOncology = await fhir(app, 'GET', `/Questionnaire?url=${encodeURIComponent(url)}`, {
          auth: ONCOLOGY,
        });
        expect(entryRefs(asOncology.body)).to.deep.equal([`Questionnaire/${oncology}`]);
        const foreignId = await fhir(app, 'GET', `/Questionnaire?_id=${oncology}`);
        expect(foreignId.status).to.equal(200);
        expect(foreignId.body.total).to.equal(0);
        // Another tenant sees none of them.
        const managed = await fhir(app, 'GET', `/Questionnaire?url=${encodeURIComponent(url)}`, {
          auth: MANAGED,
        });
        expect(managed.body.total).to.equal(0);
      });
    });

    describe('QuestionnaireResponse', () => {
      let patientId: string;
      let encounterId: string;
      before(async () => {
        patientId = await newPatient();
        encounterId = await newEncounter(patientId);
      });

      it('creates a QuestionnaireResponse (201, QuestionnaireResponseCreated) and reads it', async () => {
        const before = await eventCount();
        const body = responseBody(patientId, encounterId);
        const res = await fhir(app, 'POST', '/QuestionnaireResponse', { body });
        expect(res.status, JSON.stringify(res.body)).to.equal(201);
        const { resourceType: _r, ...content } = body;
        expect(res.body).to.deep.include(content);
        const events = await eventsSince(before);
        expect(events.map((e) => e.type)).to.deep.equal(['QuestionnaireResponseCreated']);
        expect(events[0]!.streamName).to.equal(`QuestionnaireResponse-${res.body.id}`);
        expect(events[0]!.metadata).to.deep.include({
          tenantId: 1,
          actor: { type: 'client', id: 'ehr-backend' },
        });

        const read = await fhir(app, 'GET', `/QuestionnaireResponse/${res.body.id}`);
        expect(read.status).to.equal(200);
        expect(read.body).to.deep.include({
          resourceType: 'QuestionnaireResponse',
          id: res.body.id,
          ...content,
        });
        expectOutcome(
          await fhir(app, 'GET', `/QuestionnaireResponse/${res.body.id}`, { auth: MANAGED }),
          404,
          'not-found',
        );
      });

      it('refuses a response without questionnaire, with an answer without value, or to a missing patient (422)', async () => {
        const before = await eventCount();
        expectOutcome(
          await fhir(app, 'POST', '/QuestionnaireResponse', {
            body: responseBody(patientId, encounterId, { questionnaire: undefined }),
          }),
          422,
          'required',
        );
        expectOutcome(
          await fhir(app, 'POST', '/QuestionnaireResponse', {
            body: responseBody(patientId, encounterId, { item: [{ linkId: 'a', answer: [{}] }] }),
          }),
          422,
          'invalid',
        );
        expectOutcome(
          await fhir(app, 'POST', '/QuestionnaireResponse', { body: responseBody('999999', undefined) }),
          422,
          'not-found',
        );
        expect(await eventCount()).to.equal(before);
      });

      it('records edits as QuestionnaireResponseUpdated and completion as QuestionnaireResponseSubmitted', async () => {
        const body = responseBody(patientId, encounterId);
        const id = await create(body);
        let before = await eventCount();
        const edited = await fhir(app, 'PUT', `/QuestionnaireResponse/${id}`, {
          body: { ...body, id, item: [{ linkId: 'findings', answer: [{ valueString: 'Small nodule' }] }] },
        });
        expect(edited.status, JSON.stringify(edited.body)).to.equal(200);
        expect(edited.body.meta.versionId).to.equal('2');
        let events = await eventsSince(before);
        expect(events.map((e) => e.type)).to.deep.equal(['QuestionnaireResponseUpdated']);

        before = await eventCount();
        const submitted = await fhir(app, 'PUT', `/QuestionnaireResponse/${id}`, {
          body: { ...edited.body, status: 'completed' },
        });
        expect(submitted.status).to.equal(200);
        expect(submitted.body.status).to.equal('completed');
        expect(submitted.body.meta.versionId).to.equal('3');
        events = await eventsSince(before);
        expect(events.map((e) => e.type)).to.deep.equal(['QuestionnaireResponseSubmitted']);
        expect(events[0]!.data).to.deep.include({ id: Number(id), from: 'in-progress' });
        expect(events[0]!.metadata).to.deep.include({
          tenantId: 1,
          actor: { type: 'client', id: 'ehr-backend' },
        });

        // Editing a completed response is an update again, not another submission.
        before = await eventCount();
        await fhir(app, 'PUT', `/QuestionnaireResponse/${id}`, {
          body: { ...submitted.body, item: [{ linkId: 'findings', answer: [{ valueString: 'Amended' }] }] },
        });
        events = await eventsSince(before);
        expect(events.map((e) => e.type)).to.deep.equal(['QuestionnaireResponseUpdated']);

        const read = await fhir(app, 'GET', `/QuestionnaireResponse/${id}`);
        expect(read.body.status).to.equal('completed');
        expect(read.body.item).to.deep.equal([{ linkId: 'findings', answer: [{ valueString: 'Amended' }] }]);
      });

      it('a response created completed is QuestionnaireResponseCreated (no separate submission)', async () => {
        const before = await eventCount();
        await create(responseBody(patientId, undefined, { status: 'completed' }));
        const events = await eventsSince(before);
        expect(events.map((e) => e.type)).to.deep.equal(['QuestionnaireResponseCreated']);
      });

      describe('search', () => {
        let patient: string;
        let encounter: string;
        let otherEncounter: string;
        let otherPatient: string;
        let withEncounter: string;
        let withOtherEncounter: string;
        let withoutEncounter: string;
        let ofOtherPatient: string;
        before(async () => {
          patient = await newPatient();
          encounter = await newEncounter(patient);
          otherEncounter = await newEncounter(patient);
          otherPatient = await newPatient();
          withEncounter = await create(responseBody(patient, encounter));
          withOtherEncounter = await create(responseBody(patient, otherEncounter));
          withoutEncounter = await create(responseBody(patient, undefined));
          ofOtherPatient = await create(responseBody(otherPatient, undefined));
        });

        it('finds responses by _id', async () => {
          const res = await fhir(app, 'GET', `/QuestionnaireResponse?_id=${withOtherEncounter}`);
          expect(res.status).to.equal(200);
          expect(res.body).to.deep.include({ resourceType: 'Bundle', type: 'searchset', total: 1 });
          expect(entryRefs(res.body)).to.deep.equal([`QuestionnaireResponse/${withOtherEncounter}`]);
          const several = await fhir(
            app,
            'GET',
            `/QuestionnaireResponse?_id=${withEncounter},${ofOtherPatient}`,
          );
          expect(entryRefs(several.body)).to.deep.equal([
            `QuestionnaireResponse/${withEncounter}`,
            `QuestionnaireResponse/${ofOtherPatient}`,
          ]);
        });

        it('finds responses by subject (Patient/<id> or <id>)', async () => {
          const expected = [withEncounter, withOtherEncounter, withoutEncounter].map(
            (id) => `QuestionnaireResponse/${id}`,
          );
          const res = await fhir(app, 'GET', `/QuestionnaireResponse?subject=Patient/${patient}`);
          expect(res.status).to.equal(200);
          expect(res.body.total).to.equal(3);
          expect(entryRefs(res.body, 'match')).to.deep.equal(expected);
          const bare = await fhir(app, 'GET', `/QuestionnaireResponse?subject=${patient}`);
          expect(entryRefs(bare.body)).to.deep.equal(expected);
          const other = await fhir(app, 'GET', `/QuestionnaireResponse?subject=Patient/${otherPatient}`);
          expect(entryRefs(other.body)).to.deep.equal([`QuestionnaireResponse/${ofOtherPatient}`]);
          expectOutcome(
            await fhir(app, 'GET', `/QuestionnaireResponse?subject=Encounter/${encounter}`),
            400,
            'invalid',
          );
        });

        it('finds responses by encounter', async () => {
          const res = await fhir(app, 'GET', `/QuestionnaireResponse?encounter=Encounter/${encounter}`);
          expect(entryRefs(res.body)).to.deep.equal([`QuestionnaireResponse/${withEncounter}`]);
          const both = await fhir(
            app,
            'GET',
            `/QuestionnaireResponse?encounter=${encounter},${otherEncounter}`,
          );
          expect(entryRefs(both.body)).to.deep.equal([
            `QuestionnaireResponse/${withEncounter}`,
            `QuestionnaireResponse/${withOtherEncounter}`,
          ]);
          const combined = await fhir(
            app,
            'GET',
            `/QuestionnaireResponse?subject=Patient/${otherPatient}&encounter=Encounter/${encounter}`,
          );
          expect(combined.body.total).to.equal(0);
        });

        it('adds the subject and encounter with _include (search.mode include, once each)', async () => {
          const res = await fhir(
            app,
            'GET',
            `/QuestionnaireResponse?subject=Patient/${patient}&_include=QuestionnaireResponse:subject&_include=QuestionnaireResponse:encounter`,
          );
          expect(res.status).to.equal(200);
          expect(res.body.total).to.equal(3);
          expect(entryRefs(res.body, 'match')).to.have.members(
            [withEncounter, withOtherEncounter, withoutEncounter].map((id) => `QuestionnaireResponse/${id}`),
          );
          expect(entryRefs(res.body, 'include')).to.have.members([
            `Patient/${patient}`,
            `Encounter/${encounter}`,
            `Encounter/${otherEncounter}`,
          ]);
          expect(res.body.entry).to.have.length(6);
          const included = res.body.entry.find((e: any) => e.resource.resourceType === 'Patient');
          expect(included.search).to.deep.equal({ mode: 'include' });
          expect(included.fullUrl).to.equal(`${app.casebook.config.fhirUrl}/Patient/${patient}`);
          expect(included.resource.name).to.deep.equal([{ family: 'Doe', given: ['Jane'] }]);
          // Matches come before included resources.
          const modes = res.body.entry.map((e: any) => e.search.mode);
          expect(modes).to.deep.equal(['match', 'match', 'match', 'include', 'include', 'include']);
        });

        it('includes only what was asked for', async () => {
          const subjectOnly = await fhir(
            app,
            'GET',
            `/QuestionnaireResponse?_id=${withEncounter}&_include=QuestionnaireResponse:subject`,
          );
          expect(entryRefs(subjectOnly.body, 'include')).to.deep.equal([`Patient/${patient}`]);
          const encounterOnly = await fhir(
            app,
            'GET',
            `/QuestionnaireResponse?_id=${withEncounter}&_include=QuestionnaireResponse:encounter`,
          );
          expect(entryRefs(encounterOnly.body, 'include')).to.deep.equal([`Encounter/${encounter}`]);
          const none = await fhir(
            app,
            'GET',
            `/QuestionnaireResponse?_id=${withoutEncounter}&_include=QuestionnaireResponse:encounter`,
          );
          expect(entryRefs(none.body, 'include')).to.deep.equal([]);
          expect(entryRefs(none.body, 'match')).to.deep.equal([`QuestionnaireResponse/${withoutEncounter}`]);
        });

        it('answers 400 for an unsupported _include', async () => {
          expectOutcome(
            await fhir(app, 'GET', `/QuestionnaireResponse?_include=QuestionnaireResponse:author`),
            400,
            'invalid',
          );
          expectOutcome(await fhir(app, 'GET', `/Task?_include=Task:patient`), 400, 'invalid');
        });

        it('sees nothing of another tenant', async () => {
          const res = await fhir(app, 'GET', `/QuestionnaireResponse?subject=Patient/${patient}`, {
            auth: MANAGED,
          });
          expect(res.status).to.equal(200);
          expect(res.body.total).to.equal(0);
        });
      });
    });
  });
}
