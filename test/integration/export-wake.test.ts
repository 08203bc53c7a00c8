/**
 * The report exporter is woken by appends that change the export outbox, not by every append
 * (src/integration/export/exporter.ts `follow`; the runner's `applied$` names the projections an
 * append applied). Woken by every append, it ran a pass of outbox queries per write under load.
 * On PGlite and on a real Postgres server.
 */
import { expect } from 'chai';
import { seed, startTestApp, type TestApp } from '../support/app.js';
import { recordingDatabase, testDatabases } from '../support/databases.js';
import { fhir } from '../support/fhir.js';

for (const database of testDatabases) {
  describe(`the report exporter's wake-ups on ${database.name}`, () => {
    const statements: string[] = [];
    let app: TestApp;

    before(async () => {
      // A sink nobody listens on: nothing here is delivered, only the exporter's passes count.
      app = await startTestApp(recordingDatabase(database, statements), {
        env: { EXPORT_SINK: 'http://127.0.0.1:9/reports' },
      });
      await seed(app);
    });
    after(() => app?.close());

    it('is not woken by writes that change no outbox row, and is by one that does', async () => {
      expect(app.casebook.exporter, 'the exporter runs in this process').to.not.equal(undefined);
      const applied: (ReadonlySet<string> | undefined)[] = [];
      const subscription = app.casebook.runner.applied$.subscribe((names) => applied.push(names));
      try {
        // Let the exporter's first passes end.
        await new Promise((resolve) => setTimeout(resolve, 300));
        statements.length = 0;
        const started = performance.now();
        for (let i = 0; i < 10; i++) {
          const res = await fhir(app, 'POST', '/Patient', {
            body: { resourceType: 'Patient', name: [{ family: `Wake${i}` }] },
          });
          expect(res.status, JSON.stringify(res.body)).to.equal(201);
        }
        await new Promise((resolve) => setImmediate(resolve));
        // Each create applied the resources read model, none the outbox.
        expect(applied).to.have.length.at.least(10);
        for (const names of applied)
          expect([...(names ?? ['(any)'])])
            .to.include('resources')
            .and.not.include('export-outbox');
        // At most the exporter's own polls (a pass of two outbox queries a second) while ten
        // creates went by; woken by every append, it ran a pass for each.
        const polls = Math.ceil((performance.now() - started) / 1000) + 1;
        const outboxQueries = statements.filter((text) => text.includes('rm_export_outbox'));
        expect(outboxQueries.length, outboxQueries.join('\n')).to.be.at.most(2 * polls);
        expect(2 * polls, 'the creates took too long to tell polls from wake-ups').to.be.below(20);

        applied.length = 0;
        const patient = await fhir(app, 'POST', '/Patient', { body: { resourceType: 'Patient' } });
        const report = await fhir(app, 'POST', '/QuestionnaireResponse', {
          body: {
            resourceType: 'QuestionnaireResponse',
            questionnaire: 'https://forms.example.org/Questionnaire/wake',
            status: 'completed',
            subject: { reference: `Patient/${patient.body.id}` },
            authored: '2026-03-01T09:30:00Z',
            item: [{ linkId: 'findings', answer: [{ valueString: 'clear' }] }],
          },
        });
        expect(report.status, JSON.stringify(report.body)).to.equal(201);
        await new Promise((resolve) => setImmediate(resolve));
        // A completed report enters the outbox: that append names it, and wakes the exporter.
        expect(applied.some((names) => names?.has('export-outbox'))).to.equal(true);
      } finally {
        subscription.unsubscribe();
      }
    });
  });
}
