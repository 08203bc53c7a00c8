-- rm_tenants: the data tenants (src/projections/tenants.ts; docs/architecture.md "Projections").
-- Version 1: the schema as casebook made it before versioned migrations (commit 6b2458c), so a
-- database made then upgrades by running it (every statement is IF NOT EXISTS or OR REPLACE);
-- applied by src/db/migrations.ts, recorded in schema_migrations (docs/architecture.md "Schema migrations").

CREATE TABLE IF NOT EXISTS rm_tenants (
  id integer PRIMARY KEY,
  name text NOT NULL,
  ehr_managed boolean NOT NULL,
  allowed_scopes jsonb NOT NULL,
  redirect_origins jsonb NOT NULL,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  revision integer NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX IF NOT EXISTS rm_tenants_name ON rm_tenants (lower(name));
