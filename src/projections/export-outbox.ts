/**
 * The report-export outbox (issue 6, issue 15; docs/architecture.md "Report export"): one row per
 * QuestionnaireResponse version that reached `completed` (or `amended`), keyed by (response_id,
 * version_id) — an amendment is a new row, so it is exported again. The exporter's own events move
 * a row: ReportExportQueued pins its key and hash, ReportExportFailed schedules the next attempt,
 * ReportExported, ReportExportAbandoned and ReportExportRequeued end or restart it. ExportSinkConfigured
 * holds the rows still waiting to be queued as the backlog; ExportBacklogDecided releases or skips
 * them. Built only from events: replaying gives the same rows.
 */
import type { Sql } from '../db/sql.js';
import {
  REPORT_EXPORT_ABANDONED,
  REPORT_EXPORT_FAILED,
  REPORT_EXPORT_QUEUED,
  REPORT_EXPORT_REQUEUED,
  REPORT_EXPORTED,
  type ReportExportAbandonedData,
  type ReportExportedData,
  type ReportExportFailedData,
  type ReportExportQueuedData,
  type ReportExportRequeuedData,
} from '../domain/export/export.js';
import {
  EXPORT_BACKLOG_DECIDED,
  EXPORT_SINK_CONFIGURED,
  type ExportBacklogDecidedData,
} from '../domain/export/export-sink.js';
import type { ChangedData, CreatedData } from '../domain/fhir/resource.js';
import { resourceEventKind } from '../domain/fhir/resource.js';
import type { RecordedEvent } from '../eventstore/port.js';
import type { Projection } from './projection.js';

/** Statuses whose report is exported. */
const EXPORTED_STATUSES = new Set(['completed', 'amended']);

const EXPORT_EVENTS = new Set([
  REPORT_EXPORT_QUEUED,
  REPORT_EXPORTED,
  REPORT_EXPORT_FAILED,
  REPORT_EXPORT_ABANDONED,
  REPORT_EXPORT_REQUEUED,
  EXPORT_SINK_CONFIGURED,
  EXPORT_BACKLOG_DECIDED,
]);

/**
 * Text for a `text` column: PostgreSQL refuses NUL, so events recorded before outside text was
 * sanitised (issue 15) must not stop the read model.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: NUL is what is replaced
const storable = (text: string): string => text.replace(/\u0000/g, '\\x00');

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
    ALTER TABLE rm_export_outbox ADD COLUMN IF NOT EXISTS created_at timestamptz;
    ALTER TABLE rm_export_outbox ADD COLUMN IF NOT EXISTS export_key text;
    ALTER TABLE rm_export_outbox ADD COLUMN IF NOT EXISTS sha256 text;
    ALTER TABLE rm_export_outbox ADD COLUMN IF NOT EXISTS queued_at timestamptz;
    ALTER TABLE rm_export_outbox ADD COLUMN IF NOT EXISTS round_attempts integer NOT NULL DEFAULT 0;
    ALTER TABLE rm_export_outbox ADD COLUMN IF NOT EXISTS round_started_at timestamptz;
    ALTER TABLE rm_export_outbox ADD COLUMN IF NOT EXISTS abandoned_reason text;
    ALTER TABLE rm_export_outbox ADD COLUMN IF NOT EXISTS backlog text;
    CREATE INDEX IF NOT EXISTS rm_export_outbox_due ON rm_export_outbox (state, next_attempt_at);`),
  handles: (type) =>
    EXPORT_EVENTS.has(type) || resourceEventKind(type)?.resourceType === 'QuestionnaireResponse',
  apply: async (events, tx) => {
    for (const event of events) await applyOne(event, tx);
  },
};

/** Export events are few (one per finished report version and attempt): one statement each. */
const applyOne = async (event: RecordedEvent, tx: Sql): Promise<void> => {
  switch (event.type) {
    case REPORT_EXPORT_QUEUED: {
      const d = event.data as ReportExportQueuedData;
      await tx.query(
        `UPDATE rm_export_outbox SET export_key = $3, sha256 = $4, queued_at = $5,
           round_started_at = COALESCE(round_started_at, $5)
         WHERE response_id = $1 AND version_id = $2 AND sha256 IS NULL`,
        [d.responseId, d.version, d.key, d.sha256, d.at],
      );
      return;
    }
    case REPORT_EXPORTED: {
      const d = event.data as ReportExportedData;
      await tx.query(
        `UPDATE rm_export_outbox SET state = 'delivered', attempts = GREATEST(attempts, $3), delivered_at = $4,
           last_error = NULL, abandoned_reason = NULL
         WHERE response_id = $1 AND version_id = $2`,
        [d.responseId, d.version, d.attempt, d.at],
      );
      return;
    }
    case REPORT_EXPORT_FAILED: {
      const d = event.data as ReportExportFailedData;
      // A late failure never undoes a delivery; an older attempt never overwrites a newer one.
      await tx.query(
        `UPDATE rm_export_outbox SET state = 'failed', attempts = $3, next_attempt_at = $4, last_error = $5
         WHERE response_id = $1 AND version_id = $2 AND state IN ('pending', 'failed') AND attempts < $3`,
        [d.responseId, d.version, d.attempt, d.nextAttemptAt, storable(d.error)],
      );
      return;
    }
    case REPORT_EXPORT_ABANDONED: {
      const d = event.data as ReportExportAbandonedData;
      await tx.query(
        `UPDATE rm_export_outbox SET state = 'abandoned', abandoned_reason = $3
         WHERE response_id = $1 AND version_id = $2 AND state IN ('pending', 'failed')`,
        [d.responseId, d.version, storable(d.reason)],
      );
      return;
    }
    case REPORT_EXPORT_REQUEUED: {
      const d = event.data as ReportExportRequeuedData;
      await tx.query(
        `UPDATE rm_export_outbox SET state = 'failed', next_attempt_at = $3, round_attempts = attempts,
           round_started_at = $3, abandoned_reason = NULL
         WHERE response_id = $1 AND version_id = $2 AND state = 'abandoned'`,
        [d.responseId, d.version, d.at],
      );
      return;
    }
    case EXPORT_SINK_CONFIGURED:
      // What waits unqueued now was written before this sink: the backlog, held for a choice.
      await tx.query(
        `UPDATE rm_export_outbox SET backlog = 'held' WHERE state = 'pending' AND sha256 IS NULL AND backlog IS NULL`,
      );
      return;
    case EXPORT_BACKLOG_DECIDED: {
      const d = event.data as ExportBacklogDecidedData;
      if (d.choice === 'all') {
        await tx.query(`UPDATE rm_export_outbox SET backlog = 'released' WHERE backlog = 'held'`);
        return;
      }
      await tx.query(
        `UPDATE rm_export_outbox SET backlog = CASE WHEN $1::timestamptz IS NOT NULL AND created_at >= $1::timestamptz
           THEN 'released' ELSE 'skipped' END,
           state = CASE WHEN $1::timestamptz IS NOT NULL AND created_at >= $1::timestamptz THEN state ELSE 'skipped' END
         WHERE backlog = 'held'`,
        [d.choice === 'since' ? (d.since ?? null) : null],
      );
      return;
    }
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
    `INSERT INTO rm_export_outbox (tenant_id, response_id, version_id, state, attempts, next_attempt_at, created_at)
       VALUES ($1, $2, $3, 'pending', 0, $4, $4) ON CONFLICT (response_id, version_id) DO NOTHING`,
    [tenantId, d.id, versionId, d.at],
  );
};
