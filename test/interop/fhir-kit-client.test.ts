/**
 * Interoperability (issues 3 and 13): the data server driven by `fhir-kit-client`, a standard FHIR client,
 * exactly as an integrator would — create, read, vread, update, conditional update, delete,
 * history, search and the transaction Bundle — with the library's default headers, asserted on
 * what the library gives back (resources, Bundles, and its errors for 409/410/412). Every resource
 * it hands back passes the R5 response validator.
 */
import { expect } from 'chai';
import { Client, type FhirResource } from 'fhir-kit-client';
import { GENERAL, seed, startTestApp, type TestApp } from '../support/app.js';
import { testDatabases } from '../support/databases.js';
import { assertValid } from './support.js';

/** The error fhir-kit-client throws for a non-2xx answer. */
interface ClientError extends Error {
  readonly response: { readonly status: number; readonly data: any };
  readonly config: { readonly method: string; readonly url: string; readonly headers: Headers };
}

/** Awaits a call that must fail and returns the library's error. */
const failure = async (call: Promise<unknown>): Promise<ClientError> => {
  try {
    await call;
  } catch (error) {
    expect(error).to.be.instanceOf(Error);
    expect(error).to.have.nested.property('response.status');
    return error as ClientError;
  }
  expect.fail('the call should have failed');
};

/** Asserts the library surfaced `status` with an OperationOutcome carrying issue `code`. */
const expectOutcome = (error: ClientError, status: number, code: string) => {
  expect(error.response.status, JSON.stringify(error.response.data)).to.equal(status);
  expect(error.response.data.resourceType).to.equal('OperationOutcome');
  expect(error.response.data.issue.map((i: { code: string }) => i.code)).to.include(code);
};

/** The raw response fhir-kit-client attached to a result. */
const responseOf = (result: FhirResource): Response => {
  const { response } = Client.httpFor(result);
  expect(response, 'fhir-kit-client attaches the Response').to.not.equal(undefined);
  return response!;
};

/**
 * The client with every resource it resolves to checked by the R5 response validator (issue 13).
 * Its errors are left as they are: their OperationOutcomes are checked where the tests read them.
 */
const validating = (client: Client): Client =>
  new Proxy(client, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        const result = value.apply(target, args);
        if (!(result instanceof Promise)) return result;
        return result.then((resolved: unknown) => {
          if (resolved && typeof resolved === 'object' && 'resourceType' in resolved)
            assertValid(resolved, `fhir-kit-client ${String(property)}`);
          return resolved;
        });
      };
    },
  });

for (const database of testDatabases) {
  describe(`fhir-kit-client against the data server on ${database.name}`, () => {
    let app: TestApp;
    let client: Client;
    let seq = 0;
    const unique = (prefix: string) => `${prefix}-${++seq}-${Math.random().toString(36).slice(2, 8)}`;
    const MRN = 'urn:oid:1.2.36.146.595.217.0.1';

    before(async () => {
      app = await startTestApp(database);
      await seed(app);
      client = validating(
        new Client({
          baseUrl: app.casebook.config.fhirUrl.replace('localhost', '127.0.0.1'),
          customHeaders: { Authorization: GENERAL },
        }),
      );
    });
    after(() => app?.close());

    const newPatient = (value = unique('mrn')): FhirResource => ({
      resourceType: 'Patient',
      identifier: [{ system: MRN, value }],
      name: [{ family: 'Chalmers', given: ['Peter', 'James'] }],
      gender: 'male',
      birthDate: '1974-12-25',
    });

    it('sends and receives application/fhir+json with its default headers', async () => {
      const created: any = await client.create({ resourceType: 'Patient', body: newPatient() });
      const { request, response } = Client.httpFor(created);
      expect(request?.headers.get('accept')).to.equal('application/fhir+json');
      expect(request?.headers.get('content-type')).to.equal('application/fhir+json');
      expect(response?.status).to.equal(201);
      expect(response?.headers.get('content-type')).to.match(/^application\/fhir\+json/);

      // Media types with the FHIR version parameter (FHIR R5 §3.2.0.1.2) are accepted as well.
      const versioned = 'application/fhir+json; fhirVersion=5.0';
      const read: any = await client.read({
        resourceType: 'Patient',
        id: created.id,
        options: { headers: { Accept: versioned } },
      });
      expect(read.id).to.equal(created.id);
      const again: any = await client.create({
        resourceType: 'Patient',
        body: newPatient(),
        options: { headers: { 'Content-Type': versioned, Accept: versioned } },
      });
      expect(responseOf(again).status).to.equal(201);
      // Plain JSON, as some integrators send it.
      const plain: any = await client.create({
        resourceType: 'Patient',
        body: newPatient(),
        options: { headers: { 'Content-Type': 'application/json', Accept: 'application/json' } },
      });
      expect(responseOf(plain).status).to.equal(201);
    });

    it('creates, reads, updates by id, vreads version 1 and lists the history newest first', async () => {
      const created: any = await client.create({ resourceType: 'Patient', body: newPatient() });
      expect(created.resourceType).to.equal('Patient');
      expect(created.id).to.match(/^\d+$/);
      expect(created.meta.versionId).to.equal('1');
      const createdResponse = responseOf(created);
      expect(createdResponse.status).to.equal(201);
      expect(createdResponse.headers.get('etag')).to.equal('W/"1"');
      expect(createdResponse.headers.get('location')).to.equal(
        `${app.casebook.config.fhirUrl}/Patient/${created.id}/_history/1`,
      );

      const read: any = await client.read({ resourceType: 'Patient', id: created.id });
      expect(read.id).to.equal(created.id);
      expect(read.meta.versionId).to.equal('1');
      expect(read.name).to.deep.equal([{ family: 'Chalmers', given: ['Peter', 'James'] }]);
      expect(responseOf(read).headers.get('etag')).to.equal('W/"1"');

      // An integrator's update: read, change, PUT the whole resource back (meta included).
      const updated: any = await client.update({
        resourceType: 'Patient',
        id: read.id,
        body: { ...read, gender: 'other', birthDate: '1974-12-24' },
      });
      expect(updated.id).to.equal(created.id);
      expect(updated.meta.versionId).to.equal('2');
      expect(updated.gender).to.equal('other');
      expect(updated.birthDate).to.equal('1974-12-24');
      expect(responseOf(updated).status).to.equal(200);
      expect(responseOf(updated).headers.get('etag')).to.equal('W/"2"');

      const v1: any = await client.vread({ resourceType: 'Patient', id: created.id, version: '1' });
      expect(v1.meta.versionId).to.equal('1');
      expect(v1.gender).to.equal('male');
      expect(v1.birthDate).to.equal('1974-12-25');
      const v2: any = await client.vread({ resourceType: 'Patient', id: created.id, version: '2' });
      expect(v2.gender).to.equal('other');

      const history: any = await client.history({ resourceType: 'Patient', id: created.id });
      expect(history.resourceType).to.equal('Bundle');
      expect(history.type).to.equal('history');
      expect(history.total).to.equal(2);
      expect(history.entry.map((e: any) => e.resource.meta.versionId)).to.deep.equal(['2', '1']);
      expect(history.entry.map((e: any) => e.request.method)).to.deep.equal(['PUT', 'POST']);
      expect(history.entry.map((e: any) => e.response.etag)).to.deep.equal(['W/"2"', 'W/"1"']);
      expect(history.entry.every((e: any) => e.resource.id === created.id)).to.equal(true);
    });

    it('honours If-Match sent through the request options (412 on a stale version)', async () => {
      const created: any = await client.create({ resourceType: 'Patient', body: newPatient() });
      const updated: any = await client.update({
        resourceType: 'Patient',
        id: created.id,
        body: { ...created, gender: 'female' },
        options: { headers: { 'If-Match': 'W/"1"' } },
      });
      expect(updated.meta.versionId).to.equal('2');
      const stale = await failure(
        client.update({
          resourceType: 'Patient',
          id: created.id,
          body: { ...created, gender: 'unknown' },
          options: { headers: { 'If-Match': 'W/"1"' } },
        }),
      );
      expect(stale.response.status).to.equal(412);
      expect(stale.response.data.resourceType).to.equal('OperationOutcome');
    });

    it('conditionally updates by identifier: creates when nothing matches, updates the match after', async () => {
      const value = unique('mrn');
      const first: any = await client.update({
        resourceType: 'Patient',
        searchParams: { identifier: `${MRN}|${value}` },
        body: newPatient(value),
      });
      const firstResponse = responseOf(first);
      expect(firstResponse.status).to.equal(200);
      expect(Client.httpFor(first).request?.url).to.match(/\/Patient\?identifier=/);
      expect(first.id).to.match(/^\d+$/);
      expect(first.meta.versionId).to.equal('1');
      expect(first.identifier).to.deep.equal([{ system: MRN, value }]);

      const second: any = await client.update({
        resourceType: 'Patient',
        searchParams: { identifier: `${MRN}|${value}` },
        body: { resourceType: 'Patient', identifier: [{ system: MRN, value }], gender: 'female' },
      });
      expect(responseOf(second).status).to.equal(200);
      expect(second.id).to.equal(first.id);
      expect(second.meta.versionId).to.equal('2');
      expect(second.gender).to.equal('female');
      expect(responseOf(second).headers.get('etag')).to.equal('W/"2"');

      const found: any = await client.search({
        resourceType: 'Patient',
        searchParams: { identifier: `${MRN}|${value}` },
      });
      expect(found.resourceType).to.equal('Bundle');
      expect(found.type).to.equal('searchset');
      expect(found.total).to.equal(1);
      expect(found.entry.map((e: any) => e.resource.id)).to.deep.equal([first.id]);
      expect(found.entry[0].search.mode).to.equal('match');
      expect(found.entry[0].resource.meta.versionId).to.equal('2');

      const none: any = await client.search({
        resourceType: 'Patient',
        searchParams: { identifier: `${MRN}|${unique('absent')}` },
      });
      expect(none.total).to.equal(0);
      expect(none.entry ?? []).to.deep.equal([]);
    });

    it('runs a transaction: conditional PUT Patient, PUT Encounter by urn:uuid, POST Task with ifNoneExist', async () => {
      const mrn = unique('mrn');
      const visit = unique('visit');
      const order = unique('order');
      const bundle = (): FhirResource => ({
        resourceType: 'Bundle',
        type: 'transaction',
        entry: [
          {
            fullUrl: 'urn:uuid:8f0c6a4e-0d7b-4f43-9a43-1c4f5f0b6a01',
            resource: newPatient(mrn),
            request: { method: 'PUT', url: `Patient?identifier=${encodeURIComponent(`${MRN}|${mrn}`)}` },
          },
          {
            fullUrl: 'urn:uuid:8f0c6a4e-0d7b-4f43-9a43-1c4f5f0b6a02',
            resource: {
              resourceType: 'Encounter',
              identifier: [{ system: 'urn:test:visit', value: visit }],
              status: 'in-progress',
              subject: { reference: 'urn:uuid:8f0c6a4e-0d7b-4f43-9a43-1c4f5f0b6a01' },
            },
            request: {
              method: 'PUT',
              url: `Encounter?identifier=${encodeURIComponent(`urn:test:visit|${visit}`)}`,
            },
          },
          {
            fullUrl: 'urn:uuid:8f0c6a4e-0d7b-4f43-9a43-1c4f5f0b6a03',
            resource: {
              resourceType: 'Task',
              identifier: [{ system: 'urn:test:order', value: order }],
              status: 'ready',
              intent: 'order',
              for: { reference: 'urn:uuid:8f0c6a4e-0d7b-4f43-9a43-1c4f5f0b6a01' },
              encounter: { reference: 'urn:uuid:8f0c6a4e-0d7b-4f43-9a43-1c4f5f0b6a02' },
            },
            request: {
              method: 'POST',
              url: 'Task',
              ifNoneExist: `identifier=${encodeURIComponent(`urn:test:order|${order}`)}`,
            },
          },
        ],
      });

      const response: any = await client.transaction({ body: bundle() });
      expect(responseOf(response).status).to.equal(200);
      expect(response.resourceType).to.equal('Bundle');
      expect(response.type).to.equal('transaction-response');
      expect(response.entry).to.have.length(3);
      const [patient, encounter, task] = response.entry as any[];
      expect(patient.response.status).to.match(/^200/);
      // A conditional PUT that creates answers 201 for every type but Patient (docs/interface.md §4.3 rule 2).
      expect(encounter.response.status).to.match(/^201/);
      expect(task.response.status).to.match(/^201/);
      const patientId: string = patient.resource.id;
      const encounterId: string = encounter.resource.id;
      const taskId: string = task.resource.id;
      expect(patient.response.location).to.equal(`Patient/${patientId}/_history/1`);
      expect(encounter.resource.subject).to.deep.equal({ reference: `Patient/${patientId}` });
      expect(task.resource.for).to.deep.equal({ reference: `Patient/${patientId}` });
      expect(task.resource.encounter).to.deep.equal({ reference: `Encounter/${encounterId}` });

      // What was written is readable through the library.
      const readEncounter: any = await client.read({ resourceType: 'Encounter', id: encounterId });
      expect(readEncounter.subject).to.deep.equal({ reference: `Patient/${patientId}` });
      const readTask: any = await client.read({ resourceType: 'Task', id: taskId });
      expect(readTask.meta.versionId).to.equal('1');
      expect(readTask.encounter).to.deep.equal({ reference: `Encounter/${encounterId}` });

      // Sent again: the same Patient and Encounter are matched, the Task is not created twice.
      const replay: any = await client.transaction({ body: bundle() });
      const [patient2, encounter2, task2] = replay.entry as any[];
      expect(patient2.response.location).to.match(new RegExp(`^Patient/${patientId}/_history/\\d+$`));
      expect(encounter2.response.location).to.match(new RegExp(`^Encounter/${encounterId}/_history/\\d+$`));
      expect(task2.response.status).to.match(/^200/);
      expect(task2.response.location).to.equal(`Task/${taskId}/_history/1`);
      const tasks: any = await client.search({
        resourceType: 'Task',
        searchParams: { identifier: `urn:test:order|${order}` },
      });
      expect(tasks.total).to.equal(1);
    });

    it('deletes (204), then reads 410 Gone as a library error carrying the OperationOutcome', async () => {
      const created: any = await client.create({ resourceType: 'Patient', body: newPatient() });
      const deleted: any = await client.delete({ resourceType: 'Patient', id: created.id });
      expect(responseOf(deleted).status).to.equal(204);

      const gone = await failure(client.read({ resourceType: 'Patient', id: created.id }));
      expectOutcome(gone, 410, 'deleted');
      expect(gone.config.method).to.equal('GET');

      // The history still lists every version, the deletion first.
      const history: any = await client.history({ resourceType: 'Patient', id: created.id });
      expect(history.entry.map((e: any) => e.request.method)).to.deep.equal(['DELETE', 'POST']);
      expect(history.entry[0].resource).to.equal(undefined);
      const v1: any = await client.vread({ resourceType: 'Patient', id: created.id, version: '1' });
      expect(v1.id).to.equal(created.id);

      const unknown = await failure(client.read({ resourceType: 'Patient', id: '2000000000' }));
      expectOutcome(unknown, 404, 'not-found');
    });

    it('surfaces a duplicate POST as a 409 error with the duplicate issue', async () => {
      const value = unique('mrn');
      const first: any = await client.create({ resourceType: 'Patient', body: newPatient(value) });
      const duplicate = await failure(client.create({ resourceType: 'Patient', body: newPatient(value) }));
      expectOutcome(duplicate, 409, 'duplicate');
      expect(duplicate.config.method).to.equal('POST');
      expect(duplicate.config.headers.get('location')).to.equal(
        `${app.casebook.config.fhirUrl}/Patient/${first.id}`,
      );
    });
  });
}
