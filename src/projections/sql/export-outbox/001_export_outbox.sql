-- rm_export_outbox and the exporter's read of it (src/projections/export-outbox.ts).
-- Version 1: the schema as casebook made it before versioned migrations (commit 6b2458c), so a
-- database made then upgrades by running it (every statement is IF NOT EXISTS or OR REPLACE);
-- applied by src/db/migrations.ts, recorded in schema_migrations (docs/architecture.md "Schema migrations").

CREATE TABLE IF NOT EXISTS rm_export_outbox (
  tenant_id integer NOT NULL,
  response_id integer NOT NULL,
  version_id integer NOT NULL,
  state text NOT NULL,
  attempts integer NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL,
  last_error text,
  delivered_at timestamptz,
  PRIMARY KEY (response_id, version_id)
);
ALTER TABLE rm_export_outbox ADD COLUMN IF NOT EXISTS created_at timestamptz;
ALTER TABLE rm_export_outbox ADD COLUMN IF NOT EXISTS export_key text;
ALTER TABLE rm_export_outbox ADD COLUMN IF NOT EXISTS sha256 text;
ALTER TABLE rm_export_outbox ADD COLUMN IF NOT EXISTS queued_at timestamptz;
ALTER TABLE rm_export_outbox ADD COLUMN IF NOT EXISTS round_attempts integer NOT NULL DEFAULT 0;
ALTER TABLE rm_export_outbox ADD COLUMN IF NOT EXISTS round_started_at timestamptz;
ALTER TABLE rm_export_outbox ADD COLUMN IF NOT EXISTS abandoned_reason text;
ALTER TABLE rm_export_outbox ADD COLUMN IF NOT EXISTS backlog text;
CREATE INDEX IF NOT EXISTS rm_export_outbox_due ON rm_export_outbox (state, next_attempt_at);

CREATE OR REPLACE FUNCTION rm_export_outbox_read(ids integer[], lock boolean) RETURNS SETOF json LANGUAGE plpgsql
  SET enable_seqscan = off AS $fn$

BEGIN
  IF lock THEN
    RETURN QUERY SELECT row_to_json(o) FROM rm_export_outbox o WHERE o.response_id = ANY(ids)
  ORDER BY o.response_id, o.version_id FOR UPDATE;
  ELSE
    RETURN QUERY SELECT row_to_json(o) FROM rm_export_outbox o WHERE o.response_id = ANY(ids)
  ORDER BY o.response_id, o.version_id;
  END IF;
END
$fn$;
