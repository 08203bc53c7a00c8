/** Read model of sessions (spec §2.4): `rm_sessions`, looked up by id and by cookie hash. */

import type { Sql } from '../db/sql.js';
import type { SessionEvent } from '../domain/session/session.js';
import type { Projection } from './projection.js';
import { bumpSequence } from './sequences.js';

export const sessionsProjection: Projection = {
  name: 'sessions',
  tables: ['rm_sessions'],
  migrate: (sql) =>
    sql.exec(`CREATE TABLE IF NOT EXISTS rm_sessions (
      id integer PRIMARY KEY,
      tenant_id integer NOT NULL,
      client_id text NOT NULL,
      user_id integer NOT NULL,
      patient_id integer,
      encounter_id integer,
      scopes jsonb NOT NULL,
      deployment_mode text NOT NULL,
      post_submit_redirect text,
      post_cancel_redirect text,
      status text NOT NULL,
      cookie_hash text UNIQUE,
      created_at timestamptz NOT NULL,
      last_modified_at timestamptz NOT NULL,
      expires_at timestamptz NOT NULL
    );
    CREATE INDEX IF NOT EXISTS rm_sessions_tenant ON rm_sessions (tenant_id);`),
  apply: async (event, tx) => {
    const e = { type: event.type, data: event.data } as SessionEvent;
    switch (e.type) {
      case 'SessionCreated': {
        const d = e.data;
        await tx.query(
          `INSERT INTO rm_sessions (id, tenant_id, client_id, user_id, patient_id, encounter_id, scopes, deployment_mode,
             post_submit_redirect, post_cancel_redirect, status, created_at, last_modified_at, expires_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, $9, $10, 'inactive', $11, $11, $12) ON CONFLICT (id) DO NOTHING`,
          [
            d.sessionId,
            d.tenantId,
            d.clientId,
            d.userId,
            d.patientId,
            d.encounterId,
            JSON.stringify(d.scopes),
            d.deploymentMode,
            d.postSubmitRedirect,
            d.postCancelRedirect,
            d.createdAt,
            d.expiresAt,
          ],
        );
        await bumpSequence(tx, 'session', d.sessionId);
        return;
      }
      case 'SessionHandedOver':
        await tx.query(
          `UPDATE rm_sessions SET status = 'active', cookie_hash = $2, last_modified_at = $3 WHERE id = $1`,
          [e.data.sessionId, e.data.cookieHash, e.data.at],
        );
        return;
      case 'SessionEnded':
        await tx.query(
          `UPDATE rm_sessions SET status = 'ended', cookie_hash = NULL, last_modified_at = $2 WHERE id = $1`,
          [e.data.sessionId, e.data.at],
        );
        return;
      default:
        return;
    }
  },
};

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

/** The session `id` of `tenantId`, or undefined (another tenant's session reads as missing, spec §5 rule 1). */
export const findSession = async (
  sql: Sql,
  id: number,
  tenantId: number,
): Promise<SessionRow | undefined> => {
  const rows = await sql.query(`${SELECT_SESSION} WHERE s.id = $1 AND s.tenant_id = $2`, [id, tenantId]);
  return rows[0] ? toSessionRow(rows[0]) : undefined;
};

/** The active, unexpired session whose cookie hashes to `cookieHash` at `now`, or undefined (spec §2.4, §3.1). */
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
