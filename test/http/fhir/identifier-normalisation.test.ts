/**
 * Identifiers are compared after Unicode NFC normalisation of system and value, and stored as sent
 * (issue 33 finding 8; docs/interface.md §2.5): "Renée" typed with U+00E9 and with "e" + U+0301 is
 * one identifier — one Patient, one reservation, one search match, one session context, one launch
 * patient — where it made a second Patient before.
 */
import { expect } from 'chai';
import { GENERAL, seed, startTestApp, type TestApp, unique } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import { expectOutcome, fhir, ROLE_NEW } from '../../support/fhir.js';
import { launchThrough, TEST_LAUNCH_SECRET } from '../../support/launch.js';

/** The same text in its composed (NFC) and decomposed (NFD) spellings, distinct as strings. */
const spellings = (base: string) => {
  const nfc = `${base}-Ren\u00e9e`;
  const nfd = `${base}-Rene\u0301e`;
  expect(nfc).not.to.equal(nfd);
  expect(nfc.normalize('NFC')).to.equal(nfd.normalize('NFC'));
  return { nfc, nfd };
};

for (const database of testDatabases) {
  describe(`identifiers compare in NFC on ${database.name} (issue 33 finding 8)`, function () {
    this.timeout(60_000);
    let app: TestApp;
    before(async () => {
      app = await startTestApp(database, {
        env: {
          LAUNCHER_CLIENT_ID: 'ehr-backend',
          LAUNCHER_CLIENT_SECRET: 'general-secret-0123456789',
          LAUNCHER_SHARED_SECRET: TEST_LAUNCH_SECRET,
          // The launcher's identifier system, spelled decomposed: it is compared in NFC too.
          LAUNCHER_PATIENT_SYSTEM: 'urn:test:mrn-e\u0301',
        },
      });
      await seed(app);
    });
    after(() => app?.close());

    it('finds one Patient whichever spelling is sent, and stores each as sent', async () => {
      const { nfc, nfd } = spellings(unique('mrn'));
      const system = 'urn:test:syst\u00e8me';
      const systemNfd = 'urn:test:syste\u0300me';
      const created = await fhir(app, 'POST', '/Patient', {
        body: { resourceType: 'Patient', identifier: [{ system, value: nfc }] },
      });
      expect(created.status).to.equal(201);
      expect(created.body.identifier[0].value).to.equal(nfc);

      const before = (await app.allEvents()).length;
      const duplicate = await fhir(app, 'POST', '/Patient', {
        body: { resourceType: 'Patient', identifier: [{ system: systemNfd, value: nfd }] },
      });
      expectOutcome(duplicate, 409, 'duplicate');
      expect((await app.allEvents()).length).to.equal(before);

      for (const [s, v] of [
        [systemNfd, nfd],
        [system, nfd],
        [systemNfd, nfc],
      ] as const) {
        const found = await fhir(app, 'GET', `/Patient?identifier=${encodeURIComponent(`${s}|${v}`)}`);
        expect(found.body.total, `${s}|${v}`).to.equal(1);
        expect(found.body.entry[0].resource.id).to.equal(created.body.id);
        const valueOnly = await fhir(app, 'GET', `/Patient?identifier=${encodeURIComponent(v)}`);
        expect(valueOnly.body.total).to.equal(1);
      }

      // A conditional update in the other spelling updates the same Patient and keeps one identifier.
      const updated = await fhir(
        app,
        'PUT',
        `/Patient?identifier=${encodeURIComponent(`${systemNfd}|${nfd}`)}`,
        {
          body: {
            resourceType: 'Patient',
            identifier: [{ system: systemNfd, value: nfd }],
            gender: 'female',
          },
        },
      );
      expect(updated.status).to.equal(200);
      expect(updated.body.id).to.equal(created.body.id);
      expect(updated.body.identifier).to.have.length(1);

      // Both spellings in one list are one identifier given twice.
      const twice = await fhir(app, 'POST', '/Patient', {
        body: {
          resourceType: 'Patient',
          identifier: [
            { system: 'urn:x', value: `${nfc}-2` },
            { system: 'urn:x', value: `${nfd}-2` },
          ],
        },
      });
      expectOutcome(twice, 422, 'invalid');
    });

    it('resolves a session fhirContext find and a launch in the other spelling to the same Patient', async () => {
      const { nfc, nfd } = spellings(unique('ctx'));
      const created = await fhir(app, 'POST', '/Patient', {
        body: { resourceType: 'Patient', identifier: [{ system: 'urn:test:mrn-\u00e9', value: nfc }] },
      });
      expect(created.status).to.equal(201);
      const session = await fetch(`${app.authUrl}/sessions`, {
        method: 'POST',
        headers: { Authorization: GENERAL, 'Content-Type': 'application/json' },
        body: JSON.stringify({
          fhirContext: [
            { type: 'Patient', identifier: { system: 'urn:test:mrn-e\u0301', value: nfd } },
            {
              type: 'Practitioner',
              identifier: { system: 'urn:test:staff', value: unique('dr') },
              role: ROLE_NEW,
            },
          ],
        }),
      });
      const body = (await session.json()) as any;
      expect(session.status, JSON.stringify(body)).to.equal(201);
      expect(body.patient.reference).to.equal(`Patient/${created.body.id}`);

      // The launcher's patient number, in the spelling the hospital system happens to send.
      const first = await launchThrough(app, { patient: nfc, encounter: unique('E'), user: unique('dr') });
      const second = await launchThrough(app, { patient: nfd, encounter: unique('E'), user: unique('dr') });
      const patientOf = async (taskId: number) =>
        (await fhir(app, 'GET', `/Task/${taskId}`)).body.for.reference as string;
      expect(await patientOf(second.taskId)).to.equal(await patientOf(first.taskId));
    });
  });
}
