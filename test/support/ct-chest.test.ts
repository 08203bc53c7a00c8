/**
 * The CT chest fixture (test/support/ct-chest.ts) is what its doc says, and casebook stores it.
 */
import { expect } from 'chai';
import { seed, startTestApp, type TestApp } from './app.js';
import { allItems, CT_CHEST_REQUIRED, CT_CHEST_VALUE_SETS, ctChestQuestionnaire } from './ct-chest.js';
import { testDatabases } from './databases.js';
import { fhir } from './fhir.js';

describe('the CT chest test form', () => {
  it('has 60 items, 16 of them required, a repeating Nodule group and a BMI calculation', () => {
    const items = allItems(ctChestQuestionnaire('https://forms.example.org/ct').item);
    expect(items).to.have.length(60);
    expect(items.filter((i) => i.required).map((i) => i.linkId)).to.deep.equal([...CT_CHEST_REQUIRED]);
    expect(items.find((i) => i.linkId === 'nodule')).to.deep.include({ type: 'group', repeats: true });
    expect(JSON.stringify(items.find((i) => i.linkId === 'bmi'))).to.contain('calculatedExpression');
    expect(new Set(items.map((i) => i.linkId)).size).to.equal(60);
  });

  for (const database of testDatabases.slice(0, 1))
    describe(`stored on ${database.name}`, () => {
      let app: TestApp;
      before(async () => {
        app = await startTestApp(database);
        await seed(app);
      });
      after(() => app?.close());

      it('is accepted with its ValueSets', async () => {
        for (const valueSet of CT_CHEST_VALUE_SETS) {
          const res = await fhir(app, 'POST', '/ValueSet', { body: valueSet });
          expect(res.status, JSON.stringify(res.body)).to.equal(201);
        }
        const res = await fhir(app, 'POST', '/Questionnaire', {
          body: ctChestQuestionnaire('https://forms.example.org/Questionnaire/ct-chest-fixture'),
        });
        expect(res.status, JSON.stringify(res.body)).to.equal(201);
      });
    });
});
