/**
 * `rm_resources` made before $everything's link columns (src/projections/resources.ts), on PGlite
 * and PostgreSQL: migrating adds `practitioner_ids` and `questionnaire` and keeps the rows, whose
 * links stay NULL (read from the content by $everything) until they are written again or rebuilt.
 */
import { expect } from 'chai';
import { everythingLinksOf, resourcesProjection } from '../../src/projections/resources.js';
import { testDatabases } from '../support/databases.js';

const TASK = {
  resourceType: 'Task',
  id: '7',
  status: 'requested',
  intent: 'order',
  for: { reference: 'Patient/1' },
  owner: { reference: 'Practitioner/3' },
  requester: { reference: 'Practitioner/3' },
};

for (const database of testDatabases) {
  describe(`rm_resources migration on ${database.name}`, () => {
    it('adds the link columns to a table made without them, keeping its rows', async () => {
      const { sql, dispose } = await database.open();
      try {
        await sql.exec(`CREATE TABLE rm_resources (
          resource_type text NOT NULL, id integer NOT NULL, tenant_id integer NOT NULL,
          version_id integer NOT NULL, content json NOT NULL, last_updated timestamptz NOT NULL,
          deleted boolean NOT NULL, patient_id integer, encounter_id integer, project text, author text,
          PRIMARY KEY (resource_type, id))`);
        await sql.query(
          `INSERT INTO rm_resources VALUES ('Task', 7, 1, 1, $1::json, now(), false, 1, null, null, null)`,
          [JSON.stringify(TASK)],
        );
        await resourcesProjection.migrate(sql);
        await resourcesProjection.migrate(sql); // idempotent
        const [row] = await sql.query('SELECT id, practitioner_ids, questionnaire FROM rm_resources');
        expect(row).to.deep.equal({ id: 7, practitioner_ids: null, questionnaire: null });
      } finally {
        await dispose();
      }
    });
  });
}

describe('everythingLinksOf', () => {
  it("follows a Task's owner and requester once, a report's Questionnaire, and nothing of a Patient", () => {
    expect(everythingLinksOf('Task', TASK)).to.deep.equal({ practitionerIds: [3], questionnaire: null });
    expect(
      everythingLinksOf('QuestionnaireResponse', {
        questionnaire: 'https://example.org/Questionnaire/x|2',
        author: { reference: 'Practitioner/9' },
        subject: { reference: 'Patient/1' },
      }),
    ).to.deep.equal({ practitionerIds: [9], questionnaire: 'https://example.org/Questionnaire/x|2' });
    expect(
      everythingLinksOf('Patient', { generalPractitioner: [{ reference: 'Practitioner/4' }] }),
    ).to.deep.equal({
      practitionerIds: [],
      questionnaire: null,
    });
  });
});
