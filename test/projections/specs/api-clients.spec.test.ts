/**
 * Projection spec of `rm_api_clients` (src/projections/tenants.ts; docs/architecture.md
 * "Projections"): given client events → then rows, inline, by catch-up and by rebuild, on PGlite
 * and PostgreSQL.
 */
import { clientStream } from '../../../src/domain/client/client.js';
import { apiClientsProjection } from '../../../src/projections/tenants.js';
import { testDatabases } from '../../support/databases.js';
import { projectionSpec, specEvent } from '../../support/projection-spec.js';

const AT = '2026-03-01T10:00:00.000Z';
const LATER = '2026-03-01T11:00:00.000Z';
const LAST = '2026-03-01T12:00:00.000Z';

const registered = (clientId: string) =>
  specEvent(clientStream(clientId), 'ApiClientRegistered', {
    clientId,
    tenantId: 1,
    secretHash: 'hash-1',
    scopes: ['system/*.rs'],
    projects: [],
    at: AT,
  });
const rotated = (clientId: string) =>
  specEvent(clientStream(clientId), 'ApiClientSecretRotated', { clientId, secretHash: 'hash-2', at: LATER });
const configured = (clientId: string) =>
  specEvent(clientStream(clientId), 'ApiClientSettingsChanged', {
    clientId,
    scopes: ['system/*.*'],
    projects: ['p1'],
    at: LAST,
  });

const rowsOf = (clientId: string) =>
  `SELECT client_id, tenant_id, secret_hash, scopes, projects, created_at, updated_at, revision
     FROM rm_api_clients WHERE client_id = '${clientId}'`;

for (const db of testDatabases)
  describe(`projection spec: api_clients on ${db.name}`, function () {
    this.timeout(60_000);
    const spec = projectionSpec(db, [apiClientsProjection]);

    it('ApiClientRegistered inserts the client', () =>
      spec.given(registered('spec-a')).thenRows(rowsOf('spec-a'), [
        {
          client_id: 'spec-a',
          tenant_id: 1,
          secret_hash: 'hash-1',
          scopes: ['system/*.rs'],
          projects: [],
          created_at: AT,
          updated_at: AT,
          revision: 0,
        },
      ]));

    it('a rotated secret and changed settings are the last ones, at the last revision', () =>
      spec
        .given(registered('spec-b'))
        .when(rotated('spec-b'), configured('spec-b'))
        .thenRows(rowsOf('spec-b'), [
          {
            client_id: 'spec-b',
            tenant_id: 1,
            secret_hash: 'hash-2',
            scopes: ['system/*.*'],
            projects: ['p1'],
            created_at: AT,
            updated_at: LAST,
            revision: 2,
          },
        ]));
  });
