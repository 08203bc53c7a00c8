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
import { PATIENT_ERASED, type PatientErasedData } from '../domain/erasure/erasure.js';
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
  type ExportSinkConfiguredData,
} from '../domain/export/export-sink.js';
import type { ChangedData, CreatedData } from '../domain/fhir/resource.js';
import { resourceEventKind } from '../domain/fhir/resource.js';
import type { RecordedEvent } from '../eventstore/port.js';
import type { ApplyMode, Projection } from './projection.js';
import { migrateReadModel, rowsParam } from './projection.js';

/**
 * Statuses whose report is exported: completed (the original), amended (a correction),
 * entered-in-error (a retraction; only a signed-off report can reach it: src/domain/report/report.ts).
 */
const EXPORTED_STATUSES = new Set(['completed', 'amended', 'entered-in-error']);
/** States of a row whose report may still be sent (a failure or an abandon applies to them). */
const OPEN_STATES = new Set(['pending', 'failed']);

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
  migrate: (sql) => migrateReadModel(sql, 'export-outbox'),
  handles: (type) =>
    EXPORT_EVENTS.has(type) ||
    type === PATIENT_ERASED ||
    resourceEventKind(type)?.resourceType === 'QuestionnaireResponse',
  apply: async (events, tx, mode) => {
    // Split at the events that act on the whole table (rare): each run between them is folded
    // in memory from the rows it touches and written with one upsert.
    let run: RecordedEvent[] = [];
    for (const event of events) {
      if (
        event.type !== EXPORT_SINK_CONFIGURED &&
        event.type !== EXPORT_BACKLOG_DECIDED &&
        event.type !== PATIENT_ERASED
      ) {
        run.push(event);
        continue;
      }
      await applyRun(run, tx, mode);
      run = [];
      if (event.type === PATIENT_ERASED) await forgetErased(event, tx);
      else await applyToAll(event, tx);
    }
    await applyRun(run, tx, mode);
  },
};

/**
 * An erased patient's reports are never sent again (docs/architecture.md "Erasure"): their rows go,
 * pending or not.
 */
const forgetErased = async (event: RecordedEvent, tx: Sql): Promise<void> => {
  const d = event.data as PatientErasedData;
  const responses = d.resources.filter((r) => r.resourceType === 'QuestionnaireResponse').map((r) => r.id);
  if (responses.length === 0) return;
  await tx.query(`DELETE FROM rm_export_outbox WHERE tenant_id = $1 AND response_id = ANY($2::integer[])`, [
    d.tenantId,
    responses,
  ]);
};

/** A row of `rm_export_outbox`, as `row_to_json` gives it and `json_populate_recordset` takes it. */
interface OutboxRow {
  tenant_id: number;
  response_id: number;
  version_id: number;
  state: string;
  attempts: number;
  next_attempt_at: string;
  last_error: string | null;
  delivered_at: string | null;
  created_at: string | null;
  export_key: string | null;
  sha256: string | null;
  queued_at: string | null;
  round_attempts: number;
  round_started_at: string | null;
  abandoned_reason: string | null;
  backlog: string | null;
}

/** The response an event is about (every event of a run is about one). */
const responseOf = (event: RecordedEvent): number | undefined => {
  const d = event.data as { responseId?: unknown; id?: unknown };
  const id = EXPORT_EVENTS.has(event.type) ? d.responseId : d.id;
  return typeof id === 'number' ? id : undefined;
};

// The rows of some reports, by primary key, in key order (locked with `lock`). A function with
// enable_seqscan off: during a rebuild the table grows from empty without statistics, and the
// plain statement, planned as a scan of the table filtered by the array of ids, cost 11 ms a page
// at 12,000 reports (docs/performance.md "The export outbox read by key") instead of ~1 ms by key.
/** Defined in src/projections/sql/export-outbox/001_export_outbox.sql. */
const READ_FUNCTION = 'rm_export_outbox_read';

/**
 * Applies a run of per-report events: reads the rows of the reports it names (locked when
 * inline: a concurrent append touching them waits, then sees this one's result), applies each
 * event to them in order by the rules of {@link applyOne}, and writes the rows that changed.
 */
const applyRun = async (events: readonly RecordedEvent[], tx: Sql, mode: ApplyMode): Promise<void> => {
  if (events.length === 0) return;
  const ids = [...new Set(events.map(responseOf).filter((id): id is number => id !== undefined))];
  if (ids.length === 0) return;
  const loaded = await tx.query<{ row: OutboxRow }>(
    `SELECT ${READ_FUNCTION}($1::int[], $2::boolean) AS row`,
    [ids, mode === 'inline'],
  );
  const byResponse = new Map<number, Map<number, OutboxRow>>();
  const versions = (id: number) => {
    const rows = byResponse.get(id) ?? new Map<number, OutboxRow>();
    byResponse.set(id, rows);
    return rows;
  };
  for (const { row } of loaded) versions(row.response_id).set(row.version_id, row);
  const changed = new Set<OutboxRow>();
  for (const event of events) applyOne(event, versions, changed);
  if (changed.size === 0) return;
  await tx.query(
    `INSERT INTO rm_export_outbox SELECT * FROM json_populate_recordset(NULL::rm_export_outbox, $1::json)
     ON CONFLICT (response_id, version_id) DO UPDATE SET
       tenant_id = EXCLUDED.tenant_id, state = EXCLUDED.state, attempts = EXCLUDED.attempts,
       next_attempt_at = EXCLUDED.next_attempt_at, last_error = EXCLUDED.last_error,
       delivered_at = EXCLUDED.delivered_at, created_at = EXCLUDED.created_at,
       export_key = EXCLUDED.export_key, sha256 = EXCLUDED.sha256, queued_at = EXCLUDED.queued_at,
       round_attempts = EXCLUDED.round_attempts, round_started_at = EXCLUDED.round_started_at,
       abandoned_reason = EXCLUDED.abandoned_reason, backlog = EXCLUDED.backlog`,
    [rowsParam([...changed])],
  );
};

/** The sink's configuration and the backlog decision act on every row: one statement each. */
const applyToAll = async (event: RecordedEvent, tx: Sql): Promise<void> => {
  if (event.type === EXPORT_SINK_CONFIGURED) {
    // What waits unqueued now was written before this sink: the backlog, held for a choice (by
    // its time, so that the event applied again never holds a report written after it).
    const d = event.data as ExportSinkConfiguredData;
    await tx.query(
      `UPDATE rm_export_outbox SET backlog = 'held'
        WHERE state = 'pending' AND sha256 IS NULL AND backlog IS NULL
          AND (created_at IS NULL OR created_at <= $1::timestamptz)`,
      [d.at],
    );
    return;
  }
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
};

/**
 * One per-report event applied to the rows of its report (`versions(responseId)`: version → row),
 * adding the rows it changes or creates to `changed`. Export events are the exporter's record
 * of an attempt; a QuestionnaireResponse version that reached an exported status adds a row.
 */
const applyOne = (
  event: RecordedEvent,
  versions: (responseId: number) => Map<number, OutboxRow>,
  changed: Set<OutboxRow>,
): void => {
  const at = (responseId: number, version: number) => versions(responseId).get(version);
  switch (event.type) {
    case REPORT_EXPORT_QUEUED: {
      const d = event.data as ReportExportQueuedData;
      const row = at(d.responseId, d.version);
      if (!row || row.sha256 !== null) return;
      Object.assign(row, {
        export_key: d.key,
        sha256: d.sha256,
        queued_at: d.at,
        round_started_at: row.round_started_at ?? d.at,
      });
      changed.add(row);
      return;
    }
    case REPORT_EXPORTED: {
      const d = event.data as ReportExportedData;
      const row = at(d.responseId, d.version);
      if (!row) return;
      Object.assign(row, {
        state: 'delivered',
        attempts: Math.max(row.attempts, d.attempt),
        delivered_at: d.at,
        last_error: null,
        abandoned_reason: null,
      });
      changed.add(row);
      return;
    }
    case REPORT_EXPORT_FAILED: {
      const d = event.data as ReportExportFailedData;
      const row = at(d.responseId, d.version);
      // A late failure never undoes a delivery; an older attempt never overwrites a newer one.
      if (!row || !OPEN_STATES.has(row.state) || row.attempts >= d.attempt) return;
      Object.assign(row, {
        state: 'failed',
        attempts: d.attempt,
        next_attempt_at: d.nextAttemptAt,
        last_error: storable(d.error),
      });
      changed.add(row);
      return;
    }
    case REPORT_EXPORT_ABANDONED: {
      const d = event.data as ReportExportAbandonedData;
      const row = at(d.responseId, d.version);
      if (!row || !OPEN_STATES.has(row.state)) return;
      Object.assign(row, { state: 'abandoned', abandoned_reason: storable(d.reason) });
      changed.add(row);
      return;
    }
    case REPORT_EXPORT_REQUEUED: {
      const d = event.data as ReportExportRequeuedData;
      const row = at(d.responseId, d.version);
      if (!row || row.state !== 'abandoned') return;
      Object.assign(row, {
        state: 'failed',
        next_attempt_at: d.at,
        round_attempts: row.attempts,
        round_started_at: d.at,
        abandoned_reason: null,
      });
      changed.add(row);
      return;
    }
  }
  const kind = resourceEventKind(event.type);
  if (!kind || kind.resourceType !== 'QuestionnaireResponse') return;
  const d = event.data as CreatedData | ChangedData | { id: number };
  const rows = versions(d.id);
  // A deletion cancels every undelivered version; a newer version (or a step back from
  // completed) makes undelivered older ones moot.
  const versionId = kind.kind === 'deleted' ? Number.POSITIVE_INFINITY : Number(event.revision) + 1;
  for (const row of rows.values())
    if (row.version_id < versionId && OPEN_STATES.has(row.state)) {
      row.state = 'cancelled';
      changed.add(row);
    }
  if (kind.kind === 'deleted' || !('resource' in d)) return;
  const status = typeof d.resource.status === 'string' ? d.resource.status : undefined;
  if (!status || !EXPORTED_STATUSES.has(status) || rows.has(versionId)) return;
  const tenantId =
    'tenantId' in d && typeof d.tenantId === 'number' ? d.tenantId : (event.metadata.tenantId ?? null);
  if (tenantId === null) return;
  const row: OutboxRow = {
    tenant_id: tenantId,
    response_id: d.id,
    version_id: versionId,
    state: 'pending',
    attempts: 0,
    next_attempt_at: d.at,
    last_error: null,
    delivered_at: null,
    created_at: d.at,
    export_key: null,
    sha256: null,
    queued_at: null,
    round_attempts: 0,
    round_started_at: null,
    abandoned_reason: null,
    backlog: null,
  };
  rows.set(versionId, row);
  changed.add(row);
};

/**
 * The idempotency keys of every version of these reports the outbox holds (queued, delivered or
 * abandoned): what a drop directory named its files by (docs/architecture.md "Erasure").
 */
export const exportKeysOf = async (
  sql: Sql,
  tenantId: number,
  responseIds: readonly number[],
): Promise<string[]> => {
  if (responseIds.length === 0) return [];
  const rows = await sql.query<{ export_key: string }>(
    `SELECT DISTINCT export_key FROM rm_export_outbox
      WHERE tenant_id = $1 AND response_id = ANY($2::integer[]) AND export_key IS NOT NULL ORDER BY 1`,
    [tenantId, [...responseIds]],
  );
  return rows.map((r) => r.export_key);
};
