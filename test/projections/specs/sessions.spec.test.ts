/**
 * Projection spec of `rm_sessions` (src/projections/sessions.ts; docs/architecture.md
 * "Projections"): given session events → then rows, inline (the keyed apply function, called in
 * the append), by catch-up and by rebuild (a page of more than 100 sessions: the bulk form), on
 * PGlite and PostgreSQL.
 */
import { sessionStream } from '../../../src/domain/session/session.js';
import { sessionsProjection } from '../../../src/projections/sessions.js';
import { testDatabases } from '../../support/databases.js';
import { projectionSpec, specEvent } from '../../support/projection-spec.js';

const AT = '2026-03-01T10:00:00.000Z';
const LATER = '2026-03-01T10:05:00.000Z';
const END = '2026-03-01T10:30:00.000Z';
const EXPIRES = '2026-03-01T18:00:00.000Z';

const created = (sessionId: number) =>
  specEvent(sessionStream(sessionId), 'SessionCreated', {
    sessionId,
    tenantId: 1,
    clientId: 'ehr',
    userId: 7,
    patientId: 11,
    encounterId: null,
    scopes: ['patient/*.rs'],
    deploymentMode: 'embedded',
    postSubmitRedirect: 'https://ehr.example/done',
    postCancelRedirect: null,
    handoverTokenHash: 'token-hash',
    handoverExpiresAt: LATER,
    createdAt: AT,
    expiresAt: EXPIRES,
  });
const handedOver = (sessionId: number) =>
  specEvent(sessionStream(sessionId), 'SessionHandedOver', {
    sessionId,
    cookieHash: `cookie-${sessionId}`,
    at: LATER,
  });
const ended = (sessionId: number) =>
  specEvent(sessionStream(sessionId), 'SessionEnded', { sessionId, reason: 'deleted', at: END });

const row = (id: number, over: Record<string, unknown> = {}) => ({
  id,
  tenant_id: 1,
  client_id: 'ehr',
  user_id: 7,
  patient_id: 11,
  encounter_id: null,
  scopes: ['patient/*.rs'],
  deployment_mode: 'embedded',
  post_submit_redirect: 'https://ehr.example/done',
  post_cancel_redirect: null,
  status: 'inactive',
  cookie_hash: null,
  created_at: AT,
  last_modified_at: AT,
  expires_at: EXPIRES,
  revision: 0,
  ...over,
});

const rowsOf = (from: number, to: number) =>
  `SELECT * FROM rm_sessions WHERE id BETWEEN ${from} AND ${to} ORDER BY id`;

for (const db of testDatabases)
  describe(`projection spec: sessions on ${db.name}`, function () {
    this.timeout(60_000);
    const spec = projectionSpec(db, [sessionsProjection]);

    it('SessionCreated inserts an inactive session without a cookie', () =>
      spec.given(created(201)).thenRows(rowsOf(201, 201), [row(201)]));

    it('a handover activates it with the cookie hash; its end clears the cookie', () =>
      spec
        .given(created(202), created(203))
        .when(handedOver(202), handedOver(203), ended(203))
        .thenRows(rowsOf(202, 203), [
          row(202, { status: 'active', cookie_hash: 'cookie-202', last_modified_at: LATER, revision: 1 }),
          row(203, { status: 'ended', cookie_hash: null, last_modified_at: END, revision: 2 }),
        ]));

    it('a handover of a session never created writes no row', () =>
      spec.given(handedOver(204)).thenRows(rowsOf(204, 204), []));

    it('101 sessions, rebuilt in one page (the bulk apply function), give the rows applied one by one', () => {
      const ids = Array.from({ length: 101 }, (_, i) => 1000 + i);
      return spec
        .given(...ids.map(created))
        .when(handedOver(1000), ended(1100))
        .thenRows(
          rowsOf(1000, 1100),
          ids.map((id) =>
            id === 1000
              ? row(id, {
                  status: 'active',
                  cookie_hash: 'cookie-1000',
                  last_modified_at: LATER,
                  revision: 1,
                })
              : id === 1100
                ? row(id, { status: 'ended', last_modified_at: END, revision: 1 })
                : row(id),
          ),
        );
    });
  });
