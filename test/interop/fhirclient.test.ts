/**
 * Interoperability (issue 13): the data server driven by `fhirclient` (SMART on FHIR's JavaScript
 * client, its standalone `FhirClient`), as an integrator would: paging a search with `pages()`
 * while another client writes, `If-Match` on update, a transaction Bundle and history paging.
 * Every resource and Bundle the library hands back passes the R5 response validator.
 */
import { createRequire } from 'node:module';
import { expect } from 'chai';
import { GENERAL, seed, startTestApp, type TestApp } from '../support/app.js';
import { testDatabases } from '../support/databases.js';
import { fhir } from '../support/fhir.js';
import { assertValid, createPatients, expectEachOnce } from './support.js';

/**
 * The part of fhirclient's `FhirClient` these tests use. Its own type declarations are not
 * imported: they pull in the DOM library (`/// <reference lib="dom" />`), whose `fetch` types
 * would replace Node's for the whole project.
 */
interface FhirClientApi {
  getRequestDefaults(): Promise<Partial<RequestInit>>;
  create(resource: object, options?: RequestInit): Promise<any>;
  update(resource: object, options?: RequestInit): Promise<any>;
  fhirRequest<T = any>(uri: string, options?: RequestInit): Promise<T>;
  pages(url: string): AsyncGenerator<any>;
}

// fhirclient is CommonJS: its class is the module's `default` export.
const { default: FhirClient } = createRequire(import.meta.url)('fhirclient/lib/FhirClient.js') as {
  default: new (fhirBaseUrl: string) => FhirClientApi;
};

/** A FhirClient that authenticates as an API client (HTTP Basic) on every request. */
class BasicFhirClient extends FhirClient {
  constructor(
    baseUrl: string,
    private readonly authorization: string,
  ) {
    super(baseUrl);
  }

  override async getRequestDefaults(): Promise<Partial<RequestInit>> {
    return { headers: { Authorization: this.authorization } };
  }
}

/** The HTTP status of fhirclient's HttpError, or fails. */
const statusOf = async (call: Promise<unknown>): Promise<number> => {
  try {
    await call;
  } catch (error) {
    expect(error).to.have.property('status');
    return (error as { status: number }).status;
  }
  return expect.fail('the call should have failed');
};

for (const database of testDatabases) {
  describe(`fhirclient against the data server on ${database.name}`, function () {
    this.timeout(120_000);
    let app: TestApp;
    let client: BasicFhirClient;
    const system = `urn:interop:fhirclient:${database.name}`;
    let created: string[] = [];

    before(async () => {
      app = await startTestApp(database);
      await seed(app);
      client = new BasicFhirClient(app.casebook.config.fhirUrl.replace('localhost', '127.0.0.1'), GENERAL);
      created = await createPatients(app, system, 45);
    });
    after(() => app?.close());

    it('pages through 45 Patients with _count=10 and pages(): each exactly once, while another client writes', async () => {
      const seen: string[] = [];
      let pages = 0;
      let written = 0;
      for await (const bundle of client.pages('Patient?_count=10')) {
        assertValid(bundle, `page ${pages + 1}`);
        pages++;
        expect(bundle.entry?.length ?? 0).to.be.at.most(10);
        seen.push(...(bundle.entry ?? []).map((e: any) => e.resource.id as string));
        // Another client writes between pages: a new Patient and an update of a paged one.
        const other = await fhir(app, 'POST', '/Patient', {
          body: {
            resourceType: 'Patient',
            identifier: [{ system: `${system}:other`, value: `o-${++written}` }],
          },
        });
        expect(other.status).to.equal(201);
        const touched = await fhir(app, 'PUT', `/Patient/${created[pages]}`, {
          body: { resourceType: 'Patient', gender: pages % 2 ? 'female' : 'male' },
        });
        expect(touched.status).to.equal(200);
      }
      expect(pages).to.be.at.least(5);
      expectEachOnce(seen, created);
    });

    it('updates with If-Match: the current version succeeds, a stale one gets 412', async () => {
      const patient: any = await client.create({
        resourceType: 'Patient',
        identifier: [{ system, value: 'if-match' }],
      });
      assertValid(patient, 'create');
      expect(patient.meta.versionId).to.equal('1');
      const updated: any = await client.update(
        { ...patient, gender: 'female' },
        { headers: { 'If-Match': 'W/"1"' } },
      );
      assertValid(updated, 'update');
      expect(updated.meta.versionId).to.equal('2');
      expect(
        await statusOf(client.update({ ...patient, gender: 'male' }, { headers: { 'If-Match': 'W/"1"' } })),
      ).to.equal(412);
      const read: any = await client.fhirRequest(`Patient/${patient.id}`);
      expect(read.gender).to.equal('female');
    });

    it('runs a transaction Bundle: conditional PUT of a Patient and a POST of a Task with ifNoneExist', async () => {
      const bundle = {
        resourceType: 'Bundle',
        type: 'transaction',
        entry: [
          {
            fullUrl: 'urn:uuid:0b7c3c2e-1f0a-4c7e-9a55-3b8f0c1d2e01',
            resource: { resourceType: 'Patient', identifier: [{ system, value: 'tx-1' }] },
            request: { method: 'PUT', url: `Patient?identifier=${encodeURIComponent(`${system}|tx-1`)}` },
          },
          {
            resource: {
              resourceType: 'Task',
              identifier: [{ system, value: 'tx-task-1' }],
              status: 'ready',
              intent: 'order',
              for: { reference: 'urn:uuid:0b7c3c2e-1f0a-4c7e-9a55-3b8f0c1d2e01' },
            },
            request: {
              method: 'POST',
              url: 'Task',
              ifNoneExist: `identifier=${encodeURIComponent(`${system}|tx-task-1`)}`,
            },
          },
        ],
      };
      const send = () =>
        client.fhirRequest<any>('', {
          method: 'POST',
          body: JSON.stringify(bundle),
          headers: { 'Content-Type': 'application/fhir+json' },
        });
      const first = await send();
      assertValid(first, 'transaction');
      expect(first.type).to.equal('transaction-response');
      expect(first.entry.map((e: any) => e.response.status.slice(0, 3))).to.deep.equal(['200', '201']);
      const again = await send();
      expect(again.entry.map((e: any) => e.response.status.slice(0, 3))).to.deep.equal(['200', '200']);
      expect(again.entry[1].response.location).to.equal(first.entry[1].response.location);
    });

    it('pages an instance history with _count=2 and pages(): versions 5 to 1, each once', async () => {
      const patient: any = await client.create({
        resourceType: 'Patient',
        identifier: [{ system, value: 'hist' }],
      });
      for (const birthDate of ['1970-01-01', '1971-01-01', '1972-01-01', '1973-01-01'])
        await client.update({ ...patient, birthDate });
      const versions: string[] = [];
      let pages = 0;
      for await (const bundle of client.pages(`Patient/${patient.id}/_history?_count=2`)) {
        assertValid(bundle, `history page ${++pages}`);
        expect(bundle.type).to.equal('history');
        versions.push(...(bundle.entry ?? []).map((e: any) => e.resource.meta.versionId as string));
      }
      expect(pages).to.equal(3);
      expect(versions).to.deep.equal(['5', '4', '3', '2', '1']);
    });
  });
}
