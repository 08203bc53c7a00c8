/**
 * A QuestionnaireResponse with contained resources (issue 35; R5 Resource.contained;
 * docs/interface.md §4.4 $validate): stored and read back as sent; $validate of a response whose
 * `questionnaire` is its contained `#form` uses that form, and the form's `answerValueSet` `#vs`
 * is the response's contained ValueSet (contained resources do not nest). On PGlite.
 */
import { expect } from 'chai';
import { seed, startTestApp, type TestApp } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import { fhir } from '../../support/fhir.js';

const contained = [
  {
    resourceType: 'Questionnaire',
    id: 'form',
    status: 'active',
    item: [{ linkId: 'colour', text: 'Colour', type: 'coding', answerValueSet: '#vs' }],
  },
  {
    resourceType: 'ValueSet',
    id: 'vs',
    status: 'active',
    compose: { include: [{ system: 'urn:test:colours', concept: [{ code: 'red', display: 'Red' }] }] },
  },
];
const response = (code: string) => ({
  resourceType: 'QuestionnaireResponse',
  questionnaire: '#form',
  status: 'completed',
  contained,
  item: [{ linkId: 'colour', answer: [{ valueCoding: { system: 'urn:test:colours', code } }] }],
});

describe('a QuestionnaireResponse with contained resources (issue 35)', function () {
  this.timeout(120_000);
  let app: TestApp;
  before(async () => {
    app = await startTestApp(testDatabases[0]!);
    await seed(app);
  });
  after(() => app?.close());

  it('is stored and read back with its contained resources as sent', async () => {
    const created = await fhir(app, 'POST', '/QuestionnaireResponse', { body: response('red') });
    expect(created.status, JSON.stringify(created.body).slice(0, 400)).to.equal(201);
    const read = await fhir(app, 'GET', `/QuestionnaireResponse/${created.body.id}`);
    expect(read.status).to.equal(200);
    expect(read.body.contained).to.deep.equal(contained);
    expect(read.body.questionnaire).to.equal('#form');
  });

  it('$validate checks the answers against the contained form and its contained ValueSet', async () => {
    const good = await fhir(app, 'POST', '/QuestionnaireResponse/$validate', { body: response('red') });
    expect(good.status).to.equal(200);
    expect(
      good.body.issue.map((i: any) => i.severity),
      JSON.stringify(good.body),
    ).to.deep.equal(['information']);
    const bad = await fhir(app, 'POST', '/QuestionnaireResponse/$validate', { body: response('blue') });
    expect(
      bad.body.issue.filter((i: any) => i.severity === 'error').map((i: any) => i.expression[0]),
    ).to.deep.equal(['QuestionnaireResponse.item[0].answer[0]']);
    const missing = await fhir(app, 'POST', '/QuestionnaireResponse/$validate', {
      body: { ...response('red'), questionnaire: '#nothing' },
    });
    expect(missing.status).to.equal(422);
  });
});
