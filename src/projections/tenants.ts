/** Read model of data tenants and API clients (issue 2 §4): `rm_tenants`, `rm_api_clients`. */
import { bumpSequence } from '../db/sequences.js';
import type { ClientEvent } from '../domain/client/client.js';
import type { TenantEvent } from '../domain/tenant/tenant.js';
import { migrateReadModel, type Projection } from './projection.js';

const json = (value: unknown) => JSON.stringify(value);

export const tenantsProjection: Projection = {
  name: 'tenants',
  tables: ['rm_tenants'],
  migrate: (sql) => migrateReadModel(sql, 'tenants'),
  handles: (type) => type === 'TenantCreated' || type === 'TenantSettingsChanged',
  // Tenants change rarely: one statement per event, guarded by the stream revision.
  apply: async (events, tx, mode) => {
    for (const event of events) {
      const e = { type: event.type, data: event.data } as TenantEvent;
      const revision = Number(event.revision);
      switch (e.type) {
        case 'TenantCreated':
          await tx.query(
            `INSERT INTO rm_tenants (id, name, ehr_managed, allowed_scopes, redirect_origins, created_at, updated_at, revision)
             VALUES ($1, $2, $3, $4::jsonb, $5::jsonb, $6, $6, $7) ON CONFLICT (id) DO NOTHING`,
            [
              e.data.tenantId,
              e.data.name,
              e.data.ehrManaged,
              json(e.data.allowedScopes),
              json(e.data.redirectOrigins),
              e.data.createdAt,
              revision,
            ],
          );
          if (mode === 'catch-up') await bumpSequence(tx, 'tenant', e.data.tenantId);
          break;
        case 'TenantSettingsChanged':
          await tx.query(
            `UPDATE rm_tenants SET ehr_managed = $2, allowed_scopes = $3::jsonb, redirect_origins = $4::jsonb, updated_at = $5,
               revision = $6 WHERE id = $1 AND revision < $6`,
            [
              e.data.tenantId,
              e.data.ehrManaged,
              json(e.data.allowedScopes),
              json(e.data.redirectOrigins),
              e.data.at,
              revision,
            ],
          );
          break;
      }
    }
  },
};

export const apiClientsProjection: Projection = {
  name: 'api_clients',
  tables: ['rm_api_clients'],
  migrate: (sql) => migrateReadModel(sql, 'api_clients'),
  handles: (type) =>
    type === 'ApiClientRegistered' ||
    type === 'ApiClientSecretRotated' ||
    type === 'ApiClientSettingsChanged',
  // Clients change rarely: one statement per event, guarded by the stream revision.
  apply: async (events, tx) => {
    for (const event of events) {
      const e = { type: event.type, data: event.data } as ClientEvent;
      const revision = Number(event.revision);
      switch (e.type) {
        case 'ApiClientRegistered':
          await tx.query(
            `INSERT INTO rm_api_clients (client_id, tenant_id, secret_hash, scopes, projects, created_at, updated_at, revision)
             VALUES ($1, $2, $3, $4::jsonb, $5::jsonb, $6, $6, $7) ON CONFLICT (client_id) DO NOTHING`,
            [
              e.data.clientId,
              e.data.tenantId,
              e.data.secretHash,
              json(e.data.scopes),
              json(e.data.projects),
              e.data.at,
              revision,
            ],
          );
          break;
        case 'ApiClientSecretRotated':
          await tx.query(
            `UPDATE rm_api_clients SET secret_hash = $2, updated_at = $3, revision = $4 WHERE client_id = $1 AND revision < $4`,
            [e.data.clientId, e.data.secretHash, e.data.at, revision],
          );
          break;
        case 'ApiClientSettingsChanged':
          await tx.query(
            `UPDATE rm_api_clients SET scopes = $2::jsonb, projects = $3::jsonb, updated_at = $4, revision = $5
             WHERE client_id = $1 AND revision < $5`,
            [e.data.clientId, json(e.data.scopes), json(e.data.projects), e.data.at, revision],
          );
          break;
      }
    }
  },
};
