-- rm_audit_events: the AuditEvent search view, deferred (src/projections/audit-events.ts).
-- Version 1: the schema as casebook made it before versioned migrations (commit 6b2458c), so a
-- database made then upgrades by running it (every statement is IF NOT EXISTS or OR REPLACE);
-- applied by src/db/migrations.ts, recorded in schema_migrations (docs/architecture.md "Schema migrations").

CREATE TABLE IF NOT EXISTS rm_audit_events (
  -- Insertion order: newest first and stable paging, whatever the clocks said.
  seq bigserial UNIQUE,
  id uuid PRIMARY KEY,
  tenant_id integer,
  recorded timestamptz NOT NULL,
  action text NOT NULL,
  outcome text NOT NULL,
  code text NOT NULL,
  agents text[] NOT NULL,
  entities text[] NOT NULL,
  patients integer[] NOT NULL,
  -- The AuditRecord (rendered as an AuditEvent when read), or the AuditEvent of an older log.
  content json NOT NULL
);
CREATE INDEX IF NOT EXISTS rm_audit_events_tenant_seq ON rm_audit_events (tenant_id, seq DESC);
CREATE INDEX IF NOT EXISTS rm_audit_events_recorded ON rm_audit_events (tenant_id, recorded);
CREATE INDEX IF NOT EXISTS rm_audit_events_patients ON rm_audit_events USING gin (patients);
CREATE INDEX IF NOT EXISTS rm_audit_events_entities ON rm_audit_events USING gin (entities);
CREATE INDEX IF NOT EXISTS rm_audit_events_agents ON rm_audit_events USING gin (agents);
