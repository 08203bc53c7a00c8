/**
 * Invalid data is refused, never stored changed (issue 33 finding 7):
 * - a number JSON.parse cannot read as written: `valueDecimal: 1e400` (stored as null before), an
 *   integer literal past 2^53 (rounded before), `1e-400` (0);
 * - typed primitives out of their FHIR range: `valueInteger` past 32 bits, a `valueInteger64` that
 *   is not a string, `valuePositiveInt: 0`, year 0000 and 30 February as dates;
 * - year 0000 as a launch's `dob`;
 * - search parameters named after JavaScript properties (every Patient came back).
 * Each refusal writes nothing but its AuditEvent.
 */
import { expect } from 'chai';
import { seed, startTestApp, type TestApp, unique } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import { expectOutcome, fhir } from '../../support/fhir.js';
import { launchUrlOf, TEST_LAUNCH_SECRET } from '../../support/launch.js';

const QUESTIONNAIRE_URL = 'https://forms.example/invalid-data';

for (const database of testDatabases) {
  describe(`invalid data is refused on ${database.name} (issue 33 finding 7)`, function () {
    this.timeout(60_000);
    let app: TestApp;
    let patientId: string;
    before(async () => {
      app = await startTestApp(database, {
        env: {
          LAUNCHER_CLIENT_ID: 'ehr-backend',
          LAUNCHER_CLIENT_SECRET: 'general-secret-0123456789',
          LAUNCHER_SHARED_SECRET: TEST_LAUNCH_SECRET,
        },
      });
      await seed(app);
      const patient = await fhir(app, 'POST', '/Patient', {
        body: { resourceType: 'Patient', identifier: [{ system: 'urn:test:mrn', value: unique('mrn') }] },
      });
      patientId = patient.body.id;
    });
    after(() => app?.close());

    /** A response body with one answer, written as raw JSON text (`answer` is spliced in as is). */
    const responseText = (answer: string) =>
      `{"resourceType":"QuestionnaireResponse","questionnaire":"${QUESTIONNAIRE_URL}","status":"in-progress",` +
      `"subject":{"reference":"Patient/${patientId}"},"item":[{"linkId":"q","answer":[${answer}]}]}`;

    /** Sends `body` and asserts that nothing but the refusal's AuditEvent was written. */
    const refused = async (method: string, path: string, body: string, status: number, code: string) => {
      const before = (await app.allEvents()).length;
      const res = await fhir(app, method, path, { body });
      const issue = expectOutcome(res, status, code);
      expect((await app.allEvents()).length, `events written for ${body.slice(0, 80)}`).to.equal(before);
      return issue;
    };

    it('refuses numbers JSON cannot carry as written, naming the element (400)', async () => {
      for (const [answer, where] of [
        ['{"valueDecimal":1e400}', 'QuestionnaireResponse.item[0].answer[0].valueDecimal'],
        ['{"valueDecimal":-1E+400}', 'QuestionnaireResponse.item[0].answer[0].valueDecimal'],
        ['{"valueDecimal":1e-400}', 'QuestionnaireResponse.item[0].answer[0].valueDecimal'],
        ['{"valueInteger":9007199254740993}', 'QuestionnaireResponse.item[0].answer[0].valueInteger'],
        [
          '{"valueQuantity":{"value":123456789012345678901}}',
          'QuestionnaireResponse.item[0].answer[0].valueQuantity.value',
        ],
      ] as const) {
        const issue = await refused('POST', '/QuestionnaireResponse', responseText(answer), 400, 'value');
        expect(issue.expression, answer).to.deep.equal([where]);
      }
      // Inside a transaction Bundle too.
      const bundle = `{"resourceType":"Bundle","type":"transaction","entry":[{"request":{"method":"POST","url":"QuestionnaireResponse"},"resource":${responseText('{"valueDecimal":1e400}')}}]}`;
      await refused('POST', '/', bundle, 400, 'value');
    });

    it('refuses typed primitives out of their FHIR range (422, with the element)', async () => {
      for (const [answer, element] of [
        ['{"valueInteger":2147483648}', 'valueInteger'],
        ['{"valueInteger":-2147483649}', 'valueInteger'],
        ['{"valueInteger":1.5}', 'valueInteger'],
        ['{"valueDate":"0000-01-01"}', 'valueDate'],
        ['{"valueDate":"2026-02-30"}', 'valueDate'],
        ['{"valueDateTime":"0000-06-01T10:00:00Z"}', 'valueDateTime'],
        ['{"valueTime":"25:00:00"}', 'valueTime'],
        ['{"valueString":"x","extension":[{"url":"urn:x","valueInteger64":42}]}', 'valueInteger64'],
        [
          '{"valueString":"x","extension":[{"url":"urn:x","valueInteger64":"9223372036854775808"}]}',
          'valueInteger64',
        ],
        ['{"valueString":"x","extension":[{"url":"urn:x","valuePositiveInt":0}]}', 'valuePositiveInt'],
        ['{"valueString":"x","extension":[{"url":"urn:x","valueUnsignedInt":-1}]}', 'valueUnsignedInt'],
      ] as const) {
        const issue = await refused('POST', '/QuestionnaireResponse', responseText(answer), 422, 'invalid');
        expect(issue.expression?.[0], answer).to.match(new RegExp(`\\.${element}$`));
      }
      for (const birthDate of ['0000-01-01', '0000', '2026-02-30'])
        await refused(
          'POST',
          '/Patient',
          JSON.stringify({
            resourceType: 'Patient',
            birthDate,
            identifier: [{ system: 'urn:x', value: unique('b') }],
          }),
          422,
          'invalid',
        );
    });

    it('keeps what a double carries and what FHIR allows', async () => {
      const created = await fhir(app, 'POST', '/QuestionnaireResponse', {
        body: responseText(
          '{"valueDecimal":0.1},{"valueDecimal":1.000000000000000000E-245},{"valueDecimal":1000000000000000000},' +
            '{"valueInteger":-2147483648},{"valueDate":"0001-01-01"},' +
            '{"valueString":"x","extension":[{"url":"urn:x","valueInteger64":"-9223372036854775808"}]}',
        ),
      });
      expect(created.status, JSON.stringify(created.body)).to.equal(201);
      const values = created.body.item[0].answer.map(
        (a: any) => a.valueDecimal ?? a.valueInteger ?? a.valueDate,
      );
      expect(values.slice(0, 5)).to.deep.equal([0.1, 1e-245, 1e18, -2147483648, '0001-01-01']);
    });

    it('refuses a launch whose dob is year 0000 (400 page), and writes nothing', async () => {
      const before = (await app.allEvents()).length;
      const res = await fetch(
        launchUrlOf(app, { patient: unique('P'), encounter: unique('E'), user: 'dr-x', dob: '0000-01-01' }),
        { redirect: 'manual' },
      );
      expect(res.status).to.equal(400);
      expect(await res.text()).to.include('not a real date');
      expect((await app.allEvents()).length).to.equal(before);
    });

    it('answers 400 for search parameters named after JavaScript properties, as for any unknown one', async () => {
      for (const name of [
        'constructor',
        '__proto__',
        'toString',
        'hasOwnProperty',
        'valueOf',
        'isPrototypeOf',
      ])
        for (const type of ['Patient', 'Task', 'QuestionnaireResponse']) {
          const res = await fhir(app, 'GET', `/${type}?${encodeURIComponent(name)}=x`);
          expectOutcome(res, 400, 'not-supported');
          const posted = await fhir(app, 'POST', `/${type}/_search`, {
            body: `${encodeURIComponent(name)}=x`,
            headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
          });
          expectOutcome(posted, 400, 'not-supported');
        }
      for (const name of ['constructor', '__proto__'])
        expectOutcome(await fhir(app, 'GET', `/Patient?_sort=${name}`), 400, 'invalid');
    });
  });
}
