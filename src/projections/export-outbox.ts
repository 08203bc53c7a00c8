/**
 * The report-export outbox (issue 6, docs/architecture.md "Processes and hosts", role `export`): one row per QuestionnaireResponse
 * version that reached `completed` (or `amended`), keyed by (response_id, version_id) — an
 * amendment is a new row, so it is exported again. The exporter's own events (ReportExported,
 * ReportExportFailed) move a row's state. Built only from events: replaying gives the same rows.
 */
import type { Sql } from '../db/sql.js';
import {
  REPORT_EXPORT_FAILED,
  REPORT_EXPORTED,
  type ReportExportedData,
  type ReportExportFailedData,
} from '../domain/export/export.js';
import type { ChangedData, CreatedData } from '../domain/fhir/resource.js';
import { resourceEventKind } from '../domain/fhir/resource.js';
import type { RecordedEvent } from '../eventstore/port.js';
import type { Projection } from './projection.js';

/** Statuses whose report is exported. */
const EXPORTED_STATUSES = new Set(['completed', 'amended']);

export const exportOutboxProjection: Projection = {
  name: 'export-outbox',
  tables: ['rm_export_outbox'],
  migrate: (sql) =>
    sql.exec(`CREATE TABLE IF NOT EXISTS rm_export_outbox (
      tenant_id integer NOT NULL,
      response_id integer NOT NULL,
      version_id integer NOT NULL,
      state text NOT NULL,
      attempts integer NOT NULL DEFAULT 0,
      next_attempt_at timestamptz NOT NULL,
      last_error text,
      delivered_at timestamptz,
      PRIMARY KEY (response_id, version_id)
    );
    CREATE INDEX IF NOT EXISTS rm_export_outbox_due ON rm_export_outbox (state, next_attempt_at);`),
  handles: (type) =>
    type === REPORT_EXPORTED ||
    type === REPORT_EXPORT_FAILED ||
    resourceEventKind(type)?.resourceType === 'QuestionnaireResponse',
  apply: async (events, tx) => {
    for (const event of events) await applyOne(event, tx);
  },
};

/** Export events are few (one per finished report version and attempt): one statement each. */
const applyOne = async (event: RecordedEvent, tx: Sql): Promise<void> => {
  if (event.type === REPORT_EXPORTED) {
    const d = event.data as ReportExportedData;
    await tx.query(
      `UPDATE rm_export_outbox SET state = 'delivered', attempts = GREATEST(attempts, $3), delivered_at = $4, last_error = NULL
         WHERE response_id = $1 AND version_id = $2`,
      [d.responseId, d.version, d.attempt, d.at],
    );
    return;
  }
  if (event.type === REPORT_EXPORT_FAILED) {
    const d = event.data as ReportExportFailedData;
    // A late failure never undoes a delivery; an older attempt never overwrites a newer one.
    await tx.query(
      `UPDATE rm_export_outbox SET state = 'failed', attempts = $3, next_attempt_at = $4, last_error = $5
         WHERE response_id = $1 AND version_id = $2 AND state <> 'delivered' AND attempts < $3`,
      [d.responseId, d.version, d.attempt, d.nextAttemptAt, d.error],
    );
    return;
  }
  const kind = resourceEventKind(event.type);
  if (!kind || kind.resourceType !== 'QuestionnaireResponse') return;
  if (kind.kind === 'deleted') {
    const d = event.data as { id: number };
    await tx.query(
      `UPDATE rm_export_outbox SET state = 'cancelled' WHERE response_id = $1 AND state IN ('pending', 'failed')`,
      [d.id],
    );
    return;
  }
  const d = event.data as CreatedData | ChangedData;
  const versionId = Number(event.revision) + 1;
  const status = typeof d.resource.status === 'string' ? d.resource.status : undefined;
  // A newer version (or a step back from completed) makes undelivered older versions moot.
  await tx.query(
    `UPDATE rm_export_outbox SET state = 'cancelled' WHERE response_id = $1 AND version_id < $2 AND state IN ('pending', 'failed')`,
    [d.id, versionId],
  );
  if (!status || !EXPORTED_STATUSES.has(status)) return;
  const tenantId =
    'tenantId' in d && typeof d.tenantId === 'number' ? d.tenantId : (event.metadata.tenantId ?? null);
  if (tenantId === null) return;
  await tx.query(
    `INSERT INTO rm_export_outbox (tenant_id, response_id, version_id, state, attempts, next_attempt_at)
       VALUES ($1, $2, $3, 'pending', 0, $4) ON CONFLICT (response_id, version_id) DO NOTHING`,
    [tenantId, d.id, versionId, d.at],
  );
};
