/**
 * Questionnaire rules on the write path (issue 35; docs/interface.md §2.6): create, update and a
 * transaction entry refuse a Questionnaire that breaks an R5 invariant (que-2 duplicate linkIds,
 * que-12 enableWhen without enableBehavior) or an item rule with 422, naming the item by FHIRPath
 * and linkId, and write nothing; $validate reports the rules for a form given inline. Over HTTP
 * on PGlite and on the Postgres server.
 */
import { expect } from 'chai';
import { seed, startTestApp, type TestApp } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import { expectOutcome, fhir } from '../../support/fhir.js';

type Issue = { severity: string; code: string; diagnostics: string; expression?: string[] };

const duplicateLinkIds = [
  { linkId: 'size', text: 'Size', type: 'decimal' },
  { linkId: 'nodules', type: 'group', item: [{ linkId: 'size', text: 'Nodule size', type: 'decimal' }] },
];
const twoConditions = [
  { linkId: 'a', type: 'boolean' },
  { linkId: 'b', type: 'boolean' },
  {
    linkId: 'c',
    type: 'string',
    enableWhen: [
      { question: 'a', operator: '=', answerBoolean: true },
      { question: 'b', operator: '=', answerBoolean: true },
    ],
  },
];

for (const database of testDatabases) {
  describe(`Questionnaire rules on write on ${database.name}`, () => {
    let app: TestApp;
    let seq = 0;
    const unique = (prefix: string) => `${prefix}-${++seq}-${Math.random().toString(36).slice(2, 8)}`;
    const questionnaire = (item: unknown[]) => ({
      resourceType: 'Questionnaire',
      url: `https://forms.example.org/Questionnaire/${unique('q')}`,
      status: 'active',
      item,
    });

    before(async function () {
      this.timeout(180_000);
      app = await startTestApp(database);
      await seed(app);
    });
    after(() => app?.close());

    const eventCount = async () => (await app.allEvents()).length;
    const issuesOf = (body: { issue: Issue[] }) => body.issue;

    it('refuses duplicate linkIds (que-2) on create with 422 naming the second item, and writes nothing', async () => {
      const before = await eventCount();
      const res = await fhir(app, 'POST', '/Questionnaire', { body: questionnaire(duplicateLinkIds) });
      expectOutcome(res, 422, 'invalid');
      const [issue] = issuesOf(res.body);
      expect(issue!.expression).to.deep.equal(['Questionnaire.item[1].item[0].linkId']);
      expect(issue!.diagnostics).to.include('que-2').and.include('linkId "size"');
      expect(await eventCount()).to.equal(before);
    });

    it('refuses several enableWhen without enableBehavior (que-12) on update, naming the item', async () => {
      const body = questionnaire([{ linkId: 'a', type: 'boolean' }]);
      const created = await fhir(app, 'POST', '/Questionnaire', { body });
      expect(created.status, JSON.stringify(created.body)).to.equal(201);
      const before = await eventCount();
      const res = await fhir(app, 'PUT', `/Questionnaire/${created.body.id}`, {
        body: { ...body, id: created.body.id, item: twoConditions },
      });
      expectOutcome(res, 422, 'required');
      expect(issuesOf(res.body)).to.have.length(1);
      expect(res.body.issue[0].expression).to.deep.equal(['Questionnaire.item[2].enableBehavior']);
      expect(res.body.issue[0].diagnostics).to.include('que-12').and.include('linkId "c"');
      expect(await eventCount()).to.equal(before);
      // With enableBehavior the same update is stored.
      const fixed = twoConditions.map((i) => (i.linkId === 'c' ? { ...i, enableBehavior: 'any' } : i));
      const ok = await fhir(app, 'PUT', `/Questionnaire/${created.body.id}`, {
        body: { ...body, id: created.body.id, item: fixed },
      });
      expect(ok.status, JSON.stringify(ok.body)).to.equal(200);
      expect(await eventCount()).to.be.greaterThan(before);
    });

    it('refuses a transaction entry whose Questionnaire names a missing enableWhen question, naming entry and item', async () => {
      const before = await eventCount();
      const res = await fhir(app, 'POST', '/', {
        body: {
          resourceType: 'Bundle',
          type: 'transaction',
          entry: [
            {
              resource: questionnaire([
                {
                  linkId: 'a',
                  type: 'string',
                  enableWhen: [{ question: 'zz', operator: 'exists', answerBoolean: true }],
                },
              ]),
              request: { method: 'POST', url: 'Questionnaire' },
            },
          ],
        },
      });
      expectOutcome(res, 422, 'invalid');
      expect(res.body.issue[0].expression).to.deep.equal([
        'Bundle.entry[0].resource.item[0].enableWhen[0].question',
      ]);
      expect(res.body.issue[0].diagnostics).to.include('linkId "a"').and.include('"zz"');
      expect(await eventCount()).to.equal(before);
    });
  });
}
