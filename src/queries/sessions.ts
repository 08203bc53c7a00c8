/**
 * Reads of the sessions read model (`rm_sessions`, written by src/projections/sessions.ts;
 * docs/interface.md §2.4): by id within a tenant, and by cookie hash. The hosts read sessions here,
 * not in projections/ (docs/architecture.md "Layers").
 */

import type { Sql } from '../db/sql.js';

/** A row of `rm_sessions` joined with its tenant's name. */
export interface SessionRow {
  readonly id: number;
  readonly tenantId: number;
  readonly tenantName: string;
  /** The API client that created the session. */
  readonly clientId: string;
  readonly userId: number;
  readonly patientId: number | null;
  readonly encounterId: number | null;
  readonly scopes: string[];
  readonly deploymentMode: 'embedded' | 'standalone';
  readonly postSubmitRedirect: string | null;
  readonly postCancelRedirect: string | null;
  readonly status: 'inactive' | 'active' | 'ended';
  readonly createdAt: Date;
  readonly lastModifiedAt: Date;
  readonly expiresAt: Date;
}

const SELECT_SESSION = `SELECT s.id, s.tenant_id, t.name AS tenant_name, s.client_id, s.user_id, s.patient_id, s.encounter_id, s.scopes,
  s.deployment_mode, s.post_submit_redirect, s.post_cancel_redirect, s.status, s.created_at, s.last_modified_at, s.expires_at
  FROM rm_sessions s JOIN rm_tenants t ON t.id = s.tenant_id`;

const toSessionRow = (r: Record<string, unknown>): SessionRow => ({
  id: Number(r.id),
  tenantId: Number(r.tenant_id),
  tenantName: String(r.tenant_name),
  clientId: String(r.client_id),
  userId: Number(r.user_id),
  patientId: r.patient_id === null ? null : Number(r.patient_id),
  encounterId: r.encounter_id === null ? null : Number(r.encounter_id),
  scopes: r.scopes as string[],
  deploymentMode: r.deployment_mode as SessionRow['deploymentMode'],
  postSubmitRedirect: (r.post_submit_redirect as string | null) ?? null,
  postCancelRedirect: (r.post_cancel_redirect as string | null) ?? null,
  status: r.status as SessionRow['status'],
  createdAt: new Date(r.created_at as string | Date),
  lastModifiedAt: new Date(r.last_modified_at as string | Date),
  expiresAt: new Date(r.expires_at as string | Date),
});

/** The session `id` of `tenantId`, or undefined (another tenant's session reads as missing, docs/interface.md §5 rule 1). */
export const findSession = async (
  sql: Sql,
  id: number,
  tenantId: number,
): Promise<SessionRow | undefined> => {
  const rows = await sql.query(`${SELECT_SESSION} WHERE s.id = $1 AND s.tenant_id = $2`, [id, tenantId]);
  return rows[0] ? toSessionRow(rows[0]) : undefined;
};

/** The active, unexpired session whose cookie hashes to `cookieHash` at `now`, or undefined (docs/interface.md §2.4, §3.1). */
export const findSessionByCookie = async (
  sql: Sql,
  cookieHash: string,
  now: Date,
): Promise<SessionRow | undefined> => {
  const rows = await sql.query(
    `${SELECT_SESSION} WHERE s.cookie_hash = $1 AND s.status = 'active' AND s.expires_at > $2`,
    [cookieHash, now.toISOString()],
  );
  return rows[0] ? toSessionRow(rows[0]) : undefined;
};
