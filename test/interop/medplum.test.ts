/**
 * Interoperability (issue 13): the data server driven by Medplum's `MedplumClient`
 * (`@medplum/core`), authenticated with HTTP Basic (`setBasicAuth`) as an API client would:
 * `searchResourcePages()` while another client writes, `If-Match` on update, a transaction with
 * `executeBatch()` and history paging by the Bundle's `next` links. Every resource and Bundle the
 * library hands back passes the R5 response validator.
 */
import { MedplumClient, OperationOutcomeError } from '@medplum/core';
import type { Bundle, Patient } from '@medplum/fhirtypes';
import { expect } from 'chai';
import { seed, startTestApp, type TestApp } from '../support/app.js';
import { testDatabases } from '../support/databases.js';
import { fhir } from '../support/fhir.js';
import { assertValid, createPatients, expectEachOnce } from './support.js';

/** The HTTP status Medplum's error carries for a failed call, or fails. */
const statusOf = async (call: Promise<unknown>): Promise<string> => {
  try {
    await call;
  } catch (error) {
    expect(error).to.be.instanceOf(OperationOutcomeError);
    return (error as OperationOutcomeError).outcome.issue?.[0]?.code ?? '';
  }
  return expect.fail('the call should have failed');
};

for (const database of testDatabases) {
  describe(`@medplum/core MedplumClient against the data server on ${database.name}`, function () {
    this.timeout(120_000);
    let app: TestApp;
    let medplum: MedplumClient;
    const system = `urn:interop:medplum:${database.name}`;
    let created: string[] = [];

    before(async () => {
      app = await startTestApp(database);
      await seed(app);
      const fhirUrl = new URL(app.casebook.config.fhirUrl.replace('localhost', '127.0.0.1'));
      medplum = new MedplumClient({
        baseUrl: `${fhirUrl.origin}/`,
        fhirUrlPath: `${fhirUrl.pathname.replace(/^\//, '')}/`,
        fetch: (url: string | URL | Request, init?: RequestInit) => fetch(url, init),
        cacheTime: 0,
      });
      medplum.setBasicAuth('ehr-backend', 'general-secret-0123456789');
      created = await createPatients(app, system, 45);
    });
    after(() => app?.close());

    it('pages through 45 Patients with _count=10 and searchResourcePages(): each exactly once, while another client writes', async () => {
      const seen: string[] = [];
      let pages = 0;
      for await (const page of medplum.searchResourcePages('Patient', { _count: 10 })) {
        assertValid(page.bundle, `page ${pages + 1}`);
        pages++;
        expect(page.length).to.be.at.most(10);
        seen.push(...page.map((p) => p.id));
        const other = await fhir(app, 'POST', '/Patient', {
          body: { resourceType: 'Patient', identifier: [{ system: `${system}:other`, value: `o-${pages}` }] },
        });
        expect(other.status).to.equal(201);
      }
      expect(pages).to.be.at.least(5);
      expectEachOnce(seen, created);
    });

    it('updates with If-Match: the current version succeeds, a stale one gets 412 (conflict)', async () => {
      const patient = await medplum.createResource<Patient>({
        resourceType: 'Patient',
        identifier: [{ system, value: 'if-match' }],
      });
      assertValid(patient, 'createResource');
      expect(patient.meta?.versionId).to.equal('1');
      const updated = await medplum.updateResource<Patient>(
        { ...patient, gender: 'female' },
        { headers: { 'If-Match': 'W/"1"' } },
      );
      assertValid(updated, 'updateResource');
      expect(updated.meta?.versionId).to.equal('2');
      expect(
        await statusOf(
          medplum.updateResource<Patient>(
            { ...patient, gender: 'male' },
            { headers: { 'If-Match': 'W/"1"' } },
          ),
        ),
      ).to.equal('conflict');
      const read = await medplum.readResource('Patient', patient.id);
      assertValid(read, 'readResource');
      expect(read.gender).to.equal('female');
    });

    it('runs a transaction with executeBatch: a conditional PUT that creates an Encounter answers 201, a Patient 200', async () => {
      const patientUrl = 'urn:uuid:5d0f6a3e-2b1c-4d8e-9f70-6a1b2c3d4e05';
      // Medplum's types are R4's (an R4 Encounter needs `class`): the R5 Bundle is cast.
      const bundle = {
        resourceType: 'Bundle',
        type: 'transaction',
        entry: [
          {
            fullUrl: patientUrl,
            resource: { resourceType: 'Patient', identifier: [{ system, value: 'tx-1' }] },
            request: { method: 'PUT', url: `Patient?identifier=${encodeURIComponent(`${system}|tx-1`)}` },
          },
          {
            resource: {
              resourceType: 'Encounter',
              identifier: [{ system, value: 'tx-enc-1' }],
              status: 'in-progress',
              subject: { reference: patientUrl },
            },
            request: {
              method: 'PUT',
              url: `Encounter?identifier=${encodeURIComponent(`${system}|tx-enc-1`)}`,
            },
          },
        ],
      } as unknown as Bundle;
      const response = await medplum.executeBatch(bundle);
      assertValid(response, 'executeBatch');
      expect(response.type).to.equal('transaction-response');
      // docs/interface.md §4.3 rule 2: 200 for Patient on purpose; FHIR's 201 for every other type.
      expect(response.entry?.map((e) => e.response?.status.slice(0, 3))).to.deep.equal(['200', '201']);
      const again = await medplum.executeBatch(bundle);
      expect(again.entry?.map((e) => e.response?.status.slice(0, 3))).to.deep.equal(['200', '200']);
    });

    it('pages an instance history by its next links: versions 4 to 1, each once', async () => {
      const patient = await medplum.createResource<Patient>({
        resourceType: 'Patient',
        identifier: [{ system, value: 'hist' }],
      });
      let current = patient;
      for (const birthDate of ['1970-01-01', '1971-01-01', '1972-01-01'])
        current = await medplum.updateResource<Patient>({ ...current, birthDate });
      let bundle: Bundle | undefined = await medplum.readHistory('Patient', patient.id, { count: 2 });
      const versions: string[] = [];
      let pages = 0;
      while (bundle) {
        assertValid(bundle, `history page ${++pages}`);
        versions.push(...(bundle.entry ?? []).map((e) => e.resource?.meta?.versionId ?? '?'));
        const next: string | undefined = bundle.link?.find((l) => l.relation === 'next')?.url;
        bundle = next ? await medplum.get<Bundle>(next) : undefined;
      }
      expect(pages).to.equal(2);
      expect(versions).to.deep.equal(['4', '3', '2', '1']);
    });
  });
}
