/**
 * The export outbox (docs/architecture.md "Projections"): a catch-up folds a whole batch in
 * memory and writes it with one upsert; it must give exactly the rows that applying each event
 * inline, one statement at a time, gives — whatever the batch boundaries. On PGlite and Postgres.
 */
import { expect } from 'chai';
import { forgetMigrations } from '../../src/db/migrations.js';
import type { Sql } from '../../src/db/sql.js';
import type { RecordedEvent } from '../../src/eventstore/port.js';
import { exportOutboxProjection } from '../../src/projections/export-outbox.js';
import { readModelComponent } from '../../src/projections/projection.js';
import { testDatabases } from '../support/databases.js';
import { testRecordedEvent } from '../support/events.js';

const at = (minute: number) => `2026-03-01T10:${String(minute).padStart(2, '0')}:00.000Z`;
/** A recorded event of `stream` at `revision`, positioned after every earlier one. */
const recorded = (type: string, stream: string, revision: number, data: unknown): RecordedEvent =>
  testRecordedEvent(type, stream, revision, data, { recordedAt: at(0) });

const response = (id: number, revision: number, type: string, status: string, minute: number) =>
  recorded(type, `QuestionnaireResponse-${id}`, revision, {
    id,
    ...(revision === 0 ? { tenantId: 1 } : {}),
    resource: { status, questionnaire: 'https://q.example/q' },
    at: at(minute),
  });

/** Every rule of the outbox: submit, amend, re-open, failures (late and out of order), delivery, delete. */
const log = (): RecordedEvent[] => [
  response(1, 0, 'QuestionnaireResponseCreated', 'in-progress', 1),
  response(1, 1, 'QuestionnaireResponseSubmitted', 'completed', 2),
  recorded('ReportExportFailed', 'export-QuestionnaireResponse-1', 0, {
    responseId: 1,
    version: 2,
    attempt: 1,
    error: 'refused',
    nextAttemptAt: at(5),
    at: at(3),
  }),
  recorded('ReportExportFailed', 'export-QuestionnaireResponse-1', 1, {
    responseId: 1,
    version: 2,
    attempt: 1,
    error: 'again',
    nextAttemptAt: at(6),
    at: at(4),
  }),
  recorded('ReportExported', 'export-QuestionnaireResponse-1', 2, {
    responseId: 1,
    version: 2,
    sink: 'mllp://ris',
    attempt: 2,
    at: at(7),
  }),
  recorded('ReportExportFailed', 'export-QuestionnaireResponse-1', 3, {
    responseId: 1,
    version: 2,
    attempt: 3,
    error: 'late',
    nextAttemptAt: at(9),
    at: at(8),
  }),
  response(1, 2, 'QuestionnaireResponseUpdated', 'amended', 10),
  response(1, 3, 'QuestionnaireResponseUpdated', 'amended', 11),
  response(2, 0, 'QuestionnaireResponseCreated', 'completed', 12),
  recorded('ReportExportFailed', 'export-QuestionnaireResponse-2', 0, {
    responseId: 2,
    version: 1,
    attempt: 1,
    error: 'down',
    nextAttemptAt: at(20),
    at: at(13),
  }),
  response(2, 1, 'QuestionnaireResponseUpdated', 'in-progress', 14),
  response(3, 0, 'QuestionnaireResponseCreated', 'completed', 15),
  recorded('QuestionnaireResponseDeleted', 'QuestionnaireResponse-3', 1, { id: 3, at: at(16) }),
  recorded('ReportExported', 'export-QuestionnaireResponse-9', 0, {
    responseId: 9,
    version: 1,
    sink: 'mllp://ris',
    attempt: 1,
    at: at(17),
  }),
  // Queued with its key, failed, abandoned, requeued (a new round), then delivered.
  response(4, 0, 'QuestionnaireResponseCreated', 'completed', 18),
  recorded('ReportExportQueued', 'export-QuestionnaireResponse-4', 0, {
    responseId: 4,
    version: 1,
    key: 'k-4-1',
    sha256: 'a'.repeat(64),
    at: at(19),
  }),
  recorded('ReportExportQueued', 'export-QuestionnaireResponse-4', 1, {
    responseId: 4,
    version: 1,
    key: 'k-other',
    sha256: 'b'.repeat(64),
    at: at(20),
  }),
  recorded('ReportExportFailed', 'export-QuestionnaireResponse-4', 2, {
    responseId: 4,
    version: 1,
    attempt: 1,
    error: 'nul \u0000 here',
    nextAttemptAt: at(22),
    at: at(21),
  }),
  recorded('ReportExportAbandoned', 'export-QuestionnaireResponse-4', 3, {
    responseId: 4,
    version: 1,
    attempt: 1,
    reason: 'too many attempts',
    at: at(23),
  }),
  recorded('ReportExportRequeued', 'export-QuestionnaireResponse-4', 4, {
    responseId: 4,
    version: 1,
    at: at(24),
  }),
  recorded('ReportExported', 'export-QuestionnaireResponse-4', 5, {
    responseId: 4,
    version: 1,
    sink: 'mllp://ris',
    attempt: 2,
    at: at(25),
  }),
  // A backlog: two reports waiting when a sink is configured, one released by the decision.
  response(5, 0, 'QuestionnaireResponseCreated', 'completed', 26),
  response(6, 0, 'QuestionnaireResponseCreated', 'completed', 28),
  recorded('ExportSinkConfigured', 'export-sink', 0, { sink: 'mllp://ris', at: at(29) }),
  recorded('ExportBacklogDecided', 'export-sink', 1, {
    choice: 'since',
    since: at(27),
    source: 'EXPORT_BACKLOG',
    at: at(30),
  }),
  response(7, 0, 'QuestionnaireResponseCreated', 'completed', 31),
];

const dump = (sql: Sql) =>
  sql.query(
    `SELECT response_id, version_id, tenant_id, state, attempts, next_attempt_at::text AS next_attempt_at,
            last_error, delivered_at::text AS delivered_at, created_at::text AS created_at, export_key,
            sha256, queued_at::text AS queued_at, round_attempts, round_started_at::text AS round_started_at,
            abandoned_reason, backlog
       FROM rm_export_outbox ORDER BY response_id, version_id`,
  );

const fresh = async (sql: Sql) => {
  await sql.exec('DROP TABLE IF EXISTS rm_export_outbox');
  // Its migrations then run again from version 1 (docs/architecture.md "Projections").
  await forgetMigrations(sql, readModelComponent(exportOutboxProjection.name));
  await exportOutboxProjection.migrate(sql);
};

for (const db of testDatabases) {
  describe(`export outbox on ${db.name}`, function () {
    this.timeout(60_000);

    it('builds the same rows in one catch-up batch, in batches of any size, and inline event by event', async () => {
      const { sql, dispose } = await db.open();
      try {
        const events = log();
        await fresh(sql);
        for (const event of events)
          await sql.transaction((tx) => exportOutboxProjection.apply([event], tx, 'inline'));
        const inline = await dump(sql);
        expect(inline.map((r) => `${r.response_id}/${r.version_id} ${r.state}`)).to.deep.equal([
          '1/2 delivered',
          '1/3 cancelled',
          '1/4 skipped',
          '2/1 cancelled',
          '3/1 cancelled',
          '4/1 delivered',
          '5/1 skipped',
          '6/1 pending',
          '7/1 pending',
        ]);
        const row = (id: number) => inline.find((r) => r.response_id === id)!;
        expect(row(4)).to.deep.include({
          export_key: 'k-4-1',
          sha256: 'a'.repeat(64),
          attempts: 2,
          round_attempts: 1,
          last_error: null,
          abandoned_reason: null,
        });
        expect(new Date(String(row(4).round_started_at)).toISOString()).to.equal(at(24));
        expect(new Date(String(row(4).delivered_at)).toISOString()).to.equal(at(25));
        expect([row(5).backlog, row(6).backlog, row(7).backlog]).to.deep.equal(['skipped', 'released', null]);
        for (const size of [events.length, 1, 2, 3, 5]) {
          await fresh(sql);
          for (let i = 0; i < events.length; i += size)
            await sql.transaction((tx) =>
              exportOutboxProjection.apply(events.slice(i, i + size), tx, 'catch-up'),
            );
          expect(await dump(sql), `batches of ${size}`).to.deep.equal(inline);
          // Applying the whole log again changes nothing (idempotence).
          await sql.transaction((tx) => exportOutboxProjection.apply(events, tx, 'catch-up'));
          expect(await dump(sql), `again after batches of ${size}`).to.deep.equal(inline);
        }
      } finally {
        await dispose();
      }
    });

    if (db.name === 'postgres')
      it('reads the rows a batch touches by key, not by a scan of a table that grew without statistics', async () => {
        // A rebuild's state: the table created empty, thousands of rows written since, no ANALYZE.
        const { sql, dispose } = await db.open();
        try {
          await fresh(sql);
          await sql.exec(`
            INSERT INTO rm_export_outbox (tenant_id, response_id, version_id, state, next_attempt_at)
            SELECT 1, g, 1, 'delivered', now() FROM generate_series(1000, 13000) g`);
          const ids = Array.from({ length: 150 }, (_, i) => 2000 + i * 7);
          const batch = ids.map((id) =>
            recorded('ReportExported', `export-QuestionnaireResponse-${id}`, 0, {
              responseId: id,
              version: 1,
              sink: 'mllp://ris',
              attempt: 1,
              at: at(40),
            }),
          );
          for (const mode of ['catch-up', 'inline'] as const) {
            const scans = await sql.transaction(async (tx) => {
              const count = async () =>
                Number(
                  (
                    await tx.query<{ n: string }>(
                      `SELECT coalesce(seq_scan, 0)::text AS n FROM pg_stat_xact_user_tables
                        WHERE schemaname = current_schema() AND relname = 'rm_export_outbox'`,
                    )
                  )[0]?.n ?? 0,
                );
              const before = await count();
              // Six times: the sixth runs a cached generic plan, made for a table without statistics.
              for (let i = 0; i < 6; i++) await exportOutboxProjection.apply(batch, tx, mode);
              return (await count()) - before;
            });
            expect(scans, mode).to.equal(0);
          }
          const rows = await sql.query<{ n: string }>(
            `SELECT count(*)::text AS n FROM rm_export_outbox WHERE delivered_at IS NOT NULL`,
          );
          expect(Number(rows[0]!.n)).to.equal(ids.length);
        } finally {
          await dispose();
        }
      });
  });
}
