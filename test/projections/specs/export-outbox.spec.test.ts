/**
 * Projection spec of `rm_export_outbox` (src/projections/export-outbox.ts; docs/architecture.md
 * "Projections", "Report export"): given report and exporter events → then rows, inline, by
 * catch-up and by rebuild, on PGlite and PostgreSQL.
 */
import { exportStream } from '../../../src/domain/export/export.js';
import { exportOutboxProjection } from '../../../src/projections/export-outbox.js';
import { testDatabases } from '../../support/databases.js';
import { projectionSpec, specEvent } from '../../support/projection-spec.js';

const at = (minute: number) => `2026-03-01T10:${String(minute).padStart(2, '0')}:00.000Z`;

const response = (id: number, revision: number, type: string, status: string, minute: number) =>
  specEvent(`QuestionnaireResponse-${id}`, type, {
    id,
    ...(revision === 0 ? { tenantId: 1 } : {}),
    resource: { status, questionnaire: 'https://q.example/q' },
    at: at(minute),
  });
const exporter = (id: number, type: string, data: Record<string, unknown>) =>
  specEvent(exportStream(id), type, { responseId: id, ...data });

const rowsOf = (id: number) =>
  `SELECT tenant_id, response_id, version_id, state, attempts, next_attempt_at, last_error, delivered_at,
          export_key, sha256, round_attempts, abandoned_reason
     FROM rm_export_outbox WHERE response_id = ${id} ORDER BY version_id`;

const pending = (id: number, version: number, minute: number) => ({
  tenant_id: 1,
  response_id: id,
  version_id: version,
  state: 'pending',
  attempts: 0,
  next_attempt_at: at(minute),
  last_error: null,
  delivered_at: null,
  export_key: null,
  sha256: null,
  round_attempts: 0,
  abandoned_reason: null,
});

for (const db of testDatabases)
  describe(`projection spec: export-outbox on ${db.name}`, function () {
    this.timeout(60_000);
    const spec = projectionSpec(db, [exportOutboxProjection]);

    it('a response created in progress is not exported; its submission queues version 2', () =>
      spec
        .given(response(501, 0, 'QuestionnaireResponseCreated', 'in-progress', 1))
        .when(response(501, 1, 'QuestionnaireResponseSubmitted', 'completed', 2))
        .thenRows(rowsOf(501), [pending(501, 2, 2)]));

    it('a failure schedules the next attempt; the export delivers it', () =>
      spec
        .given(response(502, 0, 'QuestionnaireResponseCreated', 'completed', 1))
        .when(
          exporter(502, 'ReportExportFailed', {
            version: 1,
            attempt: 1,
            error: 'refused',
            nextAttemptAt: at(5),
            at: at(3),
          }),
          exporter(502, 'ReportExported', { version: 1, sink: 'mllp://ris', attempt: 2, at: at(7) }),
        )
        .thenRows(rowsOf(502), [
          // The delivery's attempt is the count; a delivered row keeps no error.
          { ...pending(502, 1, 5), state: 'delivered', attempts: 2, delivered_at: at(7) },
        ]));

    it('an amendment before the export is a new row; the version it replaces is no longer sent', () =>
      spec
        .given(response(503, 0, 'QuestionnaireResponseCreated', 'completed', 1))
        .when(response(503, 1, 'QuestionnaireResponseUpdated', 'amended', 4))
        .thenRows(rowsOf(503), [{ ...pending(503, 1, 1), state: 'cancelled' }, pending(503, 2, 4)]));
  });
