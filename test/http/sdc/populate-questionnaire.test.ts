/**
 * $populate always sets QuestionnaireResponse.questionnaire (1..1 in R5; issue 13): the canonical,
 * else the stored Questionnaire, else a contained copy with an issue; it leaves out optional groups
 * with no answers beneath them.
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

    it('leaves out an empty optional repeating group, so $validate of the populated response warns of nothing', async () => {
      const questionnaire = {
        resourceType: 'Questionnaire',
        url: 'http://example.org/Questionnaire/contacts',
        status: 'active',
        item: [
          { linkId: 'note', type: 'string', text: 'Note', initial: [{ valueString: 'seen' }] },
          {
            linkId: 'contact',
            type: 'group',
            text: 'Contacts',
            repeats: true,
            item: [{ linkId: 'contact-name', type: 'string', text: 'Name', required: true }],
          },
        ],
      };
      const populated = await fhir(app, 'POST', '/Questionnaire/$populate', {
        body: { resourceType: 'Parameters', parameter: [{ name: 'questionnaire', resource: questionnaire }] },
      });
      expect(populated.status, JSON.stringify(populated.body)).to.equal(200);
      const response = populated.body.parameter.find((p: any) => p.name === 'response').resource;
      expect(response.item.map((i: any) => i.linkId)).to.deep.equal(['note']);

      const validated = await fhir(app, 'POST', '/QuestionnaireResponse/$validate', {
        body: {
          resourceType: 'Parameters',
          parameter: [
            { name: 'resource', resource: { ...response, status: 'completed' } },
            { name: 'questionnaire', resource: questionnaire },
          ],
        },
      });
      expect(validated.status, JSON.stringify(validated.body)).to.equal(200);
      expect(validated.body.issue.map((i: any) => i.severity)).to.deep.equal(['information']);
    });
  });
}
