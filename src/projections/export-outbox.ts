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
import { type Projection, rowsParam } from './projection.js';

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
  // Inline, a write brings one or two of these events: one statement each, each an atomic
  // read-modify-write beside concurrent appends. A catch-up (no concurrent writer of this table)
  // folds the whole batch in memory and writes it with two statements.
  apply: async (events, tx, mode) => {
    if (mode === 'catch-up') return applyBatch(events, tx);
    for (const event of events) await applyOne(event, tx);
  },
};

/** One outbox row as the fold sees it. */
interface OutboxRow {
  tenant_id: number;
  response_id: number;
  version_id: number;
  state: string;
  attempts: number;
  next_attempt_at: string;
  last_error: string | null;
  delivered_at: string | null;
}

/** Cancels the undelivered rows of `rows` below `belowVersion` (all when undefined). */
const cancelUndelivered = (rows: readonly OutboxRow[] | undefined, belowVersion?: number) => {
  for (const row of rows ?? [])
    if (
      (belowVersion === undefined || row.version_id < belowVersion) &&
      (row.state === 'pending' || row.state === 'failed')
    )
      row.state = 'cancelled';
};

/**
 * Catch-up: the same rules as {@link applyOne}, event by event in log order, on the batch's rows
 * read once (one SELECT) and written once (one upsert of every row the batch touched).
 */
const applyBatch = async (events: readonly RecordedEvent[], tx: Sql): Promise<void> => {
  const responseIds = [
    ...new Set(
      events.map((e) =>
        e.type === REPORT_EXPORTED || e.type === REPORT_EXPORT_FAILED
          ? (e.data as ReportExportedData).responseId
          : (e.data as { id: number }).id,
      ),
    ),
  ];
  const byResponse = new Map<number, OutboxRow[]>();
  const existing = await tx.query<Record<string, unknown>>(
    `SELECT tenant_id, response_id, version_id, state, attempts, next_attempt_at::text AS next_attempt_at,
            last_error, delivered_at::text AS delivered_at
       FROM rm_export_outbox WHERE response_id = ANY($1::int[])`,
    [responseIds],
  );
  for (const r of existing) {
    const row = r as unknown as OutboxRow;
    const list = byResponse.get(row.response_id) ?? [];
    list.push(row);
    byResponse.set(row.response_id, list);
  }
  const touched = new Set<OutboxRow>();
  const find = (responseId: number, version: number) =>
    byResponse.get(responseId)?.find((row) => row.version_id === version);
  for (const event of events) {
    if (event.type === REPORT_EXPORTED) {
      const d = event.data as ReportExportedData;
      const row = find(d.responseId, d.version);
      if (!row) continue;
      Object.assign(row, {
        state: 'delivered',
        attempts: Math.max(row.attempts, d.attempt),
        delivered_at: d.at,
        last_error: null,
      });
      touched.add(row);
      continue;
    }
    if (event.type === REPORT_EXPORT_FAILED) {
      const d = event.data as ReportExportFailedData;
      const row = find(d.responseId, d.version);
      if (!row || row.state === 'delivered' || row.attempts >= d.attempt) continue;
      Object.assign(row, {
        state: 'failed',
        attempts: d.attempt,
        next_attempt_at: d.nextAttemptAt,
        last_error: d.error,
      });
      touched.add(row);
      continue;
    }
    const kind = resourceEventKind(event.type);
    if (!kind || kind.resourceType !== 'QuestionnaireResponse') continue;
    const id = (event.data as { id: number }).id;
    const rows = byResponse.get(id);
    if (kind.kind === 'deleted') {
      cancelUndelivered(rows);
      for (const row of rows ?? []) touched.add(row);
      continue;
    }
    const d = event.data as CreatedData | ChangedData;
    const versionId = Number(event.revision) + 1;
    cancelUndelivered(rows, versionId);
    for (const row of rows ?? []) touched.add(row);
    const status = typeof d.resource.status === 'string' ? d.resource.status : undefined;
    if (!status || !EXPORTED_STATUSES.has(status)) continue;
    const tenantId =
      'tenantId' in d && typeof d.tenantId === 'number' ? d.tenantId : (event.metadata.tenantId ?? null);
    if (tenantId === null || find(id, versionId)) continue;
    const row: OutboxRow = {
      tenant_id: tenantId,
      response_id: id,
      version_id: versionId,
      state: 'pending',
      attempts: 0,
      next_attempt_at: d.at,
      last_error: null,
      delivered_at: null,
    };
    byResponse.set(id, [...(rows ?? []), row]);
    touched.add(row);
  }
  if (touched.size === 0) return;
  await tx.query(
    `INSERT INTO rm_export_outbox (tenant_id, response_id, version_id, state, attempts, next_attempt_at, last_error, delivered_at)
     SELECT tenant_id, response_id, version_id, state, attempts, next_attempt_at, last_error, delivered_at
       FROM json_to_recordset($1::json) AS x(tenant_id integer, response_id integer, version_id integer, state text,
            attempts integer, next_attempt_at timestamptz, last_error text, delivered_at timestamptz)
     ON CONFLICT (response_id, version_id) DO UPDATE SET state = EXCLUDED.state, attempts = EXCLUDED.attempts,
       next_attempt_at = EXCLUDED.next_attempt_at, last_error = EXCLUDED.last_error, delivered_at = EXCLUDED.delivered_at`,
    [rowsParam([...touched])],
  );
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
