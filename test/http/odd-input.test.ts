/**
 * Tampered and odd input that answered 500 (issue 33 finding 6): every parser of a date, a number
 * or a cursor agrees with PostgreSQL, and JavaScript property names are names like any other.
 * - a paging `_cursor` holding 30 February or year 0000 (`Date.parse` reads them, PostgreSQL
 *   refuses them), or a text key with U+0000;
 * - `AuditEvent?date=ge0000-01-01`, and the date ranges whose bounds leave years 1–9999;
 * - an AuditEvent `_cursor` holding 9223372036854775808 (past PostgreSQL's bigint);
 * - the report editor on a Questionnaire whose linkIds and enableWhen questions are `valueOf`,
 *   `constructor`, `__proto__`, `toString`.
 */
import { expect } from 'chai';
import { newPatient, newTask, sessionBody, unique } from '../app/support.js';
import { seed, startTestApp, type TestApp } from '../support/app.js';
import { testDatabases } from '../support/databases.js';
import { expectOutcome, fhir, sessionCookie } from '../support/fhir.js';

/** The cursor of a Bundle's `next` link, decoded (a search cursor is base64url JSON). */
const nextCursor = (bundle: any): string => {
  const next = bundle.link.find((l: any) => l.relation === 'next')?.url as string;
  expect(next, 'a next link').to.be.a('string');
  return new URL(next).searchParams.get('_cursor')!;
};
const decode = (cursor: string): unknown[] => JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
const encode = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url');

for (const database of testDatabases) {
  describe(`odd and tampered input on ${database.name} (issue 33 finding 6)`, function () {
    this.timeout(60_000);
    let app: TestApp;
    before(async () => {
      app = await startTestApp(database);
      await seed(app);
      for (let i = 0; i < 3; i++) await newPatient(app, unique('odd'));
    });
    after(() => app?.close());

    it('answers 400 for a _lastUpdated cursor holding 30 February or year 0000, and pages with the real one', async () => {
      const first = await fhir(app, 'GET', '/Patient?_sort=_lastUpdated&_count=1');
      expect(first.status).to.equal(200);
      const cursor = nextCursor(first.body);
      const [direction, key, id, sort] = decode(cursor) as [string, string, number, string];
      expect(key).to.match(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/);
      for (const forged of [
        '2026-02-30T10:00:00.000000Z',
        '0000-01-01T00:00:00.000000Z',
        '2026-04-31T00:00:00.000000Z',
        '2026-01-01T24:00:00.000000Z',
        '2026-01-01T23:59:60.000000Z',
      ]) {
        const res = await fhir(
          app,
          'GET',
          `/Patient?_sort=_lastUpdated&_count=1&_cursor=${encode([direction, forged, id, sort])}`,
        );
        expectOutcome(res, 400, 'invalid');
      }
      const second = await fhir(app, 'GET', `/Patient?_sort=_lastUpdated&_count=1&_cursor=${cursor}`);
      expect(second.status).to.equal(200);
      expect(second.body.entry).to.have.length(1);
    });

    it('answers 400 for a text sort cursor holding U+0000, and for ids past 2,147,483,647', async () => {
      const first = await fhir(app, 'GET', '/Patient?_count=1');
      const [direction, , , sort] = decode(nextCursor(first.body)) as [string, string, number, string];
      for (const [key, id] of [
        ['2147483648', 1],
        ['1', 2147483648],
        ['1', -1],
      ] as const)
        expectOutcome(
          await fhir(app, 'GET', `/Patient?_count=1&_cursor=${encode([direction, key, id, sort])}`),
          400,
          'invalid',
        );
      await newTask(app, (await newPatient(app)) as string);
      const tasks = await fhir(app, 'GET', '/Task?_sort=status&_count=1');
      expect(tasks.status).to.equal(200);
      const taskCursor = tasks.body.link.find((l: any) => l.relation === 'next');
      // One Task is enough for the forged cursor: the key is checked before any page is read.
      const [, , taskId] = taskCursor ? decode(nextCursor(tasks.body)) : ['n', '', 1];
      const forged = encode(['n', 'draft\u0000', taskId, 'status']);
      expectOutcome(await fhir(app, 'GET', `/Task?_sort=status&_count=1&_cursor=${forged}`), 400, 'invalid');
    });

    it('answers AuditEvent date searches whose bounds leave years 1–9999, and 400 for year 0000', async () => {
      for (const date of ['ge0000-01-01', 'lt0000', 'eq0000-12-31', 'ge2026-02-30'])
        expectOutcome(await fhir(app, 'GET', `/AuditEvent?date=${date}`), 400, 'invalid');
      // The end of 9999 is 10000-01-01, and 0001-01-01T00:00+14:00 is in 1 BC: both are bounds SQL must read.
      for (const date of [
        'gt9999-12-31',
        'le9999',
        'lt0001-01-01T00:00:00%2B14:00',
        'ge0001-01-01T00:00:00%2B14:00',
      ]) {
        const res = await fhir(app, 'GET', `/AuditEvent?date=${date}`);
        expect(res.status, `${date}: ${JSON.stringify(res.body)}`).to.equal(200);
        expect(res.body.type).to.equal('searchset');
      }
      const since = await fhir(app, 'GET', '/AuditEvent?date=ge0001-01-01T00:00:00%2B14:00&_count=1');
      expect(since.body.total).to.be.greaterThan(0);
      const none = await fhir(app, 'GET', '/AuditEvent?date=gt9999-12-31');
      expect(none.body.total).to.equal(0);
    });

    it('answers 400 for an AuditEvent cursor past PostgreSQL bigint, and pages with a real one', async () => {
      for (const seq of ['9223372036854775808', '9999999999999999999'])
        expectOutcome(
          await fhir(app, 'GET', `/AuditEvent?_cursor=${Buffer.from(`a${seq}`).toString('base64url')}`),
          400,
          'invalid',
        );
      const largest = await fhir(
        app,
        'GET',
        `/AuditEvent?_cursor=${Buffer.from('a9223372036854775807').toString('base64url')}&_count=1`,
      );
      expect(largest.status).to.equal(200);
    });

    it('opens and saves a report whose linkIds and enableWhen questions are JavaScript property names', async () => {
      const form = (extra: object[]) => ({
        body: {
          resourceType: 'Questionnaire',
          url: `https://forms.example/${unique('props')}`,
          status: 'active',
          title: 'Property names',
          item: [
            ...extra,
            { linkId: 'valueOf', text: 'Value of', type: 'boolean' },
            {
              linkId: 'constructor',
              text: 'Shown when valueOf is true',
              type: 'string',
              enableWhen: [{ question: 'valueOf', operator: '=', answerBoolean: true }],
            },
            {
              linkId: '__proto__',
              text: 'Shown unless toString is answered',
              type: 'string',
              enableWhen: [{ question: 'toString', operator: 'exists', answerBoolean: false }],
            },
            {
              linkId: 'hasOwnProperty',
              text: 'Shown when __proto__ is answered',
              type: 'string',
              enableWhen: [{ question: '__proto__', operator: 'exists', answerBoolean: true }],
            },
            {
              // The finding: a question that is no item's linkId but a property of every object.
              linkId: 'later',
              text: 'Shown when isPrototypeOf equals x',
              type: 'string',
              enableWhen: [{ question: 'isPrototypeOf', operator: '=', answerString: 'x' }],
            },
          ],
        },
      });
      // An enableWhen on a question that is no item's linkId but a property of every object is
      // refused when the form is stored (issue 35, Questionnaire rules), naming the item…
      const refused = await fhir(app, 'POST', '/Questionnaire', form([]));
      expect(refused.status, JSON.stringify(refused.body)).to.equal(422);
      expect(JSON.stringify(refused.body)).to.include('isPrototypeOf');
      // …and with those questions present, every name is a linkId like any other.
      const questionnaire = await fhir(
        app,
        'POST',
        '/Questionnaire',
        form([
          { linkId: 'toString', text: 'To string', type: 'string' },
          { linkId: 'isPrototypeOf', text: 'Is prototype of', type: 'string' },
        ]),
      );
      expect(questionnaire.status, JSON.stringify(questionnaire.body)).to.equal(201);
      const patientId = await newPatient(app);
      const task = await newTask(app, patientId);
      const { cookie } = await sessionCookie(app, sessionBody({ patient: Number(patientId) }));
      const origin = new URL(app.casebook.config.appUrl).origin;
      const appBase = app.casebook.config.appUrl.replace('localhost', '127.0.0.1');
      const post = (path: string, form: [string, string][]) =>
        fetch(`${appBase}${path}`, {
          method: 'POST',
          redirect: 'manual',
          headers: {
            Cookie: cookie.cookie,
            Origin: origin,
            'Content-Type': 'application/x-www-form-urlencoded',
          },
          body: new URLSearchParams(form).toString(),
        });
      const chosen = await post(`/tasks/${task.id}/forms`, [['questionnaire', questionnaire.body.id]]);
      expect(chosen.status, await chosen.clone().text()).to.equal(303);
      const page = await fetch(`${appBase}/tasks/${task.id}/report`, { headers: { Cookie: cookie.cookie } });
      expect(page.status).to.equal(200);
      const html = await page.text();
      for (const linkId of ['valueOf', 'constructor', '__proto__', 'hasOwnProperty'])
        expect(html).to.include(`name="q:${linkId}"`);

      const baseVersion = /name="base_version" value="(\d+)"/.exec(html)?.[1];
      expect(baseVersion, 'the editor names its base version').to.be.a('string');
      const saved = await post(`/tasks/${task.id}/report`, [
        ['action', 'save'],
        ['base_version', String(baseVersion)],
        ['q:valueOf', 'true'],
        ['q:constructor', 'built'],
        ['q:__proto__', 'proto'],
        ['q:hasOwnProperty', 'own'],
      ]);
      expect(saved.status, await saved.clone().text()).to.be.oneOf([200, 303]);
      const again = await fetch(`${appBase}/tasks/${task.id}/report`, { headers: { Cookie: cookie.cookie } });
      expect(again.status).to.equal(200);
      const taskNow = await fhir(app, 'GET', `/Task/${task.id}`);
      const responseId = /QuestionnaireResponse\/(\d+)/.exec(taskNow.body.focus.reference)![1];
      const response = await fhir(app, 'GET', `/QuestionnaireResponse/${responseId}`);
      // Entries, not an object literal: `{ __proto__: … }` in a literal would set a prototype.
      const answers = response.body.item.map((i: any) => [i.linkId, Object.values(i.answer[0])[0]]);
      expect(answers).to.deep.equal([
        ['valueOf', true],
        ['constructor', 'built'],
        ['__proto__', 'proto'],
        ['hasOwnProperty', 'own'],
      ]);
    });
  });
}
