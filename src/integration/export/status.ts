/**
 * Export state of a QuestionnaireResponse's latest exported version (issue 6), from the outbox
 * read model.
 */
import type { Sql } from '../../db/sql.js';

export interface ExportStatus {
  /**
   * `pending` (not yet tried), `failed` (an attempt failed, more follow), `abandoned` (retrying
   * ended: ReportExportAbandoned), `delivered`, `skipped` (a backlog report not sent by choice),
   * `disabled` (no sink).
   */
  readonly state: 'pending' | 'delivered' | 'failed' | 'abandoned' | 'skipped' | 'disabled';
  readonly attempts: number;
  readonly lastError?: string;
  readonly deliveredAt?: string;
}

/**
 * The export status of `responseId`'s latest completed/amended version, or undefined when none is
 * queued. `'disabled'` when `config` is given without an export sink.
 */
export const exportStatus = async (
  sql: Sql,
  responseId: number,
  config?: { readonly exportSink: string | undefined },
): Promise<ExportStatus | undefined> => {
  const [row] = await sql.query<{
    state: string;
    attempts: number;
    last_error: string | null;
    delivered_at: string | Date | null;
  }>(
    `SELECT state, attempts, COALESCE(abandoned_reason, last_error) AS last_error, delivered_at FROM rm_export_outbox WHERE response_id = $1
     ORDER BY version_id DESC LIMIT 1`,
    [responseId],
  );
  if (!row) return undefined;
  if (config && !config.exportSink) return { state: 'disabled', attempts: 0 };
  if (!['pending', 'delivered', 'failed', 'abandoned', 'skipped'].includes(row.state)) return undefined;
  return {
    state: row.state as ExportStatus['state'],
    attempts: Number(row.attempts),
    ...(row.last_error ? { lastError: row.last_error } : {}),
    ...(row.delivered_at ? { deliveredAt: new Date(row.delivered_at).toISOString() } : {}),
  };
};
