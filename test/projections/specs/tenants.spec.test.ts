/**
 * Projection spec of `rm_tenants` (src/projections/tenants.ts; docs/architecture.md "Projections"):
 * given tenant events → then rows, inline, by catch-up and by rebuild, on PGlite and PostgreSQL.
 */
import { tenantStream } from '../../../src/domain/tenant/tenant.js';
import { tenantsProjection } from '../../../src/projections/tenants.js';
import { testDatabases } from '../../support/databases.js';
import { projectionSpec, specEvent } from '../../support/projection-spec.js';

const AT = '2026-03-01T10:00:00.000Z';
const LATER = '2026-03-01T11:00:00.000Z';

const created = (tenantId: number, name: string) =>
  specEvent(tenantStream(tenantId), 'TenantCreated', {
    tenantId,
    name,
    ehrManaged: false,
    allowedScopes: ['user/*.rs'],
    redirectOrigins: ['https://ehr.example'],
    createdAt: AT,
  });

const changed = (tenantId: number) =>
  specEvent(tenantStream(tenantId), 'TenantSettingsChanged', {
    tenantId,
    ehrManaged: true,
    allowedScopes: ['user/*.*'],
    redirectOrigins: [],
    at: LATER,
  });

const rowsOf = (ids: string) =>
  `SELECT id, name, ehr_managed, allowed_scopes, redirect_origins, created_at, updated_at, revision
     FROM rm_tenants WHERE id IN (${ids}) ORDER BY id`;

for (const db of testDatabases)
  describe(`projection spec: tenants on ${db.name}`, function () {
    this.timeout(60_000);
    const spec = projectionSpec(db, [tenantsProjection]);

    it('TenantCreated inserts the tenant at revision 0', () =>
      spec.given(created(101, 'Ward A')).thenRows(rowsOf('101'), [
        {
          id: 101,
          name: 'Ward A',
          ehr_managed: false,
          allowed_scopes: ['user/*.rs'],
          redirect_origins: ['https://ehr.example'],
          created_at: AT,
          updated_at: AT,
          revision: 0,
        },
      ]));

    it('TenantSettingsChanged replaces the settings and moves updated_at and the revision', () =>
      spec
        .given(created(102, 'Ward B'))
        .when(changed(102))
        .thenRows(rowsOf('102'), [
          {
            id: 102,
            name: 'Ward B',
            ehr_managed: true,
            allowed_scopes: ['user/*.*'],
            redirect_origins: [],
            created_at: AT,
            updated_at: LATER,
            revision: 1,
          },
        ]));

    it('a change of a tenant never created writes no row', () =>
      spec.given(changed(103)).thenRows(rowsOf('103'), []));
  });
