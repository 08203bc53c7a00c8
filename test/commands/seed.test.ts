/**
 * The seed file and the demo bootstrap are idempotent against the log, not the read models
 * (issue 11): after a replay cut short (read models emptied and still building), applying the seed
 * again duplicates no tenant, client or Questionnaire. On PGlite and on a real Postgres server.
 */
import { expect } from 'chai';
import { applySeed, bootstrapDemo, DEMO_QUESTIONNAIRE, type Seed } from '../../src/commands/seed.js';
import { startTestApp, type TestApp } from '../support/app.js';
import { testDatabases } from '../support/databases.js';

const SEED: Seed = {
  tenants: [
    {
      name: 'Seeded Hospital',
      ehr_managed: false,
      allowed_scopes: ['patient/*.*'],
      redirect_origins: [],
      clients: [
        {
          client_id: 'seeded-ehr',
          client_secret: 'seeded-secret-0123456789',
          scopes: ['system/*.*'],
          projects: ['demo'],
        },
      ],
      questionnaires: [{ project: 'demo', resource: DEMO_QUESTIONNAIRE }],
    },
  ],
};

const CREATIONS = ['TenantCreated', 'ApiClientRegistered', 'QuestionnaireCreated'];

for (const database of testDatabases) {
  describe(`seed and bootstrap on ${database.name}`, () => {
    let app: TestApp;
    afterEach(() => app?.close());

    /** What a replay killed halfway leaves: every read model empty and building, nothing caught up. */
    const cutShortReplay = async () => {
      const { sql, runner } = app.casebook;
      for (const projection of runner.projections)
        for (const table of projection.tables) await sql.exec(`DELETE FROM ${table}`);
      await sql.exec(`UPDATE projection_state SET status = 'building', checkpoint = NULL`);
    };

    const creations = async () =>
      (await app.allEvents()).filter((e) => CREATIONS.includes(e.type)).map((e) => e.type);

    it('creates nothing again when the seed is applied after a replay was cut short', async () => {
      app = await startTestApp(database);
      const first = await applySeed(app.casebook, SEED);
      expect(first.questionnaires.map((q) => q.outcome)).to.deep.equal(['created']);
      expect(await creations()).to.deep.equal(CREATIONS);

      await cutShortReplay();
      const again = await applySeed(app.casebook, SEED);

      expect(await creations()).to.deep.equal(CREATIONS);
      expect(again.tenants.map((t) => [t.id, t.created])).to.deep.equal(
        first.tenants.map((t) => [t.id, false]),
      );
      expect(again.clients.map((c) => c.created)).to.deep.equal([false]);
      expect(again.questionnaires.map((q) => [q.id, q.outcome])).to.deep.equal([
        [first.questionnaires[0]!.id, 'unchanged'],
      ]);

      // The rebuild then shows exactly one of each.
      await app.casebook.runner.catchUp();
      const rows = await app.casebook.sql.query<{ n: string }>(
        `SELECT count(*)::text AS n FROM rm_resources WHERE resource_type = 'Questionnaire'`,
      );
      expect(rows[0]!.n).to.equal('1');
    });

    it('bootstraps the demo tenant on an empty log only, whatever the read models say', async () => {
      app = await startTestApp(database);
      expect(await bootstrapDemo(app.casebook)).to.include({ clientId: 'demo-ehr' });
      await cutShortReplay();
      expect(await bootstrapDemo(app.casebook)).to.equal(undefined);
      expect(await creations()).to.deep.equal(CREATIONS);
    });
  });
}
