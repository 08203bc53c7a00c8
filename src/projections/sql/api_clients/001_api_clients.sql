-- rm_api_clients: the API clients of the data tenants (src/projections/tenants.ts).
-- Version 1: the schema as casebook made it before versioned migrations (commit 6b2458c), so a
-- database made then upgrades by running it (every statement is IF NOT EXISTS or OR REPLACE);
-- applied by src/db/migrations.ts, recorded in schema_migrations (docs/architecture.md "Schema migrations").

CREATE TABLE IF NOT EXISTS rm_api_clients (
  client_id text PRIMARY KEY,
  tenant_id integer NOT NULL,
  secret_hash text NOT NULL,
  scopes jsonb NOT NULL,
  projects jsonb NOT NULL,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  revision integer NOT NULL DEFAULT 0
);
