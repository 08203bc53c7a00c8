/**
 * $populate always sets QuestionnaireResponse.questionnaire (1..1 in R5; issue 13): the canonical,
 * else the stored Questionnaire, else a contained copy with an issue.
 */
import { expect } from 'chai';
import { seed, startTestApp, type TestApp } from '../../support/app.js';
import { testDatabases } from '../../support/databases.js';
import { fhir } from '../../support/fhir.js';

const noUrl = {
  resourceType: 'Questionnaire',
  status: 'active',
  item: [{ linkId: 'note', type: 'string', text: 'Note' }],
};

for (const database of testDatabases) {
  describe(`$populate sets questionnaire on ${database.name}`, () => {
    let app: TestApp;
    before(async () => {
      app = await startTestApp(database);
      await seed(app);
    });
    after(() => app?.close());

    it('refers to a stored Questionnaire without url as Questionnaire/<id>', async () => {
      const stored = await fhir(app, 'POST', '/Questionnaire', { body: noUrl });
      expect(stored.status, JSON.stringify(stored.body)).to.equal(201);
      const res = await fhir(app, 'POST', `/Questionnaire/${stored.body.id}/$populate`, {
        body: {
          resourceType: 'Parameters',
          parameter: [{ name: 'subject', valueReference: { reference: 'Patient/1' } }],
        },
      });
      expect(res.status, JSON.stringify(res.body)).to.equal(200);
      const response = res.body.parameter.find((p: any) => p.name === 'response').resource;
      expect(response.questionnaire).to.equal(`Questionnaire/${stored.body.id}`);
    });

    it('contains an inline Questionnaire with neither url nor id, and says so in an issue', async () => {
      const res = await fhir(app, 'POST', '/Questionnaire/$populate', {
        body: { resourceType: 'Parameters', parameter: [{ name: 'questionnaire', resource: noUrl }] },
      });
      expect(res.status, JSON.stringify(res.body)).to.equal(200);
      const response = res.body.parameter.find((p: any) => p.name === 'response').resource;
      expect(response.questionnaire).to.equal('#questionnaire');
      expect(response.contained[0]).to.deep.include({ resourceType: 'Questionnaire', id: 'questionnaire' });
      const issues = res.body.parameter.find((p: any) => p.name === 'issues').resource.issue;
      expect(issues.map((i: any) => i.expression?.[0])).to.include('Questionnaire.url');
    });
  });
}
