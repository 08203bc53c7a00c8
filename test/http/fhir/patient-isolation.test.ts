/**
 * A session of one patient learns nothing of another on the data server and the form backend
 * (issue 33 findings 4 and 5; docs/interface.md §4.3 rules 1, 9–11, §5.3; docs/architecture.md
 * "Security"): history shows each version only to a caller that may read it as it stood; a
 * known and an unknown identifier answer alike (`_total`, entries, status); a 409 names no
 * resource the caller may not read; `$everything` and `$populate`'s context keep to the rule.
 * On PGlite and PostgreSQL.
 */
import { expect } from 'chai';
import { GENERAL, seed, startTestApp, type TestApp, unique } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import { entryRefs, expectOutcome, type FhirResponse, fhir } from '../../support/fhir.js';
import {
  givenTwoPatients,
  leakedIn,
  MRN_SYSTEM,
  p1Session,
  SESSION_SCOPES,
  type TwoPatients,
} from '../../support/isolation.js';

for (const database of testDatabases) {
  describe(`patient isolation on the data server on ${database.name}`, function () {
    this.timeout(120_000);
    let app: TestApp;
    let given: TwoPatients;
    const cookies = new Map<string, { cookie: string }>();

    before(async () => {
      app = await startTestApp(database);
      await seed(app);
      given = await givenTwoPatients(app);
      for (const scope of SESSION_SCOPES) cookies.set(scope, { cookie: await p1Session(app, given, scope) });
    });
    after(() => app?.close());

    const nothingLeaked = (res: FhirResponse) => {
      const text = `${JSON.stringify(res.body ?? '')} ${[...res.headers].map(([k, v]) => `${k}: ${v}`).join('\n')}`;
      expect(leakedIn(given, text), text).to.deep.equal([]);
    };
    const nonAuditEvents = async () => (await app.allEvents()).length;

    for (const scope of SESSION_SCOPES) {
      const as = () => cookies.get(scope)!;

      describe(`a session of P1 with ${scope}`, () => {
        describe('history (finding 4): each version is judged as it stood', () => {
          it('refuses version 1 of a report moved from P2 to P1 (403), and reads version 2 when it may read P1', async () => {
            const v1 = await fhir(app, 'GET', `/QuestionnaireResponse/${given.moved.response}/_history/1`, {
              auth: as(),
            });
            const current = await fhir(app, 'GET', `/QuestionnaireResponse/${given.moved.response}`, {
              auth: as(),
            });
            nothingLeaked(v1);
            if (scope === 'user/*.*') {
              // user/ reaches only what the user authored: neither version.
              expectOutcome(v1, 403, 'forbidden');
              expectOutcome(current, 403, 'forbidden');
              return;
            }
            expectOutcome(v1, 403, 'forbidden');
            const v2 = await fhir(app, 'GET', `/QuestionnaireResponse/${given.moved.response}/_history/2`, {
              auth: as(),
            });
            expect(v2.status).to.equal(200);
            expect(v2.body.subject.reference).to.equal(`Patient/${given.p1.patient}`);
            expect(current.status).to.equal(200);
          });

          it('leaves version 1 out of the instance history, its total and its pages', async () => {
            const res = await fhir(app, 'GET', `/QuestionnaireResponse/${given.moved.response}/_history`, {
              auth: as(),
            });
            nothingLeaked(res);
            if (scope === 'user/*.*') return expectOutcome(res, 403, 'forbidden');
            expect(res.status).to.equal(200);
            expect(res.body.total).to.equal(1);
            expect(res.body.entry.map((e: any) => e.response.etag)).to.deep.equal(['W/"2"']);
            const page = await fhir(
              app,
              'GET',
              `/QuestionnaireResponse/${given.moved.response}/_history?_count=1&_cursor=2`,
              { auth: as() },
            );
            expect(page.status).to.equal(200);
            expect(page.body.entry).to.equal(undefined);
            nothingLeaked(page);
          });

          it('shows nothing of it at an instant when it was about P2 (_at)', async () => {
            const at = encodeURIComponent(given.moved.firstVersionAt);
            const instance = await fhir(
              app,
              'GET',
              `/QuestionnaireResponse/${given.moved.response}/_history?_at=${at}`,
              { auth: as() },
            );
            nothingLeaked(instance);
            if (scope !== 'user/*.*') {
              expect(instance.status).to.equal(200);
              expect(instance.body.entry).to.equal(undefined);
            }
            const type = await fhir(app, 'GET', `/QuestionnaireResponse/_history?_at=${at}&_count=1000`, {
              auth: as(),
            });
            expect(type.status).to.equal(200);
            nothingLeaked(type);
          });

          it('shows in the type-level history no version about P2', async () => {
            const res = await fhir(app, 'GET', '/QuestionnaireResponse/_history?_count=1000', { auth: as() });
            expect(res.status).to.equal(200);
            nothingLeaked(res);
            for (const entry of res.body.entry ?? [])
              if (entry.resource)
                expect(entry.resource.subject.reference, JSON.stringify(entry)).to.equal(
                  `Patient/${given.p1.patient}`,
                );
            if (scope !== 'user/*.*')
              expect(
                (res.body.entry ?? []).filter((e: any) => e.fullUrl.endsWith(`/${given.moved.response}`)),
              ).to.have.length(1);
          });
        });

        describe('existence oracles (finding 5)', () => {
          const unknownMrn = () => unique('never-used-mrn');
          const search = (mrn: string, total: string) =>
            fhir(
              app,
              'GET',
              `/Patient?identifier=${encodeURIComponent(`${MRN_SYSTEM}|${mrn}`)}&_total=${total}`,
              {
                auth: as(),
              },
            );

          for (const total of ['estimate', 'accurate', 'none'])
            it(`answers a search by another patient's MRN like one by an unknown MRN (_total=${total})`, async () => {
              const known = await search(given.p2.mrn, total);
              const unknown = await search(unknownMrn(), total);
              expect(known.status).to.equal(200);
              expect(unknown.status).to.equal(200);
              expect(known.body.total).to.equal(unknown.body.total);
              expect(known.body.entry?.length ?? 0).to.equal(unknown.body.entry?.length ?? 0);
              expect(known.body.entry).to.equal(undefined);
              if (total !== 'none') expect(known.body.total).to.equal(0);
            });

          it('POST /Patient with P2’s MRN: 409 duplicate naming no resource (no Location, no id)', async () => {
            const before = await nonAuditEvents();
            const res = await fhir(app, 'POST', '/Patient', {
              auth: as(),
              body: { resourceType: 'Patient', identifier: [{ system: MRN_SYSTEM, value: given.p2.mrn }] },
            });
            expectOutcome(res, 409, 'duplicate');
            expect(res.headers.get('location')).to.equal(null);
            expect(res.headers.get('content-location')).to.equal(null);
            expect(JSON.stringify(res.body)).to.not.include(`Patient/${given.p2.patient}`);
            nothingLeaked(res);
            expect(await nonAuditEvents()).to.equal(before);
          });

          it('a transaction entry with P2’s MRN: 409 naming no resource', async () => {
            const res = await fhir(app, 'POST', '/', {
              auth: as(),
              body: {
                resourceType: 'Bundle',
                type: 'transaction',
                entry: [
                  {
                    resource: {
                      resourceType: 'Patient',
                      identifier: [{ system: MRN_SYSTEM, value: given.p2.mrn }],
                    },
                    request: { method: 'POST', url: 'Patient' },
                  },
                ],
              },
            });
            expectOutcome(res, 409, 'duplicate');
            expect(res.headers.get('location')).to.equal(null);
            expect(JSON.stringify(res.body)).to.not.include(`Patient/${given.p2.patient}`);
            nothingLeaked(res);
          });

          it('If-None-Exist, ifNoneExist and a conditional update matching P2: 403 naming no resource', async () => {
            const identifier = `identifier=${encodeURIComponent(`${MRN_SYSTEM}|${given.p2.mrn}`)}`;
            const body = { resourceType: 'Patient', name: [{ family: 'Probe' }] };
            const answers = [
              await fhir(app, 'POST', '/Patient', {
                auth: as(),
                body,
                headers: { 'If-None-Exist': identifier },
              }),
              await fhir(app, 'PUT', `/Patient?${identifier}`, { auth: as(), body }),
              await fhir(app, 'POST', '/', {
                auth: as(),
                body: {
                  resourceType: 'Bundle',
                  type: 'transaction',
                  entry: [
                    { resource: body, request: { method: 'POST', url: 'Patient', ifNoneExist: identifier } },
                  ],
                },
              }),
            ];
            for (const res of answers) {
              expectOutcome(res, 403, 'forbidden');
              expect(res.headers.get('location')).to.equal(null);
              expect(JSON.stringify(res.body)).to.not.include(`Patient/${given.p2.patient}`);
              nothingLeaked(res);
            }
          });

          it('$everything of P2 is refused (403); of P1 holds nothing of P2', async () => {
            const p2 = await fhir(app, 'GET', `/Patient/${given.p2.patient}/$everything`, { auth: as() });
            expectOutcome(p2, 403, 'forbidden');
            nothingLeaked(p2);
            const p1 = await fhir(app, 'GET', `/Patient/${given.p1.patient}/$everything?_count=1000`, {
              auth: as(),
            });
            nothingLeaked(p1);
            if (scope === 'user/*.*') return expectOutcome(p1, 403, 'forbidden');
            expect(p1.status).to.equal(200);
            const refs = entryRefs(p1.body);
            expect(refs).to.include(`QuestionnaireResponse/${given.moved.response}`);
            expect(refs).to.not.include(`QuestionnaireResponse/${given.p2.response}`);
            expect(refs).to.not.include(`Encounter/${given.p2.encounter}`);
          });
        });

        describe('$populate context (docs/interface.md §4.4)', () => {
          const parameters = (...context: [string, string][]) => ({
            resourceType: 'Parameters',
            parameter: [
              {
                name: 'questionnaire',
                resource: {
                  resourceType: 'Questionnaire',
                  url: 'https://forms.example.org/Questionnaire/probe',
                  status: 'active',
                  item: [{ linkId: 'name', type: 'string' }],
                },
              },
              ...context.map(([name, reference]) => ({
                name: 'context',
                part: [
                  { name: 'name', valueString: name },
                  { name: 'content', valueReference: { reference } },
                ],
              })),
            ],
          });

          it('refuses a context part naming P2’s Patient or Encounter (403), at type and instance level', async () => {
            for (const [path, body] of [
              ['/Questionnaire/$populate', parameters(['patient', `Patient/${given.p2.patient}`])],
              ['/Questionnaire/$populate', parameters(['encounter', `Encounter/${given.p2.encounter}`])],
              [
                '/Questionnaire/$populate',
                parameters(['patient', `${app.casebook.config.fhirUrl}/Patient/${given.p2.patient}`]),
              ],
            ] as const) {
              const res = await fhir(app, 'POST', path, { auth: as(), body });
              expectOutcome(res, 403, 'forbidden');
              nothingLeaked(res);
            }
            const stored = await fhir(app, 'POST', `/Questionnaire/${given.questionnaire}/$populate`, {
              auth: as(),
              body: {
                resourceType: 'Parameters',
                parameter: parameters(['patient', `Patient/${given.p2.patient}`]).parameter.slice(1),
              },
            });
            expectOutcome(stored, 403, 'forbidden');
            nothingLeaked(stored);
          });
        });
      });
    }

    describe('callers that may read the holder keep the answers of docs/interface.md §4.3', () => {
      it('a duplicate names its holder (Location) to the client and to a P1 session for P1’s MRN', async () => {
        const client = await fhir(app, 'POST', '/Patient', {
          auth: GENERAL,
          body: { resourceType: 'Patient', identifier: [{ system: MRN_SYSTEM, value: given.p2.mrn }] },
        });
        expectOutcome(client, 409, 'duplicate');
        expect(client.headers.get('location')).to.match(new RegExp(`/Patient/${given.p2.patient}$`));
        const session = await fhir(app, 'POST', '/Patient', {
          auth: cookies.get('patient/*.* user/*.*')!,
          body: { resourceType: 'Patient', identifier: [{ system: MRN_SYSTEM, value: given.p1.mrn }] },
        });
        expectOutcome(session, 409, 'duplicate');
        expect(session.headers.get('location')).to.match(new RegExp(`/Patient/${given.p1.patient}$`));
      });

      it('a client’s _total=estimate still counts before scopes (its scopes hide nothing)', async () => {
        const res = await fhir(
          app,
          'GET',
          `/Patient?identifier=${encodeURIComponent(`${MRN_SYSTEM}|${given.p2.mrn}`)}&_total=estimate`,
        );
        expect(res.status).to.equal(200);
        expect(res.body.total).to.equal(1);
      });

      it('a delete refused for references names only those the caller may read', async () => {
        // The session user authors a Patient (user/ covers it); the EHR's client adds an Encounter.
        const { cookie } = { cookie: cookies.get('user/*.*')! };
        const created = await fhir(app, 'POST', '/Patient', {
          auth: cookie,
          body: { resourceType: 'Patient', identifier: [{ system: MRN_SYSTEM, value: unique('authored') }] },
        });
        expect(created.status, JSON.stringify(created.body)).to.equal(201);
        const encounter = await fhir(app, 'POST', '/Encounter', {
          auth: GENERAL,
          body: {
            resourceType: 'Encounter',
            status: 'planned',
            subject: { reference: `Patient/${created.body.id}` },
          },
        });
        expect(encounter.status).to.equal(201);
        const refused = await fhir(app, 'DELETE', `/Patient/${created.body.id}`, { auth: cookie });
        const issue = expectOutcome(refused, 409, 'conflict');
        expect(issue.diagnostics).to.not.include(`Encounter/${encounter.body.id}`);
        expect(issue.diagnostics).to.include('1 resource the caller may not read');
        const byClient = await fhir(app, 'DELETE', `/Patient/${created.body.id}`);
        expect(expectOutcome(byClient, 409, 'conflict').diagnostics).to.include(
          `Encounter/${encounter.body.id}`,
        );
      });
    });
  });
}
